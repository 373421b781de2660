"""Checks every experiment shares."""

from __future__ import annotations

from collections.abc import Sequence


def check_policies(names: Sequence[str], environment: str) -> None:
    """Registered, distinct policies that can run on ``environment`` (``--policies`` errors)."""
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
