"""Pure client simulators with explicit ``params``/``state`` pytrees (gymnax style)."""

from jfl.envs import hfl, rbcsf, wireless
from jfl.envs.hfl import HflEnv, HflParams, HflState
from jfl.envs.rbcsf import Feedback, Observation, RbcsfEnv, RbcsfParams, RbcsfState
from jfl.envs.wireless import WirelessEnv, WirelessParams, WirelessState

ENVIRONMENTS = {"rbcsf": RbcsfEnv, "wireless": WirelessEnv, "hfl": HflEnv}


def make(name: str):
    """Environment object by name."""
    if name not in ENVIRONMENTS:
        raise ValueError(f"unknown environment {name!r}; choose one of {sorted(ENVIRONMENTS)}")
    return ENVIRONMENTS[name]()


__all__ = [
    "ENVIRONMENTS",
    "Feedback",
    "HflEnv",
    "HflParams",
    "HflState",
    "Observation",
    "RbcsfEnv",
    "RbcsfParams",
    "RbcsfState",
    "WirelessEnv",
    "WirelessParams",
    "WirelessState",
    "hfl",
    "make",
    "rbcsf",
    "wireless",
]
