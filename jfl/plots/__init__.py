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

import importlib

# Every public name by the submodule that defines it; each loads on first use, so that a sweep
# that draws no figure (``--no-plots``) never imports matplotlib, and plotting a stored
# results.nc needs no JAX (``jfl.results`` loads on use too).
_NAMES = {
    "INTERVAL_NAMES": "bands",
    "ISOLATED_NOTE": "bands",
    "NO_FINITE_LABEL": "bands",
    "NO_FINITE_NOTE": "bands",
    "band": "bands",
    "band_from_stats": "bands",
    "band_title": "bands",
    "has_runs": "bands",
    "mark_nonfinite": "bands",
    "seed_band": "bands",
    "DPI": "figure",
    "fit_texts": "figure",
    "legend_size": "figure",
    "line_figure": "figure",
    "outside_legend": "figure",
    "save": "figure",
    "EVALUATION_LABELS": "lines",
    "plot_accuracy": "lines",
    "plot_over_rounds": "lines",
    "plot_pull_record": "lines",
    "plot_selection_fraction": "lines",
    "MAX_LINES": "style",
    "PALETTE": "style",
    "VARIANT_HATCHES": "style",
    "VARIANT_SHADES": "style",
    "VARIANT_STYLES": "style",
    "bar_styles": "style",
    "config_label": "style",
    "format_values": "style",
    "line_styles": "style",
    "palette_color": "style",
    "panel_groups": "style",
    "policy_colors": "style",
    "symbol": "style",
    "varying_hparams": "style",
    "averaged_columns": "summary",
    "plot_heatmap": "summary",
    "plot_metric_vs": "summary",
    "swept_scale": "summary",
}

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


def __getattr__(name: str):
    if name in _NAMES:
        value = getattr(importlib.import_module(f"jfl.plots.{_NAMES[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'jfl.plots' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
