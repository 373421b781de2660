"""Client-selection policies as (init, select, update) triples, and their registry."""

from jfl.policies import baselines, rbcsf
from jfl.policies.base import REGISTRY, HParam, Policy, PolicySpec, get, register
from jfl.policies.baselines import dirichlet_random, fedcs, random_policy
from jfl.policies.rbcsf import rbcsf as rbcsf_policy

__all__ = [
    "REGISTRY",
    "HParam",
    "Policy",
    "PolicySpec",
    "baselines",
    "dirichlet_random",
    "fedcs",
    "get",
    "random_policy",
    "rbcsf",
    "rbcsf_policy",
    "register",
]
