"""Confidence bands over seeds: Student-t intervals (default) and bootstrap intervals, kept
within the range of the quantity (:class:`Bounds`)."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np


class Bounds(NamedTuple):
    """The range a quantity can take: a metric's or an output's ``bounds``.

    A mean over seeds of values in the range is in the range; a Student-t interval around it
    need not be (with few seeds it is wide), so intervals and bands are clipped to it
    (:meth:`clip`). Declared with the quantity, by name: ``jfl.outputs.Metric`` (per-round
    and per-client outputs), ``jfl.reduction.RunMetric`` and ``CURVES`` (per-run metrics and
    curves), ``jfl.results.ACCURACY_METRICS`` and an experiment's ``metric_bounds`` (its own
    metrics); ``jfl.results.declared_bounds`` gathers them.
    """

    low: float = -math.inf
    high: float = math.inf

    def clip(self, *arrays):
        """``arrays`` clipped into [low, high] (NaN stays NaN), as a tuple of arrays."""
        return tuple(np.clip(np.asarray(a, float), self.low, self.high) for a in arrays)

    def cumulative(self) -> Bounds:
        """The range of a running sum of values in this range: ≥ 0 (≤ 0) when the values are."""
        return Bounds(0.0 if self.low >= 0 else -math.inf, 0.0 if self.high <= 0 else math.inf)


UNBOUNDED = Bounds()
# Rates, fractions, probabilities, accuracies, Jain's index, rewards normalised to [0, 1].
UNIT_INTERVAL = Bounds(0.0, 1.0)
# Times, counts, queue backlogs, utilities.
NONNEGATIVE = Bounds(0.0, math.inf)


def _t_quantile(q, df):
    """Student-t quantile: ``scipy.stats.t.ppf(q, df)`` is this function of scipy.special,
    which imports in a fraction of scipy.stats' second."""
    from scipy import special

    return special.stdtrit(df, q)


def mean_ci(samples, axis: int = 0, level: float = 0.95):
    """Mean and the two-sided Student-t interval of the mean along ``axis``.

    NaN samples (e.g. the rounds to a target accuracy of a seed that never reaches it) are left
    out, so each cell's interval uses its own number of samples; with fewer than two the
    interval is undefined and returned as NaN (and the mean too when there are none).
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    x = np.asarray(samples, float)
    present = ~np.isnan(x)
    if present.all():
        n = x.shape[axis]
        mean = x.mean(axis=axis)
        if n < 2:
            nan = np.full_like(mean, np.nan)
            return mean, nan, nan
        sem = x.std(axis=axis, ddof=1) / np.sqrt(n)
        half = _t_quantile(0.5 + level / 2, n - 1) * sem
        return mean, mean - half, mean + half
    n = present.sum(axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, np.nansum(x, axis=axis) / np.maximum(n, 1), np.nan)
        deviation = np.where(present, x - np.expand_dims(mean, axis), 0.0)
        sem = np.sqrt((deviation**2).sum(axis=axis) / np.maximum(n - 1, 1) / np.maximum(n, 1))
        half = np.where(n >= 2, _t_quantile(0.5 + level / 2, np.maximum(n - 1, 1)) * sem, np.nan)
    return mean, mean - half, mean + half


def stats_ci(mean, variance, n: int, level: float = 0.95):
    """:func:`mean_ci` from the mean and the variance (``ddof=1``) of ``n`` samples: the same
    interval, for bands reduced on the device (NaN bounds for fewer than two samples)."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    mean = np.asarray(mean, float)
    if n < 2:
        nan = np.full_like(mean, np.nan)
        return mean, nan, nan
    half = _t_quantile(0.5 + level / 2, n - 1) * np.sqrt(np.asarray(variance, float) / n)
    return mean, mean - half, mean + half


# Most values resampled at once by :func:`bootstrap_ci` (float64: 400 MB).
BOOTSTRAP_ELEMENTS = 50_000_000


def bootstrap_ci(samples, axis: int = 0, level: float = 0.95, n_resamples: int = 2000, seed=0):
    """Mean and a BCa bootstrap interval of the mean along ``axis`` (scipy.stats.bootstrap),
    over the values present: NaN marks a missing one (a censored run, say), as in
    :func:`mean_ci`."""
    x = np.asarray(samples, float)
    if not np.isnan(x).any():
        return _bootstrap(x, axis, level, n_resamples, seed)
    # Slices with missing values hold different numbers of samples: one at a time.
    rows = np.moveaxis(x, axis, -1)
    flat = rows.reshape(-1, rows.shape[-1])
    out = np.full((3, len(flat)), np.nan)
    for i, row in enumerate(flat):
        present = row[~np.isnan(row)]
        if len(present):
            out[:, i] = _bootstrap(present, 0, level, n_resamples, seed)
    return tuple(column.reshape(rows.shape[:-1]) for column in out)


def _bootstrap(x: np.ndarray, axis: int, level: float, n_resamples: int, seed):
    mean = x.mean(axis=axis)
    if x.shape[axis] < 2:
        nan = np.full_like(mean, np.nan)
        return mean, nan, nan
    # BCa is undefined for constant samples; those get a zero-width interval.
    constant = np.all(x == np.take(x, [0], axis=axis), axis=axis)
    safe = np.where(
        np.expand_dims(constant, axis),
        x + np.random.default_rng(seed).normal(scale=1e-12, size=x.shape),
        x,
    )
    from scipy import stats

    # Resamples in batches of at most BOOTSTRAP_ELEMENTS values (a band of 5000 rounds × 32
    # seeds would otherwise hold 2000 resamples of it at once, 2.6 GB); small inputs in one.
    batch = max(1, BOOTSTRAP_ELEMENTS // max(x.size, 1))
    res = stats.bootstrap(
        (safe,),
        np.mean,
        axis=axis,
        confidence_level=level,
        n_resamples=n_resamples,
        batch=None if batch >= n_resamples else batch,
        rng=np.random.default_rng(seed),
        method="BCa",
    )
    lo = np.where(constant, mean, res.confidence_interval.low)
    hi = np.where(constant, mean, res.confidence_interval.high)
    return mean, lo, hi


INTERVALS = ("t", "bootstrap")


def interval(
    samples, axis: int = 0, level: float = 0.95, method: str = "t", bounds: Bounds = UNBOUNDED
):
    """``(mean, lo, hi)`` over ``axis``: Student-t (``"t"``) or BCa bootstrap, with ``lo`` and
    ``hi`` clipped to the quantity's ``bounds``."""
    if method == "t":
        mean, lo, hi = mean_ci(samples, axis, level)
    elif method == "bootstrap":
        mean, lo, hi = bootstrap_ci(samples, axis, level)
    else:
        raise ValueError(f"interval method must be one of {list(INTERVALS)}, got {method!r}")
    return (mean, *Bounds(*bounds).clip(lo, hi))


def jain_index(rates, axis: int = -1):
    """Jain's fairness index (Σx)² / (n Σx²); 1 for equal rates, 1/n for one client only.

    Defined as 1 when every rate is 0 (nobody is favoured).
    """
    x = np.asarray(rates, float)
    n = x.shape[axis]
    num = x.sum(axis=axis) ** 2
    den = n * (x**2).sum(axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), 1.0)
