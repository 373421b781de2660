"""Checks of user-facing values: one place, one message format.

Each check raises ``ValueError("<name> must be …, got …")`` naming the parameter (for a command
line, the flag: ``"--seeds"``) and the allowed range, so a bad value stops a sweep with one line
before anything compiles. Every range check of the library goes through these: the command
lines', the environments' parameters, the policies' hyperparameters (``HParam``).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping, Sequence

import numpy as np


def describe_range(low, high, low_open: bool = False, high_open: bool = False) -> str:
    """``"[0, 1]"``, ``"(0, inf)"``: the interval, open at an infinite end."""
    left = "(" if low_open or math.isinf(low) else "["
    right = ")" if high_open or math.isinf(high) else "]"
    return f"{left}{low:g}, {high:g}{right}"


# The largest integer a flag may take: counters, shapes and seeds are int32 on the device.
INT32_MAX = 2**31 - 1


# The most clients an environment may have: its per-client arrays must fit one device (jfl's
# largest measured P4 selection is 10⁶ clients); what fits is then checked from the shapes.
MAX_CLIENTS = 10**7


def clients(name: str, value) -> int:
    """A number of clients: an integer in [1, ``MAX_CLIENTS``]."""
    return integer(name, value, 1, MAX_CLIENTS)


def integer(name: str, value, low: int = 1, high: int | None = None, high_name: str = "") -> int:
    """An integer ≥ ``low`` (and ≤ ``high``: ``high_name`` names where that bound comes from;
    never above ``INT32_MAX``, where the device's counters would overflow)."""
    ok = isinstance(value, int | np.integer) or (isinstance(value, float) and value.is_integer())
    ok = ok and not isinstance(value, bool)
    if ok and value >= low and (high is None or value <= high) and value <= INT32_MAX:
        return int(value)
    if ok and value > INT32_MAX and (high is None or high > INT32_MAX):
        raise ValueError(
            f"{name} must be at most {INT32_MAX} (the device counts in int32), got {value}"
        )
    if high is None:
        raise ValueError(f"{name} must be an integer >= {low}, got {value}")
    bound = f"{high_name}={high}" if high_name else f"{high}"
    raise ValueError(f"{name} must be an integer in [{low}, {bound}], got {value}")


def in_range(
    name: str,
    value,
    low: float = -math.inf,
    high: float = math.inf,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    """A finite number (or every number of an array) in the range; open ends where asked.

    The message shows the value, or for an array the first three values out of range.
    """
    values = np.atleast_1d(np.asarray(value, float))
    ok = np.isfinite(values)
    ok &= (values > low) if low_open else (values >= low)
    ok &= (values < high) if high_open else (values <= high)
    if not np.all(ok):
        shown = value if np.ndim(value) == 0 else values[~ok].ravel()[:3].tolist()
        raise ValueError(
            f"{name} must be in {describe_range(low, high, low_open, high_open)}, got {shown}"
        )


def positive(name: str, value) -> None:
    """Finite and > 0 (every value of a sequence)."""
    in_range(name, value, 0.0, low_open=True)


def choice(name: str, value, choices: Iterable) -> None:
    """One of ``choices``."""
    choices = list(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def per_client(name: str, values: Sequence[float], count: int) -> list[float]:
    """One value for every client, or exactly ``count`` values."""
    values = [float(v) for v in values]
    if len(values) == 1:
        values = values * count
    if len(values) != count:
        raise ValueError(f"{name}: expected 1 or --clients={count} values, got {len(values)}")
    return values


def distinct(name: str, values: Sequence) -> None:
    """No value twice."""
    if len(set(values)) != len(values):
        raise ValueError(f"{name}: duplicate values in {list(values)}")


def grid_point(name: str, items: Sequence[str], axes: Mapping[str, Sequence[float]]):
    """``AXIS=VALUE`` items (each may join several with commas) → ``{axis: value}``, every axis
    one of ``axes`` and every value one of that axis's values (to float rounding: ``0:0.3:7``'s
    0.15 is 0.15000000000000002), returned as the grid holds it."""
    point: dict[str, float] = {}
    for text in items:
        for item in (v.strip() for v in str(text).split(",")):
            if not item:
                continue
            axis, sep, value = (part.strip() for part in item.partition("="))
            if not sep or not axis or not value:
                raise ValueError(f"{name}: expected AXIS=VALUE (e.g. beta=0.2), got {item!r}")
            if not axes:
                raise ValueError(f"{name}: these figures draw every configuration, no slice")
            if axis not in axes:
                raise ValueError(f"{name}: unknown axis {axis!r}; choose from {', '.join(axes)}")
            if axis in point:
                raise ValueError(f"{name}: axis {axis!r} given twice")
            try:
                number = float(value)
            except ValueError:
                raise ValueError(f"{name}: {axis}={value!r} is not a number") from None
            grid = np.asarray(axes[axis], float)
            match = np.flatnonzero(np.isclose(grid, number, rtol=1e-9, atol=1e-12))
            if not len(match):
                values = ", ".join(f"{v:g}" for v in grid)
                raise ValueError(
                    f"{name}: {axis}={number:g} is not in the grid; {axis} is one of {values}"
                )
            point[axis] = float(grid[match[0]])
    return point


def in_python_terms(message: str, config) -> str:
    """A refusal worded for the command line in the words of the Python API, for the fields of
    the dataclass ``config`` (nested ones included): a switch ``--overwrite`` / ``--no-plots``
    becomes ``overwrite=True`` / ``plots=False``, any other flag its field (``--rounds``:
    ``rounds``, ``--lr``: ``training.lr``); other text is left alone."""
    fields = _field_paths(config)

    def python(match: re.Match) -> str:
        name = match[1].replace("-", "_")
        negated = name.startswith("no_") and name[3:] in fields
        name = name[3:] if negated else name
        if name not in fields:
            return match[0]
        path, value = fields[name]
        return f"{path}={not negated}" if isinstance(value, bool) else path

    return re.sub(r"(?<![\w-])--([A-Za-z][\w-]*)", python, message)


def in_flag_terms(message: str, config) -> str:
    """A refusal worded in the Python API's terms for the command line: a parameter the
    library names in backticks that is a field of ``config`` becomes its flag (`` `out` ``:
    ``--out``, `` `overwrite=True` ``: ``--overwrite``, `` `plots=False` ``: ``--no-plots``,
    `` `training.lr` ``: ``--lr``); other text is left alone."""
    fields = {path: value for path, value in _field_paths(config).values()}

    def flag(match: re.Match) -> str:
        path, switch = match[1], match[3]
        if path not in fields:
            return match[0]
        name = path.rsplit(".", 1)[-1].replace("_", "-")
        if switch is not None and isinstance(fields[path], bool):
            return f"--{name}" if switch == "True" else f"--no-{name}"
        return f"--{name}"

    return re.sub(r"`([A-Za-z_][\w.]*)(=(True|False))?`", flag, message)


def _field_paths(config, prefix: str = "") -> dict[str, tuple[str, object]]:
    """Each field of ``config`` by name: its dotted path and value (nested dataclasses'
    fields too, as the command line flattens them)."""
    paths = {}
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value):
            paths.update(_field_paths(value, f"{prefix}{field.name}."))
        else:
            paths.setdefault(field.name, (f"{prefix}{field.name}", value))
    return paths
