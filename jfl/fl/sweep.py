"""The pipeline shared by the federated-training sweep scripts (``sweeps/fl_*.py``).

A federated sweep crosses selection policies (and their hyperparameters) with training
scenarios: data partitions (e.g. γ₁ = 1, 10, IID) and learning rates. Everything that does not
change shapes is traced, so each policy compiles once: the partitions are stacked along the
data's leading axis and a configuration picks its own with the ``partition`` hyperparameter.

The Python side runs first and fails early: flags, dataset files, partitions and the model are
checked before anything compiles. Then the grid runs in resumable chunks
(:func:`jfl.sweep.run_policy_grid`) and the outputs are written like every other sweep's:
``summary.csv`` (final accuracy, rounds and simulated time to ``--target-accuracy`` with 95%
intervals, besides the selection metrics), ``results.nc``, ``metadata.json`` and figures of the
test accuracy against rounds and against wall-clock time with bands over seeds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from jfl.cli import at_least
from jfl.fl.data import DATASETS, Dataset
from jfl.fl.models import MODELS
from jfl.fl.partition import Partition, stack_clients
from jfl.fl.train import AGGREGATIONS, FederatedData

ACCURACY_COLUMNS = (
    "n_seeds",
    "final_accuracy",
    "final_accuracy_lo",
    "final_accuracy_hi",
    "rounds_to_accuracy",
    "time_to_accuracy",
    "reached_accuracy",
    "mean_round_time",
)


# --------------------------------------------------------------------------- command line


def add_training_args(
    parser,
    *,
    model: str = "logistic",
    epochs: int = 1,
    batch_size: int = 10,
    learning_rate: str = "0.1",
    eval_every: int = 5,
    target_accuracy: float = 0.8,
    aggregation: str = "data_size",
) -> None:
    """Dataset, model and FedAvg flags, with the script's defaults."""
    g = parser.add_argument_group("federated training")
    g.add_argument("--dataset", default="digits", help=f"one of {', '.join(DATASETS)}")
    g.add_argument(
        "--data-dir", default=None, help="directory with the dataset's files (not for digits)"
    )
    g.add_argument("--model", default=model, help=f"one of {', '.join(MODELS)}")
    g.add_argument("--epochs", type=int, default=epochs, help="local epochs E ≥ 1")
    g.add_argument("--batch-size", type=int, default=batch_size, help="local minibatch size ≥ 1")
    g.add_argument(
        "--lr", default=learning_rate, help="learning rate(s) > 0, a list is a swept axis"
    )
    g.add_argument(
        "--aggregation", default=aggregation, help=f"FedAvg weights: {', '.join(AGGREGATIONS)}"
    )
    g.add_argument(
        "--eval-every", type=int, default=eval_every, help="rounds between test evaluations"
    )
    g.add_argument(
        "--target-accuracy",
        type=float,
        default=target_accuracy,
        help="accuracy in (0, 1] for rounds/time-to-target",
    )
    g.add_argument("--partition-seed", type=int, default=0, help="seed of the data partition")


def check_training_args(args) -> dict:
    """Validate the training flags (ValueError naming the flag); returns their settings."""
    from jfl.sweep import parse_values

    if args.dataset not in DATASETS:
        raise ValueError(f"--dataset must be one of {list(DATASETS)}, got {args.dataset!r}")
    if args.model not in MODELS:
        raise ValueError(f"--model must be one of {sorted(MODELS)}, got {args.model!r}")
    if args.aggregation not in AGGREGATIONS:
        raise ValueError(
            f"--aggregation must be one of {list(AGGREGATIONS)}, got {args.aggregation!r}"
        )
    at_least("epochs", args.epochs)
    at_least("batch-size", args.batch_size)
    at_least("eval-every", args.eval_every)
    at_least("partition-seed", args.partition_seed, 0)
    if args.rounds % args.eval_every:
        raise ValueError(f"--eval-every must divide --rounds={args.rounds}, got {args.eval_every}")
    if not 0 < args.target_accuracy <= 1:
        raise ValueError(f"--target-accuracy must be in (0, 1], got {args.target_accuracy}")
    learning_rate = parse_values(args.lr, "lr")
    if any(not 0 < v < math.inf for v in learning_rate):
        raise ValueError(f"--lr must be finite and > 0, got {learning_rate}")
    return {
        "dataset": args.dataset,
        "data_dir": args.data_dir,
        "model": args.model,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "learning_rate": learning_rate,
        "aggregation": args.aggregation,
        "eval_every": args.eval_every,
        "target_accuracy": args.target_accuracy,
        "partition_seed": args.partition_seed,
    }


def load_data(settings: dict) -> Dataset:
    """The dataset named in the settings (``DatasetError``, a ValueError, if it cannot be read)."""
    from jfl.fl.data import load_dataset

    return load_dataset(settings["dataset"], settings["data_dir"])


# --------------------------------------------------------------------------- data and model


def federated_data(dataset: Dataset, partitions: Sequence[Partition]) -> FederatedData:
    """Stack the clients' data of every partition, padded to one size, as device arrays."""
    import jax.numpy as jnp

    if not partitions:
        raise ValueError("give at least one partition")
    width = max(max(int(np.max(p.count, initial=0)) for p in partitions), 1)
    stacked = [stack_clients(dataset.x_train, dataset.y_train, p, pad_to=width) for p in partitions]
    return FederatedData(
        x=jnp.asarray(np.stack([c.x for c in stacked])),
        y=jnp.asarray(np.stack([c.y for c in stacked])),
        mask=jnp.asarray(np.stack([c.mask for c in stacked])),
        count=jnp.asarray(np.stack([c.count for c in stacked])),
        x_test=jnp.asarray(dataset.x_test),
        y_test=jnp.asarray(dataset.y_test),
    )


def model_footprint(model, sample_shape) -> tuple[int, int]:
    """(parameters, activation floats per sample) of ``model``, from shapes only."""
    import jax
    import jax.numpy as jnp

    def init(x):
        _, variables = model.init_with_output(jax.random.key(0), x, capture_intermediates=True)
        return variables

    variables = jax.eval_shape(init, jax.ShapeDtypeStruct((1, *sample_shape), jnp.float32))
    params = variables["params"]
    intermediates = variables.get("intermediates", {})
    num_params = sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(params))
    activations = sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(intermediates))
    return num_params, max(activations, int(np.prod(sample_shape)))


def bytes_per_fl_run(
    num_params: int,
    activations: int,
    *,
    slots: int,
    batch_size: int,
    num_servers: int,
    num_rounds: int,
    num_clients: int,
) -> int:
    """Rough upper bound of the memory one (configuration, seed) training run needs."""
    from jfl import sweep
    from jfl.fl.train import EVAL_BATCH

    models = num_params * (4 * slots + 3 * num_servers + 4)  # start, trained, grads, averages
    training = 3 * activations * batch_size * slots  # forward and backward activations
    evaluation = activations * EVAL_BATCH
    selection = sweep.bytes_per_run(num_rounds, num_clients, slots, False)
    # float32, ×2 for XLA temporaries, plus the selection run's own footprint.
    return 2 * 4 * (models + max(training, evaluation)) + selection


# --------------------------------------------------------------------------- running


def run_from_cli(
    parser,
    args,
    *,
    settings: dict,
    configs,
    env,
    env_params,
    dataset: Dataset,
    partitions: Sequence[Partition],
    num_clients: int,
    m: int | str,
    slots: Callable[[str, int], int],
    columns: Sequence[str],
    title: str,
    per_config: dict | None = None,
    env_hparams: tuple[str, ...] = (),
    num_servers: int = 1,
    global_every: int = 1,
) -> int:
    """Everything after flag validation: learner, chunked run, dataset, outputs, figures.

    ``configs`` needs the columns ``learning_rate`` and ``partition`` (an index into
    ``partitions``); ``slots(policy, m)`` bounds the clients a policy can select in a round.
    """
    import time

    from jfl import cli, results, sweep
    from jfl.fl.models import make_model
    from jfl.fl.train import make_learner

    sample_shape = tuple(dataset.x_train.shape[1:])
    model = make_model(settings["model"], dataset.num_classes)
    num_params, activations = model_footprint(model, sample_shape)
    sizes = configs[m].to_numpy(int) if isinstance(m, str) else np.full(len(configs), m)
    largest_slots = max(slots(p, int(s)) for p, s in zip(configs["policy"], sizes, strict=True))
    per_run = bytes_per_fl_run(
        num_params,
        activations,
        slots=largest_slots,
        batch_size=settings["batch_size"],
        num_servers=num_servers,
        num_rounds=settings["rounds"],
        num_clients=num_clients,
    )
    groups = ["policy", m] if isinstance(m, str) else ["policy"]
    chunk_size = cli.resolve_chunk_size(
        settings["chunk_size"],
        int(configs.groupby(groups).size().max()),
        settings["seeds"],
        per_run,
        settings["memory_budget_mib"],
    )
    data = federated_data(dataset, partitions)
    out, manifest = cli.prepare(parser, args, settings, chunk_size)

    def learner(policy: str, size: int):
        return make_learner(
            model,
            sample_shape,
            num_clients,
            epochs=settings["epochs"],
            batch_size=settings["batch_size"],
            slots=slots(policy, size),
            num_servers=num_servers,
            aggregation=settings["aggregation"],
            global_every=global_every,
        )

    run_arrays = {
        "learning_rate": configs["learning_rate"].to_numpy(),
        "partition": configs["partition"].to_numpy(),
        **(per_config or {}),
    }
    seeds = np.arange(settings["seeds"])
    start = time.perf_counter()
    try:
        outputs = sweep.run_policy_grid(
            env,
            env_params,
            configs,
            num_clients=num_clients,
            m=m,
            num_rounds=settings["rounds"],
            seeds=seeds,
            base_seed=settings["base_seed"],
            chunk_size=chunk_size,
            store=sweep.ChunkStore(out),
            trajectories=settings["trajectories"],
            show_progress=not args.quiet,
            per_config=run_arrays,
            env_hparams=env_hparams,
            learner=learner,
            data=data,
            eval_every=settings["eval_every"],
        )
    except ValueError as err:  # e.g. a corrupt chunk found while resuming
        parser.error(str(err))
    wall = time.perf_counter() - start
    untrained = int(np.max(outputs["untrained"]))
    if untrained:
        raise RuntimeError(
            f"a policy selected {untrained} more clients than its training slots; the slot "
            "bound in this script is wrong"
        )

    # Rate metrics are measured against each configuration's guaranteed rate: its queue_rate
    # column (β), or per-client rates c when the configuration has a vector of them.
    rate_vector = (per_config or {}).get("queue_rate")
    if rate_vector is not None and np.ndim(rate_vector) == 2:
        ds = results.to_dataset(outputs, configs.drop(columns="queue_rate"), seeds)
        ds["rate_target"] = (("config", "client"), np.asarray(rate_vector, float))
    else:
        ds = results.to_dataset(outputs, configs, seeds)
    ds["data_size"] = (("partition_index", "client"), np.asarray(data.count))
    ds.attrs["target_accuracy"] = settings["target_accuracy"]
    metadata = sweep.run_metadata(manifest, wall_seconds=wall)
    metadata["model"] = {"name": settings["model"], "parameters": num_params}
    metadata["data"] = {
        "train": int(dataset.y_train.shape[0]),
        "test": int(dataset.y_test.shape[0]),
        "clients_samples_min": int(np.min(data.count)),
        "clients_samples_max": int(np.max(data.count)),
    }

    def figures(ds, summary, folder):
        write_figures(ds, folder, title)

    summary = cli.write_outputs(ds, out, metadata, args.ci, None if args.no_plots else figures)
    print(
        f"{len(configs)} configurations × {settings['seeds']} seeds × {settings['rounds']} "
        f"rounds of {settings['model']} on {settings['dataset']} in {wall:.1f} s → {out}"
    )
    print(cli.format_table(summary, [*columns, *ACCURACY_COLUMNS]))
    return 0


def write_figures(ds, folder, title: str) -> None:
    """Accuracy vs round and vs wall-clock, one figure per scenario (partition × lr)."""
    from jfl import plots

    scenario = np.stack(
        [ds["partition"].to_numpy(), ds["learning_rate"].to_numpy()], axis=1
    ).astype(float)
    for key in np.unique(scenario, axis=0):
        shown = list(np.flatnonzero((scenario == key).all(axis=1)))
        label = scenario_label(ds, shown[0])
        suffix = label.replace(" ", "_").replace("=", "-")
        name = f"_{suffix}" if suffix else ""
        for against in ("round", "time"):
            plots.plot_accuracy(
                ds,
                folder / f"accuracy_vs_{against}{name}.png",
                against=against,
                configs=shown,
                title=f"{title} {label}".strip(),
                exclude=("policy", "queue_rate", "partition", "gamma1", "learning_rate"),
            )


def scenario_label(ds, config: int) -> str:
    """'gamma1=10 lr=0.1' from the scenario columns that vary across the sweep."""
    parts = []
    for name in ("gamma1", "learning_rate"):
        if name not in ds.coords:
            continue
        values = np.unique(ds[name].to_numpy())
        if len(values) > 1:
            value = float(ds[name].to_numpy()[config])
            short = "lr" if name == "learning_rate" else name
            parts.append(f"{short}={'iid' if math.isinf(value) else f'{value:g}'}")
    return " ".join(parts)
