"""The baselines of COCS (Qu et al. §VI-B) and their variants, for the ``hfl`` environment, and
the pieces every policy of the COCS family shares (the family's overview and its registry:
``jfl.policies._cocs``).

* ``oracle``, ``oracle_context``, ``oracle_state``: the solver fed what an oracle knows;
* ``random_budget``: §VI-B's Random (``random_feasible_decision``);
* ``cucb`` (decisions) and ``cucb_pairs`` (pairs): UCB without context;
* ``linucb`` (one shared model) and ``linucb_pairs`` (one model per pair): ridge UCB on the
  context.

An action is bool[N, M]; ``num_servers`` in the builders is the number of ESs M. The states
count rounds played: the paper's 1-based current round is ``t + 1``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jfl.kernels import (
    ArmStats,
    arm_stats_init,
    arm_stats_update,
    ridge_estimate,
    ridge_init,
    ridge_update,
    ucb_bonus,
)
from jfl.kernels.assignment import BUDGET_RTOL, budgeted_assignment, cardinality_assignment
from jfl.kernels.ridge import RidgeState
from jfl.policies.base import Policy, check_selection_size, stateless
from jfl.prng import uniform

# CUCB's confidence scale: index = mean + scale·sqrt(1.5 ln t / count) (Chen et al.'s CUCB).
UCB_SCALE = 1.5


class CucbState(NamedTuple):
    signature: jax.Array  # u32[K, 2]  hashes of the decisions played (first K distinct ones)
    decision: jax.Array  # bool[K, N, M]  those decisions
    count: jax.Array  # f[K]  times each was played
    total: jax.Array  # f[K]  Σ utility (eq. 8) it earned
    recorded: jax.Array  # i[]  distinct decisions recorded (≤ K)
    t: jax.Array  # i[]  rounds played so far


class CucbPairsState(NamedTuple):
    stats: ArmStats  # count f[N·M], mean success f[N·M], pairs in row-major (n, m) order
    t: jax.Array  # i[]  rounds played so far


class LinUcbState(NamedTuple):
    gram: jax.Array  # f[D+1, D+1]  λI + Σ x xᵀ over every pair selected so far
    target: jax.Array  # f[D+1]  Σ X x over the same pairs
    t: jax.Array  # i[]


class LinUcbPairsState(NamedTuple):
    ridge: RidgeState  # over the N·M pairs (row-major), features [1, context]
    t: jax.Array  # i[]


# --------------------------------------------------------------------------------------------
# shared pieces
# --------------------------------------------------------------------------------------------


def check_observation(name: str, obs, num_clients: int, num_servers: int, context_dim=None):
    """Refuse, while tracing (before anything compiles), observations of other shapes.

    A policy sized for one environment would otherwise index its state out of range silently
    (e.g. COCS built for a 2-D context reading 4-D contexts looks up NaN cubes).
    """
    pairs = (num_clients, num_servers)
    if tuple(obs.available.shape) != pairs:
        raise ValueError(
            f"{name} was built for {num_clients} clients and {num_servers} edge servers "
            f"(pairs {pairs}); the environment observes pairs {tuple(obs.available.shape)}"
        )
    if context_dim is not None and tuple(obs.context.shape) != (*pairs, context_dim):
        raise ValueError(
            f"{name} was built for context_dim={context_dim}; the environment's context has "
            f"shape {tuple(obs.context.shape)}: build it with "
            f"context_dim={obs.context.shape[-1]}"
        )


def pair_tiebreak(key, obs):
    """One uniform draw per pair from the selection's key: equal choices are then not settled
    by client or ES index."""
    return uniform(key, obs.available.shape, obs.cost.dtype)


def assign(weight, obs, tiebreak):
    """The solver of P2 (eq. 10) fed the per-pair ``weight``: the selected pairs, bool[N, M]."""
    return budgeted_assignment(weight, obs.cost, obs.available, obs.budget, tiebreak=tiebreak).mask


def random_feasible_decision(key, cost, available, budget):
    """A uniformly random maximal decision: clients in random order, each to a uniformly random
    covering ES whose remaining budget still pays for it (bool[N, M]).

    The paper's Random (§VI-B: "selects a client to an accessible ES randomly … under these two
    constraints"). Budgets have the solver's slack ``BUDGET_RTOL``.
    """
    num_clients, num_servers = available.shape
    k_order, k_pick = jax.random.split(key)
    order = jax.random.permutation(k_order, num_clients)
    pick = jax.random.uniform(k_pick, (num_clients,), cost.dtype)
    budget = jnp.broadcast_to(jnp.asarray(budget, cost.dtype), (num_servers,))

    def place(left, n):
        fits = available[n] & (cost[n] >= 0) & (cost[n] <= left)
        choices = jnp.sum(fits)
        rank = jnp.minimum(jnp.floor(pick[n] * choices), choices - 1)
        row = fits & (jnp.cumsum(fits) - 1 == rank)
        return left - jnp.where(row, cost[n], 0), row

    _, rows = lax.scan(place, budget * (1 + BUDGET_RTOL), order)
    return jnp.zeros((num_clients, num_servers), bool).at[order].set(rows, unique_indices=True)


# --------------------------------------------------------------------------------------------
# oracles and Random
# --------------------------------------------------------------------------------------------


def oracle(num_clients: int, num_servers: int) -> Policy:
    """§VI-B's Oracle: the most of this round's successful pairs (``obs.success_now``) that the
    budgets admit, exactly (eq. 10 with X known; for the strongly convex utility, eq. 8, the
    maximum number of successful clients)."""
    check_selection_size(num_clients, num_servers, "num_servers")

    def select(key, state, obs, hparams):
        del state, hparams
        check_observation("oracle", obs, num_clients, num_servers)
        return cardinality_assignment(
            obs.cost, obs.available & obs.success_now, obs.budget, tiebreak=pair_tiebreak(key, obs)
        ).mask

    return stateless(select)


def _oracle_on(field: str, name: str, doc: str):
    """The stateless policy feeding the solver the observation's ``field`` as weights."""

    def build(num_clients: int, num_servers: int) -> Policy:
        check_selection_size(num_clients, num_servers, "num_servers")

        def select(key, state, obs, hparams):
            del state, hparams
            check_observation(name, obs, num_clients, num_servers)
            return assign(getattr(obs, field), obs, pair_tiebreak(key, obs))

        return stateless(select)

    build.__name__, build.__doc__ = name, doc
    return build


oracle_context = _oracle_on(
    "success_prob_context",
    "oracle_context",
    "§IV-A's Oracle: the solver fed p(φ) = E[X | observed context] (``success_prob_context``).",
)
oracle_state = _oracle_on(
    "success_prob",
    "oracle_state",
    """The solver fed P(X | everything but the uplink fading) (``success_prob``): neither of the
    paper's oracles (it knows the distance, shadowing and downlink fading of every pair).""",
)


def random_budget(num_clients: int, num_servers: int) -> Policy:
    """§VI-B's Random: ``random_feasible_decision`` every round."""
    check_selection_size(num_clients, num_servers, "num_servers")

    def select(key, state, obs, hparams):
        del state, hparams
        check_observation("random_budget", obs, num_clients, num_servers)
        return random_feasible_decision(key, obs.cost, obs.available, obs.budget)

    return stateless(select)


# --------------------------------------------------------------------------------------------
# CUCB
# --------------------------------------------------------------------------------------------


def cucb(num_clients: int, num_servers: int, max_decisions: int = 64, proposals: int = 4) -> Policy:
    """§VI-B's CUCB: UCB over whole feasible decisions s, learning each decision's utility.

    Each round ``proposals`` random feasible decisions (``random_feasible_decision``) are drawn;
    the first one never played is played (untried decisions first). If all were played before,
    the decision with the best index ``mean utility + (|s|/M)·sqrt(1.5 ln t / count)`` among
    those recorded and feasible this round is played (the utility of s lies in [0, |s|/M]).
    A decision is identified by a 64-bit hash of its mask; the first ``max_decisions`` distinct
    decisions are recorded. The paper ran CUCB with static resources so that the set of
    decisions stays fixed; here coverage and costs vary, and a recorded decision competes in the
    rounds where it is feasible. With N = 50 clients and M = 3 ESs there are far more than 10⁵
    decisions, so CUCB never repeats one and behaves like ``random_budget`` (the paper: "CUCB
    is difficult to enter the exploitation phase").
    """
    check_selection_size(num_clients, num_servers, "num_servers")
    if not isinstance(max_decisions, int) or max_decisions < 1:
        raise ValueError(f"max_decisions must be an integer >= 1, got {max_decisions!r}")
    if not isinstance(proposals, int) or proposals < 1:
        raise ValueError(f"proposals must be an integer >= 1, got {proposals!r}")
    shape = (num_clients, num_servers)
    # Fixed random hash weights (two 32-bit hashes: collisions ~ K²/2⁶⁴).
    hash_weights = np.random.default_rng(0x5EED).integers(0, 2**32, (2, *shape), dtype=np.uint32)

    def signature(mask):
        weights = jnp.asarray(hash_weights)
        return jnp.sum(jnp.where(mask, weights, 0), axis=(-2, -1), dtype=jnp.uint32)

    def init(key, hparams) -> CucbState:
        del key, hparams
        return CucbState(
            signature=jnp.zeros((max_decisions, 2), jnp.uint32),
            decision=jnp.zeros((max_decisions, *shape), bool),
            count=jnp.zeros(max_decisions),
            total=jnp.zeros(max_decisions),
            recorded=jnp.asarray(0, jnp.int32),
            t=jnp.asarray(0, jnp.int32),
        )

    def lookup(state: CucbState, mask):
        """(recorded, index) of ``mask`` in the table."""
        valid = jnp.arange(max_decisions) < state.recorded
        match = valid & jnp.all(state.signature == signature(mask), axis=-1)
        return jnp.any(match), jnp.argmax(match)

    def select(key, state: CucbState, obs, hparams):
        del hparams
        check_observation("cucb", obs, num_clients, num_servers)
        keys = jax.random.split(key, proposals)
        drawn = jax.vmap(random_feasible_decision, in_axes=(0, None, None, None))(
            keys, obs.cost, obs.available, obs.budget
        )
        tried = jax.vmap(lambda mask: lookup(state, mask)[0])(drawn)
        first_untried = jnp.argmax(~tried)

        valid = jnp.arange(max_decisions) < state.recorded
        spend = jnp.einsum("knm,n->km", state.decision.astype(obs.cost.dtype), obs.cost)
        feasible = (
            valid
            & jnp.all(~state.decision | obs.available, axis=(-2, -1))
            & jnp.all(spend <= obs.budget * (1 + BUDGET_RTOL), axis=-1)
        )
        size = jnp.sum(state.decision, axis=(-2, -1)) / num_servers
        mean = state.total / jnp.maximum(state.count, 1)
        bonus = size * ucb_bonus(state.count, state.t + 1, UCB_SCALE)
        best = jnp.argmax(jnp.where(feasible, mean + bonus, -jnp.inf))

        exploit = ~jnp.any(~tried) & jnp.any(feasible)
        return jnp.where(exploit, state.decision[best], drawn[first_untried])

    def update(state: CucbState, obs, action, feedback, hparams) -> CucbState:
        del obs, hparams
        known, index = lookup(state, action)
        new = ~known & (state.recorded < max_decisions)
        slot = jnp.where(known, index, state.recorded)
        counted = known | new
        one_hot = (jnp.arange(max_decisions) == slot) & counted
        return CucbState(
            signature=jnp.where(new & one_hot[:, None], signature(action), state.signature),
            decision=jnp.where((new & one_hot)[:, None, None], action, state.decision),
            count=state.count + one_hot,
            total=state.total + jnp.where(one_hot, feedback.utility, 0.0),
            recorded=state.recorded + new,
            t=state.t + 1,
        )

    return Policy(init=init, select=select, update=update)


def cucb_pairs(num_clients: int, num_servers: int) -> Policy:
    """Per-pair UCB min(mean + sqrt(1.5 ln t / count), 1) on success, no context (not the paper's
    CUCB, which learns whole decisions: ``cucb``)."""
    check_selection_size(num_clients, num_servers, "num_servers")
    pairs = num_clients * num_servers

    def init(key, hparams) -> CucbPairsState:
        del key, hparams
        return CucbPairsState(stats=arm_stats_init(pairs), t=jnp.asarray(0, jnp.int32))

    def select(key, state: CucbPairsState, obs, hparams):
        del hparams
        check_observation("cucb_pairs", obs, num_clients, num_servers)
        bonus = ucb_bonus(state.stats.count, state.t + 1, UCB_SCALE)
        index = jnp.minimum(state.stats.mean + bonus, 1.0)  # 1 for a pair never played
        return assign(index.reshape(num_clients, num_servers), obs, pair_tiebreak(key, obs))

    def update(state: CucbPairsState, obs, action, feedback, hparams) -> CucbPairsState:
        del obs, hparams
        stats = arm_stats_update(state.stats, action.reshape(-1), feedback.success.reshape(-1))
        return CucbPairsState(stats=stats, t=state.t + 1)

    return Policy(init=init, select=select, update=update)


# --------------------------------------------------------------------------------------------
# LinUCB
# --------------------------------------------------------------------------------------------


def _features(context):
    ones = jnp.ones((*context.shape[:-1], 1), context.dtype)
    return jnp.concatenate([ones, context], axis=-1).reshape(-1, context.shape[-1] + 1)


def linucb(num_clients: int, num_servers: int, context_dim: int = 2) -> Policy:
    """§VI-B's LinUCB: the utility of a decision is linear in its pairs' contexts.

    One ridge model shared by all pairs, x = [1, φ]: H = λI + Σ x xᵀ and b = Σ X x over every
    selected pair so far, θ̂ = H⁻¹b. A pair's optimistic weight is clip(x·θ̂ + α·sqrt(xᵀH⁻¹x),
    0, 1) and a decision's score the sum over its pairs, maximised by the solver (Li et al.'s
    LinUCB with the decision's expected utility Σ_pairs x·θ).
    """
    check_selection_size(num_clients, num_servers, "num_servers")
    dim = context_dim + 1
    pairs = num_clients * num_servers

    def init(key, hparams) -> LinUcbState:
        del key
        ridge = ridge_init(1, dim, hparams["lam"])
        return LinUcbState(gram=ridge.gram[0], target=ridge.target[0], t=jnp.asarray(0, jnp.int32))

    def select(key, state: LinUcbState, obs, hparams):
        check_observation("linucb", obs, num_clients, num_servers, context_dim)
        shared = RidgeState(
            gram=jnp.broadcast_to(state.gram, (pairs, dim, dim)),
            target=jnp.broadcast_to(state.target, (pairs, dim)),
        )
        estimate = ridge_estimate(shared, _features(obs.context))
        index = jnp.clip(estimate.mean + hparams["alpha"] * estimate.width, 0.0, 1.0)
        return assign(index.reshape(num_clients, num_servers), obs, pair_tiebreak(key, obs))

    def update(state: LinUcbState, obs, action, feedback, hparams) -> LinUcbState:
        del hparams
        x = jnp.where(action.reshape(-1, 1), _features(obs.context), 0.0)
        outcome = feedback.success.reshape(-1).astype(x.dtype)
        return LinUcbState(
            gram=state.gram + x.T @ x,
            target=state.target + x.T @ outcome,
            t=state.t + 1,
        )

    return Policy(init=init, select=select, update=update)


def linucb_pairs(num_clients: int, num_servers: int, context_dim: int = 2) -> Policy:
    """One ridge regression of success on [1, context] per pair, UCB weight in [0, 1] (not the
    paper's LinUCB, whose model is shared: ``linucb``)."""
    check_selection_size(num_clients, num_servers, "num_servers")

    def init(key, hparams) -> LinUcbPairsState:
        del key
        ridge = ridge_init(num_clients * num_servers, context_dim + 1, hparams["lam"])
        return LinUcbPairsState(ridge=ridge, t=jnp.asarray(0, jnp.int32))

    def select(key, state: LinUcbPairsState, obs, hparams):
        check_observation("linucb_pairs", obs, num_clients, num_servers, context_dim)
        estimate = ridge_estimate(state.ridge, _features(obs.context))
        index = estimate.mean + hparams["alpha"] * estimate.width
        weight = jnp.clip(index, 0.0, 1.0).reshape(num_clients, num_servers)
        return assign(weight, obs, pair_tiebreak(key, obs))

    def update(state: LinUcbPairsState, obs, action, feedback, hparams) -> LinUcbPairsState:
        del hparams
        ridge = ridge_update(
            state.ridge,
            _features(obs.context),
            action.reshape(-1),
            feedback.success.reshape(-1).astype(state.ridge.target.dtype),
        )
        return LinUcbPairsState(ridge=ridge, t=state.t + 1)

    return Policy(init=init, select=select, update=update)
