"""Stable orderings of one key vector, shared by the selection and assignment kernels.

The order is by ascending key, ties to the lower index, or to the lower ``priority`` when one is
given (a permutation of 0..P-1, e.g. a per-run random order of the clients, so that ties favour
no index); an optional ``unavailable`` mask puts the unavailable entries after all the available
ones. Two implementations give the same order of
the available entries (the unavailable ones follow, by key in the counting order, by index in the
sorted one):

- ``counting_rank`` / ``counting_order``: O(P^2) elementwise comparisons and an integer sum. For
  the small sizes of a vmapped runner this beats XLA's sort on CPU by a wide margin, and integer
  counts are exact whatever the batch shape.
- ``sort_order`` / ``sorting_rank``: one stable O(P log P) sort, for large sizes.

A *rank* gives the position of each entry in the order; an *order* lists the entries in it (the
inverse permutation). All functions work on one instance (rank-1 keys), are pure and run under
``jit`` and ``vmap``.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
from jax import lax


def materialise(x: jax.Array) -> jax.Array:
    """``x`` (floating) computed once, with ±inf clipped to the extreme finite values.

    XLA:CPU fuses elementwise producers into their consumers. In front of the P^2 comparisons of
    ``counting_rank`` the producer (e.g. a whole ridge estimate) would be recomputed for every
    pair, and the two evaluations of an operand may differ in the last bit (with and without an
    FMA), so that an entry could compare "before itself". A product with the identity matrix is a
    library call XLA does not fuse through, and exact (one non-zero term per output) once
    infinities, whose product with 0 is NaN, are clipped. Clipping keeps the order except between
    ±inf and the extreme finite values; finite values pass unchanged (-0.0 may become 0.0, an
    equal key). A NaN anywhere makes every output NaN.
    """
    chex.assert_rank(x, 1)
    chex.assert_type(x, float)
    limit = jnp.finfo(x.dtype).max
    eye = jnp.eye(x.shape[0], dtype=x.dtype)
    return jnp.matmul(jnp.clip(x, -limit, limit), eye, precision=lax.Precision.HIGHEST)


def _check(key, unavailable, priority=None):
    chex.assert_rank(key, 1)
    if unavailable is not None:
        chex.assert_rank(unavailable, 1)
        chex.assert_type(unavailable, bool)
        chex.assert_equal_shape([key, unavailable])
    if priority is not None:
        chex.assert_rank(priority, 1)
        chex.assert_type(priority, int)
        chex.assert_equal_shape([key, priority])


def inverse_permutation(permutation: jax.Array) -> jax.Array:
    """``inverse[permutation[i]] = i`` (int32[P]), one scatter."""
    index = jnp.arange(permutation.shape[0], dtype=jnp.int32)
    return jnp.zeros_like(index).at[permutation].set(index, unique_indices=True)


def counting_rank(
    key: jax.Array, unavailable: jax.Array | None = None, priority: jax.Array | None = None
) -> jax.Array:
    """Position of each entry in the order (available first, ascending key, then ascending
    ``priority``, by default the index).

    O(P^2) comparisons: ``i`` precedes ``j`` if it is available and ``j`` is not, or both are
    (un)available and ``key[i] < key[j]``, or the keys are equal and ``priority[i] <
    priority[j]``. A NaN key compares neither before nor after anything; keep keys NaN-free (or
    materialised with ``materialise``).

    Args:
      key: [P] sort key (float or int).
      unavailable: optional bool[P]; unavailable entries go after the available ones.
      priority: optional int[P] permutation of 0..P-1 that breaks ties (default: the index).

    Returns:
      int32[P] rank, a permutation of 0..P-1.
    """
    _check(key, unavailable, priority)
    index = jnp.arange(key.shape[0], dtype=jnp.int32) if priority is None else priority
    a_key, b_key = key[:, None], key[None, :]
    before = (a_key < b_key) | ((a_key == b_key) & (index[:, None] < index[None, :]))
    if unavailable is not None:
        a_unav, b_unav = unavailable[:, None], unavailable[None, :]
        before = (a_unav < b_unav) | ((a_unav == b_unav) & before)
    return jnp.sum(before, axis=0, dtype=jnp.int32)


def counting_order(
    key: jax.Array, unavailable: jax.Array | None = None, priority: jax.Array | None = None
) -> jax.Array:
    """Indices in the order of ``counting_rank`` (its inverse permutation), int32[P]."""
    return inverse_permutation(counting_rank(key, unavailable, priority))


def sort_order(
    key: jax.Array, unavailable: jax.Array | None = None, priority: jax.Array | None = None
) -> jax.Array:
    """Indices by one stable O(P log P) sort, int32[P].

    The same order as ``counting_rank`` among the available entries; the unavailable ones
    follow in index (or ``priority``) order. They get a NaN key, which XLA's total order puts
    after +inf: a single-key sort is markedly faster on CPU than a lexicographic one, so a
    ``priority`` is applied by listing the entries in priority order before the stable sort.
    """
    _check(key, unavailable, priority)
    if unavailable is not None:
        key = jnp.where(unavailable, jnp.nan, key)
    if priority is None:
        index = jnp.arange(key.shape[0], dtype=jnp.int32)
    else:
        index = inverse_permutation(priority)  # the entries listed by ascending priority
        key = key[index]
    _, order = lax.sort_key_val(key, index, is_stable=True)
    return order


def sorting_rank(
    key: jax.Array, unavailable: jax.Array | None = None, priority: jax.Array | None = None
) -> jax.Array:
    """The inverse permutation of ``sort_order``: ``counting_rank``'s rank for every available
    entry, in O(P log P) (the unavailable entries take the last positions, in index or
    ``priority`` order)."""
    return inverse_permutation(sort_order(key, unavailable, priority))


def random_priority(key: jax.Array, num_clients: int) -> jax.Array:
    """A uniformly random order of the clients, drawn once per run: int32[N], a permutation of
    0..N-1 giving each client's rank among tied clients (the ``priority`` of
    ``topk_mask`` and ``divide_and_conquer``)."""
    return jax.random.permutation(key, num_clients).astype(jnp.int32)
