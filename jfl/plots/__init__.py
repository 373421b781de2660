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

Lines: every configuration asked for is drawn, none left out. A figure of more than
``max_lines`` lines (:data:`MAX_LINES`, 12, by default) is split into panels stacked in one
figure, sharing their axes, each of at most ``max_lines`` lines and a legend of its own: the lines
grouped by policy (policies in the order they first come), a policy's lines kept in one panel
when they fit (:func:`panel_groups`). A policy (method) has one colour in every figure of an
experiment: :func:`policy_colors` gives them in the sorted order of the policy names of the whole
dataset (``ds["policy"]``; a summary's ``policy`` column), whatever subset a figure draws, from
:data:`PALETTE`'s 24 colours. The lines of one policy with different hyperparameters (``V = 1,
10``) share its hue, from dark to light in the order drawn, and differ in line style too
(:func:`line_styles`). Legends stand to the right of their axes, outside the data, in a figure
widened for them. Every figure is laid out by matplotlib's constrained layout (:func:`_subplots`)
and saved by :func:`save`, which first wraps the titles and labels longer than their axes, so
no text is clipped. Nothing is left silently empty: a line without a finite value keeps its
legend entry, marked "(no finite values)", and an axes where no line could be drawn says so
(:func:`mark_nonfinite`, called by every function that draws lines).
"""

from __future__ import annotations

from jfl.plots.bands import (
    INTERVAL_NAMES,
    ISOLATED_NOTE,
    NO_FINITE_LABEL,
    NO_FINITE_NOTE,
    band,
    band_from_stats,
    band_title,
    has_runs,
    mark_nonfinite,
    seed_band,
)
from jfl.plots.figure import (
    DPI,
    fit_texts,
    legend_size,
    line_figure,
    outside_legend,
    save,
)
from jfl.plots.lines import (
    EVALUATION_LABELS,
    plot_accuracy,
    plot_over_rounds,
    plot_pull_record,
    plot_selection_fraction,
)
from jfl.plots.style import (
    MAX_LINES,
    PALETTE,
    VARIANT_HATCHES,
    VARIANT_SHADES,
    VARIANT_STYLES,
    bar_styles,
    config_label,
    format_values,
    line_styles,
    palette_color,
    panel_groups,
    policy_colors,
    symbol,
    varying_hparams,
)
from jfl.plots.summary import (
    averaged_columns,
    plot_heatmap,
    plot_metric_vs,
    swept_scale,
)

__all__ = [
    "DPI",
    "EVALUATION_LABELS",
    "INTERVAL_NAMES",
    "ISOLATED_NOTE",
    "MAX_LINES",
    "NO_FINITE_LABEL",
    "NO_FINITE_NOTE",
    "PALETTE",
    "VARIANT_HATCHES",
    "VARIANT_SHADES",
    "VARIANT_STYLES",
    "averaged_columns",
    "band",
    "band_from_stats",
    "band_title",
    "bar_styles",
    "config_label",
    "fit_texts",
    "format_values",
    "has_runs",
    "legend_size",
    "line_figure",
    "line_styles",
    "mark_nonfinite",
    "outside_legend",
    "palette_color",
    "panel_groups",
    "plot_accuracy",
    "plot_heatmap",
    "plot_metric_vs",
    "plot_over_rounds",
    "plot_pull_record",
    "plot_selection_fraction",
    "policy_colors",
    "save",
    "seed_band",
    "swept_scale",
    "symbol",
    "varying_hparams",
]
