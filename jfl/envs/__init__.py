"""Pure client simulators with explicit ``params``/``state`` pytrees (gymnax style)."""

from jfl.envs import rbcsf, wireless
from jfl.envs.rbcsf import Feedback, Observation, RbcsfEnv, RbcsfParams, RbcsfState
from jfl.envs.wireless import WirelessEnv, WirelessParams, WirelessState

ENVIRONMENTS = {"rbcsf": RbcsfEnv, "wireless": WirelessEnv}


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
    "WirelessEnv",
    "WirelessParams",
    "WirelessState",
    "make",
    "rbcsf",
    "wireless",
]
