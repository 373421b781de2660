"""Budgeted client-to-edge-server assignment for COCS (Qu et al., problem P2, eq. 10).

One round, one instance (no batch axis); pure, runs under ``jit`` and ``vmap``. Weights and
budgets may be traced; the shapes N (clients) and M (edge servers, ES) are static.

P2: maximise ``Σ weight[n, m]·x[n, m]`` over x ∈ {0, 1}^{N×M} with every client on at most one ES
(10d), only on ESs that cover it (10c) and ``Σ_n cost[n]·x[n, m] ≤ budget[m]`` on every ES (10b).
It is NP-hard (M knapsacks and a matroid; with unit weights it contains bin packing), so both
solvers here run one branch and bound (``_search``) with a fixed budget of search steps, which
keeps them jit-able; ``certified`` says when the result is proven optimal (the search finished).
The budgets are large enough for the search to finish on the rounds of the hfl presets measured
against an exact MILP (``bench/bench_assignment.py``), and a step costs the same whatever the
budget, so under ``vmap`` a batch pays for the steps of its slowest instance only:

* ``cardinality_assignment``: the max-|s| problem of COCS's exploration step (eq. 14);
* ``budgeted_assignment``: general non-negative weights (eqs. 10, 17, 18; the oracles), the
  search started from two incumbents (a density greedy and a cardinality search on the heavy
  pairs);
* ``assignment_value``: the objective of a mask.

The search (``_search``) is depth first over the candidate clients in ascending cost; at depth d
client d goes to one of the ESs that can still take it, or is left out. Three rules keep the tree
small without losing an optimum:

* dominance: leaving client d out forbids every later (no cheaper) client k on an ES m where
  ``weight[k, m] ≤ weight[d, m]`` (replacing k by d on m would cost no more and weigh no less);
  with unit weights this closes every ES that covers d;
* symmetry: two ESs with the same remaining budget and the same threshold, and identical weights
  and coverage for all the clients still to be decided, are interchangeable: only the first one
  (in the option order) is tried;
* bound: a child is entered only if its value plus an upper bound of what the undecided clients
  can add exceeds the best value found. The bound counts how many of the cheapest undecided
  clients fit into each ES (and into the total remaining budget) and multiplies by their largest
  weights (capped by the sum of their best weights); it is updated in O(M) per step, because with
  costs ascending one step changes each count by at most one;
* packing: the fewest undecided clients that could lift the value above the best one must fit,
  and if any j of them fit so do the j cheapest: their total cost is compared with what each ES
  can use of them at most (``_can_pack``: the largest single cost or pair that fits where an ES
  has room for one or two more, the dearest ones elsewhere). Near-perfect packings, where the
  count bound holds but the last clients would leave too much budget unusable, are refuted early.

A step costs a few gathers of O(M) values and one O(N) select (keeping the best path), plus an
O(N)·log N setup, so the search runs inside a vmapped ``lax.scan`` runner; under ``vmap`` the
loop runs until every instance of the batch is done or out of steps (checked every
STEPS_PER_CHECK steps). The plain-loop mirrors ``jfl.reference.milp_assignment.budgeted_numpy``
/ ``cardinality_numpy`` follow it step by step.
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jfl.kernels.batching import batched_like
from jfl.kernels.order import counting_order, counting_rank, sort_order, sorting_rank
from jfl.kernels.reduce import doubling_cumsum, pairwise_sum
from jfl.kernels.reduce import sequential_max as _seq_max
from jfl.kernels.reduce import sequential_min as _seq_min
from jfl.kernels.reduce import sequential_sum as _seq_sum

# A client may join an ES whose remaining budget is short of its cost by at most this fraction of
# the ES's whole budget, so that float rounding of the running spend never rejects a set whose
# exact cost is the budget: the guarantee is Σ_{n on m} c_n ≤ B_m·(1 + BUDGET_RTOL), up to the
# float rounding of that running sum (a few ulps of B_m per client taken).
BUDGET_RTOL = 1e-6

# Default search budgets (loop iterations: one child generated or one backtrack each), chosen with
# bench/bench_assignment.py and the MILP on first rounds of the hfl presets (N = 50, M = 3): with
# unit weights the cardinality search finished on every MNIST round within 256 steps, and within
# 8192 on 10,499 of 10,500 CIFAR rounds (seeds 0-20, 500 each; the other one optimal too); with
# the oracle's success probabilities the weighted search, on 12,000 CIFAR rounds (seeds 0-39, 300
# each), finished on all but 6 within 32768 steps, two of them below the optimum (0.9954 and
# 0.9991 of it); within 16384 steps it left 7 of 3,000 unfinished (seeds 0-9), one at 0.9939. In
# budgeted_assignment COUNT_STEPS go to the cardinality incumbent, BUDGETED_STEPS to the weighted
# search.
CARDINALITY_STEPS = 8192
BUDGETED_STEPS = 32768
COUNT_STEPS = 128

# Above this many clients the default budget of either search is LARGE_STEPS: there a step costs
# O(N) (keeping the best path; 5 µs per instance-step at N = 10^4 against 0.2 µs at N = 50), and
# the search does not finish on rounds of that size anyway.
LARGE_CLIENTS = 256
LARGE_STEPS = 256


def default_steps(num_clients: int, steps: int | None, default: int) -> int:
    """A search's step budget: ``steps`` if given, else ``default`` up to LARGE_CLIENTS clients
    and LARGE_STEPS above."""
    if steps is not None:
        return steps
    return default if num_clients <= LARGE_CLIENTS else LARGE_STEPS


# budgeted_assignment's second incumbent: the most clients on pairs of at least this fraction of
# the largest weight (a cardinality search), which finds the tight packings the greedy misses.
COUNT_THRESHOLD = 0.5

# The search loop checks for termination every this many steps (see ``_search``).
STEPS_PER_CHECK = 16

# In the weighted search an ES comes before "leave the client out" when its weight exceeds
# LAMBDA_SCALE times the critical value density of the surrogate knapsack (all budgets pooled)
# times the client's cost: the first dive then skips light, costly clients.
LAMBDA_SCALE = 0.5

# Up to this many clients the orders come from O(N^2) comparison counting, which beats XLA's sort
# in a vmapped runner on CPU for small sizes; above it, from stable sorts (``_lex_order``).
SMALL_CLIENTS_MAX = 64


class AssignmentResult(NamedTuple):
    mask: jax.Array  # bool[N, M]: client n is assigned to ES m
    certified: jax.Array  # bool[]: True only when ``mask`` is provably optimal


# --------------------------------------------------------------------------------------------
# shared pieces
# --------------------------------------------------------------------------------------------


def _check(weight, cost, available, budget, tiebreak):
    chex.assert_rank([weight, cost, available, budget], [2, 1, 2, {0, 1}])
    chex.assert_equal_shape([weight, available])
    chex.assert_equal_shape_prefix([weight, cost], 1)
    chex.assert_type(available, bool)
    if jnp.ndim(budget) == 1:
        chex.assert_equal_shape_suffix([weight, budget], 1)
    if tiebreak is not None:
        chex.assert_rank(tiebreak, 2)
        chex.assert_equal_shape([weight, tiebreak])


def _prepare(weight, cost, available, budget, tiebreak):
    """Inputs in one float dtype, the capacities with the budget slack, the eligible pairs and
    their clipped weights (0 elsewhere)."""
    dtype = jnp.result_type(weight, cost, budget, jnp.float32)
    weight = jnp.asarray(weight, dtype)
    cost = jnp.asarray(cost, dtype)
    n_clients, n_servers = weight.shape
    capacity = jnp.broadcast_to(jnp.asarray(budget, dtype), (n_servers,)) * (1 + BUDGET_RTOL)
    eligible = (
        jnp.asarray(available, bool)
        & (weight > 0)
        & (cost[:, None] >= 0)
        & jnp.isfinite(cost)[:, None]
        & (cost[:, None] <= capacity[None, :])
    )
    # Clipped so that no sum of N weights overflows (an infinite weight stays the largest).
    limit = jnp.finfo(dtype).max / (4 * (n_clients + 1))
    value = jnp.where(eligible, jnp.minimum(weight, limit), 0).astype(dtype)
    if tiebreak is None:
        tiebreak = jnp.zeros((n_clients, n_servers), dtype)
    else:
        tiebreak = jnp.asarray(tiebreak, dtype)
        tiebreak = jnp.where(jnp.isnan(tiebreak), 0, tiebreak)
    return dtype, value, cost, eligible, capacity, tiebreak


def _lex_order(key, tie=None):
    """Indices by ascending ``key``, then ``tie`` (None: no tie key), then index (both keys
    NaN-free): ``jfl.kernels.order``'s order of ``key``, with the rank of ``tie`` as the
    priority among equal keys."""
    if key.shape[0] <= SMALL_CLIENTS_MAX:
        # (the keys are selected or divided values, not sums: no FMA to evaluate differently in
        # the two operands of a comparison, so no need to materialise them)
        return counting_order(key, priority=None if tie is None else counting_rank(tie))
    return sort_order(key, priority=None if tie is None else sorting_rank(tie))


def _doubling_scan(x, op):
    """Inclusive ``op``-scan along axis 0, ``op`` one of max, "or" and add.

    Float sums by recursive doubling (``doubling_cumsum``: a fixed order of operations, which
    the NumPy mirror repeats). Max, "or" and integer sums are exact in any order: one
    cumulative op, which compiles to far less code.
    """
    if op is jnp.maximum:
        return lax.cummax(x, axis=0)
    if op is jnp.logical_or:
        return lax.cummax(x.astype(jnp.int32), axis=0) > 0
    if op is not jnp.add:
        raise NotImplementedError(f"no scan for {op}")
    if jnp.issubdtype(x.dtype, jnp.integer):
        return lax.cumsum(x, axis=0)
    return doubling_cumsum(x)


def _scan_prefix(x):
    """Prefix sums along axis 0 with a leading zero row: [L+1, ...] (doubling order)."""
    return jnp.concatenate([jnp.zeros_like(x[:1]), _doubling_scan(x, jnp.add)], axis=0)


def _scan_suffix(x, op):
    """``op`` (max, add, or; identity 0) over x[d+1:] for every d: [L, ...]."""
    inclusive = _doubling_scan(x[::-1], op)[::-1]
    return jnp.concatenate([inclusive[1:], jnp.zeros_like(x[:1])], axis=0)


# --------------------------------------------------------------------------------------------
# the search
# --------------------------------------------------------------------------------------------


class _Row(NamedTuple):
    """What the search reads at depth d (of client ``order[d]``): one row of ``_Tables.rows``."""

    cost: jax.Array  # f[]: c_d (+inf past the candidates)
    next_cost: jax.Array  # f[]: c_{d+1} (+inf after the last depth)
    eligible: jax.Array  # bool[M]
    weight: jax.Array  # f[M]
    rank: jax.Array  # i32[M + 1]: place of ES m (m < M) and of "leave out" (m = M) among options
    twin: jax.Array  # bool[P]: the ES pair p of ``_es_pairs`` is alike for every client from d on
    weight_after: jax.Array  # f[M]: the largest weight on ES m after depth d
    best_after: jax.Array  # f[]: Σ of the best weights after depth d
    listed_before: jax.Array  # i32[M]: how many clients ES m may take before depth d
    list_cost: jax.Array  # f[M]: cost of ES m's list up to and including client d
    all_cost: jax.Array  # f[]: cost of all candidates up to and including client d


def _es_pairs(n_servers):
    return [(a, b) for a in range(n_servers) for b in range(a + 1, n_servers)]


def _row_widths(n_servers):
    """Columns of each ``_Row`` field in a packed row."""
    M = n_servers
    return _Row(1, 1, M, M, M + 1, len(_es_pairs(M)), M, 1, M, M, 1)


def _unpack_row(packed, n_servers) -> _Row:
    fields, start = [], 0
    for width in _row_widths(n_servers):
        fields.append(packed[start : start + width])
        start += width
    f = _Row(*fields)
    return f._replace(
        cost=f.cost[0],
        next_cost=f.next_cost[0],
        eligible=f.eligible > 0,
        rank=f.rank.astype(jnp.int32),
        twin=f.twin > 0,
        best_after=f.best_after[0],
        listed_before=f.listed_before.astype(jnp.int32),
        all_cost=f.all_cost[0],
    )


class _Tables(NamedTuple):
    """Per-instance constants of the search (N clients in search order, M ESs)."""

    # f[N, F]: the ``_Row`` of every depth, packed (a step then costs one gather, not eleven)
    rows: jax.Array
    # f[(M + 1)·(N + 2) + N]: cost prefix sums of each ES's list of clients (slot s: its s
    # cheapest; +inf past the list), then of all candidates, then the candidates' costs in search
    # order (ascending; +inf past K): one table, so that the packing test reads it in one gather
    prefix: jax.Array
    count: jax.Array  # i32[]: K, the number of candidates (depths 0 .. K - 1)
    total_cost: jax.Array  # f[]: the candidates' total cost


class _Node(NamedTuple):
    """A node of the search tree: the clients before ``depth`` are decided."""

    budget: jax.Array  # f[M]: remaining budget per ES
    threshold: jax.Array  # f[M]: largest weight on ES m of a client left out (dominance)
    value: jax.Array  # f[]: weight of the clients placed
    fits: jax.Array  # i32[M]: how many of the cheapest undecided clients ES m may take fit into it
    fits_all: jax.Array  # i32[]: how many of the cheapest undecided candidates fit into the pool
    next_option: jax.Array  # i32[]: rank of the next option to try
    depth: jax.Array  # i32[]


class _State(NamedTuple):
    node: _Node
    best_value: jax.Array  # f[]: the incumbent's value
    found: jax.Array  # bool[]: a solution better than the initial value was found
    steps: jax.Array  # i32[]
    done: jax.Array  # bool[]: every branch explored or pruned


# The loop carries the state packed into one float vector, and the stack one packed node per
# row (the integer fields are small counts and ids, exact in floats): under vmap a step is then a
# few XLA:CPU kernels over a handful of buffers, the next state built in one of them (with the
# next node selected field by field, a step took about 1.3 times as long).
def _node_size(n_servers):
    return 3 * n_servers + 4


def _pack(fields, dtype):
    """A ``_Node`` or ``_State`` as one f[...] vector, its fields in order."""
    return jnp.concatenate([jnp.atleast_1d(x).astype(dtype) for x in jax.tree.leaves(fields)])


def _unpack_node(packed, n_servers) -> _Node:
    M = n_servers
    ints = packed[2 * M + 1 : _node_size(M)].astype(jnp.int32)
    return _Node(
        budget=packed[:M],
        threshold=packed[M : 2 * M],
        value=packed[2 * M],
        fits=ints[:M],
        fits_all=ints[M],
        next_option=ints[M + 1],
        depth=ints[M + 2],
    )


def _unpack_state(packed, n_servers) -> _State:
    rest = packed[_node_size(n_servers) :]
    return _State(
        node=_unpack_node(packed, n_servers),
        best_value=rest[0],
        found=rest[1] > 0,
        steps=rest[2].astype(jnp.int32),
        done=rest[3] > 0,
    )


def _search(
    value,
    eligible,
    cost,
    capacity,
    tiebreak,
    init_value,
    order,
    lam,
    prefer,
    step_limit,
    leave_out_last,
):
    """Depth-first branch and bound of P2 with at most ``step_limit`` iterations.

    ``order``: the clients by ascending cost, those with an eligible pair first (``_cost_order``).
    The options' reduced weights ``value - lam·cost`` order the ESs and "leave out" (reduced
    weight 0, or last where ``leave_out_last``); ``prefer`` f[N, M] orders ESs of equal reduced
    weight before the tie-break (larger first). ``lam``, ``step_limit`` and ``leave_out_last``
    are traced, so that one compiled search runs every stage of ``_solve``.

    Returns ``(found, best_path, complete)``: whether a solution better than ``init_value`` was
    found, its ES per client in search order (-1: left out) as i32[N], and whether the search
    finished (every branch explored or pruned).
    """
    dtype = value.dtype
    n_clients, n_servers = value.shape
    t = _search_tables(value, eligible, cost, tiebreak, order, lam, prefer, leave_out_last)
    root = _pack(_root(t, capacity, init_value, n_servers), dtype)
    # The ancestors by depth (row N: where idle instances write), the current node's path (its
    # ES per depth, -1: left out; entries from its depth on are stale) and the best solution's
    # path (-1 from its last depth on): copied when a better solution is found, so that a step
    # costs the same whatever the step budget.
    stack = jnp.zeros((n_clients + 1, _node_size(n_servers)), dtype)
    path = jnp.full((n_clients + 1,), -1, jnp.int32)

    def running(carry):
        return _running(_unpack_state(carry[0], n_servers), step_limit)

    # Under vmap a while loop selects every carried array with each instance's own condition after
    # every iteration; a fixed inner loop of STEPS_PER_CHECK iterations, idle for the instances
    # that are done, pays that copy once per block.
    def block(carry):
        def step(_, c):
            return _step(t, *c, n_servers=n_servers, step_limit=step_limit)

        return lax.fori_loop(0, STEPS_PER_CHECK, step, carry)

    # (the stack and paths start unbatched: see ``batched_like``)
    carry = batched_like((root, stack, path, path), [t.rows, capacity, init_value, step_limit])
    packed, _, _, best_path = lax.while_loop(running, block, carry)
    state = _unpack_state(packed, n_servers)
    return state.found, best_path[:n_clients], state.done


def _search_tables(value, eligible, cost, tiebreak, order, lam, prefer, leave_out_last):
    """``_Tables`` of the search over the clients in ``order``."""
    dtype = value.dtype
    n_clients, n_servers = value.shape
    big = jnp.asarray(jnp.inf, dtype)
    N = n_clients
    K = jnp.sum(jnp.any(eligible, axis=1), dtype=jnp.int32)
    live = jnp.arange(N) < K
    cs = jnp.where(live, cost[order], big)
    E = eligible[order] & live[:, None]
    W = value[order]
    rank = _option_rank(cs, E, W, tiebreak[order], lam, leave_out_last, prefer, order)
    j0, pc, pall = _cost_lists(cs, E, K)
    pairs = _es_pairs(n_servers)
    if pairs:
        same = jnp.stack([(E[:, a] == E[:, b]) & (W[:, a] == W[:, b]) for a, b in pairs], axis=1)
        twin = same & ~_scan_suffix(~same, jnp.logical_or)  # (no later client differs)
    else:
        twin = jnp.zeros((N, 0), bool)
    row = _Row(
        cost=cs,
        next_cost=jnp.concatenate([cs[1:], jnp.full((1,), big)]),
        eligible=E,
        weight=W,
        rank=rank,
        twin=twin,
        weight_after=_scan_suffix(W, jnp.maximum),
        best_after=_scan_suffix(jnp.max(W, axis=1), jnp.add),
        listed_before=j0[:N],
        list_cost=jnp.take_along_axis(pc, (j0[:N] + 1).T, axis=1).T,
        all_cost=pall[1 : N + 1],
    )
    rows = jnp.concatenate([jnp.reshape(f, (N, -1)).astype(dtype) for f in row], axis=1)
    prefix = jnp.concatenate([pc.reshape(-1), pall, cs])
    return _Tables(rows=rows, prefix=prefix, count=K, total_cost=pall[jnp.minimum(K, N)])


def _option_rank(cs, E, W, TB, lam, leave_out_last, prefer, order):
    """i32[N, M + 1]: the place of ES m (m < M) and of "leave out" (m = M) among the options of
    depth d: the ESs by reduced weight W - λ·c (descending), then ``prefer`` (descending), then
    tie-break, then index; "leave out" has reduced weight 0, or comes last."""
    N, M = W.shape
    dtype = W.dtype
    big = jnp.asarray(jnp.inf, dtype)
    skip_red = jnp.where(leave_out_last, -big, jnp.zeros((), dtype))
    red = jnp.where(E, W - lam * cs[:, None], -big)
    okey = jnp.concatenate([red, jnp.broadcast_to(skip_red, (N, 1))], axis=1)
    otie = jnp.concatenate([TB, jnp.full((N, 1), 2, dtype)], axis=1)
    opref = jnp.concatenate([prefer[order], jnp.full((N, 1), -big)], axis=1)
    opt = jnp.arange(M + 1)
    a_k, b_k = okey[:, :, None], okey[:, None, :]
    a_p, b_p = opref[:, :, None], opref[:, None, :]
    a_t, b_t = otie[:, :, None], otie[:, None, :]
    later_index = opt[None, None, :] < opt[None, :, None]
    tie = (b_t < a_t) | ((b_t == a_t) & later_index)
    first = (b_k > a_k) | ((b_k == a_k) & ((b_p > a_p) | ((b_p == a_p) & tie)))
    return jnp.sum(first, axis=2, dtype=jnp.int32)


def _cost_lists(cs, E, K):
    """The count bound's cost tables ``(j0, pc, pall)``: how many clients ES m may take before
    depth d (i32[N + 1, M]), the prefix sums of their costs as ES m's list (f[M, N + 2], slot s:
    its s cheapest, +inf past the list), and those over all candidates (f[N + 2], +inf past K)."""
    N, M = E.shape
    big = jnp.asarray(jnp.inf, cs.dtype)
    pre = _scan_prefix(jnp.where(E, cs[:, None], 0))
    j0 = _scan_prefix(E.astype(jnp.int32))
    covered = j0[N]
    slot = jnp.arange(N + 2)
    position = jnp.where(E, j0[1:], N + 1)  # 1-based slot of client d in its ES's list
    pc = jnp.zeros((M, N + 2), cs.dtype)
    pc = pc.at[jnp.arange(M)[None, :], position].set(pre[1:], mode="drop")
    pc = jnp.where(slot[None, :] <= covered[:, None], pc, big)
    pall = _scan_prefix(jnp.where(jnp.arange(N) < K, cs, 0)[:, None])[:, 0]
    pall = jnp.where(slot <= K, jnp.concatenate([pall, pall[-1:]]), big)
    return j0, pc, pall


def _target(t: _Tables, r):
    """A remaining budget r loosened for the count tests, which compare differences of prefix
    sums with it: their rounding may differ from the budgets' own running sums by a few ulps per
    term, which this slack covers (a looser count is still a valid bound)."""
    slack = 4 * (t.rows.shape[0] + 2) * jnp.finfo(r.dtype).eps
    return r + slack * (jnp.abs(r) + t.total_cost)


def _root(t: _Tables, capacity, init_value, n_servers) -> _State:
    """The search at its root: every ES's whole budget, nothing decided."""
    N, M = t.rows.shape[0], n_servers
    dtype = capacity.dtype
    pc = t.prefix[: M * (N + 2)].reshape(M, N + 2)
    pall = t.prefix[M * (N + 2) : (M + 1) * (N + 2)]
    fits = jnp.sum(pc[:, 1:] <= _target(t, capacity)[:, None], axis=1, dtype=jnp.int32)
    # (an ES with a negative budget adds nothing to the pool)
    pool = _target(t, _seq_sum(jnp.maximum(capacity, 0)))
    zero = jnp.zeros((), jnp.int32)
    node = _Node(
        budget=capacity,
        threshold=jnp.zeros((M,), dtype),
        value=jnp.zeros((), dtype),
        fits=fits,
        fits_all=jnp.sum(pall[1:] <= pool, dtype=jnp.int32),
        next_option=zero,
        depth=zero,
    )
    return _State(
        node=node,
        best_value=jnp.asarray(init_value, dtype),
        found=jnp.zeros((), bool),
        steps=zero,
        done=t.count == 0,
    )


def _running(state: _State, step_limit):
    return ~state.done & (state.steps < step_limit)


def _step(t: _Tables, packed, stack, path, best_path, *, n_servers, step_limit):
    """One step: the current node's next option becomes a child (the next node, unless it is
    pruned), or, where no option is left, a backtrack to the parent. A no-op once done."""
    N, M, dtype = t.rows.shape[0], n_servers, stack.dtype
    state = _unpack_state(packed, M)
    node, step = state.node, state.steps
    active = _running(state, step_limit)
    d = node.depth
    row = _unpack_row(t.rows[jnp.minimum(d, N - 1)], M)
    option, has, leave, onehot = _next_option(t, row, node)
    has = has & active
    child, choice = _child(t, row, node, leave, onehot)
    better = has & (child.value > state.best_value)
    descend = has & (d + 1 < t.count) & (row.next_cost <= _seq_max(child.budget))
    best_value = jnp.where(better, child.value, state.best_value)
    bound = child.value + _upper_bound(row, child)
    j, decided = _needed(best_value - child.value, _seq_max(row.weight_after), N)
    packs = _can_pack(t, child.depth, j, child.budget, child.fits, row.next_cost)
    descend = descend & (bound > best_value) & (packs | ~decided)
    # The current node goes to row d of the stack (with its next option), the child's choice to
    # the path. Every read of the stack comes after the write, so that it is done in place.
    here = node._replace(next_option=option + 1)
    stack = lax.dynamic_update_slice(stack, _pack(here, dtype)[None], (jnp.where(active, d, N), 0))
    path = lax.dynamic_update_slice(path, choice[None], (jnp.where(has, d, N),))
    best_path = jnp.where(better, jnp.where(jnp.arange(N + 1) <= d, path, -1), best_path)
    parent = stack[jnp.maximum(d - 1, 0)]
    # The next node: the child, the same node (next option), or the parent (backtrack); selected
    # packed, so that XLA builds the new state in one kernel.
    following = jnp.where(descend, _pack(child, dtype), jnp.where(has, _pack(here, dtype), parent))
    search = (
        best_value,
        state.found | better,
        step + 1,
        ~has & (d == 0),
    )  # (the rest of ``_State``, in its order)
    new = jnp.concatenate([following, _pack(search, dtype)])
    return jnp.where(active, new, packed), stack, path, best_path


def _next_option(t: _Tables, row: _Row, node: _Node):
    """The node's next option: the first by rank, from ``next_option`` on, whose ES can pay,
    lies above its dominance threshold and is not a later twin of an equal ES (symmetry).
    Returns ``(option, has, leave, onehot)``: its rank (M + 1: none), whether there is one (none
    at a leaf), whether it leaves the client out, and else its ES as bool[M]."""
    M = node.budget.shape[0]
    R, tau, c = node.budget, node.threshold, row.cost
    es_rank = row.rank[:M]
    leaf = (node.depth >= t.count) | (c > _seq_max(R))
    basic = row.eligible & (row.weight > tau) & (c <= R)
    dup = jnp.zeros((M,), bool)
    pairs = _es_pairs(M)
    if pairs:
        # Over all pairs (a, b) at once: a pair alike here marks the later of its two ESs in the
        # option order as a duplicate (``first[m, p]``: ES m is pair p's a; ``second``: its b).
        a, b = (np.array(side) for side in zip(*pairs, strict=True))
        first, second = (side[None, :] == np.arange(M)[:, None] for side in (a, b))
        alike = row.twin & (R[a] == R[b]) & (tau[a] == tau[b]) & basic[a]
        b_later = alike & (es_rank[a] < es_rank[b])
        a_later = alike & (es_rank[b] < es_rank[a])
        dup = jnp.any((second & b_later) | (first & a_later), axis=1)
    ok = basic & ~dup & (es_rank >= node.next_option)
    skip_rank = row.rank[M:]
    ranks = jnp.concatenate(
        [
            jnp.where(ok, es_rank, M + 1),
            jnp.where(skip_rank >= node.next_option, skip_rank, M + 1),
        ]
    )
    option = _seq_min(ranks)
    leave = ranks[M] == option
    onehot = (es_rank == option) & ~leave
    return option, (option <= M) & ~leaf, leave, onehot


def _child(t: _Tables, row: _Row, node: _Node, leave, onehot):
    """The child of ``node`` for the option (``leave`` or the ES ``onehot``), with its counts
    (at most one more client fits where one left the list); and the choice (its ES, -1: left
    out) for the path."""
    N, M = t.rows.shape[0], onehot.shape[0]
    servers = jnp.arange(M, dtype=jnp.int32)
    R, d = node.budget, node.depth
    R2 = R - jnp.where(onehot, row.cost, 0)
    look = t.prefix[
        jnp.concatenate(
            [
                servers * (N + 2) + jnp.minimum(row.listed_before + 1 + node.fits, N + 1),
                (M * (N + 2) + jnp.minimum(d + 1 + node.fits_all, N + 1))[None],
            ]
        )
    ]
    fits = (look[:M] - row.list_cost) <= _target(t, R2)
    fits_all = (look[M] - row.all_cost) <= _target(t, _seq_sum(jnp.maximum(R2, 0)))
    child = _Node(
        budget=R2,
        threshold=jnp.where(leave, jnp.maximum(node.threshold, row.weight), node.threshold),
        value=node.value + _seq_sum(jnp.where(onehot, row.weight, 0)),
        fits=jnp.where(row.eligible, jnp.where(node.fits >= 1, node.fits - 1 + fits, 0), node.fits),
        fits_all=jnp.where(node.fits_all >= 1, node.fits_all - 1 + fits_all, 0),
        next_option=jnp.zeros((), jnp.int32),
        depth=d + 1,
    )
    return child, jnp.where(leave, -1, _seq_sum(jnp.where(onehot, servers, 0)))


def _upper_bound(row: _Row, child: _Node):
    """What the clients after the child's depth can add at most: each ES's count times its
    largest weight, the pooled count times the largest of those, and the sum of their best
    weights."""
    dtype = row.weight_after.dtype
    vn = row.weight_after
    count = jnp.minimum(_seq_sum(child.fits), child.fits_all).astype(dtype)
    by_es = _seq_sum(child.fits.astype(dtype) * vn)
    return jnp.minimum(jnp.minimum(count * _seq_max(vn), by_es), row.best_after)


def _needed(gap, vmax, n_clients):
    """The fewest clients whose weights (each ≤ ``vmax``) could add more than ``gap``, as i32[],
    and whether a failed packing test of that many bounds the gain by ``gap`` (decided)."""
    need = jnp.floor(gap / vmax) + 1
    # (a failed test bounds the gain by (need - 1)·vmax, which rounding may put above the gap)
    decided = (vmax > 0) & (need >= 1) & ((need - 1) * vmax <= gap)
    return jnp.clip(jnp.where(decided, need, 1), 1, n_clients).astype(jnp.int32), decided


def _can_pack(t: _Tables, start, j, budget, fits, cheapest):
    """Whether the j cheapest candidates from depth ``start`` may fit into ESs with remaining
    ``budget``, ES m taking at most ``fits[m]`` of them (False only if they cannot).

    If any j of the undecided clients can be placed, so can the j cheapest, each ES m holding at
    most ``fits[m]`` of them (swap each placed client for the cheapest one of the same rank); so
    ES m uses at most the largest sum of k or fewer of those j costs within its budget, k the
    least of ``fits[m]``, j and how many of them fit alone: the largest single cost that fits
    (k = 1), the larger of it and a bound on the best pair (k = 2: the dearer one fits beside the
    cheapest, the cheaper one within half the budget), the sum of the k dearest (k ≥ 3), each
    capped by the budget. In a near-perfect packing this shows early that the dearest clients
    would leave too much of the budgets unused: with it the max-|s| search finishes the hfl
    CIFAR rounds in a few thousand steps instead of tens of thousands.
    """
    N, M = t.rows.shape[0], budget.shape[0]
    end = jnp.minimum(start + j, N + 1)
    limit = _target(t, budget)
    # How many candidates cost at most each query: ``limit`` (the dearest that fits alone), what
    # the cheapest undecided one leaves (the pair's dearer one) and half (its cheaper one).
    queries = jnp.concatenate([limit, limit - cheapest, limit / 2])
    method = "compare_all" if N <= SMALL_CLIENTS_MAX else "scan"  # (O(N) or O(log N) a query)
    sums_and_costs = t.prefix[M * (N + 2) :]  # (all candidates' prefix sums, then their costs)
    costs = sums_and_costs[N + 2 :]
    below = jnp.searchsorted(costs, queries, side="right", method=method).astype(jnp.int32) - 1
    single, high, half = jnp.split(jnp.minimum(below, end - 1), 3)
    low = jnp.maximum(jnp.minimum(half, high - 1), 0)
    # (no more clients than fit alone: a bound ``fits`` may be loose)
    take = jnp.clip(jnp.minimum(fits, single - start + 1), 0, j)
    # One gather from the prefix sums (first N + 2 entries) and the costs (N + 2 on).
    index = jnp.concatenate(
        [jnp.stack([end, start]), end - take, N + 2 + jnp.concatenate([single, high, low])]
    )
    got = sums_and_costs[jnp.clip(index, 0, 2 * N + 1)]
    total = got[0] - got[1]  # (+inf where fewer than j candidates are left)
    many = jnp.minimum(limit, got[0] - got[2 : 2 + M])
    one, dearer, cheaper = jnp.split(got[2 + M :], 3)
    two = jnp.maximum(one, jnp.minimum(limit, dearer + cheaper))
    usable = jnp.where(take == 1, one, jnp.where(take == 2, two, many))
    return total <= _target(t, _seq_sum(jnp.where(take >= 1, usable, 0)))


def _cost_order(cost, cand, tiebreak):
    """The search order: the candidate clients by ascending cost, then smallest tie-break value
    (``tiebreak`` None: none), then index; the others after them."""
    return _lex_order(jnp.where(cand, cost, jnp.inf), _client_tie(tiebreak))


def _client_tie(tiebreak):
    # (without a tie-break, equal keys go by index: an order by one key, which costs less)
    return None if tiebreak is None else jnp.min(tiebreak, axis=1)


def _first_of(order, first):
    """``order`` with the entries where ``first`` (indexed by client) moved to the front, both
    parts keeping their relative order (a stable partition, O(N))."""
    flag = first[order].astype(jnp.int32)
    front = jnp.cumsum(flag) - flag
    back = jnp.sum(flag) + jnp.cumsum(1 - flag) - (1 - flag)
    position = jnp.where(flag > 0, front, back)
    return jnp.zeros_like(order).at[position].set(order, unique_indices=True)


def _density_order(value, eligible, cost, tiebreak):
    """The clients by descending best density max_m weight / cost (ties: smallest tie-break
    value, ``tiebreak`` None: none, then index), the others after them; and the densities."""
    best_w = jnp.max(value, axis=1)
    cand = jnp.any(eligible, axis=1)
    density = jnp.where(cand, best_w / jnp.maximum(cost, jnp.finfo(value.dtype).tiny), -jnp.inf)
    return _lex_order(-density, _client_tie(tiebreak)), density


def _critical_density(by_density, density, eligible, cost, capacity):
    """Density of the first client (in density order) that overflows the pooled budget of the
    ESs (0 if everybody fits): the price of budget in the surrogate knapsack."""
    cand = jnp.any(eligible, axis=1)[by_density]
    spent = _scan_prefix(jnp.where(cand, cost[by_density], 0)[:, None])[1:, 0]
    over = (spent > _seq_sum(jnp.maximum(capacity, 0))) & cand
    return jnp.where(jnp.any(over), density[by_density][jnp.argmax(over)], 0)


def _path_mask(path, order, n_servers):
    mask_sorted = path[:, None] == jnp.arange(n_servers, dtype=path.dtype)[None, :]
    return jnp.zeros(mask_sorted.shape, bool).at[order].set(mask_sorted, unique_indices=True)


def _path_value(value, path, order):
    """Σ of the chosen weights along a search path, summed by pairwise halving in search order
    (the mirror's order)."""
    rows = value[order]
    index = jnp.maximum(path, 0).astype(jnp.int32)[:, None]
    chosen = jnp.where(path >= 0, jnp.take_along_axis(rows, index, 1)[:, 0], 0)
    return pairwise_sum(chosen)


def _all_best(mask, value):
    """Every client with a positive weight sits on an ES of largest weight: the value is then
    the upper bound Σ_n max_m weight[n, m] and the mask optimal."""
    best = jnp.max(value, axis=1)
    chosen = jnp.max(jnp.where(mask, value, 0), axis=1)
    return jnp.all(chosen == best)


def _density_greedy(value, eligible, cost, capacity, tiebreak, order):
    """Clients in ``order`` (``_density_order``), each to the heaviest ES that can still pay for
    it (ties: tie-break, then index). Returns ``(mask, value)``."""
    n_servers = value.shape[1]
    dtype = value.dtype

    def step(carry, x):
        left, total = carry
        w, e, c, tb = x
        can = e & (c <= left)
        key = jnp.where(can, w, -jnp.inf)
        top = _seq_max(key)
        pick_tb = jnp.where(can & (key == top), tb, jnp.inf)
        m = jnp.argmin(pick_tb)
        take = jnp.any(can)
        hit = take & (jnp.arange(n_servers) == m)
        left = jnp.where(hit, left - c, left)
        total = total + _seq_sum(jnp.where(hit, w, 0))
        return (left, total), jnp.where(take, m, -1)

    xs = (value[order], eligible[order], cost[order], tiebreak[order])
    (_, total), chosen = lax.scan(step, (capacity, jnp.zeros((), dtype)), xs)
    return _path_mask(chosen.astype(dtype), order, n_servers), total


# --------------------------------------------------------------------------------------------
# public solvers
# --------------------------------------------------------------------------------------------


def cardinality_assignment(
    cost,
    available,
    budget,
    tiebreak=None,
    *,
    max_steps: int | None = None,
) -> AssignmentResult:
    """The most clients that the budgets admit: COCS's exploration step, eq. (14).

    maximise the number of assigned clients, each on at most one ES (10d) that covers it (10c),
    with ``Σ_{n on m} cost[n] ≤ budget[m]`` on every ES (10b): P2 with weight 1 on every covered
    pair. Branch and bound (see the module docstring) over the covered clients in ascending cost,
    at most ``max_steps`` iterations; the first dive is the cheapest-first greedy.

    Exactness: the result is optimal whenever ``certified`` is True: the search finished within
    ``max_steps``, or every covered client got an ES. The problem contains bin packing (is there
    room for the k cheapest clients in M budgets?), and the hard rounds are near-perfect packings
    whose total slack is a fraction of a percent of the budgets, which the search's packing test
    refutes early: with M = 3 it finished within 256 steps on every round measured of the hfl
    MNIST preset, and within the default 8192 on 10,499 of 10,500 CIFAR rounds (N = 50), the
    other one optimal too (``certified`` False there). Under ``vmap`` a batch runs until its
    slowest instance is done.

    Budgets are compared with the relative slack ``BUDGET_RTOL``: the result satisfies
    ``Σ_{n on m} cost[n] ≤ budget[m]·(1 + 1e-6)`` up to float rounding.

    Ties: among equally good choices the order is by ``tiebreak`` (clients of equal cost by their
    smallest tie-break value, ESs by the pair's value), then by index; with ``tiebreak=None`` by
    index alone (deterministic). A policy passes ``jfl.prng.uniform(key, (N, M))`` (JAX's uniform
    bits, drawn flat) so that equal choices are not settled by client or ES index.

    Args:
      cost: f[N] cost c_n ≥ 0 of each client, the same on every ES (negative, NaN or infinite:
        never chosen).
      available: bool[N, M] pairs that may be chosen (coverage, or the pairs to explore).
      budget: f[M] per-ES budget B_m (a scalar is broadcast), possibly traced.
      tiebreak: optional f[N, M] values in [0, 1) that order equal choices.
      max_steps: static search budget (loop iterations; default CARDINALITY_STEPS, or
        LARGE_STEPS above LARGE_CLIENTS clients).

    Returns:
      ``AssignmentResult(mask, certified)``: ``mask`` bool[N, M] with at most one ES per client.
    """
    chex.assert_type(available, bool)
    weight = jnp.ones(jnp.shape(available), jnp.result_type(cost, budget, jnp.float32))
    _check(weight, cost, available, budget, tiebreak)
    first_steps = default_steps(weight.shape[0], max_steps, CARDINALITY_STEPS)
    solution = _solve(
        cost, budget, tiebreak, available, None, first_steps=first_steps, count_steps=0, max_steps=0
    )
    return solution.first


def budgeted_assignment(
    weight,
    cost,
    available,
    budget,
    tiebreak=None,
    *,
    max_steps: int | None = None,
    count_steps: int = COUNT_STEPS,
) -> AssignmentResult:
    """Solution of P2 (eq. 10): clients to edge servers under per-ES budgets.

    maximise ``Σ_{(n,m) chosen} weight[n, m]`` over assignments with every client on at most one
    ES (10d), only on ESs that cover it (10c), and ``Σ_{n on m} cost[n] ≤ budget[m]`` for every ES
    (10b). With ``weight`` the (estimated) success probabilities this is the strongly convex
    utility μ = (1/M)·Σ X̂ of eq. (8) up to the factor 1/M, as in COCS's exploitation phase
    (eqs. 17-18) and the oracles; the non-convex HFL utility sqrt((1/M)·Σ X̂) (P3, eq. 20) is a
    monotone transform of the same objective and has the same maximisers.

    Algorithm, three stages:

    1. density greedy: clients by descending ``max_m weight / cost``, each to the heaviest ES
       that can still pay (one sort, one ``lax.scan`` over the clients): the first incumbent;
    2. cardinality incumbent: ``cardinality_assignment``'s search, ``count_steps`` steps, on the
       pairs whose weight is at least ``COUNT_THRESHOLD`` (half) of the largest, heavier ESs first
       among equal options. It finds the tight packings (two or three clients whose costs just
       fill a budget) that greedy orders and local moves miss; kept if it weighs more;
    3. the weighted branch and bound of the module docstring, ``max_steps`` steps, from the
       better incumbent. ES options are tried by reduced weight ``weight - λ·cost``, with λ half
       the critical value density of the pooled-budget knapsack; leaving a client out comes
       before the ESs where that is negative.

    Exactness: optimal whenever ``certified`` is True (the search of stage 3 finished, or every
    client with a positive covered weight sits on an ES of largest weight). Otherwise the best
    assignment found within ``max_steps``. On the hfl presets' rounds with the oracle's success
    probabilities (N = 50, M = 3, first rounds against ``scipy.optimize.milp``,
    ``bench/bench_assignment.py``) the search proved the optimum of every MNIST round; the CIFAR
    rounds, whose budgets hold 4-7 clients, are the hard ones: within the default 32768 steps it
    finished on 11,994 of 12,000, and the worst of the others reached 0.9954 of the optimum
    (16384 steps: 0.9939 on one of 3,000). Under ``vmap`` a batch runs until its slowest instance
    is done.

    Budgets are compared with the relative slack ``BUDGET_RTOL``: the result satisfies
    ``Σ_{n on m} cost[n] ≤ budget[m]·(1 + 1e-6)`` up to float rounding. Pairs with weight ≤ 0
    (or NaN) are never chosen; infinite weights are clipped to ``finfo.max / (4 (N + 1))``.

    Ties: as in ``cardinality_assignment``, by ``tiebreak`` then by index.

    Args:
      weight: f[N, M] value of each client–ES pair (≥ 0).
      cost: f[N] cost c_n ≥ 0 of each client, the same on every ES (negative, NaN or infinite:
        never chosen).
      available: bool[N, M] coverage: client n may join ES m.
      budget: f[M] per-ES budget B_m (a scalar is broadcast), possibly traced.
      tiebreak: optional f[N, M] values in [0, 1) that order equal choices.
      max_steps: static search budget of stage 3 (loop iterations; default BUDGETED_STEPS, or
        LARGE_STEPS above LARGE_CLIENTS clients).
      count_steps: static search budget of stage 2.

    Returns:
      ``AssignmentResult(mask, certified)``: ``mask`` bool[N, M] with at most one ES per client.
    """
    weight = jnp.asarray(weight)
    _check(weight, cost, available, budget, tiebreak)
    solution = _solve(
        cost,
        budget,
        tiebreak,
        None,
        (weight, available),
        first_steps=0,
        count_steps=count_steps,
        max_steps=default_steps(weight.shape[0], max_steps, BUDGETED_STEPS),
    )
    return solution.second


def two_phase_assignment(
    cost,
    first,
    weight,
    available,
    budget,
    tiebreak=None,
    *,
    first_steps: int | None = None,
    max_steps: int | None = None,
    count_steps: int = COUNT_STEPS,
) -> tuple[AssignmentResult, AssignmentResult]:
    """The most pairs of ``first`` that the budgets admit, then the heaviest pairs of ``weight``
    on ``available`` in the budget that they leave: COCS's exploration (eqs. 14-15) then its
    exploitation (eqs. 16-18), in one program.

    The same as ``cardinality_assignment(cost, first, budget, tiebreak)`` followed by
    ``budgeted_assignment(weight, cost, available, budget - spent, tiebreak)``, with ``spent``
    the cost of the first phase's clients on each ES (``Σ_n cost[n]·first_mask[n, m]``), and
    the same results; its three searches are the iterations of one loop, so that it compiles
    one search instead of two. A pair may be in both ``first`` and ``available``; the caller
    keeps the phases' clients apart (COCS exploits only clients with no pair to explore).

    Args:
      cost: f[N] cost c_n of each client, the same on every ES.
      first: bool[N, M] the pairs of the first phase (unit weights).
      weight: f[N, M] value of each pair in the second phase (≥ 0).
      available: bool[N, M] the pairs of the second phase.
      budget: f[M] per-ES budget B_m (a scalar is broadcast), possibly traced.
      tiebreak: optional f[N, M] values in [0, 1) that order equal choices (both phases).
      first_steps, max_steps, count_steps: static search budgets of the first phase, and of the
        second phase's weighted and count searches (the defaults of ``cardinality_assignment``
        and ``budgeted_assignment``).

    Returns:
      ``(first_result, second_result)``, each an ``AssignmentResult``.
    """
    weight = jnp.asarray(weight)
    _check(weight, cost, available, budget, tiebreak)
    chex.assert_type(first, bool)
    chex.assert_equal_shape([weight, first])
    solution = _solve(
        cost,
        budget,
        tiebreak,
        first,
        (weight, available),
        first_steps=default_steps(weight.shape[0], first_steps, CARDINALITY_STEPS),
        count_steps=count_steps,
        max_steps=default_steps(weight.shape[0], max_steps, BUDGETED_STEPS),
    )
    return solution.first, solution.second


# What ``_solve`` searches in each iteration of its loop: a max-|s| problem (weight 1 on its
# pairs), and a weighted problem's two searches: its cardinality incumbent on the heavy pairs,
# then the weighted search.
_CARDINALITY, _COUNT, _WEIGHTED = 0, 1, 2


class _Solution(NamedTuple):
    """``_solve``'s result: each phase's pairs and whether they are proven optimal."""

    first: AssignmentResult  # the max-|s| phase (no pairs where there is none)
    second: AssignmentResult  # the weighted phase, in the budget the first one left


class _Carry(NamedTuple):
    first: jax.Array  # bool[N, M]: the max-|s| phase's pairs
    first_certified: jax.Array  # bool[]
    mask: jax.Array  # bool[N, M]: the weighted phase's best pairs so far
    value: jax.Array  # f[]: their weight
    certified: jax.Array  # bool[]


def _solve(cost, budget, tiebreak, first, second, *, first_steps, count_steps, max_steps):
    """Up to two phases of P2 through one compiled search: the most pairs of ``first`` (bool[N, M]
    or None) that the budgets admit, then the heaviest pairs of ``second`` (``(weight, available)``
    or None) in the budget that the first phase leaves.

    The phases' searches are the iterations of one loop (``_CARDINALITY`` with ``first_steps``,
    then ``_COUNT`` with ``count_steps`` and ``_WEIGHTED`` with ``max_steps``), each setting up
    its problem from the loop's carry, so that every solver, and a policy that explores then
    exploits, compiles one search. The weighted phase starts from the better of a density greedy
    and the count search (``budgeted_assignment``'s stages).
    """
    order_ties = tiebreak is not None
    weights = [] if second is None else [jnp.asarray(second[0])]
    dtype = jnp.result_type(cost, budget, jnp.float32, *weights)
    shape = jnp.shape(first if second is None else second[1])
    unit = jnp.ones(shape, dtype)
    weight2 = unit if second is None else jnp.asarray(second[0], dtype)
    available2 = jnp.zeros(shape, bool) if second is None else jnp.asarray(second[1], bool)
    available1 = jnp.zeros(shape, bool) if first is None else jnp.asarray(first, bool)
    kinds = ([] if first is None else [_CARDINALITY]) + (
        [] if second is None else [_COUNT, _WEIGHTED]
    )
    limits = {_CARDINALITY: first_steps, _COUNT: count_steps, _WEIGHTED: max_steps}
    xs = (jnp.asarray(kinds, jnp.int32), jnp.asarray([limits[k] for k in kinds], jnp.int32))
    cost = jnp.asarray(cost)

    def search(carry: _Carry, x):
        kind, step_limit = x
        in_first = kind == _CARDINALITY
        spent = jnp.sum(jnp.where(carry.first, cost[:, None], 0), axis=0)
        _, value, cost_s, eligible, capacity, tb = _prepare(
            jnp.where(in_first, unit, weight2),
            cost,
            jnp.where(in_first, available1, available2),
            jnp.where(in_first, budget, budget - spent),
            tiebreak,
        )
        ties = tb if order_ties else None
        by_cost = _cost_order(cost_s, jnp.any(eligible, axis=1), ties)
        start_mask, start_value, lam = carry.mask, carry.value, jnp.zeros((), dtype)
        if second is not None:
            # The weighted phase's first incumbent (before its count search), and λ of its
            # reduced weights (for its weighted search). ``kind`` is the same for every instance
            # of a batch, so that under ``vmap`` these stay conditionals: run only where needed.
            by_density, density = _density_order(value, eligible, cost_s, ties)

            def greedy(_):
                return _density_greedy(value, eligible, cost_s, capacity, tb, by_density)

            def price(_):
                critical = _critical_density(by_density, density, eligible, cost_s, capacity)
                return LAMBDA_SCALE * critical

            start_mask, start_value = lax.cond(
                kind == _COUNT, greedy, lambda _: (start_mask, start_value), None
            )
            lam = lax.cond(kind == _WEIGHTED, price, lambda _: lam, None)
        # The count searches: the most clients on the pairs of at least COUNT_THRESHOLD of the
        # largest weight (all of them with unit weights), heavier ESs first, "leave out" last.
        counting = kind != _WEIGHTED
        good = eligible & (value >= COUNT_THRESHOLD * jnp.max(value))
        order = jnp.where(counting, _first_of(by_cost, jnp.any(good, axis=1)), by_cost)
        found, path, complete = _search(
            jnp.where(counting, good.astype(dtype), value),
            jnp.where(counting, good, eligible),
            cost_s,
            capacity,
            tb,
            jnp.where(counting, jnp.zeros((), dtype), start_value),
            order,
            jnp.where(counting, jnp.zeros((), dtype), lam),
            jnp.where(counting, value, 0),
            step_limit,
            counting,
        )
        found_mask = _path_mask(path, order, shape[1]) & found
        # The weighted search records only solutions better than its incumbent; the count
        # search's is kept if it weighs more than the greedy's.
        path_value = _path_value(value, path, order)
        use = found & ((kind == _WEIGHTED) | (path_value > start_value))
        mask = jnp.where(use, found_mask, start_mask)
        certified = complete | _all_best(mask, value)
        return _Carry(
            first=jnp.where(in_first, found_mask, carry.first),
            first_certified=jnp.where(in_first, certified, carry.first_certified),
            mask=jnp.where(in_first, carry.mask, mask),
            value=jnp.where(in_first, carry.value, jnp.where(use, path_value, start_value)),
            certified=jnp.where(kind == _WEIGHTED, certified, carry.certified),
        ), None

    none = jnp.zeros(shape, bool)
    start = _Carry(none, jnp.ones((), bool), none, jnp.zeros((), dtype), jnp.ones((), bool))
    # (one trace of the searches under vmap: see ``batched_like``)
    start = batched_like(start, [cost, budget, tiebreak, weight2, available1, available2])
    out, _ = lax.scan(search, start, xs)
    return _Solution(
        first=AssignmentResult(out.first, out.first_certified),
        second=AssignmentResult(out.mask, out.certified),
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
