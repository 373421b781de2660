"""One driver for every sweep: a typed config in, results on disk out.

An experiment is a frozen dataclass deriving from :class:`Experiment` (the execution and output
settings every sweep shares) that adds its own fields and implements ``plan()``: the Python-side
setup (environment, configuration table, traced per-configuration arrays, learner, dataset
hooks) as a :class:`Plan`. :func:`run` then does the same for every experiment:

checks → plan → chunk size → output directory (new, reused or refused) → chunked, resumable run
(:func:`jfl.sweep.run_policy_grid`) → labelled dataset → summary → ``summary.csv``,
``results.nc``, ``metadata.json`` and ``figures/``.

An experiment whose metrics and figures need only per-run metrics and bands over seeds sets
``reduces_on_device``: its chunks are then reduced on the device (``jfl.reduction``) and only
those reductions cross to the host, with every run's values kept on request
(``--per-run-rounds``, ``--trajectories``) and streamed into ``results.nc``. The others keep
every run's outputs and compute their metrics on the host (``jfl.results.summarize``).

Everything that can be wrong with the settings raises ``ValueError`` before anything compiles.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
import pandas as pd
import tyro

from jfl import checks

# Fields that change where and how a sweep is run, not what it computes: not in the manifest.
EXECUTION_ONLY = (
    "out",
    "resume",
    "overwrite",
    "reuse_stale",
    "keep_chunks",
    "ci",
    "plots",
    "plot_at",
    "quiet",
    "fast_prng",
    "distributed",
    "coordinator",
    "num_processes",
    "process_id",
    "distributed_timeout",
    "memory_budget",
    "per_run_rounds",
    "compilation_cache",
)


@dataclasses.dataclass(frozen=True)
class Experiment:
    """Execution and output settings shared by every sweep."""

    seeds: int = 64
    """number of seeds per configuration"""
    base_seed: int = 0
    """root of the seed keys"""
    rounds: int = 500
    """rounds T"""
    out: str = "runs/sweep"
    """output directory; re-running the same command there reuses or completes it"""
    chunk_size: str = "auto"
    """configurations per chunk, or 'auto' (fit --memory-budget, near the fastest batch; a
    federated sweep: one per device). A federated sweep computes every chunk at exactly this
    size, so its numbers depend on it, never on the other configurations of the sweep"""
    memory_budget: float | None = None
    """MiB for the chunks in flight (with --chunk-size auto); default: 1024 on CPU, half the
    free memory of an accelerator"""
    resume: bool = False
    """continue the sweep in --out (it must hold the same settings)"""
    overwrite: bool = False
    """replace whatever sweep --out holds"""
    reuse_stale: bool = False
    """reuse the results --out holds although other code computed them (recorded in
    metadata.json); by default they are refused"""
    per_run_rounds: bool = False
    """also store every run's per-round values in results.nc (by default it holds per-run
    metrics [config, seed] and bands over seeds [config, round]), written chunk by chunk"""
    trajectories: bool = False
    """also store per-client per-round selections and queues"""
    keep_chunks: bool = False
    """keep the chunk store (chunks/) of a finished sweep; by default it is deleted once
    results.nc is written and read back identical, so the results are on disk once"""
    ci: Literal["t", "bootstrap"] = "t"
    """interval method over seeds"""
    plots: bool = True
    """write the figures"""
    plot_at: Annotated[tuple[str, ...], tyro.conf.UseAppendAction] = ()
    """AXIS=VALUE: the grid point at which figures that show one slice of the grid draw it
    (repeat the flag or join with commas: beta=0.2,alpha=0.1); by default the experiment's
    defaults, named in each figure's title"""
    quiet: bool = False
    """no progress bar"""
    fast_prng: bool = True
    """JAX's unrolled threefry lowering on CPU (same bits, faster; see jfl.prng)"""
    distributed: bool = False
    """one of several processes (jax.distributed: SLURM, Open MPI, TPU pods detected); --out
    must be on a filesystem every process sees"""
    coordinator: str | None = None
    """with --distributed: HOST:PORT of process 0 (explicit launch, with the next two)"""
    num_processes: int | None = None
    """with --distributed --coordinator: number of processes"""
    process_id: int | None = None
    """with --distributed --coordinator: this process, 0 … --num-processes − 1"""
    distributed_timeout: float = 300.0
    """seconds to wait for the other processes to join"""
    compilation_cache: bool = True
    """keep compiled programs in the user's cache folder (jfl.compilation_cache) for later runs"""

    name: ClassVar[str] = "sweep"
    summary_columns: ClassVar[tuple[str, ...]] = ()
    # Whether the experiment trains a model (jfl.fl): only then can policies read the learner's
    # per-client signals (e.g. local_accuracy).
    trains: ClassVar[bool] = False
    # Whether the experiment's metrics and figures read the device reductions (jfl.reduction):
    # per-run metrics and bands over seeds. Experiments whose metrics need every run's rounds
    # on the host (a regret against another configuration, say) keep them all, as with
    # --per-run-rounds.
    reduces_on_device: ClassVar[bool] = False
    # The bounds (jfl.stats.Bounds) of the experiment's own metrics (``metrics()``) that have
    # any, by name: their intervals are clipped to them (the library's metrics declare theirs).
    metric_bounds: ClassVar[Mapping[str, Any]] = {}

    def check(self) -> None:
        """Raise ``ValueError`` naming the flag of the first bad value (subclasses extend)."""
        checks.integer("--seeds", self.seeds)
        checks.integer("--rounds", self.rounds)
        checks.integer("--base-seed", self.base_seed, 0)
        if self.memory_budget is not None:
            checks.positive("--memory-budget", self.memory_budget)
        if not str(self.out).strip():
            raise ValueError("--out must name a directory, got ''")
        if self.resume and self.overwrite:
            raise ValueError("--resume and --overwrite exclude each other")
        if self.reuse_stale and self.overwrite:
            raise ValueError("--reuse-stale and --overwrite exclude each other")
        from jfl import distributed

        distributed.check_flags(
            self.distributed,
            self.coordinator,
            self.num_processes,
            self.process_id,
            self.distributed_timeout,
        )
        if self.chunk_size != "auto":
            try:
                chunk = int(self.chunk_size)
            except ValueError:
                raise ValueError(
                    f"--chunk-size must be a positive integer or 'auto', got {self.chunk_size!r}"
                ) from None
            checks.integer("--chunk-size", chunk)
        if self.plot_at:
            checks.grid_point("--plot-at", self.plot_at, self.plot_axes())

    def plan(self) -> Plan:
        """The Python-side setup of the sweep: environment, configurations, per-configuration
        arrays, learner, trackers (see :class:`Plan`); ``ValueError`` on a bad setting."""
        raise NotImplementedError

    def metrics(self, ds) -> dict:
        """Experiment-specific per-(config, seed) metrics, added to the generic ones."""
        return {}

    def plot_axes(self) -> dict[str, list[float]]:
        """The grid axes that figures showing one slice of the grid fix, with their values
        (``--plot-at`` picks among them); none by default."""
        return {}

    def figures(self, ds, summary: pd.DataFrame, folder: Path) -> None:
        """Write the experiment's figures into ``folder``."""

    def settings(self) -> dict:
        """What the sweep computes, as stored in the manifest (JSON types). The fields of a
        composed settings dataclass (e.g. ``training``) are listed as the experiment's own, as
        their flags are."""
        values = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if dataclasses.is_dataclass(value):
                values.update(dataclasses.asdict(value))
            elif f.name not in EXECUTION_ONLY:
                values[f.name] = value
        return json.loads(json.dumps({"experiment": self.name, **values}))


@dataclasses.dataclass
class Plan:
    """The Python-side setup of a sweep (see :func:`jfl.sweep.run_policy_grid`)."""

    env: Any
    env_params: Any
    configs: pd.DataFrame  # one row per configuration: policy and labels
    selection_size: int | str  # an int, or the configs column holding it per row
    per_run_bytes: int  # memory of one (configuration, seed) run, for the chunk size
    per_config: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)
    per_seed: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)  # [C, S, ...]
    env_hparams: tuple[str, ...] = ()
    fixed: Mapping[str, float] = dataclasses.field(default_factory=dict)
    learner: Callable | None = None  # learner(policy, size) for federated runs
    data: Any = None
    data_bytes: int = 0  # device memory of ``data``, shared by every chunk
    eval_every: int | None = None
    trackers: tuple = ()  # jfl.trackers kept in every run (their hparams: columns or per_config)
    finish: Callable | None = None  # ds -> ds: the experiment's variables, attributes
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Result:
    config: Experiment
    dataset: Any  # xarray.Dataset
    summary: pd.DataFrame
    out: Path
    wall_seconds: float
    process: int = 0  # this process among a distributed sweep's (0 writes the outputs)
    chunks_computed: int = 0  # by this process
    chunks_reused: int = 0  # found finished in --out
    disk_bytes: int = 0  # what --out holds once the sweep is written
    stale_chunks: int = 0  # reused although other code computed them (--reuse-stale)

    def describe(self) -> str:
        """One line for the terminal: what ran, how long, where the outputs are."""
        from jfl.sweep import format_bytes

        c = self.config
        if self.process:
            return (
                f"process {self.process}: its chunks of {len(self.summary)} configurations are "
                f"in {self.out}; process 0 writes the outputs"
            )
        return (
            f"{len(self.summary)} configurations × {c.seeds} seeds × {c.rounds} rounds in "
            f"{self.wall_seconds:.1f} s → {self.out} ({self.chunks_computed} "
            f"chunk{'' if self.chunks_computed == 1 else 's'} computed, {self.chunks_reused} "
            f"reused; {format_bytes(self.disk_bytes)} on disk)" + self._stale_note()
        )

    def _stale_note(self) -> str:
        if not self.stale_chunks:
            return ""
        chunks = "1 stale chunk" if self.stale_chunks == 1 else f"{self.stale_chunks} stale chunks"
        return f"; {chunks} reused (--reuse-stale): other code computed them"


# Below this many seeds a sweep notes that its intervals are wide and unreliable.
FEW_SEEDS = 5


def few_seeds_note(seeds: int) -> str:
    """The one line a sweep of fewer than ``FEW_SEEDS`` seeds prints before it runs."""
    if seeds == 1:
        return "note: 1 seed: no intervals (they need at least 2 seeds)"
    return (
        f"note: {seeds} seeds: intervals over fewer than {FEW_SEEDS} seeds are wide and unreliable"
    )


# Largest batch (configurations × seeds) of one chunk on CPU: the vmapped runner is fastest
# near a thousand runs, and larger batches spill its working set out of the caches.
CPU_BATCH = 1024


# --memory-budget's default on CPU, in MiB (accelerators: from the device's free memory).
CPU_MEMORY_BUDGET = 1024.0


def memory_budget_bytes(config: Experiment) -> int:
    """``--memory-budget`` in bytes: given, or half an accelerator's free memory, or 1 GiB."""
    from jfl import sweep

    if config.memory_budget is not None:
        return int(config.memory_budget * 2**20)
    return sweep.device_memory_budget() or int(CPU_MEMORY_BUDGET * 2**20)


def chunk_size(config: Experiment, plan: Plan, stored: int | None = None) -> int:
    """``--chunk-size`` as an int: given, the size of the sweep being resumed (``stored``, so
    that its chunks are the same), or the most configurations fitting the budget.

    A federated sweep's chunk is one configuration per device (``exact_chunks``): XLA rounds a
    model's matrix products and reductions differently in batches of different shapes (a
    vmapped softmax cross-entropy changes in the last bit between 3 and 4 configurations on the
    CPU), so a chunk sized from the sweep would make a configuration's numbers depend on the
    other configurations of its sweep (docs/decisions.md#federated-chunks)."""
    import jax

    from jfl import sweep

    devices = jax.local_device_count()  # a chunk runs on one process's devices
    if config.chunk_size != "auto":
        return sweep.round_up(int(config.chunk_size), devices)
    if stored is not None:
        return stored
    if exact_chunks(plan):
        return devices
    configs = plan.configs
    groups = ["policy"]
    if isinstance(plan.selection_size, str):
        groups.append(plan.selection_size)
    largest = int(configs.groupby(groups, sort=False).size().max())
    budget = max(memory_budget_bytes(config) - plan.data_bytes, 0)
    size = sweep.auto_chunk_size(largest, config.seeds, plan.per_run_bytes, budget, devices)
    if jax.default_backend() == "cpu":
        size = min(size, sweep.round_up(max(1, CPU_BATCH // config.seeds), devices))
    return size


def exact_chunks(plan: Plan) -> bool:
    """Whether every chunk is computed at exactly the chunk size (federated sweeps whose learner
    is not ``batch_invariant``: see ``chunk_size``), not shrunk to a policy's number of
    configurations."""
    return plan.learner is not None and not _a_learner(plan).batch_invariant


def per_run_outputs(
    config: Experiment, dims: Mapping[str, tuple[str, ...]], trackers: tuple = ()
) -> tuple[str, ...]:
    """The outputs a reduced sweep keeps for every run: the per-round ones with
    ``--per-run-rounds``, the trajectories (the runner's and the trackers') with
    ``--trajectories``."""
    from jfl.runner import TRAJECTORY_OUTPUTS

    trajectories = {*TRAJECTORY_OUTPUTS, *(name for t in trackers for name in t.trajectories)}
    return tuple(
        name
        for name, d in dims.items()
        if d and (config.per_run_rounds or (config.trajectories and name in trajectories))
    )


def run(config: Experiment, *, words: str = "python") -> Result:
    """Check, plan, run (resuming what ``config.out`` holds) and write one sweep.

    A refusal (ValueError) names the config's fields as Python reads them (``overwrite=True``,
    ``rounds``); ``words="flags"`` keeps the command line's flags (``--overwrite``,
    ``--rounds``), as ``jfl.cli.main`` does."""
    from jfl import checks

    try:
        return _run(config)
    except ValueError as err:
        if words == "flags":
            raise
        raise ValueError(checks.in_python_terms(str(err), config)) from err


def _run(config: Experiment) -> Result:
    import jax

    from jfl import distributed, prng, provenance, sweep
    from jfl.runner import output_dims

    config.check()
    layout = distributed.SINGLE
    if config.distributed:
        layout = distributed.initialize(
            config.coordinator,
            config.num_processes,
            config.process_id,
            config.distributed_timeout,
        )
    settings = config.settings()
    out = Path(config.out)
    # A directory that will be refused is refused before the plan's own computations (by every
    # process alike: they read the same directory).
    sweep.check_out_dir(out, settings, overwrite=config.overwrite, resume=config.resume)
    plan = config.plan()
    code = provenance.code_fingerprint(_code_objects(config, plan))
    if "data" in plan.metadata:  # the files a federated sweep read (a Hub snapshot's commit)
        code["data"] = plan.metadata["data"].get("source")
    stored = None if config.overwrite else sweep.stored_chunk_size(out, settings)
    size = chunk_size(config, plan, stored)
    exact = exact_chunks(plan)
    auto = config.chunk_size == "auto"
    sweep.check_chunk_fits(
        min(size, len(plan.configs)), config.seeds, plan.per_run_bytes, auto, plan.data_bytes
    )
    # The resolved chunk size is part of the manifest: the same chunks are what make a resumed
    # sweep bit-identical to an uninterrupted one. "devices" is per process (a chunk's devices).
    manifest = {
        **settings,
        "chunk_configs": size,
        "devices": jax.local_device_count(),
        "code": code,
    }
    distributed.check_same_settings(manifest, layout)
    stale = []
    if layout.writes_outputs:
        stale = sweep.prepare_out_dir(
            out,
            manifest,
            resume=config.resume,
            overwrite=config.overwrite,
            reuse_stale=config.reuse_stale,
        )
    distributed.barrier("jfl-out-ready", layout)
    if config.fast_prng:
        prng.use_unrolled_threefry_on_cpu()
    cache = None
    if config.compilation_cache:
        from jfl import compilation_cache

        cache = compilation_cache.enable()

    dims = output_dims(
        plan.env,
        learner=_a_learner(plan),
        trajectories=config.trajectories,
        trackers=plan.trackers,
    )
    reduced = type(config).reduces_on_device
    keep = per_run_outputs(config, dims, plan.trackers) if reduced else ()
    seeds = np.arange(config.seeds)
    store = sweep.ChunkStore(out)
    if config.seeds < FEW_SEEDS and layout.writes_outputs:
        print(few_seeds_note(config.seeds), file=sys.stderr)
    start = time.perf_counter()
    stored = _stored_results(config, dims, keep)
    if stored is not None:  # a finished sweep: its summary and figures again, nothing computed
        chunks = len(list(sweep.per_run_chunks(plan.configs, plan.selection_size, size, exact)))
        return _rewritten(config, stored, dims, chunks, stale, layout, start)
    outputs = sweep.run_policy_grid(
        plan.env,
        plan.env_params,
        plan.configs,
        num_clients=plan.env_params.num_clients,
        selection_size=plan.selection_size,
        num_rounds=config.rounds,
        seeds=seeds,
        base_seed=config.base_seed,
        chunk_size=size,
        fixed=plan.fixed,
        store=store,
        trajectories=config.trajectories,
        show_progress=not config.quiet,
        per_config=plan.per_config,
        per_seed=plan.per_seed,
        env_hparams=plan.env_hparams,
        learner=plan.learner,
        data=plan.data,
        eval_every=plan.eval_every,
        layout=layout,
        reduce=reduced,
        keep=keep,
        trackers=plan.trackers,
        exact_chunks=exact,
    )
    wall = time.perf_counter() - start
    # Every process has read the chunks it needs before process 0 may delete them.
    distributed.barrier("jfl-chunks-read", layout)
    untrained = int(np.max(outputs.get("untrained", 0)))
    if untrained:
        raise RuntimeError(
            f"a policy selected {untrained} more clients than its training slots; the "
            "experiment's slot bound is wrong"
        )

    ds, summary = _summarized(config, _labelled(config, plan, outputs, dims, seeds), dims)
    if layout.writes_outputs:
        _warn_nonfinite(ds)
    counts = {"chunks_computed": store.computed, "chunks_reused": store.reused}
    if not layout.writes_outputs:
        return Result(config, ds, summary, out, wall, process=layout.index, **counts)
    metadata = provenance.run_metadata(manifest, wall_seconds=wall)
    metadata["code"] = code
    if stale:
        metadata["reused_stale"] = {"changes": stale, "chunks_reused": store.reused}
    metadata["processes"] = layout.count
    metadata["devices_per_process"] = jax.local_device_count()
    metadata["outputs"] = "reduced on the device" if reduced else "every run's rounds"
    if keep:
        metadata["per_run_outputs"] = list(keep)
    if cache is not None:
        from jfl import compilation_cache

        metadata["compilation_cache"] = {"dir": str(cache), "hits": compilation_cache.hits()}
    if plan.fixed:
        metadata["fixed_hparams"] = {name: float(value) for name, value in plan.fixed.items()}
    metadata.update(plan.metadata)
    kept = {name: dims[name] for name in keep}
    _write_outputs(config, plan, ds, summary, metadata, store, size, kept)
    disk = sweep.disk_usage(out)
    stale_chunks = store.reused if stale else 0
    return Result(
        config, ds, summary, out, wall, **counts, disk_bytes=disk, stale_chunks=stale_chunks
    )


def _a_learner(plan: Plan):
    """The learner of the plan's first configuration (False without one): what the outputs'
    dims read its evaluations from (``jfl.runner.learner_outputs``)."""
    if plan.learner is None:
        return False
    first = plan.configs.iloc[0]
    size = plan.selection_size
    size = first[size] if isinstance(size, str) else size
    return plan.learner(first["policy"], int(size))


def _code_objects(config: Experiment, plan: Plan) -> dict:
    """What a sweep runs, by role, for its code fingerprint (``jfl.provenance``)."""
    from jfl.policies import get as get_policy

    objects = {"experiment": type(config), "environment": plan.env, "learner": plan.learner}
    for name in dict.fromkeys(plan.configs["policy"]):
        objects[f"policy {name}"] = get_policy(name).build
    for i, tracker in enumerate(plan.trackers):
        functions = {k: v for k, v in tracker._asdict().items() if callable(v)}
        objects.update({f"tracker {i} {k}": v for k, v in functions.items()})
    return objects


def _labelled(config: Experiment, plan: Plan, outputs, dims, seeds):
    """The labelled dataset of a finished sweep's outputs."""
    from jfl import reduction, results

    if type(config).reduces_on_device:
        ds = results.to_dataset(
            outputs, plan.configs, seeds, dims=reduction.reduced_dims(dims), leading=("config",)
        )
    else:
        ds = results.to_dataset(outputs, plan.configs, seeds, dims=dims)
    return ds if plan.finish is None else plan.finish(ds)


def _summarized(config: Experiment, ds, dims):
    """The dataset with the experiment's own per-run metrics, and the summary table."""
    from jfl import reduction, results

    if type(config).reduces_on_device:
        extra = config.metrics(ds)  # the experiment's own per-run metrics [config, seed]
        ds = ds.assign(extra)
        metrics = [*reduction.run_metric_names(dims), *extra]
        summary = results.summary_table(ds, metrics, method=config.ci, bounds=config.metric_bounds)
        return ds, summary
    summary = results.summarize(
        ds, method=config.ci, metrics=config.metrics, bounds=config.metric_bounds
    )
    return ds, summary


def _rewritten(config: Experiment, stored, dims, chunks: int, stale, layout, start) -> Result:
    """The result of a finished sweep from its results file: the summary (at this run's
    ``--ci``) and the figures written again; reused stale results noted in ``metadata.json``."""
    from jfl import results, sweep

    out = Path(config.out)
    ds, summary = _summarized(config, stored, dims)
    if layout.writes_outputs:
        _warn_nonfinite(ds)
        summary.to_csv(out / "summary.csv", index=False)
        _write_figures(config, ds, summary)
        if stale:
            metadata = json.loads((out / "metadata.json").read_text())
            metadata["reused_stale"] = {"changes": stale, "chunks_reused": chunks}
            (out / "metadata.json").write_text(results.strict_json(metadata, indent=2))
    wall = time.perf_counter() - start
    disk = sweep.disk_usage(out)
    return Result(
        config, ds, summary, out, wall, layout.index, 0, chunks, disk, chunks if stale else 0
    )


def _warn_nonfinite(ds) -> None:
    """One line on stderr where runs recorded NaN or ±inf (a diverged model, say), naming each
    configuration as the figures' legends do."""
    from jfl import plots, results

    varying = plots.varying_hparams(ds)
    note = results.nonfinite_note(ds, lambda config: plots.config_label(ds, config, varying))
    if note:
        print(note, file=sys.stderr)


def _stored_results(config: Experiment, dims, keep):
    """The dataset of the finished sweep ``--out`` holds in ``results.nc`` alone (its chunks
    deleted once it was verified), as a run computes it in memory; None where there is none or
    it lacks the per-run values asked for (the sweep is then computed again)."""
    from jfl import results, sweep

    out = Path(config.out)
    if not (out / "results.nc").exists() or sweep.ChunkStore(out).finished():
        return None
    ds = results.load_dataset(out / "results.nc")
    if not all(name in ds for name in keep):
        return None
    if type(config).reduces_on_device:  # every run's values stay in the file
        ds = ds.drop_vars([name for name, d in dims.items() if d and name in ds])
    return ds


def _write_outputs(config, plan, ds, summary, metadata, store, size, kept) -> None:
    """``results.nc`` (with the per-run values streamed in from the chunk store), then
    ``summary.csv``, ``metadata.json`` and the figures."""
    from jfl import results, sweep

    out = Path(config.out)
    per_run = None
    if kept:
        chunks = list(
            sweep.per_run_chunks(plan.configs, plan.selection_size, size, exact_chunks(plan))
        )
        per_run = results.PerRun(kept, chunks, store.load_per_run)
    results.write_dataset(ds, out / "results.nc", metadata, per_run=per_run)
    results.verify_dataset(ds, out / "results.nc", per_run=per_run)
    if kept:
        store.remove_per_run()  # they are in results.nc now: one copy on disk
    summary.to_csv(out / "summary.csv", index=False)
    (out / "metadata.json").write_text(results.strict_json(metadata, indent=2))
    _write_figures(config, ds, summary)
    if not config.keep_chunks:
        store.remove()  # everything is in results.nc, read back identical


def _write_figures(config: Experiment, ds, summary) -> None:
    if config.plots:
        folder = Path(config.out) / "figures"
        folder.mkdir(parents=True, exist_ok=True)
        config.figures(ds, summary, folder)
