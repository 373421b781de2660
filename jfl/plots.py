"""Paper-style figures with confidence bands over seeds (matplotlib).

Figures are ``matplotlib.figure.Figure`` objects saved to files, never pyplot's global figures,
so they work under whatever backend the caller has (none is selected here; a notebook's inline
backend stays as it is). Every ``plot_*`` function saves its figure to ``path`` and returns it,
for a caller that wants to show it, change it or read it back.

Bands are the interval over seeds that ``method`` names (``"t"``: Student-t, ``"bootstrap"``:
BCa bootstrap; a sweep's ``--ci``), clipped to the quantity's bounds (``jfl.stats.Bounds``,
declared with the output or metric: ``jfl.results.declared_bounds``). A band that a sweep
reduced on the device holds only the mean and variance over seeds, from which only the
Student-t interval follows: asked for a bootstrap band, such a figure draws the Student-t one
and says so in its legend's title. Every banded figure's legend title names its interval and
seed count.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

import numpy as np
import pandas as pd
import xarray as xr
from matplotlib.figure import Figure

from jfl.stats import INTERVALS, UNBOUNDED, UNIT_INTERVAL, Bounds, interval, stats_ci

# Interval methods by name, as legends say them.
INTERVAL_NAMES = {"t": "Student-t", "bootstrap": "bootstrap"}
# Most lines a figure draws; beyond, an evenly spaced selection that its title announces.
MAX_LINES = 16
_SUBSCRIPTS = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def symbol(name: str) -> str:
    """How a figure writes hyperparameter ``name``: a Greek letter's name as the letter, with
    trailing digits as subscripts (``beta`` → ``β``, ``gamma2`` → ``γ₂``); other names as
    they are."""
    match = re.fullmatch(r"([a-z]+)(\d*)", name)
    if match is None:
        return name
    try:
        spelled = match[1].upper().replace("LAMBDA", "LAMDA")  # Unicode's spelling
        letter = unicodedata.lookup(f"GREEK SMALL LETTER {spelled}")
    except KeyError:
        return name
    return letter + match[2].translate(_SUBSCRIPTS)


def format_values(values, most: int = 6) -> str:
    """``{0.05, 0.1, 0.2}``; a longer list by its ends and count."""
    values = [f"{v:g}" for v in values]
    if len(values) > most:
        return f"{{{values[0]}, {values[1]}, …, {values[-1]}}} ({len(values)} values)"
    return "{" + ", ".join(values) + "}"


def _subplots(*args, **kwargs):
    """A figure outside pyplot (no backend, no global state) and its axes."""
    fig = Figure(figsize=kwargs.pop("figsize", None))
    return fig, fig.subplots(*args, **kwargs)


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
    return line


def has_runs(ds: xr.Dataset, variable: str) -> bool:
    """Whether ``ds`` holds every run's values of ``variable`` (not only its band)."""
    return variable in ds and "seed" in ds[variable].dims


def seed_band(
    ax, ds, variable, config, dim, label=None, transform=None, method="t", bounds=None, **kwargs
):
    """Band over seeds of ``variable`` for one configuration: from every run's values when
    ``ds`` holds them (``transform`` applied to each run's [dim] values first; ``method`` picks
    the interval), else from the band ``<variable>_band`` a reduced sweep stores (Student-t
    whatever ``method`` asks, see :func:`band_title`). ``bounds`` default to the variable's
    declared ones (``jfl.results.bounds_of``; none after a ``transform``)."""
    from jfl.results import bounds_of

    x = ds[dim].to_numpy()
    if bounds is None:
        bounds = UNBOUNDED if transform is not None else bounds_of(variable)
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


def line_colors(count: int) -> list:
    """``count`` colours told apart: tab10's, tab20's beyond 10 lines, viridis beyond 20."""
    from matplotlib import colormaps

    if count <= 10:
        return [colormaps["tab10"](i) for i in range(count)]
    if count <= 20:
        return [colormaps["tab20"](i) for i in range(count)]
    return [colormaps["viridis"](v) for v in np.linspace(0, 1, count)]


def shown_configs(ds: xr.Dataset, configs=None, max_lines: int = MAX_LINES):
    """``(configs, note)``: the configurations to draw (every one of ``ds`` by default) and,
    when there are more than ``max_lines``, an evenly spaced selection of them and a note
    saying so for the title (``""`` otherwise)."""
    configs = list(ds["config"].to_numpy() if configs is None else configs)
    if len(configs) <= max_lines:
        return configs, ""
    keep = np.unique(np.linspace(0, len(configs) - 1, max_lines).round().astype(int))
    return [configs[i] for i in keep], f"{len(keep)} of {len(configs)} configurations"


def _title(ax, title: str, *notes: str) -> None:
    notes = [n for n in notes if n]
    if notes:
        ax.set_title("\n".join([title, *notes]), fontsize=9)
    else:
        ax.set_title(title)


def _legend(ax, title: str, fontsize=8) -> None:
    ax.legend(fontsize=fontsize, title=title, title_fontsize=fontsize - 1)


def config_label(ds: xr.Dataset, config: int, varying: list[str]) -> str:
    """'rbcsf V=10' style legend label with only the hyperparameters that vary."""
    c = ds.sel(config=config)
    parts = [str(c["policy"].item())]
    for name in varying:
        value = float(c[name].item())
        if np.isfinite(value):
            parts.append(f"{name}={value:g}")
    return " ".join(parts)


def varying_hparams(ds: xr.Dataset, exclude=("policy", "queue_rate")) -> list[str]:
    """The configuration coordinates (hyperparameters) that take more than one value in ``ds``."""
    names = []
    for name, coord in ds.coords.items():
        if coord.dims != ("config",) or name in exclude or name == "config":
            continue
        values = coord.to_numpy()
        finite = np.unique(values[np.isfinite(values)])
        if len(finite) > 1:
            names.append(name)
    return names


def plot_over_rounds(
    ds,
    variable,
    ylabel,
    path,
    title,
    cumulative=False,
    configs=None,
    max_lines=MAX_LINES,
    method="t",
    varying=None,
    subtitle="",
    bounds=None,
):
    """One banded line per configuration of ``variable`` [config, seed, round] (``configs``:
    every one by default), told apart by colour and legend; the legend labels name the
    hyperparameters in ``varying`` (by default those that vary in ``ds``) and ``subtitle``
    (what the figure fixes, say) goes under the title. ``method``: the interval of the bands,
    clipped to ``bounds`` (default: the variable's declared ones; of its running sum with
    ``cumulative``).
    """
    from jfl.results import bounds_of

    if cumulative and f"{variable}_band" in ds:
        raise ValueError(f"{variable!r} is a band: plot its cumulative curve's band instead")
    varying = varying_hparams(ds) if varying is None else varying
    configs, cut = shown_configs(ds, configs, max_lines)
    bounds = bounds_of(variable) if bounds is None else Bounds(*bounds)
    cumsum = None
    if cumulative:
        bounds = bounds.cumulative()

        def cumsum(samples):
            return np.cumsum(samples, axis=1)

    fig, ax = _subplots(figsize=(6.4, 4.2))
    for config, color in zip(configs, line_colors(len(configs)), strict=True):
        label = config_label(ds, config, varying)
        seed_band(
            ax, ds, variable, config, "round", label=label, transform=cumsum, method=method,
            bounds=bounds, color=color,
        )  # fmt: skip
    ax.set_xlabel("round")
    ax.set_ylabel(ylabel)
    _title(ax, title, subtitle, cut)
    ax.grid(alpha=0.3)
    _legend(ax, band_title(ds, variable, method))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return fig


def plot_pull_record(
    ds, path, configs=None, max_lines=MAX_LINES, method="t", varying=None, subtitle=""
):
    """Selections per client after T rounds, clients sorted ascending per seed (paper Fig. 4);
    the arguments as :func:`plot_over_rounds`'."""
    from jfl.results import bounds_of

    varying = varying_hparams(ds) if varying is None else varying
    configs, cut = shown_configs(ds, configs, max_lines)
    fig, ax = _subplots(figsize=(6.4, 4.2))
    x = np.arange(1, ds.sizes["client"] + 1)
    runs = has_runs(ds, "selection_count") and (
        method == "bootstrap" or "pull_record_band" not in ds
    )
    for config, color in zip(configs, line_colors(len(configs)), strict=True):
        label = config_label(ds, config, varying)
        style = {"label": label, "marker": ".", "color": color}
        if not runs:
            stats = ds["pull_record_band"].sel(config=config)
            mean, variance = stats.sel(stat="mean"), stats.sel(stat="var")
            bounds = bounds_of("pull_record")
            band_from_stats(ax, x, mean, variance, ds.sizes["seed"], bounds=bounds, **style)
            continue
        counts = ds["selection_count"].sel(config=config).transpose("seed", "client").to_numpy()
        bounds = bounds_of("selection_count")
        band(ax, x, np.sort(counts, axis=1), method=method, bounds=bounds, **style)
    ax.set_xlabel("client (sorted by pull count)")
    ax.set_ylabel(f"selections after {ds.sizes['round']} rounds")
    _title(ax, "Pull record", subtitle, cut)
    ax.grid(alpha=0.3)
    _legend(ax, band_title(ds, "selection_count" if runs else "pull_record", method))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return fig


def averaged_columns(summary: pd.DataFrame, by: Sequence[str]) -> dict[str, list[float]]:
    """The label columns (hyperparameters) that take several values within a group of ``by``:
    a mean over the group averages over them. Their values, sorted."""
    averaged = {}
    for column in _label_columns(summary):
        if column in ("policy", *by):
            continue
        counts = summary.groupby(list(by), dropna=False)[column].nunique(dropna=True)
        if len(counts) and counts.max() > 1:
            values = summary[column].dropna().unique()
            averaged[column] = sorted(float(v) for v in values)
    return averaged


def plot_heatmap(summary: pd.DataFrame, metric: str, x: str, y: str, path, title=None):
    """Heatmap of a summary metric over two hyperparameters. Rows that share a cell (other
    hyperparameters that vary) are averaged, and the title and colour bar say over what:
    "mean over α ∈ {0.05, 0.1, 0.2}"."""
    table = summary.pivot_table(index=y, columns=x, values=metric, aggfunc="mean")
    averaged = averaged_columns(summary, (x, y))
    over = ", ".join(f"{symbol(c)} ∈ {format_values(v)}" for c, v in averaged.items())
    fig, ax = _subplots(figsize=(6.4, 4.8))
    image = ax.imshow(table.to_numpy(), origin="lower", aspect="auto", cmap="viridis")
    ax.set_xticks(range(len(table.columns)), [f"{v:g}" for v in table.columns], rotation=45)
    ax.set_yticks(range(len(table.index)), [f"{v:g}" for v in table.index])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    _title(ax, title or metric, f"mean over {over}" if over else "")
    fig.colorbar(image, ax=ax, label=f"{metric}, mean over {over}" if over else metric)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return fig


def plot_metric_vs(summary: pd.DataFrame, metric: str, x: str, path, ylabel=None, title=None):
    """A summary metric against one column, one line per policy, with its interval as error bars.

    Other varying columns would mix several configurations into one point, so every remaining
    hyperparameter combination gets its own line.
    """
    fig, ax = _subplots(figsize=(6.4, 4.2))
    others = [
        c
        for c in _label_columns(summary)
        if c not in ("policy", x) and summary[c].nunique(dropna=True) > 1
    ]
    for keys, group in summary.groupby(["policy", *others], dropna=False, sort=False):
        keys = keys if isinstance(keys, tuple) else (keys,)
        label = " ".join(
            [str(keys[0])]
            + [f"{n}={v:g}" for n, v in zip(others, keys[1:], strict=True) if np.isfinite(v)]
        )
        group = group.sort_values(x)
        mean = group[metric].to_numpy()
        err = np.stack([mean - group[f"{metric}_lo"], group[f"{metric}_hi"] - mean])
        ax.errorbar(group[x], mean, yerr=np.nan_to_num(err), marker="o", capsize=3, label=label)
    ax.set_xlabel(x)
    ax.set_ylabel(ylabel or metric)
    ax.set_title(title or metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return fig


def _label_columns(summary: pd.DataFrame) -> list[str]:
    """Columns that label a configuration (not metrics or their interval bounds)."""
    end = summary.columns.get_loc("n_seeds")
    return list(summary.columns[:end])


def plot_selection_fraction(ds: xr.Dataset, path, configs=None, max_lines=8, method="t"):
    """Running selection fraction of each client vs rounds, one panel per client (Xia Fig. 5).

    Needs the ``selected`` trajectories; a dashed line marks the client's target c_k when the
    dataset has a per-client ``queue_rate`` [config, client]. Bands in [0, 1].
    """
    from jfl.results import running_selection_fraction

    varying = varying_hparams(ds)
    configs, cut = shown_configs(ds, configs, max_lines)
    num_clients = ds.sizes["client"]
    fig, axes = _subplots(
        1, num_clients, figsize=(3.2 * num_clients, 3.6), sharey=True, squeeze=False
    )
    fraction = running_selection_fraction(ds)
    x = ds["round"].to_numpy()
    colors = line_colors(len(configs))
    for k, ax in enumerate(axes[0]):
        for config, color in zip(configs, colors, strict=True):
            samples = fraction.sel(config=config, client=k).transpose("seed", "round").to_numpy()
            label = config_label(ds, config, varying)
            band(ax, x, samples, label=label, method=method, bounds=UNIT_INTERVAL, color=color)
        if "queue_rate" in ds and "client" in ds["queue_rate"].dims:
            targets = np.unique(ds["queue_rate"].sel(config=configs, client=k).to_numpy())
            for target in targets:
                ax.axhline(target, color="k", linestyle="--", linewidth=1)
        ax.set_title(f"client {k + 1}")
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("selection fraction")
    if cut:
        fig.suptitle(cut, fontsize=9)
    _legend(axes[0][-1], band_title(ds, "selected", method), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return fig


EVALUATION_LABELS = {"accuracy": "test accuracy", "test_loss": "test loss"}


def plot_accuracy(
    ds: xr.Dataset,
    path,
    against="round",
    configs=None,
    title=None,
    max_lines=MAX_LINES,
    exclude=("policy", "queue_rate"),
    method="t",
    variable="accuracy",
):
    """Test accuracy (or ``variable``, another evaluation: ``test_loss``) with its band over
    seeds, against the round or the simulated wall-clock.

    Against time, the x position of an evaluation is the seed-mean of the wall-clock at that
    round (seeds differ in their clocks; the band is over accuracies at equal rounds).
    ``exclude`` names configuration labels left out of the legend. Bands in the accuracy's
    bounds, [0, 1].
    """
    varying = varying_hparams(ds, exclude=exclude)
    configs, cut = shown_configs(ds, configs, max_lines)
    rounds = ds["eval"].to_numpy()
    from jfl.results import bounds_of

    bounds = bounds_of(variable)
    fig, ax = _subplots(figsize=(6.4, 4.2))
    for config, color in zip(configs, line_colors(len(configs)), strict=True):
        c = ds.sel(config=config)
        samples = c[variable].transpose("seed", "eval").to_numpy()
        if against == "round":
            x = rounds
        else:
            clock = c["wall_clock"].transpose("seed", "round").to_numpy().mean(axis=0)
            x = np.concatenate([[0.0], clock])[rounds]
        label = config_label(ds, config, varying)
        band(ax, x, samples, label=label, method=method, bounds=bounds, color=color)
    target = ds.attrs.get("target_accuracy") if variable == "accuracy" else None
    if target is not None:
        ax.axhline(float(target), color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("round" if against == "round" else "simulated wall-clock time (s)")
    ylabel = EVALUATION_LABELS.get(variable, variable)
    ax.set_ylabel(ylabel)
    against_name = "round" if against == "round" else "time"
    _title(ax, title or f"{ylabel.capitalize()} vs {against_name}", cut)
    ax.grid(alpha=0.3)
    _legend(ax, band_title(ds, "accuracy", method))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return fig
