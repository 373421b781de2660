"""Lines with their confidence bands over seeds, and what an axes says where nothing finite could
be drawn (:func:`mark_nonfinite`).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from jfl.stats import INTERVALS, UNBOUNDED, Bounds, interval, stats_ci

# Interval methods by name, as legends say them.
INTERVAL_NAMES = {"t": "Student-t", "bootstrap": "bootstrap"}


# What an axes says where no line of data could be drawn (not an empty frame), and what the
# legend label of such a line adds (:func:`mark_nonfinite`); the summary's ``nonfinite_runs``
# counts the runs that recorded NaN or ±inf.
NO_FINITE_NOTE = "no finite values: the runs diverged\n(see nonfinite_runs in summary.csv)"


ISOLATED_NOTE = (
    "finite values at isolated points only: the runs diverged\n(see nonfinite_runs in summary.csv)"
)


NO_FINITE_LABEL = " (no finite values)"


# The gids of the lines of data (not targets, not grids): drawn, or with nothing to draw.
_DRAWN, _UNDRAWN = "jfl-data", "jfl-data-undrawn"


_NOTE = "jfl-nothing-drawn"


def band(ax, x, samples, label=None, level=0.95, method="t", bounds: Bounds = UNBOUNDED, **kwargs):
    """Mean line and shaded band of ``samples`` [seed, x] (no band for one seed): the
    Student-t (``method="t"``) or bootstrap interval, clipped to ``bounds``."""
    samples = np.asarray(samples)
    mean, lo, hi = interval(samples, axis=0, level=level, method=method, bounds=bounds)
    return _draw(ax, x, mean, lo, hi, label, **kwargs)


def band_from_stats(
    ax, x, mean, variance, n, label=None, level=0.95, bounds: Bounds = UNBOUNDED, **kwargs
):
    """The same line and Student-t band from the mean and variance over ``n`` seeds
    (``jfl.reduction``'s bands), clipped to ``bounds``."""
    mean, lo, hi = stats_ci(np.asarray(mean), np.asarray(variance), n, level)
    lo, hi = Bounds(*bounds).clip(lo, hi)
    return _draw(ax, x, mean, lo, hi, label, **kwargs)


def _draw(ax, x, mean, lo, hi, label, **kwargs):
    (line,) = ax.plot(x, mean, label=label, **kwargs)
    if np.all(np.isfinite(lo)):
        ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.25, linewidth=0)
    mark_nonfinite(ax, line, line)
    return line


def mark_nonfinite(ax, labelled, line) -> None:
    """Say where nothing finite could be drawn, as every line-drawing function does. A
    ``line`` of data (a band's mean, an error bar's points) without a finite value gets
    :data:`NO_FINITE_LABEL` after the legend label of ``labelled`` (the line, or its error-bar
    container), one with finite values at isolated points only (between NaN, which a line does
    not join) gets them marked and counted there; and ``ax`` says why it stands empty
    (:data:`NO_FINITE_NOTE`, :data:`ISOLATED_NOTE`) while none of its lines of data is drawn."""
    finite = np.isfinite(np.asarray(line.get_ydata(), float))
    joined = bool(np.any(finite[1:] & finite[:-1]))
    drawn = joined or (finite.any() and line.get_marker() not in (None, "", " ", "None"))
    line.set_gid(_DRAWN if drawn else _UNDRAWN)
    label = labelled.get_label()
    if not drawn and label and not label.startswith("_"):
        count = int(finite.sum())
        only = f" (finite at {count} point{'s' * (count > 1)} only)"
        labelled.set_label(label + (only if count else NO_FINITE_LABEL))
    if not drawn and finite.any():
        line.set_marker("o")
        line.set_markevery(list(np.flatnonzero(finite)))
    _note_nothing_drawn(ax)


def _note_nothing_drawn(ax) -> None:
    """:data:`NO_FINITE_NOTE` (or :data:`ISOLATED_NOTE`) in ``ax`` while it has lines of data
    and none is drawn; none otherwise."""
    for text in [text for text in ax.texts if text.get_gid() == _NOTE]:
        text.remove()
    lines = [line for line in ax.get_lines() if line.get_gid() in (_DRAWN, _UNDRAWN)]
    if not lines or any(line.get_gid() == _DRAWN for line in lines):
        return
    finite = any(np.isfinite(np.asarray(line.get_ydata(), float)).any() for line in lines)
    ax.text(
        0.5, 0.25, ISOLATED_NOTE if finite else NO_FINITE_NOTE, transform=ax.transAxes,
        ha="center", va="center", fontsize=9, color="0.3", gid=_NOTE,
    )  # fmt: skip


def has_runs(ds: xr.Dataset, variable: str) -> bool:
    """Whether ``ds`` holds every run's values of ``variable`` (not only its band)."""
    return variable in ds and "seed" in ds[variable].dims


def seed_band(
    ax, ds, variable, config, dim, label=None, transform=None, method="t", bounds=None, x=None,
    **kwargs,
):  # fmt: skip
    """Band over seeds of ``variable`` for one configuration: from every run's values when
    ``ds`` holds them (``transform`` applied to each run's [dim] values first; ``method`` picks
    the interval), else from the band ``<variable>_band`` a reduced sweep stores (Student-t
    whatever ``method`` asks, see :func:`band_title`). ``bounds`` default to the variable's
    declared ones (``jfl.results.bounds_of``; none after a ``transform``); ``x``: the
    positions of the points along ``dim`` (default: its coordinate)."""
    from jfl.results import bounds_of  # on use: results loads JAX

    x = ds[dim].to_numpy() if x is None else np.asarray(x)
    if bounds is None:
        bounds = UNBOUNDED if transform is not None else bounds_of(variable, ds=ds)
    if has_runs(ds, variable):
        samples = ds[variable].sel(config=config).transpose("seed", dim).to_numpy()
        if transform is not None:
            samples = transform(samples)
        return band(ax, x, samples, label=label, method=method, bounds=bounds, **kwargs)
    stats = ds[f"{variable}_band"].sel(config=config)
    mean, variance = stats.sel(stat="mean").to_numpy(), stats.sel(stat="var").to_numpy()
    return band_from_stats(
        ax, x, mean, variance, ds.sizes["seed"], label=label, bounds=bounds, **kwargs
    )


def band_title(ds: xr.Dataset, variable: str, method: str = "t", level: float = 0.95) -> str:
    """What the bands of ``variable`` are, for a legend's title: the interval and the seeds;
    a bootstrap asked of a band reduced on the device is a Student-t band, and says why."""
    if method not in INTERVALS:
        raise ValueError(f"interval method must be one of {list(INTERVALS)}, got {method!r}")
    seeds = ds.sizes["seed"]
    shown = f"{level:.0%} {{}} bands, {seeds} seed{'s' if seeds != 1 else ''}"
    if method == "bootstrap" and not has_runs(ds, variable):
        return (
            shown.format(INTERVAL_NAMES["t"])
            + "\n(not bootstrap: the sweep kept only\nthe mean and variance over seeds)"
        )
    return shown.format(INTERVAL_NAMES[method])
