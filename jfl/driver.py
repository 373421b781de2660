"""One driver for every sweep: a typed config in, results on disk out.

An experiment is a frozen dataclass deriving from :class:`Experiment` (the settings every sweep
shares) that adds its own fields and implements ``plan()``: the Python-side setup (environment,
configuration table, traced per-configuration arrays, learner, dataset hooks) as a
:class:`jfl.sweep.Plan`. :func:`run` then does the same for every experiment, in three steps:

- prepare: checks → plan → policy groups (:class:`jfl.sweep.PolicyGrid`) → chunk size → output
  directory (:class:`jfl.sweep.SweepDir`: new, reused or refused);
- compute: the chunked, resumable run of every configuration;
- finish: labelled dataset → summary → ``results.nc``, ``summary.csv``, ``metadata.json`` and
  ``figures/``.

An experiment whose metrics and figures need only per-run metrics and bands over seeds sets
``reduces_on_device``: its chunks are then reduced on the device (``jfl.reduction``) and only
those reductions cross to the host, with every run's values kept on request
(``--per-run-rounds``, ``--trajectories``) and streamed into ``results.nc``
(:data:`ON_DEVICE`). The others keep every run's outputs and compute their metrics on the host
(:data:`ON_HOST`, ``jfl.results.summarize``).

Everything that can be wrong with the settings raises ``ValueError`` before anything compiles.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import jax
import numpy as np
import pandas as pd
import tyro

from jfl import (
    checks,
    compilation_cache,
    distributed,
    plots,
    prng,
    provenance,
    reduction,
    results,
    sweep,
)
from jfl.outputs import TRAJECTORY_OUTPUTS
from jfl.policies import get as get_policy
from jfl.sweep import Plan


@dataclasses.dataclass(frozen=True)
class Execution:
    """Where and how a sweep runs and what it writes, not what it computes: none of these
    fields is in the manifest, so changing one reuses the sweep ``out`` holds."""

    out: str = "runs/sweep"
    """output directory; re-running the same command there reuses or completes it"""
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


# The fields left out of the manifest (``Experiment.settings``).
EXECUTION_ONLY = tuple(field.name for field in dataclasses.fields(Execution))


@dataclasses.dataclass(frozen=True)
class Experiment(Execution):
    """The settings every sweep shares: what it computes (seeds, rounds, chunks) and how it
    runs (:class:`Execution`, a base rather than a field so that its flags and fields stay
    flat: ``--out``, ``VBetaGrid(out=…)``). An experiment adds its own fields and ``plan()``."""

    seeds: int = 64
    """number of seeds per configuration"""
    base_seed: int = 0
    """root of the seed keys"""
    rounds: int = 500
    """rounds T"""
    chunk_size: str = "auto"
    """configurations per chunk, or 'auto' (fit --memory-budget, near the fastest batch; a
    federated sweep: one per device). A federated sweep computes every chunk at exactly this
    size, so its numbers depend on it, never on the other configurations of the sweep"""
    trajectories: bool = False
    """also store per-client per-round selections and queues"""

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
class Result:
    experiment: Experiment
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
        e = self.experiment
        if self.process:
            return (
                f"process {self.process}: its chunks of {len(self.summary)} configurations are "
                f"in {self.out}; process 0 writes the outputs"
            )
        return (
            f"{len(self.summary)} configurations × {e.seeds} seeds × {e.rounds} rounds in "
            f"{self.wall_seconds:.1f} s → {self.out} ({self.chunks_computed} "
            f"chunk{'' if self.chunks_computed == 1 else 's'} computed, {self.chunks_reused} "
            f"reused; {sweep.format_bytes(self.disk_bytes)} on disk)" + self._stale_note()
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


def per_run_outputs(
    experiment: Experiment, dims: dict[str, tuple[str, ...]], trackers: tuple = ()
) -> tuple[str, ...]:
    """The outputs a reduced sweep keeps for every run: the per-round ones with
    ``--per-run-rounds``, the trajectories (the runner's and the trackers') with
    ``--trajectories`` (only then, although the runs may record them for the experiment's
    reductions)."""
    trajectories = {*TRAJECTORY_OUTPUTS, *(name for t in trackers for name in t.trajectories)}
    return tuple(
        name
        for name, d in dims.items()
        if d and (experiment.trajectories if name in trajectories else experiment.per_run_rounds)
    )


# --------------------------------------------------------------------------- output modes


class OutputMode:
    """What crosses from the device to the host, and how the summary is computed from it."""

    description: ClassVar[str]  # metadata.json's "outputs"

    def per_run(self, experiment, dims, trackers) -> tuple[str, ...]:
        """The outputs kept for every run beside the dataset's own variables."""
        return ()

    def dataset(self, outputs, configs, seeds, grid: sweep.PolicyGrid):
        """The labelled dataset of the sweep's outputs."""
        raise NotImplementedError

    def summarized(self, experiment: Experiment, ds, grid: sweep.PolicyGrid):
        """The dataset with the experiment's own per-run metrics, and the summary table."""
        raise NotImplementedError

    def dropped(self, dims) -> tuple[str, ...]:
        """The variables of a finished sweep's file that the dataset in memory does not hold."""
        return ()


class OnHost(OutputMode):
    """Every run's outputs cross to the host; the metrics are computed there
    (``jfl.results.summarize``)."""

    description = "every run's rounds"

    def dataset(self, outputs, configs, seeds, grid):
        return results.to_dataset(outputs, configs, seeds, dims=grid.dims)

    def summarized(self, experiment: Experiment, ds, grid):
        summary = results.summarize(
            ds, method=experiment.ci, metrics=experiment.metrics, bounds=experiment.metric_bounds
        )
        return ds, summary


class OnDevice(OutputMode):
    """The runs are reduced on the device (``jfl.reduction``): per-run metrics and bands over
    seeds cross to the host, and the per-run values asked for stream into ``results.nc``."""

    description = "reduced on the device"

    def per_run(self, experiment, dims, trackers) -> tuple[str, ...]:
        return per_run_outputs(experiment, dims, trackers)

    def dataset(self, outputs, configs, seeds, grid):
        reduced = reduction.reduced_dims(grid.dims, extra=grid.plan.reductions)
        declared = {**outputs.metrics, **grid.reduced_declarations()}
        return results.to_dataset(
            outputs, configs, seeds, dims=reduced, leading=("config",), metrics=declared
        )

    def summarized(self, experiment: Experiment, ds, grid):
        extra = experiment.metrics(ds)  # the experiment's own per-run metrics [config, seed]
        ds = ds.assign(extra)
        metrics = [*reduction.run_metric_names(grid.dims, grid.plan.reductions), *extra]
        summary = results.summary_table(
            ds, metrics, method=experiment.ci, bounds=experiment.metric_bounds
        )
        return ds, summary

    def dropped(self, dims) -> tuple[str, ...]:
        return tuple(name for name, d in dims.items() if d)  # every run's values kept


ON_HOST, ON_DEVICE = OnHost(), OnDevice()


# --------------------------------------------------------------------------- run


@dataclasses.dataclass
class Prepared:
    """A sweep ready to compute: its plan, policy groups, chunk size and output directory."""

    experiment: Experiment
    plan: Plan
    grid: sweep.PolicyGrid
    directory: sweep.SweepDir
    layout: distributed.Layout
    manifest: dict  # the settings, the chunk size, the devices and the code
    chunk_size: int
    stale: list[str]  # what changed in the code of results reused with --reuse-stale
    mode: OutputMode
    per_run: tuple[str, ...]  # the outputs kept for every run (on the device's mode)
    cache: Path | None  # the compilation cache's directory, None when off

    @property
    def seeds(self) -> np.ndarray:
        return np.arange(self.experiment.seeds)


def run(experiment: Experiment, *, words: str = "python") -> Result:
    """Check, plan, run (resuming what ``experiment.out`` holds) and write one sweep.

    A refusal (ValueError) names the experiment's fields as Python reads them
    (``overwrite=True``, ``rounds``); ``words="flags"`` names the command line's flags
    (``--overwrite``, ``--rounds``), as ``jfl.cli.main`` does: the library names parameters in
    Python's terms (``checks.in_flag_terms``), the experiments' checks in flags
    (``checks.in_python_terms``)."""
    try:
        prepared = prepare(experiment)
        start = time.perf_counter()
        if prepared.layout.writes_outputs and experiment.seeds < FEW_SEEDS:
            print(few_seeds_note(experiment.seeds), file=sys.stderr)
        finished = prepared.directory.finished(
            prepared.per_run, prepared.mode.dropped(prepared.grid.dims)
        )
        if finished is not None:  # a finished sweep: its summary and figures again
            return _rewritten(prepared, finished, start)
        outputs = compute(prepared)
        return finish(prepared, outputs, time.perf_counter() - start)
    except ValueError as err:
        if words == "flags":
            raise ValueError(checks.in_flag_terms(str(err), experiment)) from err
        raise ValueError(checks.in_python_terms(str(err), experiment)) from err


def prepare(experiment: Experiment) -> Prepared:
    """Everything before the first compilation: the checks, the plan and its policy groups,
    the chunk size, and the output directory, new, reused or refused (by every process alike:
    they read the same directory)."""
    experiment.check()
    layout = distributed.SINGLE
    if experiment.distributed:
        layout = distributed.initialize(
            experiment.coordinator,
            experiment.num_processes,
            experiment.process_id,
            experiment.distributed_timeout,
        )
    settings = experiment.settings()
    directory = sweep.SweepDir(experiment.out)
    # Refused before the plan's own computations, if it will be.
    directory.check(settings, overwrite=experiment.overwrite, resume=experiment.resume)
    plan = experiment.plan()
    grid = sweep.PolicyGrid(plan, experiment.trajectories)
    chunk = _chunk_size(experiment, plan, grid, directory, settings)
    manifest = {
        **settings,
        "chunk_configs": chunk,
        "devices": jax.local_device_count(),
        "code": _fingerprint(experiment, plan),
    }
    distributed.check_same_settings(manifest, layout)
    stale = []
    if layout.writes_outputs:
        stale = directory.prepare(
            manifest,
            resume=experiment.resume,
            overwrite=experiment.overwrite,
            reuse_stale=experiment.reuse_stale,
        )
    distributed.barrier("jfl-out-ready", layout)
    if experiment.fast_prng:
        prng.use_unrolled_threefry_on_cpu()
    cache = compilation_cache.enable() if experiment.compilation_cache else None
    mode = ON_DEVICE if type(experiment).reduces_on_device else ON_HOST
    per_run = mode.per_run(experiment, grid.dims, plan.trackers)
    return Prepared(
        experiment, plan, grid, directory, layout, manifest, chunk, stale, mode, per_run, cache
    )


def _chunk_size(experiment, plan, grid, directory, settings) -> int:
    """The chunk size (the resumed sweep's, if any), checked against the free memory."""
    stored = None if experiment.overwrite else directory.chunk_size(settings)
    configs = sweep.chunk_size(
        experiment.chunk_size,
        plan,
        experiment.seeds,
        experiment.memory_budget,
        exact=grid.exact,
        stored=stored,
    )
    auto = experiment.chunk_size == "auto"
    fits = min(configs, len(plan.configs))
    sweep.check_chunk_fits(fits, experiment.seeds, plan.per_run_bytes, auto, plan.data_bytes)
    return configs


def _fingerprint(experiment: Experiment, plan: Plan) -> dict:
    """The code a sweep runs (``jfl.provenance``), by role, and the data a federated sweep
    read (a Hub snapshot's commit)."""
    objects = {"experiment": type(experiment), "environment": plan.env, "learner": plan.learner}
    for name in dict.fromkeys(plan.configs["policy"]):
        objects[f"policy {name}"] = get_policy(name).build
    for i, tracker in enumerate(plan.trackers):
        functions = {k: v for k, v in tracker._asdict().items() if callable(v)}
        objects.update({f"tracker {i} {k}": v for k, v in functions.items()})
    code = provenance.code_fingerprint(objects)
    if "data" in plan.metadata:
        code["data"] = plan.metadata["data"].get("source")
    return code


def compute(prepared: Prepared) -> dict[str, np.ndarray]:
    """Every configuration's outputs, chunk by chunk, reusing the finished chunks."""
    p = prepared
    outputs = p.grid.run(
        rounds=p.experiment.rounds,
        seeds=p.seeds,
        chunk_size=p.chunk_size,
        base_seed=p.experiment.base_seed,
        store=p.directory.store,
        show_progress=not p.experiment.quiet,
        layout=p.layout,
        on_device=p.mode is ON_DEVICE,
        per_run=p.per_run,
    )
    # Every process has read the chunks it needs before process 0 may delete them.
    distributed.barrier("jfl-chunks-read", p.layout)
    untrained = int(np.max(outputs.get("untrained", 0)))
    if untrained:
        raise RuntimeError(
            f"a policy selected {untrained} more clients than its training slots; the "
            "experiment's slot bound is wrong"
        )
    return outputs


def finish(prepared: Prepared, outputs, wall: float) -> Result:
    """The labelled dataset and summary of the outputs, written by process 0."""
    p, experiment = prepared, prepared.experiment
    dims = p.grid.dims
    ds = p.mode.dataset(outputs, p.plan.configs, p.seeds, p.grid)
    ds = ds if p.plan.finish is None else p.plan.finish(ds)
    ds, summary = p.mode.summarized(experiment, ds, p.grid)
    store = p.directory.store
    counts = {"chunks_computed": store.computed, "chunks_reused": store.reused}
    if not p.layout.writes_outputs:
        return Result(experiment, ds, summary, p.directory.path, wall, p.layout.index, **counts)
    _warn_nonfinite(ds)
    per_run = {name: dims[name] for name in p.per_run}
    p.directory.write(ds, summary, _metadata(p, wall), per_run, experiment.keep_chunks)
    _write_figures(experiment, ds, summary)
    stale_chunks = store.reused if p.stale else 0
    disk = p.directory.disk_usage()
    return Result(
        experiment, ds, summary, p.directory.path, wall, **counts, disk_bytes=disk,
        stale_chunks=stale_chunks,
    )  # fmt: skip


def _metadata(p: Prepared, wall: float) -> dict:
    """``metadata.json``: the manifest, the run's provenance and how it was computed."""
    metadata = provenance.run_metadata(p.manifest, wall_seconds=wall)
    metadata["code"] = p.manifest["code"]
    store = p.directory.store
    if p.stale:
        metadata["reused_stale"] = {"changes": p.stale, "chunks_reused": store.reused}
    metadata["processes"] = p.layout.count
    metadata["devices_per_process"] = jax.local_device_count()
    metadata["chunks"] = len(store.rows)
    metadata["outputs"] = p.mode.description
    if p.per_run:
        metadata["per_run_outputs"] = list(p.per_run)
    if p.cache is not None:
        metadata["compilation_cache"] = {"dir": str(p.cache), "hits": compilation_cache.hits()}
    if p.plan.fixed:
        metadata["fixed_hparams"] = {name: float(value) for name, value in p.plan.fixed.items()}
    metadata.update(p.plan.metadata)
    return metadata


def _rewritten(p: Prepared, stored, start: float) -> Result:
    """The result of a finished sweep from its results file: the summary (at this run's
    ``--ci``) and the figures written again; reused stale results noted in ``metadata.json``."""
    experiment, out = p.experiment, p.directory.path
    ds, summary = p.mode.summarized(experiment, stored, p.grid)
    chunks = p.directory.finished_chunks()
    if p.layout.writes_outputs:
        _warn_nonfinite(ds)
        summary.to_csv(out / "summary.csv", index=False)
        _write_figures(experiment, ds, summary)
        if p.stale:
            p.directory.note_stale(p.stale, chunks)
    wall = time.perf_counter() - start
    disk = p.directory.disk_usage()
    stale = chunks if p.stale else 0
    return Result(experiment, ds, summary, out, wall, p.layout.index, 0, chunks, disk, stale)


def _warn_nonfinite(ds) -> None:
    """One line on stderr where runs recorded NaN or ±inf (a diverged model, say), naming each
    configuration as the figures' legends do."""
    varying = plots.varying_hparams(ds)
    note = results.nonfinite_note(ds, lambda config: plots.config_label(ds, config, varying))
    if note:
        print(note, file=sys.stderr)


def _write_figures(experiment: Experiment, ds, summary) -> None:
    if experiment.plots:
        folder = Path(experiment.out) / "figures"
        folder.mkdir(parents=True, exist_ok=True)
        experiment.figures(ds, summary, folder)
