"""Pure client simulators with explicit ``params``/``state`` pytrees (gymnax style)."""

from jfl.envs import channel, hfl, rbcsf, volatile, wireless
from jfl.envs.base import Environment
from jfl.envs.hfl import HflEnv, HflParams, HflState
from jfl.envs.rbcsf import Feedback, Observation, RbcsfEnv, RbcsfParams, RbcsfState
from jfl.envs.volatile import VolatileEnv, VolatileParams, VolatileState
from jfl.envs.wireless import WirelessEnv, WirelessParams, WirelessState
from jfl.outputs import Metric  # what environments declare their metrics with
from jfl.registry import Registry

ENVIRONMENTS: Registry[type[Environment]] = Registry(
    "environment",
    {"rbcsf": RbcsfEnv, "wireless": WirelessEnv, "hfl": HflEnv, "volatile": VolatileEnv},
)


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
    "VolatileEnv",
    "VolatileParams",
    "VolatileState",
    "WirelessEnv",
    "WirelessParams",
    "WirelessState",
    "channel",
    "hfl",
    "rbcsf",
    "volatile",
    "wireless",
]
