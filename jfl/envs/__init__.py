"""Pure client simulators with explicit ``params``/``state`` pytrees (gymnax style)."""

from jfl.envs import rbcsf
from jfl.envs.rbcsf import Feedback, Observation, RbcsfEnv, RbcsfParams, RbcsfState

ENVIRONMENTS = {"rbcsf": RbcsfEnv}


def make(name: str):
    """Environment object by name."""
    if name not in ENVIRONMENTS:
        raise ValueError(f"unknown environment {name!r}; choose one of {sorted(ENVIRONMENTS)}")
    return ENVIRONMENTS[name]()


__all__ = [
    "ENVIRONMENTS",
    "Feedback",
    "Observation",
    "RbcsfEnv",
    "RbcsfParams",
    "RbcsfState",
    "make",
    "rbcsf",
]
