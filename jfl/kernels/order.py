"""Stable orderings of one key vector, shared by the selection and assignment kernels.

The order is by ascending key, ties to the lower index; an optional ``unavailable`` mask puts
the unavailable entries after all the available ones. Two implementations give the same order of
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


def _check(key, unavailable):
    chex.assert_rank(key, 1)
    if unavailable is not None:
        chex.assert_rank(unavailable, 1)
        chex.assert_type(unavailable, bool)
        chex.assert_equal_shape([key, unavailable])


def counting_rank(key: jax.Array, unavailable: jax.Array | None = None) -> jax.Array:
    """Position of each entry in the order (available first, ascending key, lower index first).

    O(P^2) comparisons: ``i`` precedes ``j`` if it is available and ``j`` is not, or both are
    (un)available and ``key[i] < key[j]``, or the keys are equal and ``i < j``. A NaN key compares
    neither before nor after anything; keep keys NaN-free (or materialised with ``materialise``).

    Args:
      key: [P] sort key (float or int).
      unavailable: optional bool[P]; unavailable entries go after the available ones.

    Returns:
      int32[P] rank, a permutation of 0..P-1.
    """
    _check(key, unavailable)
    index = jnp.arange(key.shape[0], dtype=jnp.int32)
    a_key, b_key = key[:, None], key[None, :]
    before = (a_key < b_key) | ((a_key == b_key) & (index[:, None] < index[None, :]))
    if unavailable is not None:
        a_unav, b_unav = unavailable[:, None], unavailable[None, :]
        before = (a_unav < b_unav) | ((a_unav == b_unav) & before)
    return jnp.sum(before, axis=0, dtype=jnp.int32)


def counting_order(key: jax.Array, unavailable: jax.Array | None = None) -> jax.Array:
    """Indices in the order of ``counting_rank`` (its inverse permutation), int32[P]."""
    rank = counting_rank(key, unavailable)
    index = jnp.arange(key.shape[0], dtype=jnp.int32)
    return jnp.zeros_like(index).at[rank].set(index, unique_indices=True)


def sort_order(key: jax.Array, unavailable: jax.Array | None = None) -> jax.Array:
    """Indices by one stable O(P log P) sort, int32[P].

    The same order as ``counting_rank`` among the available entries; the unavailable ones
    follow in index order. They get a NaN key, which XLA's total order puts after +inf: a single-key
    sort is markedly faster on CPU than a lexicographic one.
    """
    _check(key, unavailable)
    index = jnp.arange(key.shape[0], dtype=jnp.int32)
    if unavailable is not None:
        key = jnp.where(unavailable, jnp.nan, key)
    _, order = lax.sort_key_val(key, index, is_stable=True)
    return order


def sorting_rank(key: jax.Array, unavailable: jax.Array | None = None) -> jax.Array:
    """The inverse permutation of ``sort_order``: ``counting_rank``'s rank for every available
    entry, in O(P log P) (the unavailable entries take the last positions in index order)."""
    order = sort_order(key, unavailable)
    return jnp.empty_like(order).at[order].set(jnp.arange(order.shape[0], dtype=order.dtype))
