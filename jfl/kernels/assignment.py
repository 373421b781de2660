"""Budgeted client-to-edge-server assignment for COCS (Qu et al., problem P2, eq. 10).

One round, one instance (no batch axis); pure, runs under ``jit`` and ``vmap``. Weights and
budgets may be traced; the shapes N (clients) and M (edge servers, ES) are static.
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
from jax import lax

from jfl.kernels.order import counting_order, materialise, sort_order
from jfl.kernels.reduce import pairwise_sum

# A client may join an ES whose remaining budget is short of its cost by at most this fraction of
# the ES's whole budget, so that float rounding of the running spend never rejects a set whose
# exact cost is the budget: the guarantee is Σ_{n on m} c_n ≤ B_m·(1 + BUDGET_RTOL), up to the
# float rounding of that running sum (a few ulps of B_m per client taken).
BUDGET_RTOL = 1e-6

# Up to this many pairs N·M the density order comes from O((NM)^2) comparison counting, which
# beats XLA's sort in a vmapped runner on CPU for small sizes (measured on a 2-core CPU, batch 1024:
# 0.5 vs 4.8 ms at 24 pairs, 3 vs 10 ms at 60, but 26 vs 15 ms at 96); above it, one stable sort.
SMALL_PAIRS_MAX = 64


class AssignmentResult(NamedTuple):
    mask: jax.Array  # bool[N, M]: client n is assigned to ES m
    certified: jax.Array  # bool[]: True only when ``mask`` is provably optimal


def budgeted_assignment(weight, cost, available, budget, tiebreak=None) -> AssignmentResult:
    """Greedy solution of P2 (eq. 10): clients to edge servers under per-ES budgets.

    maximise ``Σ_{(n,m) chosen} weight[n, m]`` over assignments with every client on at most one
    ES (10d), only on ESs that cover it (10c), and ``Σ_{n on m} cost[n] ≤ budget[m]`` for every ES
    (10b). With ``weight`` the (estimated) success probabilities this is the strongly convex
    utility μ = (1/M)·Σ X̂ of eq. (8) up to the factor 1/M, as solved in COCS's exploitation phase
    (eq. 18); with weight 1 on the pairs to explore it serves the cardinality problem of the
    exploration phase (eq. 14), cheapest clients first. The non-convex HFL utility
    sqrt((1/M)·Σ X̂) (P3, eq. 20) is a monotone transform of the same linear objective and has
    the same maximisers.

    P2 is NP-hard (M knapsacks and a matroid). Algorithm:

    1. Greedy by value density: the covered pairs with ``weight > 0`` (others are never chosen)
       in descending ``weight / cost``, ties to the lower client index, then the lower ES index;
       a pair is taken if its client is still free and its ES's remaining budget covers the cost.
       One sort of the N·M pair keys, then a ``lax.scan`` over the pairs in that order.
    2. Modified-greedy fix (as for a single knapsack): for each ES in turn, if one free client
       that it covers and could afford with its whole budget has more weight than everything the
       ES took, the ES takes that client alone instead. Each swap strictly raises the objective
       and keeps the assignment feasible.

    Budgets are compared with a relative slack of ``BUDGET_RTOL`` = 1e-6 (see its comment): the
    result satisfies ``Σ_{n on m} cost[n] ≤ budget[m]·(1 + 1e-6)`` up to float rounding.

    ``certified`` is True when every client with a positive covered weight sits on an ES where
    its weight is largest: the value then equals the upper bound ``Σ_n max_m weight[n, m]`` and
    the assignment is optimal (always the case when the budgets can pay for everybody). False
    means "not proven", not "suboptimal".

    Cost: O(NM log NM) for the sort (O((NM)^2) elementwise comparisons when NM ≤ 64), O(NM) for
    the scan, O(NM) for the fix.

    Args:
      weight: f[N, M] value of each client–ES pair (≥ 0; pairs with weight ≤ 0 or NaN are
        never chosen).
      cost: f[N] cost c_n > 0 of each client, the same on every ES (a client with a negative or
        NaN cost is never chosen).
      available: bool[N, M] coverage: client n may join ES m.
      budget: f[M] per-ES budget B_m (a scalar is broadcast), possibly traced.

    Returns:
      ``AssignmentResult(mask, certified)``: ``mask`` bool[N, M] with at most one ES per client.
    """
    weight = jnp.asarray(weight)
    if tiebreak is not None:
        # Interim: equal densities are ordered by ``tiebreak`` (then by pair index).
        chex.assert_equal_shape([weight, tiebreak])
    chex.assert_rank([weight, cost, available, budget], [2, 1, 2, {0, 1}])
    chex.assert_equal_shape([weight, available])
    chex.assert_equal_shape_prefix([weight, cost], 1)
    chex.assert_type(available, bool)
    if jnp.ndim(budget) == 1:
        chex.assert_equal_shape_suffix([weight, budget], 1)
    dtype = jnp.result_type(weight, cost, budget, jnp.float32)
    weight = weight.astype(dtype)
    cost = jnp.asarray(cost, dtype)
    available = jnp.asarray(available, bool)
    n_clients, n_servers = weight.shape
    budget = jnp.broadcast_to(jnp.asarray(budget, dtype), (n_servers,))
    capacity = budget * (1 + BUDGET_RTOL)

    # Cost < 0 or NaN is outside the documented range; excluding it keeps NaN out of the keys.
    eligible = available & (weight > 0) & (cost[:, None] >= 0)
    # Sort key -density ≤ 0 (clipped to be finite: an infinite weight or a zero cost would give
    # -inf); ineligible pairs get +1 and go last. Pair p = n·M + m (row-major), so an order that
    # is stable in p breaks ties by client, then by ES.
    density = jnp.minimum(weight / cost[:, None], jnp.finfo(dtype).max)
    key = jnp.where(eligible, -density, 1).reshape(-1)
    if tiebreak is not None:
        tb = jnp.asarray(tiebreak, dtype).reshape(-1)
        _, _, order = lax.sort((key, tb, jnp.arange(key.shape[0])), num_keys=2, is_stable=True)
    elif key.shape[0] <= SMALL_PAIRS_MAX:
        # materialised: the key's producer is evaluated once, not once per compared operand
        order = counting_order(materialise(key))
    else:
        order = sort_order(key)
    client_sorted = order // n_servers
    server_sorted = order % n_servers
    xs = (client_sorted, server_sorted, cost[client_sorted], eligible.reshape(-1)[order])

    def step(carry, x):
        client_taken, budget_left = carry
        n, m, c, ok = x
        take = ok & ~client_taken[n] & (c <= budget_left[m])
        client_taken = client_taken.at[n].set(client_taken[n] | take)
        budget_left = budget_left.at[m].set(jnp.where(take, budget_left[m] - c, budget_left[m]))
        return (client_taken, budget_left), take

    init = (jnp.zeros(n_clients, bool), capacity)
    _, take_sorted = lax.scan(step, init, xs)
    mask = jnp.zeros(n_clients * n_servers, bool).at[order].set(take_sorted, unique_indices=True)
    mask = mask.reshape(n_clients, n_servers)

    # Modified-greedy fix, one ES after the other (a swap frees clients for the later ESs). M is
    # static and small in HFL; the loop unrolls into M O(N) steps.
    affordable = eligible & (cost[:, None] <= capacity[None, :])
    free = ~jnp.any(mask, axis=1)
    for m in range(n_servers):
        column = mask[:, m]
        candidate = jnp.where(free & affordable[:, m], weight[:, m], -jnp.inf)
        best = jnp.argmax(candidate)  # ties to the lower client index
        swap = candidate[best] > pairwise_sum(jnp.where(column, weight[:, m], 0))
        new_column = jnp.where(swap, jnp.arange(n_clients) == best, column)
        free = (free | column) & ~new_column
        mask = mask.at[:, m].set(new_column)

    best_weight = jnp.max(jnp.where(eligible, weight, 0), axis=1)
    chosen_weight = jnp.max(jnp.where(mask, weight, 0), axis=1)
    certified = jnp.all(chosen_weight == best_weight)
    return AssignmentResult(mask=mask, certified=certified)


def cardinality_assignment(cost, available, budget, tiebreak=None) -> AssignmentResult:
    """Max-cardinality assignment (eq. 14): weight 1 on every available pair (interim greedy)."""
    available = jnp.asarray(available, bool)
    return budgeted_assignment(
        available.astype(jnp.result_type(cost, jnp.float32)), cost, available, budget, tiebreak
    )


def assignment_value(mask, weight) -> jax.Array:
    """Σ weight over the chosen pairs (P2's objective without the 1/M factor of eq. 8).

    Summed by pairwise halving, so the value does not depend on the batch it is computed in.

    Args:
      mask: bool[N, M] chosen pairs.
      weight: f[N, M] value of each pair.
    """
    weight = jnp.asarray(weight)
    chex.assert_rank([mask, weight], 2)
    chex.assert_equal_shape([mask, weight])
    return pairwise_sum(jnp.where(mask, weight, 0).reshape(-1))
