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
from typing import ClassVar, Literal

from jfl import checks
from jfl.cli import Concentrations, Floats, Names
from jfl.driver import Plan
from jfl.experiments.common import with_queue_rate
from jfl.experiments.fl import rbcsf_federated_plan
from jfl.experiments.rbcsf import RbcsfScenario
from jfl.experiments.training import (
    ACCURACY_COLUMNS,
    FederatedTraining,
    Training,
    write_figures,
)
from jfl.stats import NONNEGATIVE, Bounds

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
    logistic regression, about two minutes on 2 cores; the summary gives the final accuracy,
    and the rounds and simulated time to ``--target-accuracy``.

        python sweeps/fl_selection.py
        python sweeps/fl_selection.py --policies fedcor,random --aggregation uniform --seeds 16
        python sweeps/fl_selection.py --policies pow_d,proportional --d 20,40,60
        python sweeps/fl_selection.py --dataset fashion_mnist --data-dir DIR \\
            --model fashion_cnn --rounds 300 --seeds 8
    """

    policies: Names = SELECTION_METHODS
    """registered policies (any that runs on rbcsf: see docs/methods.md)"""
    dirichlet: Concentrations = (0.1, 0.3, 1.0)
    """data split: the concentration α > 0 of the per-class Dirichlet split over clients, or
    'iid' (a list; not RBCS-F's --alpha)"""
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
    metric_bounds: ClassVar[Mapping[str, Bounds]] = {"final_test_loss": NONNEGATIVE}
    trains: ClassVar[bool] = True
    title: ClassVar[str] = "Client selection methods"
    summary_columns: ClassVar[tuple[str, ...]] = (
        *"policy aggregation dirichlet d sigma V".split(),
        *ACCURACY_COLUMNS,
        "final_test_loss",
    )

    read_anyway: ClassVar[tuple[str, ...]] = ("beta",)  # every policy's queue rate

    def check(self) -> None:
        super().check()
        self.training.check(self.rounds)
        for flag, values in (("--d", self.d), ("--sigma", self.sigma), ("--V", self.V)):
            checks.distinct(flag, values)
        for d in self.d:
            if d != 0:  # 0: the default 2m
                d = int(d) if float(d).is_integer() else d
                checks.integer("--d", d, self.m, self.clients, "--clients")
        checks.distinct("--dirichlet", self.dirichlet)
        checks.integer("--min-samples", self.min_samples, 0)
        if self.delta_zeta != "gradient" and "delta" not in self.policies:
            raise ValueError(
                "--delta-zeta is read by delta, and none of --policies "
                f"({','.join(self.policies)}) is it: drop --delta-zeta or add delta"
            )
        if not self.round_deadline > 0:
            raise ValueError(f"--round-deadline must be > 0 or inf, got {self.round_deadline}")

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

    def partitions(self, labels):
        """One partition per α (IID for ∞), all from ``--partition-seed``, every client with at
        least ``--min-samples`` samples (docs/decisions.md#by-class-min-samples)."""
        partitions = []
        for alpha in self.dirichlet:
            if math.isinf(alpha):
                name, options = "iid", {}
            else:
                name = "dirichlet_by_class"
                options = {"concentration": alpha, "min_samples": self.min_samples}
            partitions.append(self.training.partition(name, labels, self.clients, **options))
        return partitions

    def plan(self) -> Plan:
        from jfl.sweep import config_table

        configs = config_table(
            self.policies, self.grid(), shared=self.training.columns(len(self.dirichlet))
        )
        configs = with_queue_rate(configs, self.beta[0])
        configs.insert(1, "dirichlet", [self.dirichlet[int(i)] for i in configs["partition"]])
        configs = self.training.with_aggregation(configs)
        dataset = self.training.load_data()
        return rbcsf_federated_plan(self, configs, dataset, self.partitions(dataset.y_train))

    def metrics(self, ds) -> dict:
        """The test loss at the last evaluation, per run."""
        return {"final_test_loss": ds["test_loss"].isel(eval=-1).drop_vars("eval")}

    def figures(self, ds, summary, folder) -> None:
        for variable in ("accuracy", "test_loss"):
            write_figures(ds, folder, self.title, ("dirichlet", "learning_rate"), self.ci, variable)
