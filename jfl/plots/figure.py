"""Figures outside pyplot, laid out and saved so that no text is clipped; legends beside the axes.

Every figure is made by :func:`_subplots` (a ``matplotlib.figure.Figure`` in constrained layout,
no backend) or :func:`line_figure` (panels sized for their legends), and saved by :func:`save`,
which first wraps the titles and labels longer than their axes (:func:`fit_texts`).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from matplotlib.figure import Figure

# Dots per inch of every saved figure.
DPI = 120


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
