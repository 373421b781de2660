"""Random per-round inputs for the COCS-family policy tests, and the ``hfl`` observation of one
round built from them (every field, so that any policy of the family can read it)."""

from __future__ import annotations

import numpy as np

from jfl.envs.hfl import Observation
from jfl.reference.milp_assignment import budgeted_numpy

BUDGETS = {
    "tight": 3.5,  # one or two clients per ES
    "loose": 100.0,  # everybody affordable
    "one": 2.0,  # at most one client per ES, some none
}


def random_rounds(rng, num_instances, num_clients, num_servers, dim, num_rounds=1, budgets=None):
    """Stacked float32 inputs [I, T, ...] ([I, ...] when ``num_rounds`` is 1): coverage with
    gaps, contexts in [0, 1]^D, costs p·y, per-ES budgets of the given kinds (cycled over
    instances), the outcome X of every pair with a context-dependent probability."""
    budgets = budgets or tuple(BUDGETS)
    shape = (num_instances, num_rounds, num_clients, num_servers)
    available = rng.random(shape) < rng.uniform(0.5, 1.0, (num_instances, 1, 1, 1))
    context = np.where(available[..., None], rng.random((*shape, dim)), 0.0)
    cost = rng.uniform(0.5, 2.0, shape[:3]) * rng.uniform(2.0, 4.0, shape[:3])
    kinds = [budgets[i % len(budgets)] for i in range(num_instances)]
    budget = np.stack([np.full((num_rounds, num_servers), BUDGETS[k]) for k in kinds])
    prob = np.where(available, 0.1 + 0.8 * context[..., 0] * (0.5 + 0.5 * context[..., 1]), 0.0)
    success = available & (rng.random(shape) < prob)
    out = {
        "available": available,
        "context": context.astype(np.float32),
        "cost": cost.astype(np.float32),
        "budget": budget.astype(np.float32),
        "success": success,
        "success_prob": prob.astype(np.float32),
    }
    if num_rounds == 1:
        out = {k: v[:, 0] for k, v in out.items()}
    return out


def observation(x) -> Observation:
    """The observation of one round of ``random_rounds``: the oracles' fields are the outcome
    itself (``success_now``) and its probability (``success_prob``, ``success_prob_context``)."""
    fields = {
        "success_now": x["success"],
        "success_prob_context": x["success_prob"],
        **{k: v for k, v in x.items() if k != "success"},
    }
    return Observation(**{name: fields[name] for name in Observation._fields})


def solver_numpy(weight, cost, available, budget, tiebreak):
    """The NumPy mirror of the JAX solver, as ``solver(weight, cost, available, budget,
    tiebreak) -> mask``."""
    return budgeted_numpy(weight, cost, available, budget, tiebreak)[0]
