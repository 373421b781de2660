"""The longest prefix of ascending costs that packs into M ≤ 3 bins (exact max-cardinality P2).

COCS's exploration step (eq. 14) maximises the number of clients assigned to the edge servers
(ESs) under the per-ES budgets. When every candidate client may go to every ES (uniform
coverage, as on every round of the hfl presets), exchanging a chosen client for a cheaper
unchosen one never breaks a budget, so if some k clients fit then the k cheapest fit: the optimum
is the largest k for which the k cheapest costs can be packed into the M bins (the ES
capacities). ``largest_packing_prefix`` answers that exactly for M ≤ 3: it checks
k = kt, kt - 1, ... from an upper bound kt down to a count known to be feasible, with one
bin-packing search per k, and stops at the first k that packs.

The search for one k (items: the k cheapest costs) is bin oriented, two levels deep:

* level 1 chooses the content of bin 1, level 2 that of bin 2 among the items bin 1 left, and
  bin 3 takes the rest (with M = 2 there is no level 1: level 2 chooses bin 1 of 2);
* at each level the "head" items (all but the ``tail_size`` cheapest) are decided in descending
  cost, include or exclude, depth first; the "tail" items (the ``tail_size`` cheapest, the same
  for every k) are settled at once at the head leaf: one vectorised pass over a table of the
  sums of all 2^tail_size tail subsets;
* pruning, valid for the bin of any packing (up to the symmetry and dominance below): its sum
  lies in the window [rest − capacities of the later bins, capacity], its count between what
  the later bins cannot take and how many of the cheapest items fit in it, and a partial choice
  is kept only if the undecided items can complete it to such a set (``_viable``: with costs
  sorted, the j cheapest and the j dearest undecided items bound every sum of j of them);
  bin 1's set is maximal (if an excluded item still fits, moving it into bin 1 keeps a packing
  a packing); with equal capacities the dearest item goes to the first of the equal bins;
* a level-1 set enters level 2 only if the remaining items pass level 2's count test.

One step of the loop is one decision, one backtrack (a failed decision backtracks in the same
step), or one table pass; a k whose search ends without a packing is refuted, and the next
smaller k starts afresh. The loop keeps every level's partial sums on a stack indexed by item
(the state before each decision), so that a step costs a few gathers, one table pass, and two
short reductions over the N items, whatever the depth: under ``vmap`` every step costs all
instances' work, so the step is kept to operations that XLA runs as few kernels.

Float rounding: a packing is accepted only when every bin's sum, a sum of non-negative terms
(no differences), is at most its capacity, so a returned packing satisfies Σ cost ≤ capacity up
to the rounding of that sum. The pruning tests, which only ever refute, compare differences of
prefix sums and are loosened by a slack of SLACK_ULPS·(log2 N + 2) ulps of the total capacity,
so that rounding does not refute a k that packs.

Pure, one instance (no batch axis), runs under ``jit`` and ``vmap``; N and M are static. The
depth-first search has a fixed budget of steps and runs in a ``lax.while_loop`` that checks for
termination every STEPS_PER_CHECK steps (under ``vmap`` it runs until every instance is done).
Measured on 1500 rounds of the CIFAR preset (N = 50, M = 3, budgets holding 4-7 clients each)
against ``scipy.optimize.milp``, and on 8000 more against an exhaustive item-by-item search,
starting from the cardinality search's count: exact on every round (see DEFAULT_MAX_STEPS).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jfl.kernels.reduce import prefix_sums

# How many of the cheapest items the subset table settles at a head leaf: the table has
# 2^TAIL_SIZE entries (work in every step) and each tail item less is one more head level
# (steps). Measured under jit(vmap) on 1024 CIFAR-preset rounds, tail sizes 4 to 8 cost about
# the same; see DEFAULT_MAX_STEPS.
TAIL_SIZE = 6

# Default step budget (over all k checked). On 9500 CIFAR-preset rounds, checking from the
# upper bound down to the cardinality search's count, the most steps any round took was 1090
# with TAIL_SIZE = 6 (99th percentile 117, median 0).
DEFAULT_MAX_STEPS = 2048

# The loop checks for termination every this many steps (as ``assignment._search``: under vmap a
# while loop selects every carried array with each instance's condition once per iteration).
STEPS_PER_CHECK = 16

# Pruning slack, in ulps of the total capacity per log2(N) + 2 (prefix sums by doubling are
# rounded about log2(N) times; a test compares sums and differences of a few of them).
SLACK_ULPS = 16

# Head decisions.
NONE, IN, OUT = 0, 1, 2
# Cursor values other than a head item's index: at the head leaf, and "backtrack next".
LEAF, BACK = -1, -2
# Search status.
RUNNING, FOUND, KNOWN_IS_BEST = 0, 1, 2
# Columns of a level's stack entries (floats; items as indices, N for none): the sum and count
# of the included items, the sum of the excluded items, the excluded item decided last (the
# cheapest so far) and first (the dearest), and the item decided last.
SUM_IN, COUNT_IN, SUM_OUT, LAST_OUT, FIRST_OUT, LAST = range(6)
N_COLUMNS = 6


class PackingResult(NamedTuple):
    count: jax.Array  # i32[]: the largest k found (k_known when nothing larger was shown)
    bins: jax.Array  # i32[N]: bin of each of the first ``count`` items if count > k_known, else -1
    complete: jax.Array  # bool[]: ``count`` is proven optimal


class _Level(NamedTuple):
    """One level's depth-first search over the head items: decisions and a stack of sums.

    A level's decisions are made at decreasing item indices and undone in reverse, so the state
    before item i was decided, ``saved[i]``, is what a backtrack over i restores; an exhausted
    level is back at its root state (``dec`` all NONE, ``top`` as new) without a reset.
    """

    dec: jax.Array  # i32[N]: decision on each head item (NONE / IN / OUT)
    saved: jax.Array  # f[N, N_COLUMNS]: ``top`` as it was before item i was decided
    top: jax.Array  # f[N_COLUMNS]: the current sums


class _State(NamedTuple):
    """The search: the prefix being checked, the active level, both levels' stacks, and what
    level 2 inherits from level 1's leaf."""

    k: jax.Array  # i32[]: the prefix length being checked
    level: jax.Array  # i32[]: 1 (choosing bin 1) or 2 (choosing bin 2)
    cursor: jax.Array  # i32[]: head item to decide next (its index), LEAF or BACK
    lv1: _Level
    lv2: _Level
    # level 1's excluded items as a chain, each to the next cheaper one (LEAF: the last): at the
    # level-1 leaf, level 2's head items in descending order
    next_out1: jax.Array  # i32[N]
    tail1: jax.Array  # i32[]: at the level-1 leaf the subset tried last (-1: none), then bin 1's
    tail2: jax.Array  # i32[]: bin 2's tail subset, once a packing is found
    lo2: jax.Array  # f[]: lower end of bin 2's sum window
    jlo2: jax.Array  # f[]: count range of bin 2
    jhi2: jax.Array  # f[]
    first2: jax.Array  # i32[]: the dearest item left to level 2 (-1: none)
    tav2: jax.Array  # i32[]: bit mask of the tail items left to level 2
    steps: jax.Array  # i32[]
    status: jax.Array  # i32[]: RUNNING, FOUND or KNOWN_IS_BEST


class _Problem(NamedTuple):
    """One instance's constants: the items, the bins as three (level 1's, level 2's and the
    last; with M = 2 level 1's is a phantom bin of infinite capacity, never filled), and the
    table of the tail's 2^H subsets t (bit i: tail item i)."""

    x: jax.Array  # f[N]: the costs, +inf past the candidates
    prefix: jax.Array  # f[N + 1]: sum of the j cheapest items (+inf past the candidates)
    caps: jax.Array  # f[3]: the bins' capacities
    fit: jax.Array  # f[3]: how many of the cheapest items each bin holds alone (a bound)
    slack: jax.Array  # f[]: of the pruning tests
    equal_all: jax.Array  # bool[]: the three capacities are equal (symmetry at level 1)
    equal_23: jax.Array  # bool[]: the last two are (symmetry at level 2)
    k_known: jax.Array  # i32[]
    subset_sum: jax.Array  # f[2^H]
    subset_count: jax.Array  # f[2^H]
    highest: jax.Array  # i32[2^H]: the dearest item of subset t (-1: none)
    three_bins: bool  # static: M = 3 (M = 2: no level 1)


def _tail_size(p: _Problem):
    return p.subset_sum.shape[0].bit_length() - 1


def _has_bit(t, i, tail_size):
    return (jnp.right_shift(t, jnp.clip(i, 0, max(tail_size - 1, 0))) & 1) == 1


def _tail_mask(k, tail_size):
    return jnp.left_shift(1, jnp.minimum(k, tail_size)) - 1


def _bin_order(capacity, tiebreak):
    """Bins by ascending capacity, then tie-break key, then index (M ≤ 3: comparison counting)."""
    m = capacity.shape[0]
    index = jnp.arange(m)
    a_c, b_c = capacity[:, None], capacity[None, :]
    a_t, b_t = tiebreak[:, None], tiebreak[None, :]
    before = (a_c < b_c) | (
        (a_c == b_c) & ((a_t < b_t) | ((a_t == b_t) & (index[:, None] < index)))
    )
    rank = jnp.sum(before, axis=0)
    return jnp.zeros((m,), jnp.int32).at[rank].set(index.astype(jnp.int32), unique_indices=True)


def _viable(counts_up, counts_lo, v, lo_count, hi_count, c, r):
    """Can the r undecided items complete a partial bin of count c to a set with count in
    [lo_count, hi_count] and sum in the window [lo, up]?

    With s the partial sum and pre[j] the sum of the j cheapest undecided items, a completion by
    j items needs pre[j] ≤ up - s (true for j ≤ counts_up, the number of j with that property,
    capped at r) and its dearest possible sum pre[r] - pre[r - j] ≥ lo - s (true for
    j ≥ r - q, q = counts_lo capped at r: the number of j with pre[j] ≤ v = pre[r] + s - lo).
    A necessary condition only: it prunes, never accepts. All arguments are floats.
    """
    a = jnp.maximum(lo_count - c, 0)
    b = jnp.minimum(hi_count - c, r)
    j1 = jnp.minimum(r, counts_up)
    q = jnp.minimum(r, counts_lo)
    return (v >= 0) & (jnp.maximum(a, r - q) <= jnp.minimum(b, j1))


def largest_packing_prefix(
    sorted_cost,
    capacity,
    k_known,
    tiebreak_bins,
    *,
    max_steps: int = DEFAULT_MAX_STEPS,
    tail_size: int = TAIL_SIZE,
) -> PackingResult:
    """The largest k ≥ k_known such that the k cheapest items pack into the M bins.

    Packing: each of the items ``sorted_cost[:k]`` in one bin, the costs in bin m summing to at
    most ``capacity[m]``. With uniform coverage this k is the optimum of the max-cardinality
    problem (COCS eq. 14; see the module docstring). The search checks k = kt, kt - 1, ...,
    k_known + 1 (kt: the largest k allowed by the total capacity and by how many of the cheapest
    items each bin holds) and stops at the first k that packs.

    Exactness: ``complete`` is True when ``count`` is proven: a packing of ``count`` items was
    found after every larger k was refuted, or every k > k_known was refuted (then ``count`` is
    k_known). When the step budget runs out first, ``count`` is k_known and ``complete`` False.
    A returned packing satisfies Σ cost ≤ capacity in every bin up to the float rounding of a
    sum of non-negative terms (accepting never uses a slack); refuting a k uses tests loosened by
    a slack of a few hundred ulps of the total capacity.

    Args:
      sorted_cost: f[N] costs ≥ 0 in ascending order; entries that are not candidates are +inf
        (they come last and are never taken).
      capacity: f[M] bin capacities (budget slack already included), 1 ≤ M ≤ 3 static;
        negative or NaN capacities are read as 0.
      k_known: i32[] a count known to pack (e.g. the cardinality search's count); 0 if none.
      tiebreak_bins: f[M] keys that order bins of equal capacity (random keys: which of several
        equal ESs gets which part of the packing is then not settled by ES index).
      max_steps: static step budget, over all k checked.
      tail_size: static number of cheapest items settled by the subset table.

    Returns:
      ``PackingResult(count, bins, complete)``: ``bins`` i32[N] holds the bin (an index into
      ``capacity``) of each of the first ``count`` items in sorted order and -1 for the others,
      and is filled only when ``count > k_known``. When the answer is k_known (proven or not)
      every entry is -1: the caller keeps its own assignment of k_known clients.
    """
    x, prefix, capacity, order = _prepare(sorted_cost, capacity, tiebreak_bins)
    k_known = jnp.asarray(k_known, jnp.int32)
    cap_sorted = capacity[order]
    if capacity.shape[0] == 1:
        # One bin: the k cheapest fit iff their sum does (compared strictly: this is the answer).
        kt = jnp.sum(prefix[1:] <= cap_sorted[0], dtype=jnp.int32)
        bins = jnp.where((kt > k_known) & (jnp.arange(x.shape[0]) < kt), order[0], -1)
        return PackingResult(jnp.maximum(kt, k_known), bins, jnp.ones((), bool))
    p, kt = _problem(x, prefix, cap_sorted, k_known, tail_size)

    def running(s):
        return (s.status == RUNNING) & (s.steps < max_steps)

    def block(s):
        return lax.fori_loop(0, STEPS_PER_CHECK, lambda _, s: _step(p, s, running(s)), s)

    s = lax.while_loop(running, block, _start(p, kt))
    return _result(p, s, order)


def _prepare(sorted_cost, capacity, tiebreak_bins):
    """The inputs in one float dtype: ``(x, prefix, capacity, order)``, the costs (+inf past the
    leading finite, non-negative ones, the candidates), the sums of the j cheapest (+inf past
    the candidates), the capacities (NaN and negative: 0) and the bins in ascending capacity."""
    x = jnp.asarray(sorted_cost)
    dtype = jnp.result_type(x, capacity, jnp.float32)
    x = x.astype(dtype)
    (n_bins,) = jnp.shape(capacity)
    if not 1 <= n_bins <= 3:
        raise ValueError(f"largest_packing_prefix handles 1 to 3 bins, got {n_bins}")
    capacity = jnp.asarray(capacity, dtype)
    capacity = jnp.where(jnp.isnan(capacity), 0, jnp.maximum(capacity, 0))
    tiebreak_bins = jnp.asarray(tiebreak_bins, dtype)
    tiebreak_bins = jnp.where(jnp.isnan(tiebreak_bins), 0, tiebreak_bins)
    inf = jnp.asarray(jnp.inf, dtype)
    candidate = jnp.cumprod((jnp.isfinite(x) & (x >= 0)).astype(jnp.int32)) > 0
    x = jnp.where(candidate, x, inf)
    prefix = prefix_sums(jnp.where(candidate, x, 0))
    prefix = jnp.where(jnp.pad(candidate, (1, 0), constant_values=True), prefix, inf)
    return x, prefix, capacity, _bin_order(capacity, tiebreak_bins)


def _problem(x, prefix, cap_sorted, k_known, tail_size):
    """The ``_Problem`` of M = 2 or 3 bins in ascending capacity, and kt: the largest k allowed
    by the sum bound and by the count bound Σ_b min(fit_b, k) ≥ k (true on an interval
    [0, kt_count]: the left side minus k is concave in k)."""
    (N,), (n_bins,) = x.shape, cap_sorted.shape
    dtype = x.dtype
    total_cap = jnp.sum(cap_sorted)
    log_n = max(1, int(np.ceil(np.log2(N + 1))))
    slack = SLACK_ULPS * (log_n + 2) * jnp.finfo(dtype).eps * total_cap
    if n_bins == 3:
        caps = cap_sorted
    else:
        caps = jnp.concatenate([jnp.full((1,), jnp.inf, dtype), cap_sorted])
    fit = jnp.stack([jnp.sum(prefix[1:] <= caps[b] + slack) for b in range(3)]).astype(dtype)
    kt_sum = jnp.sum(prefix[1:] <= total_cap + slack, dtype=jnp.int32)
    ks = jnp.arange(N + 1, dtype=jnp.int32)
    real_fit = fit[3 - n_bins :].astype(jnp.int32)
    holds = jnp.sum(jnp.minimum(real_fit[:, None], ks[None, :]), axis=0) >= ks
    kt = jnp.minimum(kt_sum, jnp.max(jnp.where(holds, ks, 0)))
    # The tail: the H cheapest items.
    H = min(tail_size, N)
    n_sub = 1 << H
    tail_x = x[:H]
    subset_sum = jnp.zeros((1,), dtype)
    for i in range(H):
        subset_sum = jnp.concatenate([subset_sum, subset_sum + tail_x[i]])
    p = _Problem(
        x=x,
        prefix=prefix,
        caps=caps,
        fit=fit,
        slack=slack,
        equal_all=(caps[0] == caps[1]) & (caps[1] == caps[2]),
        equal_23=caps[1] == caps[2],
        k_known=k_known,
        subset_sum=subset_sum,
        subset_count=jnp.asarray([bin(t).count("1") for t in range(n_sub)], dtype),
        highest=jnp.asarray([t.bit_length() - 1 for t in range(n_sub)], jnp.int32),
        three_bins=n_bins == 3,
    )
    return p, kt


def _start(p: _Problem, kt) -> _State:
    """The search of the prefix kt from its root (done at once where kt ≤ k_known)."""
    N = p.x.shape[0]
    dtype = p.x.dtype

    def fresh_level():
        top = jnp.zeros((N_COLUMNS,), dtype).at[jnp.array([LAST_OUT, FIRST_OUT, LAST])].set(N)
        return _Level(jnp.zeros((N,), jnp.int32), jnp.zeros((N, N_COLUMNS), dtype), top)

    blank = _State(
        k=kt,
        level=jnp.ones((), jnp.int32),
        cursor=jnp.full((), LEAF, jnp.int32),
        lv1=fresh_level(),
        lv2=fresh_level(),
        next_out1=jnp.full((N,), LEAF, jnp.int32),
        tail1=jnp.full((), -1, jnp.int32),
        tail2=jnp.zeros((), jnp.int32),
        lo2=jnp.zeros((), dtype),
        jlo2=jnp.zeros((), dtype),
        jhi2=jnp.zeros((), dtype),
        first2=jnp.zeros((), jnp.int32),
        tav2=jnp.zeros((), jnp.int32),
        steps=jnp.zeros((), jnp.int32),
        status=jnp.where(kt <= p.k_known, KNOWN_IS_BEST, RUNNING).astype(jnp.int32),
    )
    return _restart(p, blank, kt)


def _restart(p: _Problem, s: _State, k) -> _State:
    """``s`` set to search the prefix of length k from its root: level 1 (M = 3), or level 2
    over all the items (M = 2). Both levels are at their roots already (see ``_Level``)."""
    H = _tail_size(p)
    # the level starts at its dearest head item, if any
    s = s._replace(
        k=k, cursor=jnp.where(k - 1 >= H, k - 1, LEAF), tail1=jnp.full((), -1, jnp.int32)
    )
    if p.three_bins:
        return s._replace(level=jnp.ones((), jnp.int32))
    kf = k.astype(p.x.dtype)
    return s._replace(
        level=jnp.full((), 2, jnp.int32),
        tail1=jnp.zeros((), jnp.int32),
        lo2=p.prefix[k] - p.caps[2],
        jhi2=jnp.minimum(p.fit[1], kf),
        jlo2=kf - jnp.minimum(p.fit[2], kf),
        first2=k - 1,
        tav2=_tail_mask(k, H),
    )


def _result(p: _Problem, s: _State, order) -> PackingResult:
    """The bins of a packing found (its items' ESs), or the known count."""
    N, H = p.x.shape[0], _tail_size(p)
    idx = jnp.arange(N, dtype=jnp.int32)
    is_tail = idx < H
    found = s.status == FOUND
    in_bin2 = (s.lv2.dec == IN) | (is_tail & _has_bit(s.tail2, idx, H))
    if p.three_bins:
        es_of = order
        in_bin1 = (s.lv1.dec == IN) | (is_tail & _has_bit(s.tail1, idx, H))
    else:
        es_of = jnp.concatenate([jnp.full((1,), -1, jnp.int32), order])
        in_bin1 = jnp.zeros((N,), bool)
    which = jnp.where(in_bin1, 0, jnp.where(in_bin2, 1, 2))
    bins = jnp.where(found & (idx < s.k), es_of[which], jnp.full((N,), -1, jnp.int32))
    count = jnp.where(found, s.k, p.k_known)
    return PackingResult(count, bins, s.status != RUNNING)


class _View(NamedTuple):
    """The active level at the start of a step (level 1's window, count range, symmetry and
    tail items follow from k: all items of the prefix are level 1's)."""

    level2: jax.Array  # bool[]: level 2 is active
    top: jax.Array  # f[N_COLUMNS]: its current sums
    last: jax.Array  # i32[]: the item decided last (N: none)
    base: jax.Array  # f[N_COLUMNS]: its stack before that item was decided
    last_was_in: jax.Array  # bool[]
    min_out: jax.Array  # f[]: the cheapest item excluded so far (+inf: none)
    lo: jax.Array  # f[]: the sum window [lo, up] of the bin
    up: jax.Array  # f[]
    jlo: jax.Array  # f[]: its count range
    jhi: jax.Array  # f[]
    first: jax.Array  # i32[]: the level's dearest item (-1: none)
    forced: jax.Array  # bool[]: the dearest item goes into this bin (equal capacities)
    tail_items: jax.Array  # i32[]: bit mask of the level's tail items


def _view(p: _Problem, s: _State) -> _View:
    N = p.x.shape[0]
    k, kf = s.k, s.k.astype(p.x.dtype)
    lvl2 = s.level == 2
    lv1, lv2 = s.lv1, s.lv2
    top = jnp.where(lvl2, lv2.top, lv1.top)
    last_out = top[LAST_OUT].astype(jnp.int32)
    last = top[LAST].astype(jnp.int32)
    pc = jnp.minimum(last, N - 1)
    return _View(
        level2=lvl2,
        top=top,
        last=last,
        base=jnp.where(lvl2, lv2.saved[pc], lv1.saved[pc]),
        last_was_in=jnp.where(lvl2, lv2.dec[pc], lv1.dec[pc]) == IN,
        min_out=jnp.where(last_out < N, p.x[jnp.minimum(last_out, N - 1)], jnp.inf),
        lo=jnp.where(lvl2, s.lo2, p.prefix[k] - p.caps[1] - p.caps[2]),
        up=jnp.where(lvl2, p.caps[1], p.caps[0]),
        jlo=jnp.where(lvl2, s.jlo2, kf - jnp.minimum(p.fit[1], kf) - jnp.minimum(p.fit[2], kf)),
        jhi=jnp.where(lvl2, s.jhi2, jnp.minimum(p.fit[0], kf)),
        first=jnp.where(lvl2, s.first2, k - 1),
        forced=jnp.where(lvl2, p.equal_23, p.equal_all),
        tail_items=jnp.where(lvl2, s.tav2, _tail_mask(k, _tail_size(p))),
    )


def _leaf_pass(p: _Problem, s: _State, v: _View):
    """The head leaf: the first tail subset t that completes the bin (one table pass), as
    ``(t_star, any_ok)``. The sum and the cheapest of the level's tail items left out of t, item
    by item (elementwise over the table, no gathers)."""
    H = _tail_size(p)
    n_sub = 1 << H
    dtype = p.x.dtype
    inf = jnp.asarray(jnp.inf, dtype)
    subsets = jnp.arange(n_sub, dtype=jnp.int32)
    # Bits of the tail subsets, bit_table[i, t]: subset t holds tail item i.
    bit_table = np.array([[(t >> i) & 1 for t in range(n_sub)] for i in range(H)], bool)
    s_in, c_in, s_out = v.top[SUM_IN], v.top[COUNT_IN], v.top[SUM_OUT]
    tav_bits = [(jnp.right_shift(v.tail_items, i) & 1) == 1 for i in range(H)]
    allowed = jnp.ones((n_sub,), bool)
    rest_sum = jnp.zeros((n_sub,), dtype)
    rest_min = jnp.full((n_sub,), inf)
    for i in range(H):
        allowed = allowed & (tav_bits[i] | ~bit_table[i])
        left_out = tav_bits[i] & ~bit_table[i]
        rest_sum = rest_sum + jnp.where(left_out, p.x[i], 0)
        rest_min = jnp.minimum(rest_min, jnp.where(left_out, p.x[i], inf))
    forced_tail = v.forced & (v.first >= 0) & (v.first < H)
    allowed = allowed & (~forced_tail | _has_bit(subsets, v.first, H))
    bin_sum = s_in + p.subset_sum
    count = c_in + p.subset_count
    # level 1: window, count range, maximality (the cheapest item left out does not fit),
    # and after the subset tried last
    level1_ok = (
        (bin_sum >= v.lo - p.slack)
        & (count >= v.jlo)
        & (count <= v.jhi)
        & (bin_sum + jnp.minimum(v.min_out, rest_min) > v.up - p.slack)
        & (subsets > s.tail1)
    )
    # level 2: bin 3 takes the rest (its sum of non-negative terms, no difference)
    level2_ok = s_out + rest_sum <= p.caps[2]
    ok = allowed & (bin_sum <= v.up) & jnp.where(v.level2, level2_ok, level1_ok)
    t_first = jnp.min(jnp.where(ok, subsets.astype(dtype), n_sub))
    return t_first.astype(jnp.int32), t_first < n_sub


def _below(p: _Problem, s: _State, v: _View, t_star, items):
    """Level 2's items (M = 3): the prefix less bin 1 (level 1's IN items and tail subset t1:
    ``tail1`` at level 2, ``t_star`` when entering it). Level 1 is then at its leaf with every
    head item decided, so the part of bin 1 cheaper than a head item j is level 1's total less
    what its stack held before j was decided: no prefix sums to recompute. With M = 2 level 2
    has all the items, as level 1 with M = 3.

    Returns ``(below, cheap_active, cheap2)``: per head item j of ``items`` the count and sum of
    the active level's items cheaper than j; and the "cheapest sums" f[N] of the active level
    and of level 2: at each of its items, the sum of its items up to it (+inf at the others).
    """
    dtype = p.x.dtype
    if not p.three_bins:
        below = [(j.astype(dtype), p.prefix[j]) for j in items]
        return below, p.prefix[1:], p.prefix[1:]
    H, N = _tail_size(p), p.x.shape[0]
    idx = jnp.arange(N, dtype=jnp.int32)
    inf = jnp.asarray(jnp.inf, dtype)
    lv1 = s.lv1
    t1 = jnp.where(v.level2, s.tail1, t_star)
    in1 = lv1.dec == IN
    in1_x = jnp.where(in1, p.x, 0)
    bin1_tail_sum, bin1_tail_count = p.subset_sum[t1], p.subset_count[t1]
    bin1_sum, bin1_count = lv1.top[SUM_IN], lv1.top[COUNT_IN]
    below = []
    for j in items:
        b_sum = bin1_tail_sum + bin1_sum - lv1.saved[j, SUM_IN] - in1_x[j]
        b_count = bin1_tail_count + bin1_count - lv1.saved[j, COUNT_IN] - in1[j]
        fj = j.astype(dtype)
        below.append(
            (jnp.where(v.level2, fj - b_count, fj), p.prefix[j] - jnp.where(v.level2, b_sum, 0))
        )
    # head items from level 1's stack, tail items one by one
    below_head = bin1_tail_sum + bin1_sum - lv1.saved[H:, SUM_IN] - in1_x[H:]
    cheap2_head = jnp.where(in1[H:] | (idx[H:] >= s.k), inf, p.prefix[H + 1 :] - below_head)
    rest_tail = _tail_mask(s.k, H) & ~t1
    running_sum, cheap2_tail = jnp.zeros((), dtype), []
    for j in range(H):
        mine = (jnp.right_shift(rest_tail, j) & 1) == 1
        running_sum = running_sum + jnp.where(mine, p.x[j], 0)
        cheap2_tail.append(jnp.where(mine, running_sum, inf))
    cheap2 = jnp.concatenate([jnp.stack(cheap2_tail), cheap2_head]) if H else cheap2_head
    return below, jnp.where(v.level2, cheap2, p.prefix[1:]), cheap2


class _Tests(NamedTuple):
    can_in: jax.Array  # bool[]: item i may go into the bin
    can_out: jax.Array  # bool[]: item i may stay out of it
    can_flip: jax.Array  # bool[]: the item decided last, undone, may stay out
    fit2: jax.Array  # f[]: how many of level 2's cheapest items fit into its bin (entering)
    fit3: jax.Array  # f[]: and into the last bin


def _tests(p: _Problem, s: _State, v: _View, t_star) -> _Tests:
    """Viability of including the cursor's item i, excluding it, and excluding the item decided
    last after undoing it; and level 2's count test for entering it: 8 counts."""
    N = p.x.shape[0]
    i = jnp.clip(s.cursor, 0, N - 1)
    pc = jnp.minimum(v.last, N - 1)
    x_i, x_p = p.x[i], p.x[pc]
    s_in, c_in = v.top[SUM_IN], v.top[COUNT_IN]
    below, cheap_active, cheap2 = _below(p, s, v, t_star, (i, pc))
    (r_i, rest_i), (r_p, rest_p) = below
    s_p, c_p = v.base[SUM_IN], v.base[COUNT_IN]
    sums = jnp.stack([s_in + x_i, s_in, s_p])
    rests = jnp.stack([rest_i, rest_i, rest_p])
    bounds_up = v.up - sums + p.slack
    bounds_lo = rests + sums - v.lo + p.slack
    bounds_entry = jnp.stack([p.caps[1], p.caps[2]]) + p.slack
    counts = jnp.concatenate(
        [
            jnp.sum(
                jnp.where(cheap_active <= jnp.concatenate([bounds_up, bounds_lo])[:, None], 1, 0),
                axis=1,
                dtype=p.x.dtype,
            ),
            jnp.sum(jnp.where(cheap2 <= bounds_entry[:, None], 1, 0), axis=1, dtype=p.x.dtype),
        ]
    )
    viable = _viable(
        counts[0:3],
        counts[3:6],
        bounds_lo,
        v.jlo,
        v.jhi,
        jnp.stack([c_in + 1, c_in, c_p]),
        jnp.stack([r_i, r_i, r_p]),
    )
    # Excluding an item: not the dearest under symmetry, and the bin can still end too full to
    # take it (else it would not be maximal).
    return _Tests(
        can_in=(s_in + x_i <= v.up + p.slack) & viable[0],
        can_out=~(v.forced & (i == v.first)) & viable[1] & (s_in + rest_i > v.up - x_i - p.slack),
        can_flip=~(v.forced & (v.last == v.first))
        & viable[2]
        & (s_p + rest_p > v.up - x_p - p.slack),
        fit2=counts[6],
        fit3=counts[7],
    )


class _Move(NamedTuple):
    """What a step does at the level's head items (i: the cursor's, p: the one decided last)."""

    decide_in: jax.Array  # bool[]: i goes into the bin
    decide_out: jax.Array  # bool[]: i stays out
    backtrack: jax.Array  # bool[]: p is undone, or, with nothing decided, the level is exhausted
    undo: jax.Array  # bool[]: p is undone
    flip: jax.Array  # bool[]: p, undone, turns from IN into OUT


def _step(p: _Problem, s: _State, go) -> _State:
    """One step of the search; a no-op where ``go`` is False."""
    N, H = p.x.shape[0], _tail_size(p)
    v = _view(p, s)
    t_star, any_ok = _leaf_pass(p, s, v)
    tests = _tests(p, s, v, t_star)
    at_leaf = s.cursor == LEAF
    deciding = s.cursor >= H
    decide_in = deciding & tests.can_in
    decide_out = deciding & ~tests.can_in & tests.can_out
    backtrack = (
        (s.cursor == BACK) | (deciding & ~tests.can_in & ~tests.can_out) | (at_leaf & ~any_ok)
    )
    undo = backtrack & ~(v.last == N)
    move = _Move(
        decide_in=decide_in,
        decide_out=decide_out,
        backtrack=backtrack,
        undo=undo,
        flip=undo & v.last_was_in & tests.can_flip,
    )
    # Where the cursor goes next: the next head item of the level below i (or p).
    i = jnp.clip(s.cursor, 0, N - 1)
    after_p = jnp.where(move.flip, _after(p, s, v, jnp.minimum(v.last, N - 1)), BACK)
    cursor = jnp.where(
        decide_in | decide_out, _after(p, s, v, i), jnp.where(backtrack, after_p, s.cursor)
    )
    new = _write_stacks(p, s, v, move, go)
    new = _change_level(p, s, v, move, tests, t_star, any_ok, new._replace(cursor=cursor))
    # (the arrays were written only where ``go``)
    small = ("k", "level", "cursor", "tail1", "tail2", "lo2", "jlo2", "jhi2", "first2")
    small += ("tav2", "steps", "status")
    return new._replace(**{f: jnp.where(go, getattr(new, f), getattr(s, f)) for f in small})


def _after(p: _Problem, s: _State, v: _View, j):
    """The head item decided after item j: the next one down (level 2 with M = 3: the next of
    level 1's excluded items), or LEAF."""
    down = jnp.where(j - 1 >= _tail_size(p), j - 1, LEAF)
    if p.three_bins:
        return jnp.where(v.level2, s.next_out1[j], down)
    return down


def _write_stacks(p: _Problem, s: _State, v: _View, move: _Move, go) -> _State:
    """The active level's stack: a decision records item i's entry, a backtrack restores p's
    (or turns it into an OUT); and level 1's chain of excluded items."""
    N = p.x.shape[0]
    dtype = p.x.dtype
    idx = jnp.arange(N, dtype=jnp.int32)
    i, pc = jnp.clip(s.cursor, 0, N - 1), jnp.minimum(v.last, N - 1)
    x_i, x_p = p.x[i], p.x[pc]
    fi, fp = i.astype(dtype), pc.astype(dtype)
    top, base = v.top, v.base
    decided = move.decide_in | move.decide_out
    top_in = top.at[SUM_IN].add(x_i).at[COUNT_IN].add(1).at[LAST].set(fi)
    top_out = top.at[SUM_OUT].add(x_i).at[LAST_OUT].set(fi).at[LAST].set(fi)
    top_out = top_out.at[FIRST_OUT].set(jnp.where(top[FIRST_OUT] == N, fi, top[FIRST_OUT]))
    top_flip = base.at[SUM_OUT].add(x_p).at[LAST_OUT].set(fp).at[LAST].set(fp)
    top_flip = top_flip.at[FIRST_OUT].set(jnp.where(base[FIRST_OUT] == N, fp, base[FIRST_OUT]))
    new_top = jnp.where(move.undo, base, top)
    new_top = jnp.where(move.flip, top_flip, new_top)
    new_top = jnp.where(move.decide_in, top_in, jnp.where(move.decide_out, top_out, new_top))
    where_to = jnp.where(decided, i, pc)
    value = jnp.where(move.decide_in, IN, jnp.where(move.decide_out | move.flip, OUT, NONE))
    write_dec = go & (decided | move.undo) & (idx == where_to)
    write_saved = (go & decided & (idx == i))[:, None]

    def update(level, lv):
        mine = s.level == level
        return _Level(
            dec=jnp.where(write_dec & mine, value, lv.dec),
            saved=jnp.where(write_saved & mine, top[None, :], lv.saved),
            top=jnp.where(go & mine, new_top, lv.top),
        )

    new = s._replace(lv1=update(1, s.lv1), lv2=update(2, s.lv2))
    if not p.three_bins:
        return new
    # A new OUT ends the chain and follows the previous OUT; undoing an OUT ends the chain at
    # the previous one.
    out = move.decide_out | move.flip
    new_out = jnp.where(move.decide_out, i, pc)
    previous_out = jnp.where(move.decide_out, top[LAST_OUT], base[LAST_OUT]).astype(jnp.int32)
    level1 = go & ~v.level2
    end_new = level1 & out & (idx == new_out)
    relink = level1 & (out | (move.undo & ~v.last_was_in)) & (idx == previous_out)
    link_to = jnp.where(out, new_out, LEAF)
    next_out1 = jnp.where(end_new, LEAF, jnp.where(relink, link_to, s.next_out1))
    return new._replace(next_out1=next_out1)


def _change_level(p, s, v, move, tests, t_star, any_ok, new) -> _State:
    """At a leaf or an exhausted level: enter level 2 (a bin-1 set whose remaining items pass
    level 2's count test), go back up to level 1 (level 2 exhausted: the next bin-1 candidate),
    accept a packing (level 2's leaf), or refute k and restart at k - 1 (level 1 exhausted),
    unless that proves k_known the largest."""
    N, H = p.x.shape[0], _tail_size(p)
    k, kf = s.k, s.k.astype(p.x.dtype)
    at_leaf = s.cursor == LEAF
    none_decided = v.last == N
    s_in, c_in = v.top[SUM_IN], v.top[COUNT_IN]
    leaf1 = at_leaf & ~v.level2 & any_ok
    size2 = kf - p.subset_count[t_star] - c_in  # (at the level-1 leaf)
    jhi2, jlo2 = tests.fit2, size2 - tests.fit3
    enter = leaf1 & (jlo2 <= jnp.minimum(jhi2, size2))
    found = at_leaf & v.level2 & any_ok
    if p.three_bins:
        go_up = move.backtrack & none_decided & v.level2
        refute = move.backtrack & none_decided & ~v.level2
    else:
        go_up = jnp.zeros((), bool)
        refute = move.backtrack & none_decided
    first_out = s.lv1.top[FIRST_OUT]
    cursor2 = jnp.where(first_out < N, first_out.astype(jnp.int32), LEAF)
    tav2 = _tail_mask(k, H) & ~t_star
    new = new._replace(
        cursor=jnp.where(enter, cursor2, jnp.where(go_up, LEAF, new.cursor)),
        level=jnp.where(enter, 2, jnp.where(go_up, 1, s.level)),
        tail1=jnp.where(leaf1, t_star, jnp.where(at_leaf & ~v.level2, -1, s.tail1)),
        tail2=jnp.where(found, t_star, s.tail2),
        status=jnp.where(found, FOUND, s.status),
        lo2=jnp.where(enter, p.prefix[k] - p.subset_sum[t_star] - s_in - p.caps[2], s.lo2),
        jlo2=jnp.where(enter, jlo2, s.jlo2),
        jhi2=jnp.where(enter, jhi2, s.jhi2),
        first2=jnp.where(enter, jnp.where(cursor2 >= H, cursor2, p.highest[tav2]), s.first2),
        tav2=jnp.where(enter, tav2, s.tav2),
    )
    new = jax.tree.map(lambda a, b: jnp.where(refute, a, b), _restart(p, new, k - 1), new)
    return new._replace(
        status=jnp.where(refute & (k - 1 <= p.k_known), KNOWN_IS_BEST, new.status),
        steps=new.steps + 1,
    )
