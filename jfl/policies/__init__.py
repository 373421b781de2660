"""Client-selection policies as (init, select, update) triples, and their registry."""

from jfl.policies import baselines, cocs, cs_ucb, local_accuracy, rbcsf
from jfl.policies.base import (
    LEARNER_SIGNALS,
    REGISTRY,
    SIZE_NAMES,
    EmptyState,
    HParam,
    LearnerObservation,
    Policy,
    PolicySpec,
    TieBreakState,
    check_selection_size,
    check_signals,
    get,
    random_priority,
    register,
    stateless,
    stateless_init,
    stateless_update,
)
from jfl.policies.baselines import dirichlet_random, fedcs, random_policy
from jfl.policies.cs_ucb import cs_ucb_q, modified_cs_ucb, round_robin
from jfl.policies.local_accuracy import local_accuracy as local_accuracy_policy
from jfl.policies.rbcsf import rbcsf as rbcsf_policy

__all__ = [
    "LEARNER_SIGNALS",
    "REGISTRY",
    "SIZE_NAMES",
    "EmptyState",
    "HParam",
    "LearnerObservation",
    "Policy",
    "PolicySpec",
    "TieBreakState",
    "baselines",
    "check_selection_size",
    "check_signals",
    "cocs",
    "cs_ucb",
    "cs_ucb_q",
    "dirichlet_random",
    "fedcs",
    "get",
    "local_accuracy",
    "local_accuracy_policy",
    "modified_cs_ucb",
    "random_policy",
    "random_priority",
    "rbcsf",
    "rbcsf_policy",
    "register",
    "round_robin",
    "stateless",
    "stateless_init",
    "stateless_update",
]
