"""The training settings every federated experiment shares (``sweeps/fl_*.py``).

:class:`FederatedTraining` holds the dataset, model and FedAvg settings (flags of every
``sweeps/fl_*.py``); :meth:`FederatedTraining.federated_plan` turns them, with an experiment's
environment, configurations and partitions, into a :class:`jfl.driver.Plan` whose learner trains
the model each round. A federated sweep crosses selection policies with training scenarios: data
partitions (e.g. γ₁ = 1, 10, IID) and learning rates; the partitions are stacked along the data's
leading axis and a configuration picks its own with the ``partition`` hyperparameter, so each
policy compiles once. Dataset files, partitions and the model are checked before anything
compiles.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Annotated

import numpy as np
import tyro

from jfl import checks, plots, reduction
from jfl.cli import Floats, Names
from jfl.fl.data import DATASETS, Dataset, load_dataset, sample_groups
from jfl.fl.models import CNN, MODELS, PADDINGS, check_input_shape, make_model
from jfl.fl.partition import Partition, federated_data, make_partition
from jfl.fl.train import AGGREGATIONS, EVAL_BATCH, make_learner
from jfl.policies import get
from jfl.sweep import bytes_per_fl_run, config_table, model_footprint

# SeedSequence([--partition-seed, WRITERS_STREAM]) spawns FEMNIST's per-writer split and the
# writer sample, streams apart from the partitions'.
WRITERS_STREAM = 0x3A17E5

# The summary columns every federated experiment ends with.
ACCURACY_COLUMNS = tuple(
    "n_seeds final_accuracy final_accuracy_lo final_accuracy_hi rounds_to_accuracy "
    "time_to_accuracy reached_accuracy mean_round_time".split()
)


@dataclasses.dataclass(frozen=True)
class FederatedTraining:
    """Dataset, model and FedAvg settings of a federated sweep.

    An experiment holds them as its field ``training`` (of type :data:`Training`), whose flags
    are the experiment's own (``--dataset``, ``--lr``, …); its default states the experiment's
    protocol, e.g. ``FederatedTraining(local_steps=1, batch_size=2, lr=(0.001,))``.
    """

    dataset: str = "digits"
    """one of digits (ships with scikit-learn), mnist, fashion_mnist, cifar10, femnist (from the
    Hugging Face cache, or --data-dir)"""
    data_dir: str | None = None
    """directory with the dataset's files (IDX, CIFAR batches, or its Hugging Face Parquet
    files); default: the Hugging Face cache"""
    download: bool = False
    """fetch --dataset from the Hugging Face Hub into its cache when it is not there"""
    writers: int | None = None
    """femnist: a seeded sample of this many writers (DivFL's 200; train and test samples of
    the others dropped); None: every writer"""
    model: str = "logistic"
    """one of logistic, fashion_cnn, cifar_cnn, fedcor_mlp, fedcor_cnn, mcmahan_cnn, leaf_cnn,
    resnet18_gn"""
    padding: str = "valid"
    """CNN padding: valid (LeNet's; inputs of at least 16×16, fedcor_cnn 18×18) or same (any
    size, e.g. digits; McMahan's CNN as its paper counts it)"""
    epochs: int = 1
    """local epochs E ≥ 1 (when --local-steps is None)"""
    batch_size: int = 10
    """local minibatch size ≥ 1"""
    local_steps: int | None = None
    """SGD steps ≥ 1 a round, each on a fresh minibatch; None: --epochs epochs"""
    lr: Floats = (0.1,)
    """learning rate(s) > 0; a list is a swept axis"""
    aggregation: Names = ("paper",)
    """how plain selections are averaged, a list: paper (each method's authors' protocol:
    docs/methods.md), data_size, uniform; methods with their own unbiased weights keep them"""
    eval_every: int = 5
    """rounds between test evaluations; divides --rounds"""
    target_accuracy: float = 0.8
    """accuracy in (0, 1] for rounds/time-to-target"""
    partition_seed: int = 0
    """seed of the data partition"""

    def check(self, rounds: int) -> None:
        """``ValueError`` naming the flag of the first bad training setting."""
        checks.choice("--dataset", self.dataset, DATASETS)
        given = {"--data-dir": self.data_dir is not None, "--download": self.download}
        for flag in (f for f, on in given.items() if on):
            if self.dataset == "digits":
                raise ValueError(
                    f"{flag} needs --dataset ({', '.join(DATASETS[1:])}): digits ships with "
                    "scikit-learn and reads no files"
                )
        if self.download and self.data_dir is not None:
            raise ValueError("--download fills the Hugging Face cache: drop --data-dir")
        if self.writers is not None:
            if self.dataset != "femnist":
                raise ValueError(f"--writers samples FEMNIST's writers, not {self.dataset}'s")
            checks.integer("--writers", self.writers)
        checks.choice("--model", self.model, sorted(MODELS))
        checks.choice("--padding", self.padding, PADDINGS)
        for aggregation in self.aggregation:
            checks.choice("--aggregation", aggregation, ("paper", *AGGREGATIONS))
        checks.distinct("--aggregation", self.aggregation)
        checks.integer("--epochs", self.epochs)
        checks.integer("--batch-size", self.batch_size)
        if self.local_steps is not None:
            checks.integer("--local-steps", self.local_steps)
        checks.integer("--eval-every", self.eval_every)
        checks.integer("--partition-seed", self.partition_seed, 0)
        if rounds % self.eval_every:
            raise ValueError(f"--eval-every must divide --rounds={rounds}, got {self.eval_every}")
        checks.in_range("--target-accuracy", self.target_accuracy, 0.0, 1.0, low_open=True)
        checks.positive("--lr", self.lr)
        checks.distinct("--lr", self.lr)

    def columns(self, partitions: int = 1) -> dict[str, list]:
        """The training scenario's configuration columns, crossed with every policy
        (``config_table``'s ``shared``): the partition index and the learning rate."""
        return {"partition": list(range(partitions)), "learning_rate": list(self.lr)}

    def config_table(self, policies, swept, shared=None):
        """``jfl.sweep.config_table`` with the training scenario's columns (one partition) after
        ``shared``'s, then :meth:`with_aggregation`."""

        table = config_table(policies, swept, shared={**(shared or {}), **self.columns()})
        return self.with_aggregation(table)

    def with_aggregation(self, configs):
        """``configs`` with an ``aggregation`` column, each row once per ``--aggregation``
        resolved for its policy: ``paper`` is the policy's authors' protocol
        (``PolicySpec.aggregation``), and a policy with its own weights keeps them
        ("policy_weights") whatever is asked; rows that resolve alike are kept once. Call it
        before building arrays aligned with the configurations."""
        rows, resolved = [], []
        for row, policy in enumerate(configs["policy"]):
            protocol = get(policy).aggregation
            for asked in self.aggregation:
                rows.append(row)
                own = asked == "paper" or protocol == "policy_weights"
                resolved.append(protocol if own else asked)
        table = configs.iloc[rows].reset_index(drop=True)
        table.insert(1, "aggregation", resolved)
        return table.drop_duplicates(ignore_index=True)

    def partition(self, name: str, labels, num_clients: int, **options) -> Partition:
        """``jfl.fl.make_partition`` of the training labels from ``--partition-seed``."""
        return make_partition(name, labels, num_clients, self.partition_seed, **options)

    def load_data(self) -> Dataset:
        """The dataset (``DatasetError``, a ValueError, if it cannot be read), FEMNIST's writers
        split and sampled (``--writers``) from ``--partition-seed``, checked against the model's
        smallest input."""

        # Streams of their own, apart from the partitions' (default_rng(--partition-seed)).
        split, sample = np.random.SeedSequence([self.partition_seed, WRITERS_STREAM]).spawn(2)
        dataset = load_dataset(
            self.dataset, self.data_dir, download=self.download, split_seed=split
        )
        if self.writers is not None:
            dataset = sample_groups(
                dataset, self.writers, np.random.default_rng(sample), "--writers"
            )
        self.check_model_input(dataset)
        return dataset

    def check_model_input(self, dataset: Dataset) -> None:
        """ValueError (one line) when ``--model`` with ``--padding`` cannot take the dataset's
        samples, e.g. a "valid" CNN on 8×8 digits."""
        model = make_model(self.model, dataset.num_classes, self.padding)
        check_input_shape(model, dataset.x_train.shape[1:], dataset.name)

    def federated_plan(
        self,
        plan,
        dataset: Dataset,
        partitions: Sequence[Partition],
        slots: Callable[[str, int], int],
        *,
        rounds: int,
        num_servers: int = 1,
        global_every: int = 1,
    ):
        """``plan`` (a selection plan whose configs have ``learning_rate``, ``partition`` and
        ``aggregation`` columns: ``with_aggregation``) with the learner, the stacked data, the
        memory estimate, the accuracy variables and the accuracy metrics reduced on the device
        (``jfl.reduction.accuracy_metrics`` at ``--target-accuracy``, beside the plan's own
        reductions); ``slots(policy, size)`` bounds the clients a policy can select in a
        round."""
        configs = plan.configs
        if "aggregation" not in configs:
            raise ValueError("the configurations need an aggregation column: with_aggregation")
        num_clients = plan.env_params.num_clients
        sample_shape = tuple(dataset.x_train.shape[1:])
        model = make_model(self.model, dataset.num_classes, self.padding)
        # Also here for datasets that did not come through load_data: a too-small input would
        # otherwise fail inside flax's initialiser, with no word of the model or the padding.
        check_input_shape(model, sample_shape, dataset.name)
        num_params, activations = model_footprint(model, sample_shape)
        largest = most_selected(plan, slots)
        data = federated_data(dataset, partitions)
        # Logistic regression has no padding to record.
        padding = {"padding": self.padding} if isinstance(model, CNN) else {}

        def learner(policy: str, size: int):
            return make_learner(
                model,
                sample_shape,
                num_clients,
                epochs=self.epochs,
                batch_size=self.batch_size,
                slots=slots(policy, size),
                local_steps=self.local_steps,
                num_servers=num_servers,
                global_every=global_every,
            )

        selection_finish = plan.finish

        def finish(ds):
            if selection_finish is not None:
                ds = selection_finish(ds)
            ds["data_size"] = (("partition_index", "client"), np.asarray(data.count))
            ds.attrs["target_accuracy"] = self.target_accuracy
            return ds

        plan = with_reductions(plan, reduction.accuracy_metrics(self.target_accuracy))
        return dataclasses.replace(
            plan,
            per_run_bytes=bytes_per_fl_run(
                num_params,
                activations,
                slots=largest,
                batch_size=self.batch_size,
                num_servers=num_servers,
                num_rounds=rounds,
                num_clients=num_clients,
                eval_batch=EVAL_BATCH,
            ),
            data_bytes=data_bytes(data),
            per_config={
                "learning_rate": configs["learning_rate"].to_numpy(),
                "partition": configs["partition"].to_numpy(),
                "aggregation": aggregation_codes(configs["aggregation"]),
                **plan.per_config,
            },
            learner=learner,
            data=data,
            eval_every=self.eval_every,
            finish=finish,
            metadata={
                **plan.metadata,
                "model": {"name": self.model, "parameters": num_params, **padding},
                "data": data_metadata(dataset, data),
            },
        )


def with_reductions(plan, metrics=None, curves=None):
    """``plan`` with more per-run ``metrics`` and ``curves`` reduced on the device
    (``jfl.reduction.Reductions``), listed before the plan's own."""
    own = plan.reductions
    reductions = own._replace(
        metrics={**(metrics or {}), **own.metrics}, curves={**(curves or {}), **own.curves}
    )
    return dataclasses.replace(plan, reductions=reductions)


def most_selected(plan, slots: Callable[[str, int], int]) -> int:
    """The most clients any configuration of ``plan`` can select in a round (``slots(policy,
    size)`` of its policy and selection size): the learner's slots the memory estimate counts."""
    configs, size = plan.configs, plan.selection_size
    sizes = configs[size] if isinstance(size, str) else np.full(len(configs), size)
    policy_sizes = zip(configs["policy"], np.asarray(sizes, int), strict=True)
    return max(slots(policy, int(n)) for policy, n in policy_sizes)


def data_metadata(dataset: Dataset, data) -> dict:
    """``metadata.json``'s ``data``: the dataset, its bytes on the device and the clients'
    smallest and largest sample counts."""
    return {
        "name": dataset.name,
        "source": dataset.source,
        "device_bytes": data_bytes(data),
        "train": int(dataset.y_train.shape[0]),
        "test": int(dataset.y_test.shape[0]),
        "clients_samples_min": int(np.min(data.count)),
        "clients_samples_max": int(np.max(data.count)),
    }


def data_bytes(data) -> int:
    """Bytes of the clients' and test data on the device: every chunk's program reads them, so
    they are counted once, beside the runs (padding to the largest client included)."""
    return int(sum(leaf.nbytes for leaf in data))


def aggregation_codes(names) -> np.ndarray:
    """The learner's ``aggregation`` hyperparameter of each resolved aggregation (an index into
    ``jfl.fl.AGGREGATIONS``); policy weights ignore it, and data_size's index stands in."""
    return np.array([AGGREGATIONS.index(a) if a in AGGREGATIONS else 0 for a in names], np.int32)


# An experiment's field of training settings; its flags carry no prefix (``--lr``, not
# ``--training.lr``).
Training = Annotated[FederatedTraining, tyro.conf.OmitArgPrefixes]


def federated_figures(
    title: str, columns: tuple[str, ...] = ("learning_rate",), variables=("accuracy",)
):
    """A federated experiment's ``figures`` method (``sweeps/fl_*.py``): :func:`write_figures`'
    curves of each of ``variables``, one figure per scenario of ``columns``, titled with
    ``title``, bands by the experiment's ``--ci``."""

    def figures(experiment, ds, summary, folder) -> None:
        """Write the experiment's figures into ``folder``."""
        for variable in variables:
            write_figures(ds, folder, title, columns, experiment.ci, variable)

    return figures


def write_figures(
    ds,
    folder,
    title: str,
    scenario_columns=("learning_rate",),
    method: str = "t",
    variable: str = "accuracy",
) -> None:
    """Accuracy (or another evaluation, ``variable``: ``test_loss``) vs round and vs
    wall-clock, one figure per scenario (partition × lr), every configuration of the scenario a
    line; ``method``: the interval of the bands (``--ci``)."""
    scenario = np.stack(
        [ds["partition"].to_numpy(), ds["learning_rate"].to_numpy()], axis=1
    ).astype(float)
    for key in np.unique(scenario, axis=0):
        shown = list(np.flatnonzero((scenario == key).all(axis=1)))
        label = scenario_label(ds, shown[0], scenario_columns)
        suffix = label.replace(" ", "_").replace("=", "-")
        name = f"_{suffix}" if suffix else ""
        for against in ("round", "time"):
            plots.plot_accuracy(
                ds,
                folder / f"{variable}_vs_{against}{name}.png",
                against=against,
                configs=shown,
                title=f"{title} {label}".strip(),
                exclude=("policy", "queue_rate", "partition", "dirichlet", *scenario_columns),
                method=method,
                variable=variable,
            )


def scenario_label(ds, config: int, columns=("learning_rate",)) -> str:
    """'gamma1=10 lr=0.1' from the scenario columns that vary across the sweep."""
    parts = []
    for name in columns:
        if name not in ds.coords:
            continue
        values = np.unique(ds[name].to_numpy())
        if len(values) > 1:
            value = ds[name].to_numpy()[config]
            if isinstance(value, str):  # a label such as "dirichlet 0.1"
                parts.append(value)
                continue
            short = "lr" if name == "learning_rate" else name
            parts.append(f"{short}={'iid' if math.isinf(value) else f'{float(value):g}'}")
    return " ".join(parts)
