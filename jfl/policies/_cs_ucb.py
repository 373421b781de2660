"""CS-UCB and CS-UCB-Q (Xia et al.) and their baselines Round-robin and modified CS-UCB.

All four learn from the per-client normalised reward ``r_k = 1 - τ_k/τ_max`` of the ``wireless``
environment and select ``min(N, |A(t)|)`` available clients (N = ``selection_size``, the number of
channels) with the top-k kernel. The round counter ``t`` of the paper is 1-based: the policies'
``t`` field counts the rounds already played, so the current round is ``t + 1``.

Ties (equal scores: CS-UCB-Q's first rounds, where every truncated index is 1, or clients with
equal play counts and means) follow a random order of the clients drawn once per run from the
``init`` key (``random_priority``), never the client index: in the wireless presets the index
orders the clients by computing speed, so an index rule would hand the early rounds to one end.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jfl.kernels import (
    ArmStats,
    arm_stats_init,
    arm_stats_update,
    random_priority,
    selection_count,
    topk_mask,
    ucb_index,
    virtual_queue_update,
)
from jfl.policies.base import HParam, Policy, PolicySpec, check_selection_size, register


class CsUcbState(NamedTuple):
    stats: ArmStats  # count z f[K], sample mean y f[K] (eqs. 16–17)
    t: jax.Array  # i[]  rounds played so far
    init_round: jax.Array  # i[K]  initialisation round (0-based) in which client k is first played
    init_fill: jax.Array  # bool[K]  already-played clients completing the last initial round
    priority: jax.Array  # i32[K]  per-run random order breaking ties (random_priority)


class UcbState(NamedTuple):
    stats: ArmStats  # count z f[K], sample mean y f[K]
    t: jax.Array  # i[]  rounds played so far
    priority: jax.Array  # i32[K]  per-run random order breaking ties (random_priority)


class CsUcbQState(NamedTuple):
    stats: ArmStats  # count z f[K], sample mean y f[K]
    queue: jax.Array  # f[K]  D_k at the start of the next round (eq. 27)
    t: jax.Array  # i[]  rounds played so far
    priority: jax.Array  # i32[K]  per-run random order breaking ties (random_priority)


class RoundRobinState(NamedTuple):
    slot: jax.Array  # i[K]  client k's position in the cycle (a random permutation per run)
    t: jax.Array  # i[]  rounds played so far


def initial_rounds(num_clients: int, selection_size: int) -> int:
    """κ = ⌈K/N⌉ initial rounds of CS-UCB (Alg. 1)."""
    return math.ceil(num_clients / selection_size)


def _stats_update(stats, action, feedback):
    return arm_stats_update(stats, action, feedback.reward)


def _learn(state, obs, action, feedback, hparams):
    """``update`` of CS-UCB and modified CS-UCB: the reward's count and mean (eqs. 16–17)."""
    del obs, hparams
    return state._replace(stats=_stats_update(state.stats, action, feedback), t=state.t + 1)


def _top_available(score, available, selection_size: int, priority=None):
    """The ``min(N, |A(t)|)`` available clients with the highest ``score``, ties in the order
    ``priority``."""
    return topk_mask(score, available, selection_count(available, selection_size), priority)


def cs_ucb(num_clients: int, selection_size: int) -> Policy:
    """CS-UCB (Alg. 1): κ = ⌈K/N⌉ random initial rounds, then the top N of eq. (18).

    The initial rounds split a random permutation of the clients into groups of N; the last
    group is completed with κN - K clients drawn without replacement among those already played
    (Alg. 1 line 4), so every client is played at least once. Afterwards each round takes the N
    largest ``y_k + sqrt((N+1) ln t / z_k)``. Should a client be unavailable (the paper's ideal
    scenario has none), the round takes its group's available members first, then other
    available clients in the run's random tie order, so the selection size is always
    ``min(N, |A(t)|)``.
    """
    check_selection_size(num_clients, selection_size)
    kappa = initial_rounds(num_clients, selection_size)
    num_fill = kappa * selection_size - num_clients

    def init(key, hparams) -> CsUcbState:
        del hparams
        k_perm, k_fill, k_tie = jax.random.split(key, 3)
        slot = jnp.argsort(jax.random.permutation(k_perm, num_clients))
        init_round = slot // selection_size
        priority = random_priority(k_tie, num_clients)
        fill = jnp.zeros(num_clients, bool)
        if num_fill:
            played_before_last = init_round < kappa - 1
            scores = jax.random.uniform(k_fill, (num_clients,))
            fill = topk_mask(scores, played_before_last, num_fill, priority)
        return CsUcbState(
            stats=arm_stats_init(num_clients),
            t=jnp.asarray(0, jnp.int32),
            init_round=init_round.astype(jnp.int32),
            init_fill=fill,
            priority=priority,
        )

    def select(key, state: CsUcbState, obs, hparams):
        del key, hparams
        group = (state.init_round == state.t) | (state.init_fill & (state.t == kappa - 1))
        index = ucb_index(state.stats, state.t + 1, selection_size + 1.0)
        score = jnp.where(state.t < kappa, group.astype(index.dtype), index)
        return _top_available(score, obs.available, selection_size, state.priority)

    return Policy(init=init, select=select, update=_learn)


def modified_cs_ucb(num_clients: int, selection_size: int) -> Policy:
    """CS-UCB restricted to the available clients, without queues (Xia et al. §V-C baseline).

    Each round the top ``min(N, |A(t)|)`` available clients by ``y_k + sqrt((N+1) ln t / z_k)``;
    a client never played has an infinite index, which replaces Alg. 1's initial rounds (those
    cannot be scheduled in advance when clients may be unavailable); ties, among them the
    never-played clients, follow the run's random order.
    """
    check_selection_size(num_clients, selection_size)

    def init(key, hparams) -> UcbState:
        del hparams
        return UcbState(
            stats=arm_stats_init(num_clients),
            t=jnp.asarray(0, jnp.int32),
            priority=random_priority(key, num_clients),
        )

    def select(key, state: UcbState, obs, hparams):
        del key, hparams
        index = ucb_index(state.stats, state.t + 1, selection_size + 1.0)
        return _top_available(index, obs.available, selection_size, state.priority)

    return Policy(init=init, select=select, update=_learn)


def cs_ucb_q(num_clients: int, selection_size: int) -> Policy:
    """CS-UCB-Q (Alg. 2): truncated UCB plus fairness queues.

    ``ŷ_k = min(y_k + sqrt(2 ln t / z_k), 1)`` (eq. 26; 1 for a client never played),
    ``D_k(t) = max(D_k(t-1) + c_k - b_k(t-1), 0)`` (eq. 27), and the top ``min(N, |A(t)|)``
    available clients by ``(1 - β) ŷ_k + β D_k(t)`` (eq. 28). Hyperparameters ``beta`` and
    ``fairness`` (c: a scalar for every client or one value per client) are traced. Ties follow
    the run's random order, not the client index: while the confidence bonus lifts every ``ŷ_k``
    to 1 (the first rounds) the scores differ only by the queues, which tie in round 1 and often
    after, so across runs these rounds' selections are uniform over the available clients.
    """
    check_selection_size(num_clients, selection_size)

    def init(key, hparams) -> CsUcbQState:
        del hparams
        stats = arm_stats_init(num_clients)
        return CsUcbQState(
            stats=stats,
            queue=jnp.zeros_like(stats.mean),
            t=jnp.asarray(0, jnp.int32),
            priority=random_priority(key, num_clients),
        )

    def select(key, state: CsUcbQState, obs, hparams):
        del key
        beta = hparams["beta"]
        optimistic = ucb_index(state.stats, state.t + 1, 2.0, cap=1.0)
        score = (1.0 - beta) * optimistic + beta * state.queue
        return _top_available(score, obs.available, selection_size, state.priority)

    def update(state: CsUcbQState, obs, action, feedback, hparams) -> CsUcbQState:
        del obs
        fairness = jnp.broadcast_to(hparams["fairness"], (num_clients,))
        return state._replace(
            stats=_stats_update(state.stats, action, feedback),
            queue=virtual_queue_update(state.queue, fairness, action),
            t=state.t + 1,
        )

    return Policy(init=init, select=select, update=update)


def round_robin(num_clients: int, selection_size: int) -> Policy:
    """Round-robin (Xia et al. §V-B baseline): groups of N clients served in turn.

    The cycle is a random permutation of the clients drawn once per run; round t serves the N
    clients in positions tN … tN + N - 1 (mod K), so with N dividing K the groups are fixed. An
    unavailable client is skipped and the next ones in the cycle take its place, keeping the
    selection size at ``min(N, |A(t)|)``. The ranking (distance along the cycle) never ties: the
    cycle itself is the run's random order, so no tie rule is involved.
    """
    check_selection_size(num_clients, selection_size)

    def init(key, hparams) -> RoundRobinState:
        del hparams
        slot = jnp.argsort(jax.random.permutation(key, num_clients)).astype(jnp.int32)
        return RoundRobinState(slot=slot, t=jnp.asarray(0, jnp.int32))

    def select(key, state: RoundRobinState, obs, hparams):
        del key, hparams
        start = (state.t * selection_size) % num_clients
        distance = (state.slot - start) % num_clients
        return _top_available(-distance, obs.available, selection_size)

    def update(state: RoundRobinState, obs, action, feedback, hparams) -> RoundRobinState:
        del obs, action, feedback, hparams
        return state._replace(t=state.t + 1)

    return Policy(init=init, select=select, update=update)


_REWARD = ("available", "reward")

register(
    PolicySpec(
        "cs_ucb",
        cs_ucb,
        {},
        "CS-UCB: initial rounds, then the top N of a UCB index on the latency reward",
        requires=_REWARD,
    )
)
register(
    PolicySpec(
        "modified_cs_ucb",
        modified_cs_ucb,
        {},
        "CS-UCB over the available clients only, no fairness queues",
        requires=_REWARD,
    )
)
register(
    PolicySpec(
        "cs_ucb_q",
        cs_ucb_q,
        {
            "beta": HParam(0.1, 0.0, 1.0, help="weight β of the fairness queues in eq. (28)"),
            "fairness": HParam(
                0.0, 0.0, 1.0, high_open=True, help="guaranteed selection fraction c_k in [0, 1)"
            ),
        },
        "CS-UCB-Q: truncated UCB plus fairness queues, over the available clients",
        queue_rate="fairness",
        requires=_REWARD,
    )
)
register(
    PolicySpec(
        "round_robin",
        round_robin,
        {},
        "groups of N clients served in turn",
    )
)
