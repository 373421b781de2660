"""Client-selection policies as (init, select, update) triples, and their registry."""

from jfl.policies import baselines, cocs, cs_ucb, rbcsf
from jfl.policies.base import (
    REGISTRY,
    SIZE_NAMES,
    EmptyState,
    HParam,
    Policy,
    PolicySpec,
    check_selection_size,
    get,
    register,
    stateless,
    stateless_init,
    stateless_update,
)
from jfl.policies.baselines import dirichlet_random, fedcs, random_policy
from jfl.policies.cs_ucb import cs_ucb_q, modified_cs_ucb, round_robin
from jfl.policies.rbcsf import rbcsf as rbcsf_policy

__all__ = [
    "REGISTRY",
    "SIZE_NAMES",
    "EmptyState",
    "HParam",
    "Policy",
    "PolicySpec",
    "baselines",
    "check_selection_size",
    "cocs",
    "cs_ucb",
    "cs_ucb_q",
    "dirichlet_random",
    "fedcs",
    "get",
    "modified_cs_ucb",
    "random_policy",
    "rbcsf",
    "rbcsf_policy",
    "register",
    "round_robin",
    "stateless",
    "stateless_init",
    "stateless_update",
]
