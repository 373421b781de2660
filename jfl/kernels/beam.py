"""Fixed-width beam search for P2, the per-round client-to-ES assignment (Qu et al., eq. 10).

One instance (no batch axis); pure, runs under ``jit`` and ``vmap``; N (clients), M (edge
servers, ES) and the beam width are static. It complements ``budgeted_assignment``
(``jfl.kernels.assignment``), whose branch and bound has a fixed step budget and, on the CIFAR
preset's rounds with probability-like weights, sometimes stops far from the optimum: the caller
runs the beam where that search did not finish (``needed = ~certified``) and keeps the better
of the two answers.

The search visits the candidate clients (those with an eligible pair) in ascending cost, one
depth per client. The beam holds up to ``width`` partial assignments (slots), each with its
remaining budget per ES, its value and a few counts. At depth d every live slot has up to M + 1
children: leave client d out, or put it on ES m if the pair is eligible and ``c_d ≤ R_m`` (the
running-subtraction test of ``budgeted_assignment``'s search, so every result is feasible). A
child is scored by an optimistic completion,

    score = (value + PB[d, q]) + spare · ALPHA / (mean cost of the candidates after d),

where q estimates how many of the remaining clients the child can still take: the smallest of
Σ_m k_m, k_all and min_m (k_pool,m + k_m), with k_m how many of the cheapest remaining clients
that ES m may take fit into R_m, k_all how many of the cheapest remaining clients fit into the
pooled budget Σ_m max(R_m, 0), and k_pool,m how many fit into the pooled budget of the other
ESs. PB[d, q] is the sum of the q largest remaining best weights ``max_m value[n, m]`` and
``spare`` the pooled budget left after the q cheapest remaining clients: a small reward for
unspent budget, which separates children of equal count. The ``width`` best children by score
(``lax.top_k``) form the next beam; the answer is the live slot of largest value after the last
client, traced back through a log of the choices.

Counts, as in ``_search`` of ``jfl.kernels.assignment``: with costs ascending a step changes
each count by at most one, so a child needs one "does one more client fit" test per count (the
parent's lookup in prefix sums of the costs) instead of a search. A step changes at most one ES,
so these tests are made per slot for the two cases "ES m keeps its budget" and "ES m takes
client d" (and for the pooled budgets, "client d stays out" and "client d joins an ES"), and a
child only selects among them. Definitions that this fixes (the NumPy mirror repeats them): the
pooled budget of a child that takes client d is the parent's minus c_d, and the other ESs'
pooled budget of the receiving ES is the parent's (the same number in exact arithmetic).

Ties: ``lax.top_k`` puts equal scores in index order, and the children are laid out slot by
slot, each slot's children as "leave out" and then its ESs by ascending ``tiebreak`` of the
client's pair (then ES index). Equal scores are thus settled by the parent's place in the beam
(itself the result of earlier such choices) and then by the tie-break, never by ES index alone
unless the tie-break values are equal too. With a random tie-break the search is equivariant in
distribution under a permutation of the ESs.

Cost: per depth O(width·M²) integer and O(width·M) float elementwise operations, 2M + 2 gathers
per slot and one ``top_k`` over width·(M + 1) scores (on XLA:CPU about half the time: its TopK
runs the batch serially); the setup is O(N²) elementwise (no scatters, which are slow on
XLA:CPU). All N depths run, those past the K candidates as no-ops, in fixed-trip loops, so that
under ``vmap`` nothing is selected per iteration. The whole search is one ``lax.while_loop`` of
at most one iteration that an instance with ``needed`` False skips: under ``vmap`` a batch where
no instance needs the beam costs next to nothing (a ``lax.cond`` would run it anyway).

``tests/kernels/test_beam.py`` holds a NumPy mirror of this module that follows it operation by
operation in the inputs' float dtype.
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
from jax import lax

from jfl.kernels.reduce import prefix_sums as _prefix
from jfl.kernels.reduce import sequential_min as _seq_min
from jfl.kernels.reduce import sequential_sum as _seq_sum

# Weight of the spare-budget term in a child's score (the NumPy prototype's choice: it separates
# children of equal count and bound without overriding a difference in weight).
ALPHA = 0.5

# Beam width (slots kept per depth). Measured with the better of the beam and
# budgeted_assignment against the MILP on the hfl presets' rounds with probability-like weights
# (N = 50, M = 3; 500 rounds per file, float32): width 128 gives a mean ratio ≥ 0.9997 and a
# worst ≥ 0.98 on every CIFAR file (≥ 0.998 on MNIST); width 96 and 64 drop to a worst of about
# 0.966 and 0.957 on CIFAR. Time per batch of 1024 (jit(vmap), 2-core CPU): about 1-1.4 s at
# width 128 and 0.6 s at width 64, half of it in XLA's TopK.
DEFAULT_WIDTH = 128


class BeamResult(NamedTuple):
    mask: jax.Array  # bool[N, M]: client n is assigned to ES m
    total: jax.Array  # f[]: the value of ``mask``, summed depth by depth (0 when not needed)


def _order(before):
    """The entries in order, given ``before[..., i, j]``: entry i precedes entry j (a strict
    total order). The rank and its inverse come from comparisons, not a scatter."""
    rank = jnp.sum(before, axis=-2, dtype=jnp.int32)  # [..., L]: place of entry j
    index = jnp.arange(rank.shape[-1], dtype=jnp.int32)
    at_place = rank[..., None, :] == index[:, None]  # [..., place, entry]
    return jnp.sum(jnp.where(at_place, index, 0), axis=-1, dtype=jnp.int32)


class _Row(NamedTuple):
    """What depth d reads (the client ``order[d]``): one row of ``_Tables.rows``."""

    cost: jax.Array  # f[]: c_d (0 past K: those depths only leave their client out)
    eligible: jax.Array  # bool[M]: its eligible pairs (all False past K)
    weight: jax.Array  # f[M]: its values
    listed_before: jax.Array  # i32[M]: how many clients ES m's list holds before depth d
    list_cost: jax.Array  # f[M]: cost of the clients ES m may take up to and including d
    all_cost: jax.Array  # f[]: cost of all candidates up to and including d
    remaining: jax.Array  # i32[]: how many candidates follow d
    spare_weight: jax.Array  # f[]: ALPHA / (their mean cost), the spare budget's weight (0: none)


def _row_widths(n_servers):
    """Columns of each ``_Row`` field in a packed row."""
    M = n_servers
    return _Row(1, M, M, M, M, 1, 1, 1)


class _Tables(NamedTuple):
    """Per-instance constants of the search (N clients, M ESs; d: depth)."""

    order: jax.Array  # i32[N]: the client at depth d (candidates first, by ascending cost)
    count: jax.Array  # i32[]: K, the number of candidates (depths 0 .. K-1)
    options: jax.Array  # i32[N, M]: ES of option 1 .. M at depth d (option 0: leave out)
    rows: jax.Array  # f[N, F]: the ``_Row`` of every depth, packed (one gather per depth)
    curves: jax.Array  # f[N, N + 1, 2]: PB[d, q] and the cost of the q cheapest after d
    prefix: jax.Array  # f[(M + 1)·(N + 2)]: cost prefix sums per ES list, then of all
    counts: jax.Array  # i32[2M + 1]: the root's counts k_m, k_all, k_pool,m


def _tables(value, eligible, cost, capacity, tiebreak) -> _Tables:
    """The search's constants: depth order and options, the rows, the bound's curves and cost
    prefix sums, and the root's counts (O(N²) elementwise; no scatters, slow on XLA:CPU)."""
    n_clients, n_servers = value.shape
    N, M = n_clients, n_servers
    dtype = value.dtype
    depth = jnp.arange(N)
    es = jnp.arange(M)
    order, K = _depth_order(eligible, cost, tiebreak)
    live = depth < K
    c = jnp.where(live, cost[order], 0)
    E = eligible[order]
    W = value[order]
    TB = tiebreak[order]
    # Options of depth d: its ESs by ascending tie-break of the pair, then index.
    a_t, b_t = TB[:, :, None], TB[:, None, :]
    options = _order((a_t < b_t) | ((a_t == b_t) & (es[:, None] < es[None, :])[None]))
    pre, j0, pc, pall = _cost_prefixes(c, E, K)
    # The candidates after depth d: how many, and the weight of the spare budget (ALPHA / their
    # mean cost, 0 if none).
    rem = K - depth - 1
    pa = pall[1 : N + 1]  # cost prefix up to and including depth d
    mean = jnp.where(rem > 0, (pall[K] - pa) / jnp.maximum(rem, 1).astype(dtype), 0)
    row = _Row(
        cost=c,
        eligible=E,
        weight=W,
        listed_before=j0,
        list_cost=pre[1:],
        all_cost=pa,
        remaining=rem,
        spare_weight=jnp.where(mean > 0, ALPHA / jnp.where(mean > 0, mean, 1), 0),
    )
    rows = jnp.concatenate([jnp.reshape(f, (N, -1)).astype(dtype) for f in row], axis=1)
    # Root counts (each list starts at depth 0).
    room = jnp.where(capacity > 0, capacity, 0)
    pooled = _seq_sum(room)
    k = jnp.sum(pc[:, 1:] <= capacity[:, None], axis=1, dtype=jnp.int32)
    k_all = jnp.sum(pall[1:] <= pooled, dtype=jnp.int32)
    k_pool = jnp.sum(pall[None, 1:] <= (pooled - room)[:, None], axis=1, dtype=jnp.int32)
    return _Tables(
        order=order,
        count=K,
        options=options,
        rows=rows,
        curves=_curves(W, live, pall),
        prefix=jnp.concatenate([pc, pall[None]], axis=0).reshape(-1),
        counts=jnp.concatenate([k, k_all[None], k_pool]),
    )


def _depth_order(eligible, cost, tiebreak):
    """The depth order ``(order, K)``: the K candidates by ascending cost, then smallest
    tie-break value, then index; the other clients after them."""
    depth = jnp.arange(cost.shape[0])
    cand = jnp.any(eligible, axis=1)
    K = jnp.sum(cand, dtype=jnp.int32)
    key = jnp.where(cand, cost, jnp.asarray(jnp.inf, cost.dtype))
    tie = jnp.min(tiebreak, axis=1)
    a_k, b_k, a_t, b_t = key[:, None], key[None, :], tie[:, None], tie[None, :]
    lower = depth[:, None] < depth[None, :]
    return _order((a_k < b_k) | ((a_k == b_k) & ((a_t < b_t) | ((a_t == b_t) & lower)))), K


def _cost_prefixes(c, E, K):
    """Prefix sums of the costs ``(pre, j0, pc, pall)``: by depth over the clients each ES may
    take (f[N + 1, M]), and how many it may take before depth d (i32[N, M]); the same sums per
    ES m over its list (f[M, N + 2], slot s: the s cheapest; slots past the list +inf, where
    nothing fits), and over all candidates (f[N + 2], +inf past K)."""
    N = E.shape[0]
    inf = jnp.asarray(jnp.inf, c.dtype)
    pre = _prefix(jnp.where(E, c[:, None], 0))  # [N + 1, M], by depth
    taken = E.astype(jnp.int32)
    cum = lax.cumsum(taken, axis=0)  # 1-based slot of client d in ES m's list (where E)
    slot = jnp.arange(N + 2)
    # The compaction as a masked sum with a single non-zero term per slot: exact.
    at_slot = E[:, None, :] & (cum[:, None, :] == slot[None, :, None])  # [N, N + 2, M]
    pc = jnp.sum(jnp.where(at_slot, pre[1:, None, :], 0), axis=0).T  # [M, N + 2]
    pc = jnp.where(slot[None, :] <= cum[-1][:, None], pc, inf)
    pall = _prefix(c)  # [N + 1]
    pall = jnp.where(slot <= K, jnp.concatenate([pall, pall[-1:]]), inf)  # [N + 2]
    return pre, cum - taken, pc, pall


def _curves(W, live, pall):
    """f[N, N + 1, 2]: per depth d and count q, the sum of the q largest best weights after d
    (PB) and the cost of the q cheapest candidates after d."""
    N = W.shape[0]
    dtype = W.dtype
    depth = jnp.arange(N)
    # Sorted best weights after depth d, built from the deepest depth up: row d - 1 is row d
    # with client d's best weight inserted (a weight > 0; zeros pad the rows and, inserted past
    # K, change nothing). No arithmetic: the rows hold the weights themselves.
    best = jnp.where(live, jnp.max(W, axis=1), 0)

    def insert(row, w):
        place = jnp.sum(row > w, dtype=jnp.int32)
        shifted = jnp.concatenate([jnp.zeros((1,), dtype), row[:-1]])
        new = jnp.where(depth < place, row, jnp.where(depth == place, w, shifted))
        return new, new

    _, above = lax.scan(insert, jnp.zeros((N,), dtype), best[1:], reverse=True)
    sorted_after = jnp.concatenate([above, jnp.zeros((1, N), dtype)])  # [N (d), N]
    pb = _prefix(sorted_after.T).T  # [N, N + 1]
    # cost of the q cheapest after d: pall[d + 1 + q] - pall[d + 1], the windows of pall taken
    # by a skewed reshape (static slicing, no gather).
    length = 2 * N + 3
    ext = jnp.concatenate([pall, jnp.full((length - (N + 2),), jnp.inf, dtype)])
    windows = jnp.tile(ext, N + 1)[: N * (length + 1)].reshape(N, length + 1)[:, 1 : N + 2]
    cq = windows - pall[1 : N + 1, None]
    return jnp.stack([pb, cq], axis=-1)


def _row(t: _Tables, d) -> _Row:
    """Depth d's ``_Row``."""
    row, fields, start = t.rows[d], [], 0
    for width in _row_widths(t.options.shape[1]):
        fields.append(row[start : start + width])
        start += width
    f = _Row(*fields)
    return f._replace(
        cost=f.cost[0],
        eligible=f.eligible > 0,
        listed_before=f.listed_before.astype(jnp.int32),
        all_cost=f.all_cost[0],
        remaining=f.remaining[0].astype(jnp.int32),
        spare_weight=f.spare_weight[0],
    )


class _Slots(NamedTuple):
    """Per slot, what its children at depth d need: the pooled budget if client d stays out or
    joins an ES, the budgets after ES m takes it, whether it may, and each count for the cases
    "ES m keeps its budget" / "takes client d" (k), "client d stays out" / "joins an ES"
    (k_all), "the other ESs' pool keeps its budget" / "loses c_d" (k_pool)."""

    pooled: jax.Array  # f[B]
    pooled_in: jax.Array  # f[B]
    left: jax.Array  # f[B, M]
    can: jax.Array  # bool[B, M]
    k_keep: jax.Array  # i32[B, M]
    k_take: jax.Array  # i32[B, M]
    all_out: jax.Array  # i32[B]
    all_in: jax.Array  # i32[B]
    pool_keep: jax.Array  # i32[B, M]
    pool_less: jax.Array  # i32[B, M]


class _Beam(NamedTuple):
    R: jax.Array  # f[B, M] remaining budget per ES
    V: jax.Array  # f[B] value
    live: jax.Array  # bool[B]
    slots: _Slots  # for the next depth


def _slot_work(t: _Tables, R, k, k_all, k_pool, d) -> _Slots:
    """``_Slots`` of a beam with budgets R and counts k, k_all, k_pool before depth d.

    Computed once per slot and carried into the next step: there XLA reads it from the loop's
    buffers; computed in the same step as the children, it would be fused into every per-child
    use and repeated there (several times the work)."""
    M = R.shape[1]
    N = t.rows.shape[0]
    es = jnp.arange(M)
    f = _row(t, d)
    c, E = f.cost, f.eligible
    j0, pm, pa = f.listed_before, f.list_cost, f.all_cost
    # The cost of one more client in each list than the slot's count (the lists after depth d
    # start just past client d).
    index = jnp.concatenate(
        [
            es[None, :] * (N + 2) + jnp.minimum(j0[None, :] + 1 + k, N + 1),
            M * (N + 2) + jnp.minimum(d + 1 + k_all, N + 1)[:, None],
            M * (N + 2) + jnp.minimum(d + 1 + k_pool, N + 1),
        ],
        axis=1,
    )
    look = t.prefix[index]  # [B, 2M + 1]
    need_m = look[:, :M] - pm
    need_a = look[:, M] - pa
    need_p = look[:, M + 1 :] - pa

    def update(count, fits):
        # the list lost client d: the count drops by one unless one more client now fits
        return jnp.where(count >= 1, count - 1 + fits.astype(jnp.int32), 0)

    room = jnp.where(R > 0, R, 0)  # (NaN: 0)
    pooled = _seq_sum(room)
    pooled_in = pooled - c
    left = R - c
    return _Slots(
        pooled=pooled,
        pooled_in=pooled_in,
        left=left,
        can=E & (c <= R),
        k_keep=jnp.where(E, update(k, need_m <= R), k),
        k_take=update(k, need_m <= left),
        all_out=update(k_all, need_a <= pooled),
        all_in=update(k_all, need_a <= pooled_in),
        pool_keep=update(k_pool, need_p <= pooled[:, None] - room),
        pool_less=update(k_pool, need_p <= pooled_in[:, None] - room),
    )


def _depth_step(t: _Tables, beam: _Beam, d, width):
    """The beam after client d: scores of every slot's children, the ``width`` best kept.
    Returns the new beam (its ``_Slots`` for depth d + 1) and the kept children's indices
    (slot·(M + 1) + option)."""
    B = width
    N, M = t.options.shape
    P = M + 1
    dtype = beam.R.dtype
    big = jnp.asarray(jnp.finfo(dtype).max / 4, dtype)
    es = jnp.arange(M)
    f = _row(t, d)
    W, rem, scale = f.weight, f.remaining, f.spare_weight
    option_es = t.options[d]  # [M]
    R, V, live, s = beam

    # q per child: option 0 (leave out), and client d on ES e (axis 1), counts by ES (axis 2).
    q_out = jnp.minimum(
        _seq_sum(s.k_keep), jnp.minimum(s.all_out, _seq_min(s.pool_keep + s.k_keep))
    )
    on_e = (es[:, None] == es[None, :])[None]  # [1, e, m]
    k_on = jnp.where(on_e, s.k_take[:, None, :], s.k_keep[:, None, :])
    pool_on = jnp.where(on_e, s.pool_keep[:, None, :], s.pool_less[:, None, :])
    q_on = jnp.minimum(_seq_sum(k_on), jnp.minimum(s.all_in[:, None], _seq_min(pool_on + k_on)))
    q = jnp.concatenate([q_out[:, None], q_on[:, option_es]], axis=1)  # [B, P]
    q = jnp.clip(q, 0, jnp.maximum(rem, 0))

    ok = live[:, None] & jnp.concatenate([jnp.ones((B, 1), bool), s.can[:, option_es]], axis=1)
    V_child = V[:, None] + jnp.concatenate([jnp.zeros((1,), dtype), W[option_es]])[None, :]
    pooled_child = jnp.concatenate(
        [s.pooled[:, None], jnp.broadcast_to(s.pooled_in[:, None], (B, M))], axis=1
    )
    curve = t.curves[d][q]  # [B, P, 2]: PB[d, q], cost of the q cheapest after d
    spare = pooled_child - curve[..., 1]
    # (a product: XLA turns a division by a broadcast value into a product with its reciprocal,
    # which the mirror could not follow)
    term = jnp.where(scale > 0, jnp.minimum(spare * scale, big), 0)
    score = (V_child + curve[..., 0]) + term
    key = jnp.where(ok, score, -jnp.inf).reshape(B * P)
    _, pick = lax.top_k(key, B)

    # The kept children: their parent's per-slot quantities, selected by the option.
    parent, option = pick // P, pick % P
    placed = (option > 0)[:, None] & (option_es[jnp.maximum(option - 1, 0)][:, None] == es)
    joined = option > 0
    k = jnp.where(placed, s.k_take[parent], s.k_keep[parent])
    k_all = jnp.where(joined, s.all_in[parent], s.all_out[parent])
    k_pool = jnp.where(placed | ~joined[:, None], s.pool_keep[parent], s.pool_less[parent])
    R = jnp.where(placed, s.left[parent], R[parent])
    new = _Beam(
        R=R,
        V=V_child.reshape(B * P)[pick],
        live=ok.reshape(B * P)[pick],
        slots=_slot_work(t, R, k, k_all, k_pool, jnp.minimum(d + 1, N - 1)),
    )
    return new, pick


def beam_assignment(
    value, eligible, cost, capacity, tiebreak, needed=True, *, width: int = DEFAULT_WIDTH
) -> BeamResult:
    """Beam search for P2 on prepared inputs (see ``_prepare`` in ``jfl.kernels.assignment``).

    maximise ``Σ value[n, m]`` over the chosen pairs, each client on at most one ES, only
    ``eligible`` pairs, and the running budget test ``c ≤ R_m`` (R_m: ``capacity[m]`` minus the
    costs already on ES m, clients in ascending cost) on every ES. Heuristic: no optimality
    certificate; see the module docstring for the algorithm and its ties.

    Args:
      value: f[N, M] pair values, > 0 on the eligible pairs (0 elsewhere, never chosen).
      eligible: bool[N, M] pairs that may be chosen.
      cost: f[N] client costs (≥ 0 and finite wherever a pair is eligible).
      capacity: f[M] per-ES budgets, including the budget slack.
      tiebreak: f[N, M] values in [0, 1) that order equal choices (zeros: by index).
      needed: bool[]; when False the search is skipped (empty mask, total 0), and under ``vmap``
        a batch where no instance needs it skips every loop.
      width: static beam width (slots kept per depth).

    Returns:
      ``BeamResult(mask, total)``: ``mask`` bool[N, M], feasible, at most one ES per client;
      ``total`` its value summed depth by depth in ascending cost (0 when not ``needed``). To
      keep the better of this mask and another, compare both masks' values summed the same way
      (e.g. ``assignment_value``), not ``total``.
    """
    chex.assert_rank([value, eligible, cost, capacity, tiebreak], [2, 2, 1, 1, 2])
    chex.assert_equal_shape([value, eligible, tiebreak])
    chex.assert_type(eligible, bool)
    n_clients, n_servers = value.shape
    N, M = n_clients, n_servers
    dtype = value.dtype
    cost = jnp.asarray(cost, dtype)
    capacity = jnp.asarray(capacity, dtype)
    tiebreak = jnp.asarray(tiebreak, dtype)
    needed = jnp.asarray(needed, bool)

    args = (value, eligible, cost, capacity, tiebreak)

    def once(carry):
        done, _ = carry
        # The inputs pass a select on the loop's flag (always False here): a body computed from
        # loop invariants alone would be hoisted out of the loop by XLA, and run everywhere.
        inputs = jax.tree.map(lambda x: jnp.where(done, jnp.zeros_like(x), x), args)
        return jnp.ones((), bool), _solve(*inputs, width)

    # The whole search as a loop of at most one iteration: skipped where not needed, and under
    # vmap by the whole batch when no instance needs it (a cond would run both branches). Its
    # carry, which vmap selects per instance, is only the result.
    empty = BeamResult(mask=jnp.zeros((N, M), bool), total=jnp.zeros((), dtype))
    _, result = lax.while_loop(lambda carry: needed & ~carry[0], once, (jnp.zeros((), bool), empty))
    return result


def _solve(value, eligible, cost, capacity, tiebreak, width) -> BeamResult:
    """The beam search itself: setup, one step per depth, trace back."""
    n_clients, n_servers = value.shape
    N, M, B, P = n_clients, n_servers, width, n_servers + 1
    dtype = value.dtype
    log_dtype = jnp.int16 if B * P <= jnp.iinfo(jnp.int16).max else jnp.int32
    t = _tables(value, eligible, cost, capacity, tiebreak)

    # Fixed trip counts (N), so that under vmap nothing is selected per iteration and the log
    # is written in place. Depths past K need no guard: a client without eligible pairs only
    # has the "leave out" child, scored by the value alone, so those steps just sort the beam
    # by value (and the trace back follows that through the log).
    def step(d, carry):
        beam, log = carry
        beam, pick = _depth_step(t, beam, d, B)
        log = lax.dynamic_update_slice(log, pick.astype(log_dtype)[None], (d, 0))
        return beam, log

    R0 = jnp.broadcast_to(capacity, (B, M))
    counts = [
        jnp.broadcast_to(x, (B, *x.shape)) for x in (t.counts[:M], t.counts[M], t.counts[M + 1 :])
    ]
    beam0 = _Beam(
        R=R0,
        V=jnp.zeros((B,), dtype),
        live=jnp.arange(B) == 0,
        slots=_slot_work(t, R0, *counts, 0),
    )
    beam, log = lax.fori_loop(0, N, step, (beam0, jnp.zeros((N, B), log_dtype)))

    # The live slot of largest value (the first among equals), traced back through the log.
    V = jnp.where(beam.live, beam.V, -jnp.inf)
    best = jnp.argmax(V).astype(jnp.int32)

    def trace_step(i, carry):
        slot, path = carry
        d = N - 1 - i
        pick = log[d, slot].astype(jnp.int32)
        option = pick % P
        server = jnp.where(option > 0, t.options[d, jnp.maximum(option - 1, 0)], -1)
        return pick // P, path.at[d].set(server)

    _, path = lax.fori_loop(0, N, trace_step, (best, jnp.full((N,), -1, jnp.int32)))
    # mask[order[d], path[d]], by comparisons (order is a permutation of the clients)
    chosen = path[:, None] == jnp.arange(M)[None, :]  # [N (depth), M]
    at_client = t.order[:, None] == jnp.arange(N)[None, :]  # [depth, client]
    mask = jnp.any(at_client[:, :, None] & chosen[:, None, :], axis=0)
    return BeamResult(mask=mask, total=V[best])
