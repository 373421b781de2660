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

import re
import textwrap
import unicodedata
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import xarray as xr
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from jfl.stats import INTERVALS, UNBOUNDED, UNIT_INTERVAL, Bounds, interval, stats_ci

# Dots per inch of every saved figure.
DPI = 120
# Interval methods by name, as legends say them.
INTERVAL_NAMES = {"t": "Student-t", "bootstrap": "bootstrap"}
# Most lines one panel of a figure draws; a figure of more lines is split into panels sharing
# their axes (:func:`panel_groups`), none left out. Beyond a dozen, lines and legend entries are
# hard to tell apart, in colour as in the legend.
MAX_LINES = 12
# One colour per policy (:func:`policy_colors`): matplotlib's tab10, then 14 colours picked
# greedily (glasbey-style) from an 18³ sRGB grid, each the farthest (CIEDE2000) from those before
# it among those at least 0.2 from each in RGB, within CIELAB lightness 25–68 and chroma ≥ 35
# (lines readable on white, no greys beside tab10's). No two closer than ΔE₀₀ ≈ 16 (tab10's red
# and brown), nor than 0.2 in RGB; no light/dark pairs of one hue.
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    "#3c4b00", "#0000d2", "#87005a", "#966900", "#00785a",
    "#f08787", "#8796ff", "#e10078", "#4b4b87", "#4bb496",
    "#870000", "#d29600", "#87873c", "#0fa5ff",
)  # fmt: skip
# The line styles of one policy's lines (different hyperparameters), in turn.
VARIANT_STYLES = ("-", "--", "-.", ":")
# The hatches of one policy's bars, in turn with the line styles of its lines.
VARIANT_HATCHES = ("", "//", "..", "xx")
# How far one policy's lines go from its colour: the first towards black, the last towards white.
VARIANT_SHADES = (-0.25, 0.35)
_SUBSCRIPTS = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")
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


def _subplots(*args, figsize=None, **kwargs):
    """A figure outside pyplot (no backend, no global state) and its axes (``Figure.subplots``'
    arguments), in matplotlib's constrained layout: every figure's, so that titles, labels,
    colour bars and legends outside the axes get their room instead of being clipped."""
    fig = Figure(figsize=figsize, dpi=DPI, layout="constrained")
    return fig, fig.subplots(*args, **kwargs)


def save(fig: Figure, path) -> Figure:
    """Save ``fig`` to ``path`` at :data:`DPI` once its long texts are wrapped to fit
    (:func:`fit_texts`), and return it: every figure is saved so."""
    fit_texts(fig)
    fig.savefig(path, dpi=DPI)
    return fig


def fit_texts(fig: Figure, rounds: int = 4) -> None:
    """Break the axes' titles and axis labels (the figure's suptitle) that reach past the
    canvas at spaces, to about the width (a y label: the height) of their axes (the figure),
    measured as laid out: constrained layout makes room around the axes for what it is given,
    but a text longer than the figure is clipped whatever the layout. Each wrap changes the
    layout, so it is measured again, ``rounds`` times at most; ``fig`` is left laid out as it
    is saved."""
    given: dict = {}  # each wrapped text: (its lines as given, the characters a line holds)
    for _ in range(rounds):
        fig.draw_without_rendering()
        if not _wrap_long_texts(fig, given):
            return
    fig.draw_without_rendering()


def _wrap_long_texts(fig: Figure, given: dict) -> bool:
    """One round of :func:`fit_texts` on ``fig`` as last laid out; whether any text changed."""
    changed = False
    for ax in fig.axes:
        box = ax.get_window_extent()
        for text in (ax.title, ax._left_title, ax._right_title, ax.xaxis.label):
            changed |= _wrap(text, box.width, fig.bbox, given)
        changed |= _wrap(ax.yaxis.label, box.height, fig.bbox, given)
    if fig._suptitle is not None:
        changed |= _wrap(fig._suptitle, fig.bbox.width, fig.bbox, given)
    return changed


def _wrap(text, room: float, page, given: dict) -> bool:
    """Wrap ``text``, if it reaches past the canvas ``page``, at spaces: its lines as given
    (``given`` keeps them, and the characters per line so far), fewer characters a line each
    time, to span about ``room`` pixels along its direction (a y label's is vertical); whether
    it changed. A value stays with its name ("N = 5" is not broken at its "=")."""
    box = text.get_window_extent()
    inside = page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1
    if not text.get_text() or inside:
        return False
    size = box.height if text.get_rotation() % 180 == 90 else box.width
    lines, most = given.get(text, (text.get_text().splitlines(), None))
    longest = max(len(line) for line in text.get_text().splitlines())
    width = max(8, min(int(longest * room / size), longest - 1, (most or longest) - 1))
    given[text] = (lines, width)
    kept = [line.replace(" = ", "\u00a0=\u00a0") for line in lines]
    wrapped = "\n".join(textwrap.fill(line, width, break_long_words=False) for line in kept)
    changed = wrapped != text.get_text()
    text.set_text(wrapped)
    return changed


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


def palette_color(index: int) -> tuple[float, float, float, float]:
    """The ``index``-th colour of :data:`PALETTE` (RGBA); past its 24 colours, the palette again,
    darker at each round (40 % of the way to black, then 64 %, …), so no two indices share one."""
    from matplotlib.colors import to_rgba

    rounds, position = divmod(index, len(PALETTE))
    rgb = np.array(to_rgba(PALETTE[position])[:3]) * 0.6**rounds
    return (*(float(v) for v in rgb), 1.0)


def policy_colors(policies) -> dict[str, tuple]:
    """``{policy: colour}`` for the policy names ``policies`` (repeats allowed: a dataset's
    ``ds["policy"]``), in their sorted order through :func:`palette_color`. Given the names of
    the whole sweep, every figure drawn from it gives a policy the same colour, whichever subset
    of the policies it draws."""
    names = sorted({str(p) for p in np.asarray(policies).ravel()})
    return {name: palette_color(i) for i, name in enumerate(names)}


def _shade(color, amount: float) -> tuple:
    """``color`` moved ``amount`` of the way towards white (``amount > 0``) or black (< 0)."""
    from matplotlib.colors import to_rgba

    *rgb, alpha = to_rgba(color)
    rgb = np.array(rgb)
    rgb = rgb + (1.0 - rgb) * amount if amount > 0 else rgb * (1.0 + amount)
    return (*(float(v) for v in rgb), alpha)


def line_styles(policies: Sequence[str], colors: dict | None = None) -> list[dict]:
    """``{"color", "linestyle"}`` of each line, of the policy ``policies[i]``: the policy's
    colour (``colors``, default :func:`policy_colors` of ``policies``); a policy with several
    lines (other hyperparameters) shades its colour from dark to light in their order
    (:data:`VARIANT_SHADES`) and turns through :data:`VARIANT_STYLES`, so every line differs."""
    policies = [str(p) for p in policies]
    colors = policy_colors(policies) if colors is None else colors
    missing = sorted(set(policies) - set(colors))
    if missing:
        raise ValueError(f"no colour for the policies {missing}")
    counts = {p: policies.count(p) for p in policies}
    seen = dict.fromkeys(counts, 0)
    styles = []
    for policy in policies:
        j, n = seen[policy], counts[policy]
        seen[policy] += 1
        amount = 0.0 if n == 1 else float(np.linspace(*VARIANT_SHADES, n)[j])
        styles.append(
            {
                "color": _shade(colors[policy], amount),
                "linestyle": VARIANT_STYLES[j % len(VARIANT_STYLES)],
            }
        )
    return styles


def bar_styles(policies: Sequence[str], colors: dict | None = None) -> list[dict]:
    """``{"color", "hatch"}`` of each bar series, of the policy ``policies[i]``: the colour of
    its line in :func:`line_styles`, and a hatch in place of its line style."""
    return [
        {"color": s["color"], "hatch": VARIANT_HATCHES[VARIANT_STYLES.index(s["linestyle"])]}
        for s in line_styles(policies, colors)
    ]


def panel_groups(policies: Sequence[str], max_lines: int = MAX_LINES) -> list[list[int]]:
    """The lines (positions in ``policies``, each line's policy) of each panel of a figure: all
    in one panel, in their order, when they are at most ``max_lines``; else grouped by policy
    (policies in the order they first come, a policy's lines in their order) into panels of at
    most ``max_lines`` lines and about equal sizes, a policy's lines in one panel when they fit
    in one (else in consecutive panels). Every line is in exactly one panel."""
    if max_lines < 1:
        raise ValueError(f"max_lines must be at least 1, got {max_lines}")
    count = len(policies)
    if count <= max_lines:
        return [list(range(count))]
    by_policy: dict[str, list[int]] = {}
    for i, policy in enumerate(policies):
        by_policy.setdefault(str(policy), []).append(i)
    target = -(-count // -(-count // max_lines))  # ceil(count / number of panels needed)
    chunks = []
    for lines in by_policy.values():  # a policy of too many lines: in equal consecutive chunks
        for part in np.array_split(lines, -(-len(lines) // max_lines)):
            chunks.append([int(i) for i in part])
    panels: list[list[int]] = [[]]
    for chunk in chunks:
        current = panels[-1]
        if current and (len(current) >= target or len(current) + len(chunk) > max_lines):
            panels.append([])
        panels[-1].extend(chunk)
    return panels


def _title(ax, title: str, *notes: str) -> None:
    notes = [n for n in notes if n]
    if notes:
        ax.set_title("\n".join([title, *notes]), fontsize=9)
    else:
        ax.set_title(title)


def outside_legend(ax, title: str, fontsize=8):
    """The legend of ``ax``, right of its axes (outside the data), top-aligned with them."""
    return ax.legend(
        fontsize=fontsize,
        title=title or None,
        title_fontsize=fontsize - 1,
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        borderaxespad=0.0,
    )


def legend_size(labels: Sequence[str], title: str = "", fontsize=8) -> tuple[float, float]:
    """About the (width, height) in inches of a legend of ``labels`` under ``title``: what a
    figure adds beside its axes, and the least height of a panel, to show it whole."""
    title = title or ""
    lines = [*title.splitlines(), *labels]
    chars = max((len(line) for line in lines), default=0)
    width = 0.9 + 0.6 * fontsize / 72 * chars  # the handle and padding, then the text
    height = 0.35 + 1.6 * fontsize / 72 * (len(labels) + len(title.splitlines()))
    return width, height


def line_figure(
    panels: list[list[str]],
    legend_title: str,
    width=6.4,
    height=4.2,
    columns=1,
    fontsize=8,
    sharey=True,
):
    """A figure of one row of ``columns`` axes per panel (``panels``: each panel's legend
    labels), sharing x (and y, with ``sharey``), in constrained layout, sized for each row's
    legend on its right (:func:`outside_legend`): each axes ``width / columns`` wide, the legend
    beside, rows ``height`` high (or less, at least 3 inches, when there are several), or the
    legend's height if more. Every figure with a legend is made so."""
    legends = [legend_size(labels, legend_title, fontsize) for labels in panels]
    rows = len(panels)
    row_height = height if rows == 1 else max(3.0, 0.75 * height)
    row_height = max(row_height, *(h + 0.9 for _, h in legends))
    figsize = (width + max(w for w, _ in legends), row_height * rows)
    fig, axes = _subplots(rows, columns, figsize=figsize, sharex=True, sharey=sharey, squeeze=False)
    return fig, axes


def _panels_note(panels: list[list[int]]) -> str:
    """What a figure of several panels says under its title ("" for one)."""
    if len(panels) == 1:
        return ""
    count = sum(len(p) for p in panels)
    return f"{count} lines in {len(panels)} panels (shared axes)"


def _finish(axes, groups, xlabel, ylabel, title, notes, legend_title, fontsize=8) -> None:
    """Axis labels (x on the bottom row), title and notes (and how many panels, if several) on
    the first axes unless ``title`` is None, a grid, and each row's legend right of its last
    axes."""
    for row in axes:
        for ax in row:
            ax.grid(alpha=0.3)
        row[0].set_ylabel(ylabel)
        outside_legend(row[-1], legend_title, fontsize)
    for ax in axes[-1]:
        ax.set_xlabel(xlabel)
    if title is not None:
        _title(axes[0][0], title, *notes, _panels_note(groups))


def config_label(ds: xr.Dataset, config: int, varying: list[str]) -> str:
    """'rbcsf V=10' style legend label with only the hyperparameters that vary."""
    c = ds.sel(config=config)
    parts = [str(c["policy"].item())]
    for name in varying:
        value = c[name].item()
        if isinstance(value, str):  # a named label, e.g. the aggregation
            parts.append(f"{name}={value}")
        elif np.isfinite(float(value)):
            parts.append(f"{name}={float(value):g}")
    return " ".join(parts)


def varying_hparams(ds: xr.Dataset, exclude=("policy", "queue_rate")) -> list[str]:
    """The configuration coordinates (hyperparameters) that take more than one value in ``ds``."""
    names = []
    for name, coord in ds.coords.items():
        if coord.dims != ("config",) or name in exclude or name == "config":
            continue
        values = coord.to_numpy()
        if values.dtype.kind not in "US":
            values = values[np.isfinite(values)]
        if len(np.unique(values)) > 1:
            names.append(name)
    return names


def _drawn(ds: xr.Dataset, configs, varying, max_lines, colors, labels=None):
    """``(configs, labels, styles, panels)`` of the lines of ``configs`` (every configuration
    of ``ds`` by default): their legend labels (``labels``: ``{config: label}`` or a function
    of the configuration, as an experiment names its methods; default :func:`config_label`'s,
    the hyperparameters in ``varying``), colours and line styles (``colors``: ``{policy:
    colour}``, default :func:`policy_colors` of ``ds["policy"]``) and the panels they go in."""
    configs = list(ds["config"].to_numpy() if configs is None else configs)
    colors = policy_colors(ds["policy"].to_numpy()) if colors is None else colors
    policies = [str(ds["policy"].sel(config=c).item()) for c in configs]
    if labels is None:
        names = [config_label(ds, c, varying) for c in configs]
    else:
        names = [labels[c] if isinstance(labels, Mapping) else labels(c) for c in configs]
    return configs, names, line_styles(policies, colors), panel_groups(policies, max_lines)


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
    colors=None,
    labels=None,
):
    """One banded line per configuration of ``variable`` [config, seed, round] (``configs``:
    every one by default, every one drawn), told apart by colour and legend; the legend labels
    name the hyperparameters in ``varying`` (by default those that vary in ``ds``), or are
    ``labels``' (``{config: label}`` or a function of the configuration: how an experiment
    names its methods), and ``subtitle`` (what the figure fixes, say) goes under the title.
    ``method``: the interval of the bands, clipped to ``bounds`` (default: the variable's
    declared ones; of its running sum with ``cumulative``). More than ``max_lines`` lines are
    split into panels; ``colors``: ``{policy: colour}`` (default :func:`policy_colors` of
    ``ds["policy"]``).
    """
    from jfl.results import bounds_of

    if cumulative and f"{variable}_band" in ds:
        raise ValueError(f"{variable!r} is a band: plot its cumulative curve's band instead")
    varying = varying_hparams(ds) if varying is None else varying
    configs, labels, styles, groups = _drawn(ds, configs, varying, max_lines, colors, labels)
    bounds = bounds_of(variable) if bounds is None else Bounds(*bounds)
    cumsum = None
    if cumulative:
        bounds = bounds.cumulative()

        def cumsum(samples):
            return np.cumsum(samples, axis=1)

    legend_title = band_title(ds, variable, method)
    fig, axes = line_figure([[labels[i] for i in g] for g in groups], legend_title)
    for (ax,), group in zip(axes, groups, strict=True):
        for i in group:
            seed_band(
                ax, ds, variable, configs[i], "round", label=labels[i], transform=cumsum,
                method=method, bounds=bounds, **styles[i],
            )  # fmt: skip
    _finish(axes, groups, "round", ylabel, title, (subtitle,), legend_title)
    return save(fig, path)


def plot_pull_record(
    ds,
    path,
    configs=None,
    max_lines=MAX_LINES,
    method="t",
    varying=None,
    subtitle="",
    colors=None,
    labels=None,
):
    """Selections per client after T rounds, clients sorted ascending per seed (paper Fig. 4);
    the arguments as :func:`plot_over_rounds`'."""
    from jfl.results import bounds_of

    varying = varying_hparams(ds) if varying is None else varying
    configs, labels, styles, groups = _drawn(ds, configs, varying, max_lines, colors, labels)
    x = np.arange(1, ds.sizes["client"] + 1)
    runs = has_runs(ds, "selection_count") and (
        method == "bootstrap" or "pull_record_band" not in ds
    )
    legend_title = band_title(ds, "selection_count" if runs else "pull_record", method)
    fig, axes = line_figure([[labels[i] for i in g] for g in groups], legend_title)
    for (ax,), group in zip(axes, groups, strict=True):
        for i in group:
            config, style = configs[i], {"label": labels[i], "marker": ".", **styles[i]}
            if not runs:
                stats = ds["pull_record_band"].sel(config=config)
                mean, variance = stats.sel(stat="mean"), stats.sel(stat="var")
                bounds = bounds_of("pull_record")
                band_from_stats(ax, x, mean, variance, ds.sizes["seed"], bounds=bounds, **style)
                continue
            counts = ds["selection_count"].sel(config=config).transpose("seed", "client")
            bounds = bounds_of("selection_count")
            band(ax, x, np.sort(counts.to_numpy(), axis=1), method=method, bounds=bounds, **style)
    _finish(
        axes, groups, "client (sorted by pull count)",
        f"selections after {ds.sizes['round']} rounds", "Pull record", (subtitle,), legend_title,
    )  # fmt: skip
    return save(fig, path)


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


def plot_selection_fraction(
    ds: xr.Dataset, path, configs=None, max_lines=8, method="t", colors=None, labels=None
):
    """Running selection fraction of each client vs rounds, one panel per client (Xia Fig. 5).

    Needs the ``selected`` trajectories; a dashed line marks the client's target c_k when the
    dataset has a per-client ``queue_rate`` [config, client]. Bands in [0, 1]. More than
    ``max_lines`` configurations are split into rows of panels (one panel per client in each);
    ``colors``: ``{policy: colour}`` (default :func:`policy_colors` of ``ds["policy"]``);
    ``labels`` as :func:`plot_over_rounds`'.
    """
    from jfl.results import running_selection_fraction

    varying = varying_hparams(ds)
    configs, labels, styles, groups = _drawn(ds, configs, varying, max_lines, colors, labels)
    num_clients = ds.sizes["client"]
    legend_title = band_title(ds, "selected", method)
    fig, axes = line_figure(
        [[labels[i] for i in g] for g in groups], legend_title, width=3.2 * num_clients,
        height=3.6, columns=num_clients, fontsize=7,
    )  # fmt: skip
    fraction = running_selection_fraction(ds)
    x = ds["round"].to_numpy()
    for row, group in zip(axes, groups, strict=True):
        shown = [configs[i] for i in group]
        for k, ax in enumerate(row):
            for i in group:
                samples = fraction.sel(config=configs[i], client=k).transpose("seed", "round")
                band(
                    ax, x, samples.to_numpy(), label=labels[i], method=method,
                    bounds=UNIT_INTERVAL, **styles[i],
                )  # fmt: skip
            if "queue_rate" in ds and "client" in ds["queue_rate"].dims:
                targets = np.unique(ds["queue_rate"].sel(config=shown, client=k).to_numpy())
                for target in targets:
                    ax.axhline(target, color="k", linestyle="--", linewidth=1)
    _finish(axes, groups, "round", "selection fraction", None, (), legend_title, 7)
    for k, ax in enumerate(axes[0]):
        ax.set_title(f"client {k + 1}")
    if len(groups) > 1:
        fig.suptitle(_panels_note(groups), fontsize=9)
    return save(fig, path)


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
    colors=None,
    labels=None,
):
    """Test accuracy (or ``variable``, another evaluation: ``test_loss``) with its band over
    seeds, against the round or the simulated wall-clock.

    Against time, the x position of an evaluation is the seed-mean of the wall-clock at that
    round (seeds differ in their clocks; the band is over accuracies at equal rounds).
    ``exclude`` names configuration labels left out of the legend. Bands in the accuracy's
    bounds, [0, 1]. Every configuration of ``configs`` is drawn, more than ``max_lines`` in
    panels; ``colors``: ``{policy: colour}`` (default :func:`policy_colors` of
    ``ds["policy"]``, the same in every figure of the dataset); ``labels`` as
    :func:`plot_over_rounds`'.
    """
    from jfl.results import bounds_of

    varying = varying_hparams(ds, exclude=exclude)
    configs, labels, styles, groups = _drawn(ds, configs, varying, max_lines, colors, labels)
    rounds = ds["eval"].to_numpy()
    bounds = bounds_of(variable)
    legend_title = band_title(ds, variable, method)
    fig, axes = line_figure([[labels[i] for i in g] for g in groups], legend_title)
    target = ds.attrs.get("target_accuracy") if variable == "accuracy" else None
    for (ax,), group in zip(axes, groups, strict=True):
        for i in group:
            c = ds.sel(config=configs[i])
            samples = c[variable].transpose("seed", "eval").to_numpy()
            if against == "round":
                x = rounds
            else:
                clock = c["wall_clock"].transpose("seed", "round").to_numpy().mean(axis=0)
                x = np.concatenate([[0.0], clock])[rounds]
            band(ax, x, samples, label=labels[i], method=method, bounds=bounds, **styles[i])
        if target is not None:
            ax.axhline(float(target), color="grey", linestyle=":", linewidth=1)
    ylabel = EVALUATION_LABELS.get(variable, variable)
    against_name = "round" if against == "round" else "time"
    _finish(
        axes, groups, "round" if against == "round" else "simulated wall-clock time (s)",
        ylabel, title or f"{ylabel.capitalize()} vs {against_name}", (), legend_title,
    )  # fmt: skip
    return save(fig, path)
