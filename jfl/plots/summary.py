"""The figures of a sweep's summary table (one row per configuration): a metric as a heatmap over
two hyperparameters, or against one of them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.patches import Rectangle

from jfl.plots.bands import mark_nonfinite
from jfl.plots.figure import _finish, _subplots, _title, line_figure, save
from jfl.plots.style import (
    MAX_LINES,
    format_values,
    line_styles,
    panel_groups,
    policy_colors,
    symbol,
)


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


def plot_heatmap(
    summary: pd.DataFrame, metric: str, x: str, y: str, path, title=None, missing="n/a"
):
    """Heatmap of a summary metric over two hyperparameters, each axis named by its symbol
    (``beta``: β) and ticked with its values (one cell per value, evenly spaced whatever their
    scale: β ∈ {1e-05, 0.001, 0.1}). Rows that share a cell (other hyperparameters that vary)
    are averaged, and the title and colour bar say over what: "mean over α ∈ {0.05, 0.1,
    0.2}". A cell without a value (NaN: a censored metric that no run met, say) is hatched grey
    and says ``missing`` ("never met"), not coloured as a number."""
    # dropna=False: a column or row of cells without a value keeps its place.
    table = summary.pivot_table(index=y, columns=x, values=metric, aggfunc="mean", dropna=False)
    averaged = averaged_columns(summary, (x, y))
    over = ", ".join(f"{symbol(c)} ∈ {format_values(v)}" for c, v in averaged.items())
    fig, ax = _subplots(figsize=(6.4, 4.8))
    values = table.to_numpy(float)
    image = ax.imshow(np.ma.masked_invalid(values), origin="lower", aspect="auto", cmap="viridis")
    _mark_missing(ax, values, missing)
    ax.set_xticks(range(len(table.columns)), [f"{v:g}" for v in table.columns], rotation=45)
    ax.set_yticks(range(len(table.index)), [f"{v:g}" for v in table.index])
    ax.set_xlabel(symbol(x))
    ax.set_ylabel(symbol(y))
    _title(ax, title or metric, f"mean over {over}" if over else "")
    fig.colorbar(image, ax=ax, label=f"{metric}, mean over {over}" if over else metric)
    return save(fig, path)


def _mark_missing(ax, values: np.ndarray, text: str) -> None:
    """Each cell of an image of ``values`` [row, column] without a value (NaN, ±inf), hatched
    grey and saying ``text``: masked out of the colour scale, it would otherwise show the
    axes' background, or a colour, as if it were a number."""
    for row, column in np.argwhere(~np.isfinite(values)):
        ax.add_patch(
            Rectangle((column - 0.5, row - 0.5), 1, 1, facecolor="0.88", edgecolor="0.6",
                      hatch="//", linewidth=0)
        )  # fmt: skip
        ax.text(column, row, text, ha="center", va="center", fontsize=8, color="0.15",
                bbox={"facecolor": "0.88", "edgecolor": "none", "pad": 1.5})  # fmt: skip


def plot_metric_vs(
    summary: pd.DataFrame,
    metric: str,
    x: str,
    path,
    ylabel=None,
    title=None,
    max_lines=MAX_LINES,
    colors=None,
):
    """A summary metric against one column, one line per policy, with its interval as error bars;
    the x axis named by the column's symbol, at its values, on a log scale where they span
    decades (:func:`swept_scale`).

    Other varying columns would mix several configurations into one point, so every remaining
    hyperparameter combination gets its own line. More than ``max_lines`` lines are split into
    panels; ``colors``: ``{policy: colour}`` (default :func:`policy_colors` of the summary's
    policies, so the same as the figures of its dataset).
    """
    others = [
        c
        for c in _label_columns(summary)
        if c not in ("policy", x) and summary[c].nunique(dropna=True) > 1
    ]
    lines = []  # (policy, label, rows)
    for keys, group in summary.groupby(["policy", *others], dropna=False, sort=False):
        keys = keys if isinstance(keys, tuple) else (keys,)
        label = " ".join(
            [str(keys[0])]
            + [f"{n}={v:g}" for n, v in zip(others, keys[1:], strict=True) if np.isfinite(v)]
        )
        lines.append((str(keys[0]), label, group.sort_values(x)))
    policies = [policy for policy, _, _ in lines]
    colors = policy_colors(summary["policy"].to_numpy()) if colors is None else colors
    styles = line_styles(policies, colors)
    groups = panel_groups(policies, max_lines)
    fig, axes = line_figure([[lines[i][1] for i in g] for g in groups], "")
    for (ax,), group_lines in zip(axes, groups, strict=True):
        for i in group_lines:
            _, label, group = lines[i]
            mean = group[metric].to_numpy()
            err = np.stack([mean - group[f"{metric}_lo"], group[f"{metric}_hi"] - mean])
            bars = ax.errorbar(
                group[x], mean, yerr=np.nan_to_num(err), marker="o", capsize=3, label=label,
                **styles[i],
            )  # fmt: skip
            mark_nonfinite(ax, bars, bars.lines[0])
    _finish(axes, groups, symbol(x), ylabel or metric, title or metric, (), "")
    axes[0][0].set_xscale(swept_scale(summary[x]))
    return save(fig, path)


def swept_scale(values) -> str:
    """The scale of an axis of swept ``values`` in their own units: ``"log"`` where they are
    positive and span two decades or more (β ∈ {1e-05, …, 0.5}: evenly spaced on it), else
    ``"linear"``."""
    values = np.asarray(values, float)
    values = values[np.isfinite(values)]
    if len(values) and values.min() > 0 and values.max() >= 100 * values.min():
        return "log"
    return "linear"


def _label_columns(summary: pd.DataFrame) -> list[str]:
    """Columns that label a configuration (not metrics or their interval bounds)."""
    end = summary.columns.get_loc("n_seeds")
    return list(summary.columns[:end])
