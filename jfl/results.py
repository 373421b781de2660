"""Labelled results: the runner's arrays as an xarray Dataset, per-run metrics and summaries.

Layout: one ``config`` dimension across all policies (coordinates ``policy`` and every swept
hyperparameter, NaN where a policy does not use it), then ``seed``, ``round`` and ``client``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import xarray as xr

from jfl.outputs import CORE_OUTPUTS, LEARNER_OUTPUTS, TRAJECTORY_OUTPUTS, Metric
from jfl.reduction import BAND_STATS, CURVES, RUN_METRICS, run_metric_names
from jfl.stats import NONNEGATIVE, UNBOUNDED, UNIT_INTERVAL, Bounds, interval, jain_index
from jfl.trackers import QUEUE_RATE

# Federated training (docs/metrics.md): final test accuracy, and rounds and simulated
# wall-clock time to
# the ``target_accuracy`` attribute (NaN for seeds that never reach it, so the mean and interval
# are over the seeds that do; ``reached_accuracy`` is the fraction that do), with their bounds.
ACCURACY_METRICS = {
    "final_accuracy": UNIT_INTERVAL,
    "rounds_to_accuracy": NONNEGATIVE,
    "time_to_accuracy": NONNEGATIVE,
    "reached_accuracy": UNIT_INTERVAL,
}


def to_dataset(
    outputs: Mapping[str, np.ndarray],
    configs: pd.DataFrame,
    seeds,
    dims: Mapping[str, tuple[str, ...]] | None = None,
    leading: tuple[str, ...] = ("config", "seed"),
    metrics: Mapping[str, Metric] | None = None,
) -> xr.Dataset:
    """Arrays with leading axes [config, seed] and a config table -> labelled Dataset.

    ``metrics`` declares the outputs (``jfl.outputs.output_metrics`` of the runs' own
    environment, learner and trackers; by default ``outputs.metrics``, as
    ``jfl.sweep.run_policy_grid`` returns them): their dims after the ``leading`` ones, and
    their ranges, which the dataset keeps (:func:`declared_bounds` reads them) to clip
    intervals. ``dims`` overrides the dims (a sweep reduced on the device:
    ``jfl.reduction.reduced_dims``, with ``leading=("config",)``).
    """
    metrics = getattr(outputs, "metrics", None) if metrics is None else metrics
    if dims is None and metrics is None:
        raise ValueError(
            "to_dataset needs the outputs' declarations: the Outputs that run_policy_grid "
            "returns, or metrics= (jfl.outputs.output_metrics of the runs' environment)"
        )
    dims = {name: tuple(m.dims) for name, m in metrics.items()} if dims is None else dims
    seeds = np.asarray(seeds)
    data_vars, sizes = {}, {}
    for name, value in outputs.items():
        if name not in dims:
            raise ValueError(
                f"unknown output {name!r}: not among the declared outputs {sorted(dims)}"
            )
        names = (*leading, *dims[name])
        data_vars[name] = (names, np.asarray(value))
        sizes.update(zip(names, np.shape(value), strict=True))
    coords = {"config": np.arange(len(configs)), "seed": seeds}
    if "round" in sizes:
        coords["round"] = np.arange(1, sizes["round"] + 1)
        if "eval" in sizes:
            # Evaluations at rounds 0, k, 2k, …, T.
            period = sizes["round"] // max(sizes["eval"] - 1, 1)
            coords["eval"] = np.arange(sizes["eval"]) * period
    if "client" in sizes:
        coords["client"] = np.arange(sizes["client"])
    if "stat" in sizes:
        coords["stat"] = list(BAND_STATS)
    for column in configs.columns:
        values = configs[column].to_numpy()
        # Labels that are names (the policy, its aggregation) stay strings; the rest are numbers.
        if values.dtype == object or column == "policy":
            values = values.astype(str)
        else:
            values = values.astype(float)
        coords[column] = ("config", values)
    ds = xr.Dataset(data_vars, coords=coords)
    return declare(ds, metrics) if metrics else ds


# The dataset attribute holding the declared ranges of its outputs (JSON: name -> [low, high]).
BOUNDS_ATTR = "output_bounds"


def declare(ds: xr.Dataset, metrics: Mapping[str, Metric]) -> xr.Dataset:
    """``ds`` with the ranges of the outputs ``metrics`` declares (a run's
    ``jfl.outputs.output_metrics``) kept in its attributes, where :func:`declared_bounds` reads
    them: what ``to_dataset`` does, for a dataset built otherwise."""
    stored = {name: list(m.bounds) for name, m in metrics.items()}
    return ds.assign_attrs({BOUNDS_ATTR: strict_json(stored, sort_keys=True)})


def output_bounds(ds: xr.Dataset) -> dict[str, Bounds]:
    """The ranges of the outputs ``ds`` holds, as their runs declared them (``to_dataset``)."""
    stored = json.loads(ds.attrs.get(BOUNDS_ATTR, "{}"))
    return {name: Bounds(float(low), float(high)) for name, (low, high) in stored.items()}


def declared_bounds(
    extra: Mapping[str, Bounds] | None = None, ds: xr.Dataset | None = None
) -> dict[str, Bounds]:
    """The bounds (``jfl.stats.Bounds``) of every quantity declared, by name: the runner's
    outputs (``jfl.outputs``), the per-run metrics and curves (``jfl.reduction.RUN_METRICS``,
    ``CURVES``), the outputs of ``ds`` as its runs declared them (their own environment's
    metrics and trackers' outputs: :func:`output_bounds`) and the accuracy metrics
    (``ACCURACY_METRICS``); a band ``<name>_band`` has its quantity's. ``extra`` (an
    experiment's ``metric_bounds``) adds or replaces entries. Anything else is unbounded.

    By name, not as an attribute of the arrays: xarray keeps attributes through arithmetic, so
    a regret computed as a difference of utilities would inherit their ≥ 0.
    """
    tables = [CORE_OUTPUTS, LEARNER_OUTPUTS, TRAJECTORY_OUTPUTS, RUN_METRICS, CURVES]
    known = {}
    for table in tables:
        for name, declaration in table.items():
            known.setdefault(name, declaration.bounds)
    for name, bounds in (output_bounds(ds) if ds is not None else {}).items():
        known.setdefault(name, bounds)
    known.update(ACCURACY_METRICS)
    known.update(extra or {})
    known.update({f"{name}_band": bounds for name, bounds in list(known.items())})
    return known


def bounds_of(
    name: str, extra: Mapping[str, Bounds] | None = None, ds: xr.Dataset | None = None
) -> Bounds:
    """The declared bounds of quantity ``name`` (:func:`declared_bounds`), else unbounded."""
    return declared_bounds(extra, ds).get(name, UNBOUNDED)


def running_selection_fraction(ds: xr.Dataset) -> xr.DataArray:
    """Fraction of the rounds so far in which each client was selected (needs trajectories)."""
    rounds = xr.DataArray(np.arange(1, ds.sizes["round"] + 1), dims="round")
    return ds["selected"].astype(float).cumsum("round") / rounds


def run_metrics(ds: xr.Dataset, extra=None) -> xr.Dataset:
    """The per-run metrics (``jfl.reduction.RUN_METRICS``, in float64) for every (config, seed).

    With the fairness queue's outputs (``jfl.trackers.fairness_queue``), the rate metrics are
    measured against its rate ``queue_rate``: a configuration coordinate or a per-client variable
    [config, client]. ``extra(ds) -> {name: DataArray}`` adds an experiment's own metrics
    (regret, utility, …) after these.
    """
    rounds = ds.sizes["round"]
    rate = ds["selection_count"] / rounds
    metrics = {}
    met = ds["last_unmet_round"] < rounds if "last_unmet_round" in ds else None
    if "accuracy" in ds:
        metrics.update(accuracy_metrics(ds))
    values = {
        "mean_round_time": lambda: ds["round_time"].mean("round"),
        "total_time": lambda: ds["round_time"].sum("round"),
        "final_queue_mean": lambda: ds["final_queue"].mean("client"),
        "final_queue_max": lambda: ds["final_queue"].max("client"),
        "min_selection_rate": lambda: rate.min("client"),
        "max_rate_violation": lambda: np.maximum(ds[QUEUE_RATE] - rate, 0.0).max("client"),
        "jain_index": lambda: xr.apply_ufunc(jain_index, rate, input_core_dims=[["client"]]),
        "selected_per_round": lambda: ds["num_selected"].mean("round"),
        # Fraction of seeds (once averaged) whose every client meets its rate after T rounds.
        "target_met": lambda: met.astype(float),
        # 1: met from the first round on; NaN: not met at the end (censored).
        "rounds_to_target": lambda: (ds["last_unmet_round"] + 1).where(met).astype(float),
    }
    for name in run_metric_names(ds.data_vars):
        metrics[name] = values[name]()
    if extra is not None:
        metrics.update(extra(ds))
    return xr.Dataset(metrics)


def accuracy_metrics(ds: xr.Dataset) -> dict[str, xr.DataArray]:
    """Final accuracy; first evaluated round and wall-clock time with accuracy ≥ the target."""
    accuracy = ds["accuracy"]
    metrics = {"final_accuracy": accuracy.isel(eval=-1)}
    if "target_accuracy" not in ds.attrs:
        return metrics
    reached = accuracy >= float(ds.attrs["target_accuracy"])
    ever = reached.any("eval")
    first = reached.argmax("eval")  # index of the first evaluation at or above the target
    rounds = ds["eval"].isel(eval=first)
    # The clock after round r is wall_clock[r - 1]; round 0 (the initial model) is time 0.
    clock = ds["wall_clock"].isel(round=(rounds - 1).clip(min=0))
    time = xr.where(rounds > 0, clock, 0.0)
    drop = ["eval", "round"]
    metrics["rounds_to_accuracy"] = xr.where(ever, rounds, np.nan).drop_vars(drop, errors="ignore")
    metrics["time_to_accuracy"] = xr.where(ever, time, np.nan).drop_vars(drop, errors="ignore")
    metrics["reached_accuracy"] = ever.astype(float)
    return metrics


def summarize(
    ds: xr.Dataset, level: float = 0.95, method: str = "t", metrics=None, bounds=None
) -> pd.DataFrame:
    """One row per configuration: its labels, ``n_seeds`` and ``metric``/``_lo``/``_hi``.

    From every run's outputs (a sweep that keeps them); ``metrics(ds) -> {name:
    DataArray[config, seed]}`` adds an experiment's own metrics after the generic ones of
    :func:`run_metrics`, ``bounds`` their bounds by name (as :func:`summary_table`).
    """
    metrics = run_metrics(ds, metrics)
    return summary_table(ds.assign(metrics), list(metrics.data_vars), level, method, bounds)


def summary_table(
    ds: xr.Dataset,
    metrics: list[str],
    level: float = 0.95,
    method: str = "t",
    bounds: Mapping[str, Bounds] | None = None,
) -> pd.DataFrame:
    """One row per configuration: its labels, ``n_seeds``, then for each per-run metric of
    ``ds`` ([config, seed]) its mean over seeds and interval, ``name``/``_lo``/``_hi``, the
    interval clipped to the metric's bounds (:func:`declared_bounds`, with ``bounds``: an
    experiment's own metrics')."""
    label_columns = [c for c in ds.coords if ds.coords[c].dims == ("config",)]
    table = ds.coords.to_dataset()[label_columns].to_dataframe().reset_index(drop=True)
    table["n_seeds"] = ds.sizes["seed"]
    if "nonfinite_round" in ds:  # runs whose outputs hold NaN or ±inf: their means skip them
        table["nonfinite_runs"] = nonfinite_runs(ds).to_numpy()
    known = declared_bounds(bounds, ds)
    for name in metrics:
        values = ds[name].transpose("config", "seed").to_numpy()
        clip = known.get(name, UNBOUNDED)
        mean, lo, hi = interval(values, axis=1, level=level, method=method, bounds=clip)
        table[name] = mean
        table[f"{name}_lo"] = lo
        table[f"{name}_hi"] = hi
    return table


def nonfinite_runs(ds: xr.Dataset) -> xr.DataArray:
    """[config] How many of each configuration's runs recorded a NaN or ±inf
    (``jfl.outputs.HEALTH_OUTPUTS``)."""
    return (ds["nonfinite_round"] >= 0).sum("seed")


def nonfinite_note(ds: xr.Dataset, describe: Callable[[int], str], most: int = 3) -> str | None:
    """One line naming the configurations with runs that recorded a NaN or ±inf, each with
    the first round it happened in; None where every value is finite. ``describe(config)``
    names a configuration."""
    if "nonfinite_round" not in ds:
        return None
    counts = nonfinite_runs(ds).to_numpy()
    bad = np.flatnonzero(counts)
    if not len(bad):
        return None
    rounds = ds["nonfinite_round"].where(ds["nonfinite_round"] >= 0).min("seed").to_numpy()
    seeds = ds.sizes["seed"]
    named = [
        f"{describe(int(c))} ({counts[c]} of {seeds} runs, from round {int(rounds[c])})"
        for c in bad[:most]
    ]
    more = f" and {len(bad) - most} more" if len(bad) > most else ""
    return (
        f"warning: {len(bad)} of {ds.sizes['config']} configurations have runs with NaN or "
        f"±inf values, which the means and intervals leave out: {'; '.join(named)}{more} "
        "(summary.csv: nonfinite_runs)"
    )


class PerRun(NamedTuple):
    """Where a sweep's per-run values wait to go into its results file (``write_dataset``)."""

    dims: Mapping[str, tuple[str, ...]]  # name -> dims after [config, seed]
    chunks: list  # (label, index, first row, stop row) of every stored chunk, in row order
    load: Callable  # load(label, index, name) -> np.ndarray [rows, seed, ...]


def strict_json(value, **options) -> str:
    """``json.dumps`` that strict parsers read: non-finite numbers become the strings "inf",
    "-inf" and "nan" (bare ``Infinity``/``NaN`` are not JSON, RFC 8259 §6); other objects
    their ``str``."""

    def finite(v):
        if isinstance(v, float) and not np.isfinite(v):
            return "nan" if np.isnan(v) else ("inf" if v > 0 else "-inf")
        if isinstance(v, Mapping):
            return {k: finite(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [finite(x) for x in v]
        return v

    plain = json.loads(json.dumps(value, default=str))  # JSON types (numpy scalars: str)
    return json.dumps(finite(plain), allow_nan=False, **options)


def write_dataset(ds: xr.Dataset, path, metadata: Mapping | None = None, per_run=None) -> None:
    """``ds`` as netCDF at ``path`` (written beside it and renamed into place when complete).

    ``per_run`` (a :class:`PerRun`) adds every run's values, copied from the chunk store one
    chunk and one output at a time, so that no more than a chunk of them is ever in memory.
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    ds = ds.copy()
    if metadata is not None:
        ds.attrs["metadata"] = strict_json(metadata)
    ds.to_netcdf(tmp, engine="h5netcdf")
    if per_run is not None:
        _append_per_run(tmp, per_run)
    os.replace(tmp, path)


def _append_per_run(path: Path, per_run: PerRun) -> None:
    import h5netcdf

    with h5netcdf.File(path, "a") as f:
        for name, dims in per_run.dims.items():
            first = per_run.load(*per_run.chunks[0][:2], name)
            names = ("config", "seed", *dims)
            for dim, size in zip(names[1:], first.shape[1:], strict=True):
                if dim not in f.dimensions:
                    f.dimensions[dim] = size
            # netCDF has no booleans: int8 with xarray's marker, read back as bool.
            boolean = first.dtype == np.bool_
            variable = f.create_variable(name, names, np.int8 if boolean else first.dtype)
            if boolean:
                variable.attrs["dtype"] = "bool"
            for label, index, start, stop in per_run.chunks:
                values = per_run.load(label, index, name)
                variable[start:stop] = values.astype(np.int8) if boolean else values


def load_dataset(path) -> xr.Dataset:
    """Open a results file written by a sweep (loads it into memory)."""
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        return ds.load()


def verify_dataset(ds: xr.Dataset, path, per_run: PerRun | None = None) -> None:
    """Raise ``RuntimeError`` unless the results file at ``path`` holds ``ds``'s variables with
    their values (NaNs alike) and, with ``per_run``, every run's values as the chunk store holds
    them (read back one chunk and one output at a time)."""
    import h5netcdf

    kept = tuple(per_run.dims) if per_run is not None else ()
    with xr.open_dataset(path, engine="h5netcdf", drop_variables=kept) as stored:
        for name, variable in ds.variables.items():
            if name not in stored.variables or not variable.equals(stored[name].variable):
                raise RuntimeError(f"{path} does not hold {name} as computed")
    if per_run is None:
        return
    with h5netcdf.File(path, "r") as f:
        for name in per_run.dims:
            boolean = f[name].attrs.get("dtype") == "bool"
            for label, index, start, stop in per_run.chunks:
                values = per_run.load(label, index, name)
                stored = f[name][start:stop]
                if not np.array_equal(stored.astype(bool) if boolean else stored, values, True):
                    raise RuntimeError(f"{path} does not hold {name} of chunk {label}/{index}")
