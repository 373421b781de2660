"""Checks and settings every experiment shares."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd

from jfl import checks
from jfl.envs import ENVIRONMENTS
from jfl.plots import symbol, varying_hparams
from jfl.policies import REGISTRY, get, readers


def check_policies(names: Sequence[str], environment: str, trains: bool = False) -> None:
    """Registered, distinct policies that can run on ``environment`` (``--policies`` errors);
    without federated training (``trains``) none may read a learner's signals."""
    if not names:
        raise ValueError("--policies: give at least one policy")
    if len(set(names)) != len(names):
        raise ValueError(f"--policies: duplicate names in {list(names)}")
    for name in names:
        if name not in REGISTRY:
            raise ValueError(f"--policies: unknown policy {name!r}; choose from {sorted(REGISTRY)}")
        try:
            REGISTRY[name].check_environment(ENVIRONMENTS[environment])
        except ValueError as err:
            raise ValueError(f"--policies: {err}") from None
        signals = REGISTRY[name].signals
        if signals and not trains:
            raise ValueError(
                f"--policies: policy {name!r} reads {list(signals)}, which only a federated "
                "training run computes (sweeps/fl_*.py)"
            )


def check_hparams(policies: Sequence[str], values: dict[str, Sequence[float]]) -> None:
    """Swept hyperparameters against the ranges their policies declare, naming the flag; a
    value given twice is refused (it would compute the same configurations twice).

    A hyperparameter no listed policy reads is not range-checked (it is not used either).
    """
    for name, grid in values.items():
        checks.distinct(f"--{name.replace('_', '-')}", list(grid))
        for policy in policies:
            spec = get(policy).hparams.get(name)
            if spec is not None:
                spec.check(f"--{name.replace('_', '-')}", grid)


def check_read(
    policies: Sequence[str],
    values: dict[str, Sequence[float]],
    defaults: dict[str, Sequence[float]],
    read_anyway: Sequence[str] = (),
) -> None:
    """ValueError naming the first swept hyperparameter set away from its default (``values``
    against ``defaults``) that none of ``policies`` reads, and the policies that would; those
    in ``read_anyway`` are read by the experiment itself (e.g. a queue rate)."""
    for name, grid in values.items():
        if name in read_anyway or tuple(grid) == tuple(defaults.get(name, grid)):
            continue
        if any(name in get(policy).hparams for policy in policies):
            continue
        flag = f"--{name.replace('_', '-')}"
        who = ", ".join(sorted(readers(name))) or "no policy"
        raise ValueError(
            f"{flag} is read by {who}, and none of --policies ({','.join(policies)}) is one of "
            f"them: drop {flag} or add such a policy"
        )


def with_queue_rate(configs: pd.DataFrame, target: float) -> pd.DataFrame:
    """``configs`` with the column ``queue_rate`` that ``jfl.trackers.fairness_queue`` reads.

    A policy with a rate of its own (``PolicySpec.queue_rate``: RBCS-F's β) is measured against
    that rate, so that its queue is its own; every other policy against ``target``.
    """
    rates = np.full(len(configs), float(target))
    for i, name in enumerate(configs["policy"]):
        own = get(name).queue_rate
        if own is not None and own in configs and not np.isnan(configs[own].iloc[i]):
            rates[i] = configs[own].iloc[i]
    return configs.assign(queue_rate=rates)


def list_defaults(config) -> dict[str, float]:
    """The default of every list field of ``config``'s type that defaults to one value (β =
    0.15, α = 0.1, …): where a figure that shows one slice of the grid draws it."""
    defaults = {}
    for field in dataclasses.fields(config):
        value = field.default
        if isinstance(value, tuple) and len(value) == 1 and isinstance(value[0], int | float):
            defaults[field.name] = float(value[0])
    return defaults


class Slice(NamedTuple):
    """The configurations a figure draws and what it holds fixed, for its title."""

    configs: list[int]
    subtitle: str  # "β = 0.15, α = 0.1 (the defaults); --plot-at beta=0.2 for another", or ""
    varying: list[str]  # the hyperparameters its legend labels name


def figure_slice(
    ds,
    point: Mapping[str, float],
    defaults: Mapping[str, float],
    along: Sequence[str] = (),
    policies: Sequence[str] | None = None,
) -> Slice:
    """One slice of the grid for a figure that draws a line per configuration.

    Every hyperparameter of ``policies``' configurations (all by default) that takes several
    values and is not drawn ``along`` the lines is held at one value: ``point``'s (from
    ``--plot-at``), else its default where the grid has it, else the middle of its values. A
    configuration that does not use the hyperparameter (NaN) stays. The subtitle names every
    value held and where it comes from.
    """
    chosen = np.ones(ds.sizes["config"], bool)
    if policies is not None:
        chosen &= np.isin(ds["policy"].to_numpy(), list(policies))
    shown = chosen.copy()
    held = []  # (axis, value, source, other values)
    for axis in varying_hparams(ds):
        column = ds[axis].to_numpy()
        values = np.unique(column[shown & np.isfinite(column)])
        if axis in along or len(values) < 2:
            continue
        default = defaults.get(axis)
        close = np.isclose(values, default, rtol=1e-9, atol=1e-12) if default is not None else []
        if axis in point:
            value, source = point[axis], "--plot-at"
        elif np.any(close):
            value, source = values[np.argmax(close)], "default"
        else:
            value = values[(len(values) - 1) // 2]
            source = "middle" if default is None else "middle, default absent"
        chosen &= ~np.isfinite(column) | np.isclose(column, value, rtol=1e-9, atol=1e-12)
        others = values[~np.isclose(values, value, rtol=1e-9, atol=1e-12)]
        held.append((axis, float(value), source, others))
    configs = list(ds["config"].to_numpy()[chosen])
    varying = [name for name in varying_hparams(ds) if name in along]
    if not held:
        return Slice(configs, "", varying)
    groups = []  # "β = 0.15, α = 0.1 (the defaults)", one per source, in the axes' order
    for source in dict.fromkeys(source for _, _, source, _ in held):
        axes = [(axis, value) for axis, value, s, _ in held if s == source]
        plural = len(axes) > 1
        why = {
            "--plot-at": "--plot-at",
            "default": "the defaults" if plural else "the default",
            "middle": "the middle of the grid",
            "middle, default absent": "the middle of the grid; "
            + ("the defaults are not in it" if plural else "the default is not in it"),
        }[source]
        values = ", ".join(f"{symbol(axis)} = {value:g}" for axis, value in axes)
        groups.append(f"{values} ({why})")
    subtitle = "; ".join(groups)
    free = [(axis, others) for axis, _, source, others in held if source != "--plot-at"]
    if free and len(free[0][1]):
        axis, others = free[0]
        hint = f"--plot-at {axis}={others[0]:g} for another"
        subtitle += f"; {hint}" if len(subtitle) + len(hint) < 80 else f"\n{hint}"
    return Slice(configs, subtitle, varying)


def plot_point(config) -> dict[str, float]:
    """``config``'s ``--plot-at`` as ``{axis: value}`` (values as the grid holds them)."""
    if not config.plot_at:
        return {}
    return checks.grid_point("--plot-at", config.plot_at, config.plot_axes())
