"""Checks and settings every experiment shares."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd


def check_policies(names: Sequence[str], environment: str, trains: bool = False) -> None:
    """Registered, distinct policies that can run on ``environment`` (``--policies`` errors);
    without federated training (``trains``) none may read a learner's signals."""
    from jfl.envs import ENVIRONMENTS
    from jfl.policies import REGISTRY

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
    """Swept hyperparameters against the ranges their policies declare, naming the flag.

    A hyperparameter no listed policy reads is not checked (it is not used either).
    """
    from jfl.policies import get

    for name, grid in values.items():
        for policy in policies:
            spec = get(policy).hparams.get(name)
            if spec is not None:
                spec.check(f"--{name.replace('_', '-')}", grid)


def with_queue_rate(configs: pd.DataFrame, target: float) -> pd.DataFrame:
    """``configs`` with the column ``queue_rate`` that ``jfl.trackers.fairness_queue`` reads.

    A policy with a rate of its own (``PolicySpec.queue_rate``: RBCS-F's β) is measured against
    that rate, so that its queue is its own; every other policy against ``target``.
    """
    from jfl.policies import get

    rates = np.full(len(configs), float(target))
    for i, name in enumerate(configs["policy"]):
        own = get(name).queue_rate
        if own is not None and own in configs and not np.isnan(configs[own].iloc[i]):
            rates[i] = configs[own].iloc[i]
    return configs.assign(queue_rate=rates)
