"""Pure client simulators with explicit ``params``/``state`` pytrees (gymnax style)."""

from jfl.envs import channel, hfl, rbcsf, wireless
from jfl.envs.base import Environment, Metric
from jfl.envs.hfl import HflEnv, HflParams, HflState
from jfl.envs.rbcsf import Feedback, Observation, RbcsfEnv, RbcsfParams, RbcsfState
from jfl.envs.wireless import WirelessEnv, WirelessParams, WirelessState

ENVIRONMENTS: dict[str, type[Environment]] = {
    "rbcsf": RbcsfEnv,
    "wireless": WirelessEnv,
    "hfl": HflEnv,
}


__all__ = [
    "ENVIRONMENTS",
    "Environment",
    "Feedback",
    "HflEnv",
    "HflParams",
    "HflState",
    "Metric",
    "Observation",
    "RbcsfEnv",
    "RbcsfParams",
    "RbcsfState",
    "WirelessEnv",
    "WirelessParams",
    "WirelessState",
    "channel",
    "hfl",
    "rbcsf",
    "wireless",
]
