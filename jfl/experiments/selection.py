"""Every client-selection method on one federated task (``sweeps/fl_selection.py``).

The methods FL papers compare against (docs/methods.md: Power-of-Choice and its variants, rand, AFL,
Oort, E3CS, clustered sampling by size and by similarity; FedIS, DELTA, optimal client sampling,
FedCor, DivFL) beside the seed papers' RBCS-F, FedCS and Random, with the same learner, data and
system heterogeneity: N = 100 clients, m = 10 a round, label- and quantity-skewed data (each class
dealt to the clients in Dirichlet(α) proportions, α ∈ {0.1, 0.3, 1}), and the ``rbcsf`` latency
environment deciding every round's time.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import ClassVar, Literal, NamedTuple

import numpy as np

from jfl import checks, plots
from jfl.cli import Concentrations, Floats, Names
from jfl.experiments.common import with_queue_rate
from jfl.experiments.fl import rbcsf_federated_plan
from jfl.experiments.rbcsf import RbcsfScenario
from jfl.experiments.training import (
    ACCURACY_COLUMNS,
    FederatedTraining,
    Training,
    federated_figures,
    with_reductions,
)
from jfl.reduction import RunMetric
from jfl.stats import NONNEGATIVE, Bounds
from jfl.sweep import Plan, config_table

# Every §10 method (the first group, then the update- and gradient-aware second), then the seed
# papers' methods runnable on ``rbcsf``.
SELECTION_METHODS = (
    "random",
    "proportional",
    "clustered_size",
    "pow_d",
    "cpow_d",
    "rpow_d",
    "afl",
    "oort",
    "e3cs",
    "fedis",
    "delta",
    "ocs",
    "fedcor",
    "divfl",
    "clustered_similarity",
    "rbcsf",
    "fedcs",
)


class Split(NamedTuple):
    """One data split of a sweep: its label (the ``split`` column), its Dirichlet α (inf: IID;
    nan: not a Dirichlet split), and the ``jfl.fl.partition`` function and options that make
    it."""

    label: str
    dirichlet: float
    partition: str
    options: dict


# The data splits of ``--partition`` (jfl.fl.partition: dirichlet_by_class or iid, shards,
# natural).
SPLITS = ("dirichlet", "shards", "natural")
# The test loss at the last evaluation, per run, reduced on the device; ``final_test_loss`` is
# its host reference.
FINAL_TEST_LOSS = RunMetric(("test_loss",), lambda run: run.outputs["test_loss"][-1], NONNEGATIVE)
SELECTION_TRAINING = FederatedTraining(lr=(0.3,), eval_every=5, target_accuracy=0.8)


@dataclasses.dataclass(frozen=True)
class FlSelection(RbcsfScenario):
    """Every client-selection method on one federated task, with bands over seeds.

    N = 100 clients of the ``rbcsf`` latency environment (four speed classes, 80% available a
    round), m = 10 a round; each class of the training set dealt to the clients in Dir(α)
    proportions (``--dirichlet``, ``iid`` for an IID split; Yurochkin et al. 2019; redrawn until
    every client holds ``--min-samples``), so clients differ in size and labels, and the
    size-aware methods (pow-d's candidates, rand, clustered sampling) have shares to work with.
    Each method runs with its paper's defaults and its authors' aggregation (``--aggregation
    paper``; ``data_size`` and ``uniform`` cross the plain selections with others); ``--d`` and
    ``--sigma`` sweep Power-of-Choice's candidates and E3CS's fairness quota. ``--round-deadline``
    drops the clients slower than it (E3CS's success; none by default). Default: digits with
    logistic regression, about 86 s on 2 cores; the summary gives the final accuracy,
    and the rounds and simulated time to ``--target-accuracy``. ``--partition`` adds McMahan et
    al.'s shards and FEMNIST's writers to the Dirichlet splits, and ``--setting`` starts from a
    paper's benchmark (FedCor's and Power-of-Choice's Fashion-MNIST, FEMNIST by writer,
    FedXplore's CIFAR-10), the datasets read through Hugging Face ``datasets``.

        python sweeps/fl_selection.py
        python sweeps/fl_selection.py --policies fedcor,random --aggregation uniform --seeds 16
        python sweeps/fl_selection.py --policies pow_d,proportional --d 20,40,60
        python sweeps/fl_selection.py --setting fedcor_fmnist --data-dir DIR
        python sweeps/fl_selection.py --setting femnist --download
    """

    setting: str = ""
    """a paper's benchmark as defaults that the other flags override: fedcor_fmnist,
    pow_d_fmnist, femnist, fedxplore_cifar10 (CPU sizes), each with _full (the paper's size, for
    an accelerator); docs/reproductions/federated-training.md#benchmark-settings"""
    policies: Names = SELECTION_METHODS
    """registered policies (any that runs on rbcsf: see docs/methods.md)"""
    partition: Names = ("dirichlet",)
    """data splits, a list: dirichlet (each class dealt in Dir(α) proportions, one split per
    --dirichlet), shards (sorted by label, --shards shards per client; McMahan et al.),
    natural (one client per writer: femnist, --clients writers)"""
    dirichlet: Concentrations = (0.1, 0.3, 1.0)
    """--partition dirichlet: the concentration α > 0 of the per-class Dirichlet split over
    clients, or 'iid' (a list; not RBCS-F's --alpha)"""
    shards: Floats = (2.0,)
    """--partition shards: shards per client, integers ≥ 1 (McMahan's 2, FedCor's 1 or 2; a
    list)"""
    min_samples: int = 1
    """training samples every client holds at least: the Dirichlet split is redrawn until it
    does (0: as first drawn, clients may hold none)"""
    d: Floats = (0.0,)
    """Power-of-Choice's candidates d: integers in [m, N], or 0 for 2m"""
    delta_zeta: Literal["gradient", "update"] = "gradient"
    """the scale of DELTA's diversity ζ: gradient (as its σ: each update over η·K) or update"""
    sigma: Floats = (0.5,)
    """E3CS fairness quota σ as a fraction of m/N, in [0, 1]"""
    V: Floats = (10.0,)
    """RBCS-F penalty factor V ≥ 0"""
    clients: int = 100
    """clients N (4 equal speed classes)"""
    m: int = 10
    """clients selected per round, 1 ≤ m ≤ N"""
    round_deadline: float = math.inf
    """seconds > 0 after which a selected client's update is lost (inf: none)"""
    seeds: int = 4
    rounds: int = 60
    training: Training = SELECTION_TRAINING
    """dataset, model and FedAvg settings"""
    out: str = "runs/fl_selection"

    name: ClassVar[str] = "fl_selection"
    reduces_on_device: ClassVar[bool] = True
    metric_bounds: ClassVar[Mapping[str, Bounds]] = {"final_test_loss": NONNEGATIVE}
    trains: ClassVar[bool] = True  # its policies may read the learner's signals
    figures = federated_figures(
        "Client selection methods", ("split", "learning_rate"), ("accuracy", "test_loss")
    )
    summary_columns: ClassVar[tuple[str, ...]] = (
        *"policy aggregation split d sigma V".split(),
        *ACCURACY_COLUMNS,
        "final_test_loss",
    )

    read_anyway: ClassVar[tuple[str, ...]] = ("beta",)  # every policy's queue rate
    # ``--setting``'s configs (``SETTINGS``, below the class).
    presets: ClassVar[Mapping[str, FlSelection]] = {}

    def check(self) -> None:
        if self.setting and self.setting not in self.presets:
            raise ValueError(
                f"--setting must be one of {sorted(self.presets)}, got {self.setting!r}"
            )
        super().check()
        self.training.check(self.rounds)
        for flag, values in (("--d", self.d), ("--sigma", self.sigma), ("--V", self.V)):
            checks.distinct(flag, values)
        for d in self.d:
            if d != 0:  # 0: the default 2m
                d = int(d) if float(d).is_integer() else d
                checks.integer("--d", d, self.m, self.clients, "--clients")
        self.check_partitions()
        checks.integer("--min-samples", self.min_samples, 0)
        if self.delta_zeta != "gradient" and "delta" not in self.policies:
            raise ValueError(
                "--delta-zeta is read by delta, and none of --policies "
                f"({','.join(self.policies)}) is it: drop --delta-zeta or add delta"
            )
        if not self.round_deadline > 0:
            raise ValueError(f"--round-deadline must be > 0 or inf, got {self.round_deadline}")

    def check_partitions(self) -> None:
        """``--partition`` and the flags of the splits it names."""
        for name in self.partition:
            checks.choice("--partition", name, SPLITS)
        checks.distinct("--partition", self.partition)
        checks.distinct("--dirichlet", self.dirichlet)
        checks.distinct("--shards", self.shards)
        for s in self.shards:
            checks.integer("--shards", s)
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for flag, name in (("--dirichlet", "dirichlet"), ("--shards", "shards")):
            if getattr(self, name) != defaults[name] and name not in self.partition:
                raise ValueError(f"{flag} is read by --partition {name}: add it or drop {flag}")
        if "natural" in self.partition and self.training.dataset != "femnist":
            raise ValueError(
                "--partition natural makes a client of each writer: it needs --dataset femnist, "
                f"not {self.training.dataset}"
            )

    def splits(self) -> list[Split]:
        """Each data split of the sweep, in ``--partition`` order."""
        splits = []
        for kind in self.partition:
            if kind == "dirichlet":
                for alpha in self.dirichlet:
                    if math.isinf(alpha):
                        splits.append(Split("iid", alpha, "iid", {}))
                    else:
                        options = {"concentration": alpha, "min_samples": self.min_samples}
                        label = f"dirichlet {alpha:g}"
                        splits.append(Split(label, alpha, "dirichlet_by_class", options))
            elif kind == "shards":
                for s in self.shards:
                    options = {"shards_per_client": int(s)}
                    splits.append(Split(f"{int(s)} shards", math.nan, "shards", options))
            else:
                splits.append(Split("natural", math.nan, "natural", {}))
        return splits

    def grid(self) -> dict[str, list[float]]:
        """RBCS-F's grid plus Power-of-Choice's d, E3CS's σ and DELTA's scale of ζ."""
        return {
            **super().grid(),
            "d": list(self.d),
            "sigma": list(self.sigma),
            "gradient_scale": [float(self.delta_zeta == "gradient")],
        }

    def environment_params(self):
        env, params = super().environment_params()
        return env, params.replace(round_deadline=float(self.round_deadline))

    def partitions(self, dataset):
        """One partition per split (``splits``), all from ``--partition-seed``; a Dirichlet
        split's clients hold at least ``--min-samples`` samples
        (docs/decisions.md#by-class-min-samples), a natural split's clients are the writers."""
        partitions = []
        for split in self.splits():
            name, options = split.partition, split.options
            if name == "natural":
                writers = len(np.unique(dataset.groups_train))
                if writers != self.clients:
                    raise ValueError(
                        f"--partition natural makes a client of each of the {writers} writers "
                        f"of {dataset.name}: give --clients {writers}, or sample --writers "
                        f"{self.clients}"
                    )
                options = {"groups": dataset.groups_train}
            labels = dataset.y_train
            partitions.append(self.training.partition(name, labels, self.clients, **options))
        return partitions

    def plan(self) -> Plan:
        splits = self.splits()
        configs = config_table(
            self.policies, self.grid(), shared=self.training.columns(len(splits))
        )
        configs = with_queue_rate(configs, self.beta[0])
        index = configs["partition"].astype(int)
        configs.insert(1, "split", [splits[i].label for i in index])
        configs.insert(2, "dirichlet", [splits[i].dirichlet for i in index])
        configs = self.training.with_aggregation(configs)
        dataset = self.training.load_data()
        plan = rbcsf_federated_plan(self, configs, dataset, self.partitions(dataset))
        return with_reductions(plan, {"final_test_loss": FINAL_TEST_LOSS})

    def metrics(self, ds) -> dict:
        """From every run's evaluations, :func:`final_test_loss`; reduced on the device, none
        (it was reduced there)."""
        return final_test_loss(ds) if plots.has_runs(ds, "test_loss") else {}


def final_test_loss(ds) -> dict:
    """The test loss at the last evaluation, per run, from every run's evaluations: the host
    reference of ``FINAL_TEST_LOSS``."""
    return {"final_test_loss": ds["test_loss"].isel(eval=-1).drop_vars("eval")}


def _setting(name: str, training: dict, **fields) -> FlSelection:
    """``FlSelection`` with ``fields`` and the training settings ``training`` overriding its
    defaults, named ``name``."""
    base = FlSelection()
    training = dataclasses.replace(base.training, **training)
    return dataclasses.replace(base, setting=name, training=training, **fields)


def _fedcor_fmnist(name: str, rounds: int, seeds: int) -> FlSelection:
    """FedCor's FMNIST benchmark (Tang et al., CVPR 2022; the authors' README command): N = 100,
    m = 5 (``--frac=0.05``), Dirichlet 0.2 and 2 shards per client, the MLP [64, 30], SGD at
    5e-3, 3 local epochs of batch 64, a plain average of the selected (``average_weights(...,
    omega=None)``) for every method; pow-d's d = 10."""
    return _setting(
        name,
        dict(dataset="fashion_mnist", model="fedcor_mlp", lr=(5e-3,), epochs=3, batch_size=64,
             aggregation=("uniform",), eval_every=10, target_accuracy=0.7),
        policies=("fedcor", "random", "pow_d"), partition=("dirichlet", "shards"),
        dirichlet=(0.2,), shards=(2.0,), d=(10.0,), clients=100, m=5, rounds=rounds, seeds=seeds,
    )  # fmt: skip


def _pow_d_fmnist(name: str, rounds: int, seeds: int) -> FlSelection:
    """Power-of-Choice's FMNIST benchmark (Cho, Wang and Joshi, AISTATS 2022; the authors'
    supplementary launch line): K = 100, m = 3, each class dealt in Dir(α) proportions with
    α ∈ {0.3, 2} and every client holding at least 10 samples, the MLP [64, 30], SGD at 0.005,
    τ = 30 local iterations of batch 64, the m updates averaged (``weight = 1/args.size``);
    rand against pow-d, cpow-d and rpow-d with d ∈ {6, 9, 15}."""
    return _setting(
        name,
        dict(dataset="fashion_mnist", model="fedcor_mlp", lr=(5e-3,), local_steps=30,
             batch_size=64, eval_every=10, target_accuracy=0.7),
        policies=("proportional", "pow_d", "cpow_d", "rpow_d"), dirichlet=(0.3, 2.0),
        min_samples=10, d=(6.0, 9.0, 15.0), clients=100, m=3, rounds=rounds, seeds=seeds,
    )  # fmt: skip


def _femnist(name: str, writers: int, m: int, rounds: int, seeds: int, local_steps) -> FlSelection:
    """FEMNIST by writer (LEAF, Caldas et al. 2018): each sampled writer a client, its samples
    split 90/10 into train and test, LEAF's CNN, FedAvg at LEAF's rate 0.004, batch 10, one
    local epoch (``local_steps`` None; the CPU size takes 5 steps)."""
    return _setting(
        name,
        dict(dataset="femnist", model="leaf_cnn", padding="same", lr=(4e-3,), epochs=1,
             batch_size=10, local_steps=local_steps, writers=writers,
             eval_every=max(rounds // 10, 1), target_accuracy=0.7),
        policies=("random", "pow_d", "fedcor", "divfl", "delta"), partition=("natural",),
        clients=writers, m=m, rounds=rounds, seeds=seeds,
    )  # fmt: skip


def _fedxplore_cifar10(name: str, rounds: int, seeds: int, local_steps: int | None) -> FlSelection:
    """FedXplore's published client-selection comparison (ispras/FedXplore
    docs/client_selection.md): CIFAR-10, N = 100, 25 a round, each class dealt in Dir(0.1)
    proportions, ResNet-18 (here with GroupNorm), one local epoch of batch 32 with SGD at 0.003
    (its script's optimizer), FedAvg by data size; uniform, pow-d (d = 2m: its d = 10 is below m),
    FedCor and DELTA."""
    return _setting(
        name,
        dict(dataset="cifar10", model="resnet18_gn", padding="same", lr=(3e-3,), epochs=1,
             batch_size=32, local_steps=local_steps, aggregation=("data_size",),
             eval_every=max(rounds // 10, 1), target_accuracy=0.7),
        policies=("random", "pow_d", "fedcor", "delta"), dirichlet=(0.1,),
        clients=100, m=25, rounds=rounds, seeds=seeds,
    )  # fmt: skip


# ``--setting``: each paper's benchmark at a CPU size and at its own size (``_full``, for an
# accelerator); docs/reproductions/federated-training.md#benchmark-settings gives the sources,
# what differs from the authors' code, and the run times.
SETTINGS = {
    "fedcor_fmnist": _fedcor_fmnist("fedcor_fmnist", rounds=100, seeds=4),
    "fedcor_fmnist_full": _fedcor_fmnist("fedcor_fmnist_full", rounds=500, seeds=5),
    "pow_d_fmnist": _pow_d_fmnist("pow_d_fmnist", rounds=100, seeds=4),
    "pow_d_fmnist_full": _pow_d_fmnist("pow_d_fmnist_full", rounds=300, seeds=8),
    "femnist": _femnist("femnist", writers=50, m=5, rounds=10, seeds=2, local_steps=5),
    "femnist_full": _femnist(
        "femnist_full", writers=3500, m=10, rounds=2000, seeds=8, local_steps=None
    ),
    "fedxplore_cifar10": _fedxplore_cifar10("fedxplore_cifar10", rounds=4, seeds=1, local_steps=2),
    "fedxplore_cifar10_full": _fedxplore_cifar10(
        "fedxplore_cifar10_full", rounds=200, seeds=8, local_steps=None
    ),
}
FlSelection.presets = SETTINGS
