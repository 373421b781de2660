"""COCS (Qu et al.) and its baselines Oracle, CUCB, LinUCB and Random, for the ``hfl`` environment.

Every policy here assigns clients to edge servers (ES) with the same budgeted solver,
``jfl.kernels.budgeted_assignment``: each client to at most one covering ES, each ES within its
budget, maximising the sum of the policy's per-pair weights (problem P2, eq. 10). They differ
only in the weights:

* Oracle: the true success probability of every pair (``obs.success_prob``);
* COCS: the success estimate of the pair's context hypercube, with forced exploration of
  under-explored hypercubes (Alg. 1, eqs. 13–18);
* CUCB: a per-pair UCB on the success rate, ignoring the context;
* LinUCB: a per-pair ridge regression of success on the context, with a UCB bonus;
* Random: a random order over the pairs (budget permitting).

An action is bool[N, M]. ``num_servers`` in the builders is the number of ESs M. The round
counter ``t`` of the paper is 1-based: the states count rounds played, the current round is
``t + 1``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jfl.kernels import (
    ArmStats,
    arm_stats_init,
    arm_stats_update,
    budgeted_assignment,
    ridge_estimate,
    ridge_init,
    ridge_update,
    ucb_bonus,
)
from jfl.kernels.ridge import RidgeState
from jfl.policies.base import HParam, Policy, PolicySpec, check_selection_size, register, stateless


class CocsState(NamedTuple):
    count: jax.Array  # f[N, M, L]  C_{n,m}(l): selections of pair (n, m) with context in cube l
    estimate: jax.Array  # f[N, M, L]  p̂_{n,m}(l), eq. 12
    t: jax.Array  # i[]  rounds played so far


class CucbState(NamedTuple):
    stats: ArmStats  # count f[N·M], mean success f[N·M], pairs in row-major (n, m) order
    t: jax.Array  # i[]  rounds played so far


class LinUcbState(NamedTuple):
    ridge: RidgeState  # over the N·M pairs (row-major), features [1, context]
    t: jax.Array  # i[]


def _assign(weight, obs):
    return budgeted_assignment(weight, obs.cost, obs.available, obs.budget).mask


def oracle(num_clients: int, num_servers: int) -> Policy:
    """The solver fed the true success probabilities (the benchmark of COCS's regret, eq. 11)."""
    check_selection_size(num_clients, num_servers, "num_servers")

    def select(key, state, obs, hparams):
        del key, state, hparams
        return _assign(obs.success_prob, obs)

    return stateless(select)


def random_budget(num_clients: int, num_servers: int) -> Policy:
    """Covered pairs in a uniformly random order, each taken if its client is free and its ES
    can afford it (weights u·c_n make the solver's density order the random order u)."""
    check_selection_size(num_clients, num_servers, "num_servers")

    def select(key, state, obs, hparams):
        del state, hparams
        order = jax.random.uniform(key, obs.available.shape, obs.cost.dtype, minval=1e-6)
        return _assign(order * obs.cost[:, None], obs)

    return stateless(select)


def hypercube_index(context, cubes_per_dim):
    """Index l of the hypercube of side 1/h_T containing each context (context in [0, 1]^D).

    ``cubes_per_dim`` h_T may be traced: the cell of coordinate x is min(floor(x·h), h − 1)
    and l = Σ_d cell_d·h^d (row-major over dimensions).
    """
    h = jnp.asarray(cubes_per_dim, context.dtype)
    cell = jnp.clip(jnp.floor(context * h), 0, h - 1).astype(jnp.int32)
    h_int = h.astype(jnp.int32)
    index = jnp.zeros(cell.shape[:-1], jnp.int32)
    for d in reversed(range(cell.shape[-1])):
        index = index * h_int + cell[..., d]
    return index


def exploration_threshold(t, z):
    """K(t) = t^z ln t (Theorem 2); pairs with C_{n,m}(l) ≤ K(t) are under-explored (eq. 13)."""
    t = jnp.asarray(t, jnp.float32)
    return t**z * jnp.log(t)


def cocs(
    num_clients: int, num_servers: int, context_dim: int = 2, max_cubes_per_dim: int = 10
) -> Policy:
    """COCS, Alg. 1: hypercube success estimates with forced exploration.

    Each round, with l the hypercube of the pair's context and K(t) = t^z ln t:

    1. under-explored pairs are the covered ones with C_{n,m}(l) ≤ K(t) (eq. 13);
    2. exploration: as many under-explored pairs as the budgets allow (max |s|, eqs. 14–15:
       weight 1 each, so the solver takes the cheapest first);
    3. clients without any under-explored pair then share the remaining budgets by their
       estimates p̂_{n,m}(l) (eqs. 16–17); with no under-explored pair at all this is the
       exploitation step, eq. 18.

    Case (i) of the paper (every client has an under-explored pair) is step 2 alone, case (ii)
    steps 2–3, the exploitation phase step 3 alone. The partition has h_T^D cubes; h_T is a
    traced hyperparameter up to the static ``max_cubes_per_dim`` (the counters are sized for it,
    so a whole (h_T, z) grid runs in one compiled program).
    """
    check_selection_size(num_clients, num_servers, "num_servers")
    if not isinstance(max_cubes_per_dim, int) or max_cubes_per_dim < 1:
        raise ValueError(f"max_cubes_per_dim must be an integer >= 1, got {max_cubes_per_dim!r}")
    if context_dim not in (2, 4):
        raise ValueError(f"context_dim must be 2 or 4, got {context_dim!r}")

    def init(key, hparams) -> CocsState:
        del key, hparams
        shape = (num_clients, num_servers, max_cubes_per_dim**context_dim)
        return CocsState(
            count=jnp.zeros(shape), estimate=jnp.zeros(shape), t=jnp.asarray(0, jnp.int32)
        )

    def _cube(obs, hparams):
        # A traced h_T cannot raise: it is floored and clipped to [1, max_cubes_per_dim] so the
        # index always addresses the counters (the registry and the sweep refuse other values).
        h = jnp.clip(jnp.floor(hparams["h_T"]), 1, max_cubes_per_dim)
        return hypercube_index(obs.context, h)

    def select(key, state: CocsState, obs, hparams):
        del key
        cube = _cube(obs, hparams)[..., None]
        count = jnp.take_along_axis(state.count, cube, axis=-1)[..., 0]
        estimate = jnp.take_along_axis(state.estimate, cube, axis=-1)[..., 0]
        under_explored = obs.available & (count <= exploration_threshold(state.t + 1, hparams["z"]))
        explore = budgeted_assignment(
            under_explored.astype(obs.cost.dtype), obs.cost, under_explored, obs.budget
        ).mask
        spent = jnp.sum(jnp.where(explore, obs.cost[:, None], 0.0), axis=0)
        explored_clients = ~jnp.any(under_explored, axis=1, keepdims=True)
        exploit = budgeted_assignment(
            estimate, obs.cost, obs.available & explored_clients, obs.budget - spent
        ).mask
        return explore | exploit

    def update(state: CocsState, obs, action, feedback, hparams) -> CocsState:
        cube = _cube(obs, hparams)
        played = action[..., None] & (jnp.arange(state.count.shape[-1]) == cube[..., None])
        count = state.count + played
        success = feedback.success[..., None].astype(state.estimate.dtype)
        step = (success - state.estimate) / jnp.maximum(count, 1)
        estimate = jnp.where(played, state.estimate + step, state.estimate)
        return CocsState(count=count, estimate=estimate, t=state.t + 1)

    return Policy(init=init, select=select, update=update)


def cucb(num_clients: int, num_servers: int) -> Policy:
    """CUCB: per-pair UCB min(mean + sqrt(1.5 ln t / count), 1) on success, no context."""
    check_selection_size(num_clients, num_servers, "num_servers")
    pairs = num_clients * num_servers

    def init(key, hparams) -> CucbState:
        del key, hparams
        return CucbState(stats=arm_stats_init(pairs), t=jnp.asarray(0, jnp.int32))

    def select(key, state: CucbState, obs, hparams):
        del key, hparams
        bonus = ucb_bonus(state.stats.count, state.t + 1, 1.5)
        index = jnp.minimum(state.stats.mean + bonus, 1.0)  # 1 for a pair never played
        return _assign(index.reshape(num_clients, num_servers), obs)

    def update(state: CucbState, obs, action, feedback, hparams) -> CucbState:
        del obs, hparams
        stats = arm_stats_update(state.stats, action.reshape(-1), feedback.success.reshape(-1))
        return CucbState(stats=stats, t=state.t + 1)

    return Policy(init=init, select=select, update=update)


def _features(context):
    ones = jnp.ones((*context.shape[:-1], 1), context.dtype)
    return jnp.concatenate([ones, context], axis=-1).reshape(-1, context.shape[-1] + 1)


def linucb(num_clients: int, num_servers: int, context_dim: int = 2) -> Policy:
    """LinUCB: per-pair ridge regression of success on [1, context]; UCB weight in [0, 1]."""
    check_selection_size(num_clients, num_servers, "num_servers")

    def init(key, hparams) -> LinUcbState:
        del key
        ridge = ridge_init(num_clients * num_servers, context_dim + 1, hparams["lam"])
        return LinUcbState(ridge=ridge, t=jnp.asarray(0, jnp.int32))

    def select(key, state: LinUcbState, obs, hparams):
        del key
        estimate = ridge_estimate(state.ridge, _features(obs.context))
        index = estimate.mean + hparams["alpha"] * estimate.width
        return _assign(jnp.clip(index, 0.0, 1.0).reshape(num_clients, num_servers), obs)

    def update(state: LinUcbState, obs, action, feedback, hparams) -> LinUcbState:
        del hparams
        ridge = ridge_update(
            state.ridge,
            _features(obs.context),
            action.reshape(-1),
            feedback.success.reshape(-1).astype(state.ridge.target.dtype),
        )
        return LinUcbState(ridge=ridge, t=state.t + 1)

    return Policy(init=init, select=select, update=update)


_HFL = ("available_pairs", "cost", "budget", "success")

register(
    PolicySpec(
        "cocs",
        cocs,
        {
            "h_T": HParam(5.0, 1.0, 10.0, help="hypercubes per context dimension h_T (integer)"),
            "z": HParam(0.4, 0.0, 1.0, low_open=True, help="exploration exponent z in (0, 1]"),
        },
        "COCS: context-hypercube success estimates with forced exploration (Qu et al. Alg. 1)",
        requires=(*_HFL, "context"),
        size_name="num_servers",
    )
)
register(
    PolicySpec(
        "oracle",
        oracle,
        {},
        "the budgeted solver fed the true success probabilities",
        requires=(*_HFL, "success_prob"),
        size_name="num_servers",
    )
)
register(
    PolicySpec(
        "cucb",
        cucb,
        {},
        "per-pair UCB on success, no context",
        requires=_HFL,
        size_name="num_servers",
    )
)
register(
    PolicySpec(
        "linucb",
        linucb,
        {
            "alpha": HParam(1.0, 0.0, help="exploration weight α ≥ 0"),
            "lam": HParam(1.0, 0.0, low_open=True, help="ridge regulariser λ > 0"),
        },
        "per-pair ridge regression of success on the context, UCB bonus",
        requires=(*_HFL, "context"),
        size_name="num_servers",
    )
)
register(
    PolicySpec(
        "random_budget",
        random_budget,
        {},
        "covered client-server pairs in random order within the budgets",
        requires=_HFL,
        size_name="num_servers",
    )
)
