"""Client-selection policies as (init, select, update) triples, and their registry.

Every builder is exported here under its registry name (``jfl.policies.rbcsf(num_clients,
selection_size)``, …; ``jfl.policies.get(name).build`` is the same function), with the interface
(``Policy``, ``PolicySpec``, ``HParam``, ``register``, ``get``) and the helpers policies share.
The builders' second parameter is the selection size, ``selection_size`` (for the COCS family,
which assigns clients to edge servers, the number of servers ``num_servers``).

Families (implementation modules, private):

* RBCS-F and its baselines (Huang et al.): ``rbcsf``, ``random``, ``fedcs``, ``dirichlet_random``;
* the CS-UCB family (Xia et al.): ``cs_ucb``, ``modified_cs_ucb``, ``cs_ucb_q``, ``round_robin``;
* the COCS family (Qu et al.): ``cocs``, ``oracle``, ``linucb``, ``cucb``, ``random_budget``, and
  their variants ``cocs_lookahead``, ``oracle_context``, ``oracle_state``, ``cucb_pairs``,
  ``linucb_pairs`` (see the docs' reproduction report for who should use which);
* ``local_accuracy``, which reads a federated learner's per-client signal;
* the methods FL papers compare against (docs/methods.md): ``pow_d`` (Power-of-Choice) with its
  cheaper variants ``cpow_d`` and ``rpow_d`` and its unbiased baseline ``proportional`` (rand),
  ``afl`` (Active Federated Learning), ``clustered_size`` (clustered sampling, Alg. 1), ``oort``
  (Oort), ``e3cs`` (E3CS: Exp3 with a fairness floor) with its FedCS-like baseline
  ``most_reliable``;
* the update- and gradient-aware methods (docs/methods.md, second group), which read sketches and
  norms of the clients' updates and gradients: ``delta`` (DELTA) and ``fedis`` (FedIS),
  unbiased samplers learnt from the participants, ``ocs`` (optimal client sampling) and
  ``fedcor`` (FedCor: a Gaussian process over the clients' loss changes), ``divfl`` (DivFL:
  greedy facility location on the clients' gradient sketches) and ``clustered_similarity``
  (clustered sampling, Algorithm 2: Ward clusters of the participants' update sketches).
"""

from jfl.kernels import random_priority
from jfl.policies._afl import afl
from jfl.policies._baselines import dirichlet_random, fedcs, random
from jfl.policies._clustered import clustered_size
from jfl.policies._clustered_similarity import clustered_similarity
from jfl.policies._cocs import cocs, cocs_lookahead, exploration_threshold, hypercube_index
from jfl.policies._cocs_baselines import (
    cucb,
    cucb_pairs,
    linucb,
    linucb_pairs,
    oracle,
    oracle_context,
    oracle_state,
    random_budget,
    random_feasible_decision,
)
from jfl.policies._cs_ucb import cs_ucb, cs_ucb_q, initial_rounds, modified_cs_ucb, round_robin
from jfl.policies._divfl import divfl
from jfl.policies._e3cs import e3cs, most_reliable
from jfl.policies._fedcor import fedcor
from jfl.policies._importance import delta, fedis, ocs
from jfl.policies._local_accuracy import local_accuracy
from jfl.policies._oort import oort
from jfl.policies._power_of_choice import cpow_d, pow_d, proportional, rpow_d
from jfl.policies._rbcsf import lemma1_alpha, rbcsf
from jfl.policies.base import (
    LEARNER_SIGNALS,
    REGISTRY,
    ROUND_SIGNALS,
    EmptyState,
    HParam,
    LearnerObservation,
    Policy,
    PolicySpec,
    Selection,
    TieBreakState,
    check_selection_size,
    check_signals,
    draws_selection,
    get,
    readers,
    register,
    stateless,
    stateless_init,
    stateless_update,
)

__all__ = [
    "LEARNER_SIGNALS",
    "REGISTRY",
    "ROUND_SIGNALS",
    "EmptyState",
    "HParam",
    "LearnerObservation",
    "Policy",
    "PolicySpec",
    "Selection",
    "TieBreakState",
    "afl",
    "check_selection_size",
    "check_signals",
    "clustered_similarity",
    "clustered_size",
    "cocs",
    "cocs_lookahead",
    "cpow_d",
    "cs_ucb",
    "cs_ucb_q",
    "cucb",
    "cucb_pairs",
    "delta",
    "dirichlet_random",
    "divfl",
    "draws_selection",
    "e3cs",
    "exploration_threshold",
    "fedcor",
    "fedcs",
    "fedis",
    "get",
    "hypercube_index",
    "initial_rounds",
    "lemma1_alpha",
    "linucb",
    "linucb_pairs",
    "local_accuracy",
    "modified_cs_ucb",
    "most_reliable",
    "ocs",
    "oort",
    "oracle",
    "oracle_context",
    "oracle_state",
    "pow_d",
    "proportional",
    "random",
    "random_budget",
    "random_feasible_decision",
    "random_priority",
    "rbcsf",
    "readers",
    "register",
    "round_robin",
    "rpow_d",
    "stateless",
    "stateless_init",
    "stateless_update",
]
