"""How the figures tell lines apart and name them: a colour per policy, shades and line styles
per configuration, panels of at most :data:`MAX_LINES` lines, hyperparameters as symbols.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

import numpy as np
import xarray as xr

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
