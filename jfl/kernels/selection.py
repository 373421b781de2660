"""Per-round client-selection kernels.

Every function here works on one instance (no batch axis), is pure, and runs under ``jit`` and
``vmap``. Counts such as ``k`` may be traced; array shapes are static.
"""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
from jax import lax

from jfl.kernels.order import counting_rank, materialise, sort_order, sorting_rank
from jfl.kernels.reduce import pairwise_sum

# Below this pool size the exact P4 solver uses an O(N^2) elementwise formulation, which vectorises
# far better inside a vmapped runner than the O(N log N) scan used for large pools.
SMALL_POOL_MAX = 512

# How divide_and_conquer builds its prefix top-m lists (see its docstring).
SCHEDULES = ("auto", "sequential", "parallel")


def selection_count(available: jax.Array, m) -> jax.Array:
    """k = min(m, number of available clients) (RBCS-F eq. 4).

    Args:
      available: bool[N] availability.
      m: maximum number of selected clients (int, possibly traced).
    """
    chex.assert_rank([available, m], [1, 0])
    chex.assert_type(m, int)
    return jnp.minimum(jnp.asarray(m, jnp.int32), jnp.sum(available, dtype=jnp.int32))


def _rank(unavailable, key, priority):
    if key.shape[0] <= SMALL_POOL_MAX:
        return counting_rank(key, unavailable, priority)
    return sorting_rank(key, unavailable, priority)


def topk_mask(scores: jax.Array, available: jax.Array, k, priority=None) -> jax.Array:
    """Boolean mask of the ``k`` highest ``scores`` among ``available`` clients.

    Selects exactly ``min(k, available.sum())`` clients and never an unavailable one; ties go
    to the lower ``priority`` (default: the lower client index). ``k`` may be a traced integer.

    Args:
      scores: f[N] scores; only the order among available clients matters (no NaN).
      available: bool[N] availability.
      k: number of clients to select (int, possibly traced).
      priority: optional int[N] permutation of 0..N-1 breaking ties (e.g. a per-run random
        order of the clients, so that no index is favoured).
    """
    available = jnp.asarray(available, bool)
    key = -jnp.asarray(scores)
    chex.assert_rank([key, available, k], [1, 1, 0])
    chex.assert_equal_shape([key, available])
    chex.assert_type(k, int)
    if key.shape[0] <= SMALL_POOL_MAX and jnp.issubdtype(key.dtype, jnp.floating):
        # Correctness, not speed: fused into the N^2 comparisons, the score expression is
        # evaluated once per operand, and the two evaluations may differ in the last bit (e.g.
        # with and without an FMA), so a client can rank "before itself" and drop out.
        key = materialise(key)
    rank = _rank(~available, key, priority)
    return available & (rank < k)


def divide_and_conquer(
    tau_bar, queue, available, m, V, priority=None, *, schedule: str = "auto"
) -> jax.Array:
    """Exact optimum of RBCS-F's per-round problem P4 (eq. 21).

    minimise ``V * max_{n in S} tau_bar_n - sum_{n in S} queue_n`` over ``S ⊆ available`` with
    ``|S| = k = min(m, #available)``.

    Algorithm 1 of the paper tries every candidate maximum (O(N^2)). Ordering the available
    clients by ``tau_bar`` turns it into a minimum over prefixes ``j`` (of size ≥ k) of
    ``V * tau_bar_(j) - (sum of the k largest queues in the prefix)``; the optimal set is the k
    largest queues of the best prefix. The order comes from O(N^2) comparison counting for small
    pools (fast when vmapped) and from one O(N log N) sort for large ones; the running top-k
    sums from a top-m buffer updated one client at a time (O(N m)). Overall O(N log N + N m),
    sub-quadratic. ``m`` must be a static int (it fixes the buffer width); ``V`` may be traced.
    Objective ties go to the smaller prefix; queue ties to the client earlier in the ``tau_bar``
    order (ties in ``tau_bar`` to the lower ``priority``, by default the lower index).

    ``schedule`` picks how the top-m lists of all N prefixes are built; every schedule yields the
    same lists (only max/min of the same floats are taken), hence the same selection:

    * ``"sequential"``: one ``lax.scan`` inserting a client per step, O(N m) work but N dependent
      steps, each a few µs of launch overhead on a GPU (seconds at N = 10^6).
    * ``"parallel"``: ``lax.associative_scan`` whose combine merges two descending top-M lists
      (M = m rounded up to a power of two) with a bitonic merge: O(log N) depth, O(N M log M)
      work.
    * ``"auto"`` (default): sequential on CPU, where the scan's steps are cheap and the extra
      work of the parallel form costs more, parallel elsewhere (GPU/TPU): on a CPU host the
      sequential form alone is traced; on an accelerator host ``lax.platform_dependent``
      decides when the computation is lowered.

    Args:
      tau_bar: f[N] optimistic exchange-time estimates (eq. 19), no NaN.
      queue: f[N] virtual-queue backlogs Z (eq. 6).
      available: bool[N] availability I.
      m: static maximum number of selected clients.
      V: penalty factor (≥ 0), possibly traced.
      priority: optional int[N] permutation of 0..N-1 breaking ties (RBCS-F passes a per-run
        random order: ties by index would favour the fast class, which has the low indices).
      schedule: ``"auto"``, ``"sequential"`` or ``"parallel"`` (static; see above).

    Returns:
      bool[N] selection mask with exactly k entries set, all available.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    tau_bar = jnp.asarray(tau_bar)
    queue = jnp.asarray(queue, tau_bar.dtype)
    available = jnp.asarray(available, bool)
    chex.assert_rank([tau_bar, queue, available, V], [1, 1, 1, 0])
    chex.assert_equal_shape([tau_bar, queue, available])
    chex.assert_type(tau_bar, float)
    m = int(m)
    if m < 1:
        raise ValueError(f"m must be an integer >= 1, got {m}")
    k = selection_count(available, m)
    if tau_bar.shape[0] <= SMALL_POOL_MAX:
        return _dnc_small(tau_bar, queue, available, k, m, V, priority, schedule)
    return _dnc_large(tau_bar, queue, available, k, m, V, priority, schedule)


def _insert_descending(buffer, value):
    """Insert ``value`` into a descending top-m ``buffer``, dropping the smallest (branch-free)."""
    above = jnp.concatenate([jnp.full((1,), jnp.inf, buffer.dtype), buffer[:-1]])
    return jnp.maximum(buffer, jnp.minimum(above, value))


def _bitonic_merge_desc(x):
    """Sort a bitonic last axis (power-of-two length) descending; leading axes are a batch."""
    size = x.shape[-1]
    stride = size // 2
    while stride >= 1:
        # Half-cleaner: within blocks of 2·stride, position i meets i + stride.
        pairs = x.reshape(*x.shape[:-1], size // (2 * stride), 2, stride)
        first, second = pairs[..., 0, :], pairs[..., 1, :]
        pairs = jnp.stack([jnp.maximum(first, second), jnp.minimum(first, second)], axis=-2)
        x = pairs.reshape(*x.shape[:-1], size)
        stride //= 2
    return x


def _merge_top_lists(earlier, later):
    """Top-M of the union of two descending top-M lists, descending (batched leading axes)."""
    # Descending vs ascending: the elementwise max is bitonic and holds the M largest of the union.
    return _bitonic_merge_desc(jnp.maximum(earlier, later[..., ::-1]))


def _prefix_top_lists_sequential(queue_sorted, m):
    def insert(buffer, value):
        buffer = _insert_descending(buffer, value)
        return buffer, buffer

    # lax.scan keeps one top-m buffer live (O(N m) work); unrolled, XLA would also fuse the
    # producer of ``queue_sorted`` into every step.
    empty = jnp.full((m,), -jnp.inf, queue_sorted.dtype)
    _, top_lists = lax.scan(insert, empty, queue_sorted)
    return top_lists


def _prefix_top_lists_parallel(queue_sorted, m):
    width = 1 << (m - 1).bit_length()  # the bitonic merge needs a power of two
    singletons = jnp.full((queue_sorted.shape[0], width), -jnp.inf, queue_sorted.dtype)
    singletons = singletons.at[:, 0].set(queue_sorted)
    # Merging top lists is associative, so log2(N) rounds replace the scan's N dependent steps.
    return lax.associative_scan(_merge_top_lists, singletons)[:, :m]


def _prefix_top_lists(queue_sorted, m, schedule="auto"):
    """[N, m]: the descending top-m values of every prefix of ``queue_sorted`` (-inf padded)."""
    if schedule == "sequential":
        return _prefix_top_lists_sequential(queue_sorted, m)
    if schedule == "parallel":
        return _prefix_top_lists_parallel(queue_sorted, m)
    if jax.default_backend() == "cpu":
        # On a CPU host only the CPU's schedule is traced: tracing the parallel form costs
        # ≈ 0.3 s per RBCS-F program, which every sweep and test would pay for nothing. (To
        # lower for an accelerator from a CPU host, pass schedule="parallel".)
        return _prefix_top_lists_sequential(queue_sorted, m)
    # Elsewhere the choice is made at lowering, so that a program traced on an accelerator and
    # compiled for the CPU (AOT, export) still gets the CPU's schedule.
    return lax.platform_dependent(
        queue_sorted,
        cpu=functools.partial(_prefix_top_lists_sequential, m=m),
        default=functools.partial(_prefix_top_lists_parallel, m=m),
    )


def _best_in_sorted_order(tau_sorted, queue_sorted, n_available, k, m, V, schedule="auto"):
    """P4 on clients listed by ascending tau_bar (available ones first): the chosen mask.

    Objective ties go to the smaller prefix; queue ties to the earlier client in the order.
    """
    n = tau_sorted.shape[0]
    position = jnp.arange(n, dtype=jnp.int32)
    top_lists = _prefix_top_lists(queue_sorted, m, schedule)  # [N, m]

    take = jnp.arange(m) < k
    top_sum = pairwise_sum(jnp.where(take, top_lists, 0), axis=-1)
    valid_prefix = (position + 1 >= k) & (position < n_available)
    objective = jnp.where(valid_prefix, V * tau_sorted - top_sum, jnp.inf)
    best = jnp.argmin(objective)
    # With V = inf every valid prefix scores +inf too; fall back to the shortest valid one.
    best = jnp.where(valid_prefix[best], best, jnp.maximum(k - 1, 0))

    # The k largest queues of the best prefix: all above the k-th value, then ties in order.
    threshold = top_lists[best, jnp.maximum(k - 1, 0)]
    in_prefix = position <= best
    above = in_prefix & (queue_sorted > threshold)
    tied = in_prefix & (queue_sorted == threshold)
    need = k - jnp.sum(above, dtype=jnp.int32)
    # associative_scan: XLA:CPU lowers jnp.cumsum to a quadratic reduce-window.
    tied_upto = lax.associative_scan(jnp.add, tied.astype(jnp.int32))
    return (above | (tied & (tied_upto <= need))) & (k > 0)


def _dnc_small(tau_bar, queue, available, k, m, V, priority=None, schedule="auto"):
    # Position of each client in the tau_bar order.
    rank = counting_rank(materialise(tau_bar), ~available, priority)
    both = jnp.stack([tau_bar, queue], axis=-1)
    # One scatter for both arrays: measurably faster than two, and than one-hot gathers.
    tau_sorted, queue_sorted = jnp.zeros_like(both).at[rank].set(both, unique_indices=True).T
    n_available = jnp.sum(available, dtype=jnp.int32)
    chosen_sorted = _best_in_sorted_order(tau_sorted, queue_sorted, n_available, k, m, V, schedule)
    return chosen_sorted[rank]


def _dnc_large(tau_bar, queue, available, k, m, V, priority=None, schedule="auto"):
    order = sort_order(tau_bar, ~available, priority)
    n_available = jnp.sum(available, dtype=jnp.int32)
    chosen_sorted = _best_in_sorted_order(
        tau_bar[order], queue[order], n_available, k, m, V, schedule
    )
    return jnp.zeros(tau_bar.shape[0], bool).at[order].set(chosen_sorted, unique_indices=True)


def p4_objective(selected, tau_bar, queue, V):
    """Value of P4's objective for a selection mask (0 for the empty set).

    Args:
      selected: bool[N] selection mask.
      tau_bar: f[N] exchange times.
      queue: f[N] virtual-queue backlogs.
      V: penalty factor, possibly traced.
    """
    chex.assert_rank([selected, tau_bar, queue, V], [1, 1, 1, 0])
    chex.assert_equal_shape([selected, tau_bar, queue])
    max_tau = jnp.max(jnp.where(selected, tau_bar, -jnp.inf))
    max_tau = jnp.where(jnp.any(selected), max_tau, 0.0)
    return V * max_tau - jnp.sum(jnp.where(selected, queue, 0))
