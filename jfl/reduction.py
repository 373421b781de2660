"""What crosses to the host: per-run metrics and per-configuration bands over seeds.

A sweep of 262,144 runs × 500 rounds records 2 GB of per-round values; its figures and summary
need ~10 MB of them. ``make_reducer`` builds the function that the runner applies, on the device
and inside the compiled sweep, to one configuration's seeds (``jfl.runner.make_batched_run``'s
``reduce``):

* **per-run metrics** ``[seed]``: the scalars that the summary averages over seeds
  (``RUN_METRICS``: mean round time, selection rates, Jain's index, the fairness queue's, …)
  and every scalar output of the run (``last_unmet_round``, …);
* **bands** ``<output>_band [stat, round | client | eval]``: the mean and the variance
  (``ddof=1``) over seeds (``BAND_STATS``) of every per-round, per-client and per-evaluation
  output, and of the ``CURVES`` (the cumulative round time, the pull record), which the figures
  draw;
* optionally the **per-run** values themselves (``keep``: ``--per-run-rounds``,
  ``--trajectories``), which the sweep writes out chunk by chunk.

A run may also read, on its own seed, the outputs of the configuration it is paired with (its
*reference*: ``jfl.sweep.Plan.reference``, ``RunView.reference``), so that a metric or a curve
of a difference (a regret against a benchmark configuration of the same sweep) is paired by
seed on the device. The sweep computes the reference rows' outputs first, as one table shared by
every chunk (``reference`` in ``make_reducer``'s ``reduce``), and each configuration reads its
row of it by a hyperparameter of its own (``REFERENCE``).

Every sum goes through the elementwise reductions of ``jfl.kernels.reduce``, and the reducer is
a program of its own that reads the runs' outputs on the device (fused into the runs' program,
XLA:CPU computed some sums differently for other numbers of configurations), so a
configuration's numbers do not depend on the batch, chunk, device or process it runs in. They
are float32, as the runs are; ``jfl.results.run_metrics`` is the same arithmetic in float64 on
the host, from per-run values, and the tests hold the two to float32 rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jfl.kernels.reduce import doubling_cumsum, pairwise_mean, pairwise_sum
from jfl.outputs import CLIENT, EVAL, ROUND
from jfl.stats import NONNEGATIVE, UNBOUNDED, UNIT_INTERVAL, Bounds
from jfl.trackers import QUEUE_RATE

# A band ``<output>_band`` holds, along its ``stat`` dim, these statistics over seeds.
BAND_STATS = ("mean", "var")
STAT = "stat"


class RunView(NamedTuple):
    """One run's outputs as the metrics read them."""

    outputs: Mapping[str, jax.Array]  # RunOutput.arrays() of one run
    hparams: Mapping[str, jax.Array]  # its configuration's, and its own seed's row of per-seed ones
    num_rounds: int
    rate: str  # the hyperparameter holding the fairness queue's rate
    # Its reference configuration's outputs on the same seed (``Reference.outputs``), NaN for a
    # configuration without one; empty where the sweep pairs nothing.
    reference: Mapping[str, jax.Array] = {}


# The per-configuration hyperparameter that holds the row of its reference configuration in the
# reference table (-1: none); the reducer reads it, the runs do not.
REFERENCE = "reference_row"


class Reference(NamedTuple):
    """The configurations a sweep pairs each configuration with, by seed (``jfl.sweep.Plan``).

    ``rows`` [config]: the row of each configuration's reference configuration in the table of
    configurations, -1 for none; ``outputs``: the (floating-point) outputs of the reference that
    each run reads for its own seed (``RunView.reference``), in a sweep reduced on the device
    (common random numbers give every configuration's seed the same key, so for an environment
    whose states do not depend on the actions the pairing is by the same draws). The reference
    rows run first (a table [reference row, seed, ...] of those outputs, shared by every
    chunk), so memory holds one row per reference configuration, however many configurations
    read it.
    """

    rows: np.ndarray
    outputs: tuple[str, ...]


class RunMetric(NamedTuple):
    """A per-run metric: computed for the runs that record every output it ``reads``; its
    interval over seeds is clipped to its ``bounds`` (``jfl.stats.Bounds``)."""

    reads: tuple[str, ...]
    fn: Callable[[RunView], jax.Array]
    bounds: Bounds = UNBOUNDED


class Curve(NamedTuple):
    """A per-run curve that the figures band over seeds, beside the recorded outputs: computed
    for the runs that record every output it ``reads``."""

    dims: tuple[str, ...]
    fn: Callable[[RunView], jax.Array]
    bounds: Bounds = UNBOUNDED
    reads: tuple[str, ...] = ()


class Reductions(NamedTuple):
    """An experiment's own per-run metrics and curves, reduced on the device beside the
    library's (``RUN_METRICS``, ``CURVES``): a regret against a benchmark each run reads from
    its hyperparameters, accuracy targets, … (``jfl.sweep.Plan.reductions``). Each is computed
    for the runs that record every output it reads, as the library's are."""

    metrics: Mapping[str, RunMetric] = {}
    curves: Mapping[str, Curve] = {}


NO_REDUCTIONS = Reductions()


def _rates(run: RunView) -> jax.Array:
    return run.outputs["selection_count"] / run.num_rounds


def _target(run: RunView) -> jax.Array:
    """Every client's guaranteed rate: the fairness queue's (``jfl.trackers.fairness_queue``)."""
    rates = _rates(run)
    return jnp.broadcast_to(jnp.asarray(run.hparams[run.rate], jnp.float32), rates.shape)


def _met(run: RunView) -> jax.Array:
    """Whether every client meets its rate at round T (the fairness queue's count, with its
    float32 slack: ``jfl.trackers.fairness_queue``)."""
    return run.outputs["last_unmet_round"] < run.num_rounds


def _squares(x: jax.Array) -> jax.Array:
    """x², materialised: fused into the sum that follows, XLA:CPU contracts some products and
    additions into FMAs and not others, depending on the batch shape's vectorisation, which
    would make a band's last bits depend on the chunk."""
    return lax.optimization_barrier(x * x)


def _jain(rates: jax.Array) -> jax.Array:
    total, squares = pairwise_sum(rates), pairwise_sum(_squares(rates))
    denominator = rates.shape[-1] * squares
    return jnp.where(denominator > 0, total * total / jnp.where(denominator > 0, denominator, 1), 1)


# Per-run metrics as functions of one run, in the summary's order; ``jfl.results.run_metrics``
# is their host reference from per-run values. Those that read the fairness queue's outputs
# (``jfl.trackers.fairness_queue``) measure against its rate.
_QUEUE = ("final_queue", "last_unmet_round")
RUN_METRICS: dict[str, RunMetric] = {
    "mean_round_time": RunMetric((), lambda r: pairwise_mean(r.outputs["round_time"]), NONNEGATIVE),
    "total_time": RunMetric((), lambda r: pairwise_sum(r.outputs["round_time"]), NONNEGATIVE),
    "final_queue_mean": RunMetric(
        _QUEUE, lambda r: pairwise_mean(r.outputs["final_queue"]), NONNEGATIVE
    ),
    "final_queue_max": RunMetric(_QUEUE, lambda r: jnp.max(r.outputs["final_queue"]), NONNEGATIVE),
    "min_selection_rate": RunMetric((), lambda r: jnp.min(_rates(r)), UNIT_INTERVAL),
    "max_rate_violation": RunMetric(
        _QUEUE, lambda r: jnp.max(jnp.maximum(_target(r) - _rates(r), 0.0)), UNIT_INTERVAL
    ),
    "jain_index": RunMetric((), lambda r: _jain(_rates(r)), UNIT_INTERVAL),
    "selected_per_round": RunMetric(
        (), lambda r: pairwise_mean(r.outputs["num_selected"].astype(jnp.float32)), NONNEGATIVE
    ),
    # Whether every client meets its rate after T rounds (its mean over seeds: the fraction).
    "target_met": RunMetric(_QUEUE, lambda r: _met(r).astype(jnp.float32), UNIT_INTERVAL),
    # Censored: the round from which the rate is met (1: from the first), NaN for a run that
    # does not meet it at the end, so that its mean is over the runs that do (target_met says
    # how many) rather than an average of T + 1 stand-ins.
    "rounds_to_target": RunMetric(
        _QUEUE,
        lambda r: jnp.where(_met(r), r.outputs["last_unmet_round"] + 1, jnp.nan).astype(
            jnp.float32
        ),
        NONNEGATIVE,
    ),
}


def run_metric_names(
    dims: Mapping[str, tuple[str, ...]], extra: Reductions = NO_REDUCTIONS
) -> list[str]:
    """The ``RUN_METRICS`` a run with outputs ``dims`` has, in order, then ``extra``'s."""
    return list(_run_metrics(dims, extra))


def _run_metrics(dims, extra: Reductions) -> dict[str, RunMetric]:
    # A federated run's accuracy metrics lead, as they do on the host (``jfl.results``).
    leading = {name: m for name, m in extra.metrics.items() if name in ACCURACY_METRICS}
    metrics = {**leading, **RUN_METRICS, **extra.metrics}
    return {name: m for name, m in metrics.items() if set(m.reads) <= set(dims)}


def _curves(dims, extra: Reductions) -> dict[str, Curve]:
    curves = {**CURVES, **extra.curves}
    return {name: c for name, c in curves.items() if set(c.reads) <= set(dims)}


# Per-run curves the figures band over seeds, beside the recorded outputs.
CURVES: dict[str, Curve] = {
    "cumulative_time": Curve(
        (ROUND,), lambda r: doubling_cumsum(r.outputs["round_time"]), NONNEGATIVE
    ),
    # Selections per client sorted ascending within each run (RBCS-F Fig. 4's pull record).
    "pull_record": Curve((CLIENT,), lambda r: jnp.sort(r.outputs["selection_count"]), NONNEGATIVE),
}


def seed_band(samples: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Mean and variance (``ddof=1``; NaN for one seed) over the leading seed axis, in float32
    and in a fixed order of operations (two passes, pairwise sums)."""
    x = jnp.moveaxis(jnp.asarray(samples, jnp.float32), 0, -1)
    n = x.shape[-1]
    # Materialised, so that the deviations use the very mean returned (fused, XLA may fold the
    # division into them as a multiplication or an FMA, differently for other batch shapes).
    mean = lax.optimization_barrier(pairwise_sum(x) / n)
    deviation = x - mean[..., None]
    if n < 2:
        return mean, jnp.full_like(mean, jnp.nan)
    return mean, pairwise_sum(_squares(deviation)) / (n - 1)


def band_dims(
    dims: Mapping[str, tuple[str, ...]], extra: Reductions = NO_REDUCTIONS
) -> dict[str, tuple[str, ...]]:
    """Dims of every band ``<name>_band`` (``stat`` first), given the run's output dims and
    the experiment's ``extra`` reductions."""
    banded = {name: d for name, d in dims.items() if len(d) == 1 and d[0] in (ROUND, CLIENT, EVAL)}
    banded.update({name: curve.dims for name, curve in _curves(dims, extra).items()})
    return {f"{name}_band": (STAT, *d) for name, d in banded.items()}


def reduced_dims(
    dims: Mapping[str, tuple[str, ...]],
    keep: tuple[str, ...] = (),
    extra: Reductions = NO_REDUCTIONS,
) -> dict[str, tuple[str, ...]]:
    """Dims after the leading config axis of everything ``make_reducer(dims, …)`` returns."""
    scalars = [name for name, d in dims.items() if d == ()]
    out = {name: ("seed",) for name in (*run_metric_names(dims, extra), *scalars)}
    out.update(band_dims(dims, extra))
    out.update({name: ("seed", *dims[name]) for name in keep})
    return out


def make_reducer(
    dims: Mapping[str, tuple[str, ...]],
    num_rounds: int,
    keep: tuple[str, ...] = (),
    rate: str = QUEUE_RATE,
    extra: Reductions = NO_REDUCTIONS,
):
    """``reduce(outputs, hparams, seeded, reference) -> {name: array}`` for one configuration's
    seeds.

    ``outputs`` are ``RunOutput.arrays()`` with a leading seed axis; ``hparams`` are the
    configuration's hyperparameters without a seed axis, ``seeded`` those with one (each run
    reads its own row: a benchmark that depends on the seed's client layout, say).
    ``reference`` is the sweep's reference table ``{output: [reference row, seed, ...]}``,
    shared by every configuration (``Reference``), of which each configuration reads the row
    its hyperparameter ``REFERENCE`` names and each run that row's own seed
    (``RunView.reference``; NaN for a row of -1). ``keep`` names outputs returned per run as
    well. ``rate`` names the hyperparameter that the fairness queue reads (its
    ``fairness_queue(rate)``); ``extra`` adds an experiment's own metrics and curves.
    ``reduced_dims(dims, keep, extra)`` gives every returned name's dims.
    """
    unknown = [name for name in keep if name not in dims]
    if unknown:
        raise ValueError(f"cannot keep {unknown}: not among the run's outputs {sorted(dims)}")
    scalars = [name for name, d in dims.items() if d == ()]
    banded = [band.removesuffix("_band") for band in band_dims(dims, extra)]
    run_metrics, run_curves = _run_metrics(dims, extra), _curves(dims, extra)

    def per_run(outputs, hparams, seeded, paired):
        run = RunView(outputs, {**hparams, **seeded}, num_rounds, rate, paired)
        metrics = {name: m.fn(run).astype(jnp.float32) for name, m in run_metrics.items()}
        curves = {name: curve.fn(run).astype(jnp.float32) for name, curve in run_curves.items()}
        return metrics, curves

    def reduce(outputs, hparams, seeded=None, reference=None):
        hparams = dict(hparams)
        row = hparams.pop(REFERENCE, None)
        paired = _reference_rows(reference or {}, row)
        over_seeds = jax.vmap(per_run, in_axes=(0, None, 0, 0))
        metrics, curves = over_seeds(dict(outputs), hparams, dict(seeded or {}), paired)
        reduced = {**metrics, **{name: outputs[name] for name in scalars}}
        series = {**outputs, **curves}
        for name in banded:
            reduced[f"{name}_band"] = jnp.stack(seed_band(series[name]))  # [stat, ...]
        reduced.update({name: outputs[name] for name in keep})
        return reduced

    return reduce


def _reference_rows(table: Mapping[str, jax.Array], row) -> dict[str, jax.Array]:
    """One configuration's row ``[seed, ...]`` of each output of the reference ``table``
    (``[reference row, seed, ...]``), NaN where ``row`` is -1 (or the table has no row)."""
    if not table:
        return {}
    if row is None:
        raise ValueError(f"a reference table needs each configuration's row ({REFERENCE!r})")
    paired = {}
    for name, values in table.items():
        if values.shape[0] == 0:
            dtype = jnp.promote_types(values.dtype, jnp.float32)
            paired[name] = jnp.full(values.shape[1:], jnp.nan, dtype)
            continue
        own = values[jnp.maximum(row, 0)]  # a copy: no arithmetic, the same bits in any batch
        paired[name] = jnp.where(row >= 0, own, jnp.nan)
    return paired


# --------------------------------------------------------------------------- federated accuracy

# docs/metrics.md#federated-training: the final test accuracy; the first evaluated round with
# accuracy ≥ the target and the simulated wall-clock at it (NaN for a run that never reaches it:
# censored, so that their means are over the runs that do); whether it does.
ACCURACY_METRICS = ("final_accuracy", "rounds_to_accuracy", "time_to_accuracy", "reached_accuracy")


def _first_reached(run: RunView, target: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Whether the run's accuracy reaches ``target`` at an evaluation, and the round of the
    first that does (evaluations at rounds 0, k, 2k, …, T, as ``jfl.results.to_dataset``
    labels them)."""
    accuracy = run.outputs["accuracy"]
    reached = accuracy >= target
    period = run.num_rounds // max(accuracy.shape[-1] - 1, 1)
    return jnp.any(reached), jnp.argmax(reached) * period  # argmax: the first True


def _time_at(run: RunView, rounds: jax.Array) -> jax.Array:
    """The simulated clock after ``rounds`` rounds: ``wall_clock[rounds - 1]``, 0 at round 0
    (the initial model)."""
    clock = run.outputs["wall_clock"][jnp.maximum(rounds - 1, 0)]
    return jnp.where(rounds > 0, clock, 0.0)


def accuracy_metrics(target: float | None) -> dict[str, RunMetric]:
    """A federated run's accuracy metrics (``ACCURACY_METRICS``) against the accuracy
    ``target`` (compared in float32, as the host compares the float32 accuracies with it);
    ``final_accuracy`` alone without one. Computed for the runs that record ``accuracy`` (and
    ``wall_clock``); ``jfl.results.accuracy_metrics`` is their host reference."""
    final = RunMetric(("accuracy",), lambda r: r.outputs["accuracy"][-1], UNIT_INTERVAL)
    metrics = {"final_accuracy": final}
    if target is None:
        return metrics
    goal = jnp.float32(target)
    reads = ("accuracy", "wall_clock")

    def rounds(run: RunView) -> jax.Array:
        ever, first = _first_reached(run, goal)
        return jnp.where(ever, first.astype(jnp.float32), jnp.nan)

    def time(run: RunView) -> jax.Array:
        ever, first = _first_reached(run, goal)
        return jnp.where(ever, _time_at(run, first), jnp.nan)

    def reached(run: RunView) -> jax.Array:
        return _first_reached(run, goal)[0].astype(jnp.float32)

    metrics["rounds_to_accuracy"] = RunMetric(reads, rounds, NONNEGATIVE)
    metrics["time_to_accuracy"] = RunMetric(reads, time, NONNEGATIVE)
    metrics["reached_accuracy"] = RunMetric(reads, reached, UNIT_INTERVAL)
    return metrics
