"""Agglomerative clustering with Ward's criterion and a cut of its tree by weight.

``ward_linkage`` builds the tree of ``scipy.cluster.hierarchy.linkage(condensed, "ward")``: N − 1
merges, each of the two closest clusters, the distance from the merged cluster to every other
one given by the Lance–Williams recurrence for Ward's method (Lance and Williams 1967; Ward
1963), on squared distances

    d²(k, i ∪ j) = ((n_i + n_k)·d²(k, i) + (n_j + n_k)·d²(k, j) − n_k·d²(i, j)) / (n_i + n_j + n_k),

n the clusters' sizes. The merges are the naive O(N³) loop's (a ``lax.fori_loop`` of N − 1 steps
over a fixed N × N matrix); Ward's criterion is reducible, so merging the globally closest pair
gives heights in non-decreasing order and, without ties, the tree and merge order of scipy's
nearest-neighbour chain. Ties, which scipy leaves to its chain's order, go here to the pair
whose clusters' smallest points come first (a merged cluster is kept in the slot of its smallest
point; the pair (a, b), a < b, of slots at the least distance that is first in row-major order).

``cut_by_weight`` cuts such a tree into the largest subtrees whose total weight is at most a
limit: what ``scipy.cluster.hierarchy.fcluster(Z, limit, "distance")`` gives when Z's heights are
replaced by the merged clusters' weights.

``pairwise_distances`` gives the Euclidean distances between rows (e.g. the input of the
clustering), from the differences, in a fixed order of summation.

One instance, pure, fixed shapes (callers ``vmap``); an ``active`` mask restricts the clustering
to some of the points, the other rows of the result being padding.
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
from jax import lax

from jfl.kernels.reduce import pairwise_norm

# Rows of ``pairwise_distances`` computed at a time: bounds the memory to ROW_BLOCK·N·K floats
# per instance (the whole N·N·K difference array would be materialised by the summation).
ROW_BLOCK = 16


def pairwise_distances(x: jax.Array, y: jax.Array | None = None) -> jax.Array:
    """f[N, M]: the Euclidean distances ‖x_i − y_j‖ between the rows of ``x`` (f[N, K]) and of
    ``y`` (f[M, K], default ``x``), from the differences (exactly 0 for equal rows, where the
    Gram form ‖x‖² + ‖y‖² − 2⟨x, y⟩ leaves rounding noise) by ``pairwise_norm`` (the same
    bits whatever the batch), ``ROW_BLOCK`` rows at a time."""
    chex.assert_rank(x, 2)
    y = x if y is None else y
    chex.assert_rank(y, 2)

    def row(xi):
        return pairwise_norm(xi[None, :] - y)

    return lax.map(row, x, batch_size=min(ROW_BLOCK, x.shape[0]))


class Linkage(NamedTuple):
    """A dendrogram in scipy's layout: step t merges clusters ``pairs[t]`` into cluster N + t
    (a cluster id below N is a single point). Steps past the last merge of the active points are
    padding: ``pairs`` −1, ``height`` 0, ``size`` 0."""

    pairs: jax.Array  # i32[N-1, 2]  the two clusters merged at step t, smaller id first
    height: jax.Array  # f[N-1]  Ward distance between them (scipy's Z[:, 2])
    size: jax.Array  # i32[N-1]  points in the merged cluster (scipy's Z[:, 3]); 0: padding


def ward_linkage(distances: jax.Array, active: jax.Array | None = None) -> Linkage:
    """Ward's agglomerative clustering of the points with pairwise ``distances``.

    Args:
      distances: f[N, N] nonnegative dissimilarities (only the upper triangle is read, as
        scipy reads the condensed form).
      active: optional bool[N], the points to cluster (default all); the others are never
        merged, and the last N − #active steps are padding.

    Returns:
      ``Linkage``: with every point active and no ties, the rows of
      ``scipy.cluster.hierarchy.linkage(squareform(distances), "ward")``.
    """
    chex.assert_rank(distances, 2)
    n = distances.shape[0]
    chex.assert_shape(distances, (n, n))
    dtype = distances.dtype if jnp.issubdtype(distances.dtype, jnp.floating) else jnp.float32
    distances = distances.astype(dtype)
    active = jnp.ones(n, bool) if active is None else jnp.asarray(active, bool)
    chex.assert_shape(active, (n,))
    index = jnp.arange(n)
    upper = index[:, None] < index[None, :]
    # Squared distances, symmetric from the upper triangle (the condensed form).
    squared = jnp.square(jnp.where(upper, distances, distances.T))

    def merge(t, carry):
        squared, alive, label, count, out = carry
        pair = upper & alive[:, None] & alive[None, :]
        flat = jnp.argmin(jnp.where(pair, squared, jnp.inf).ravel())  # first in row-major order
        i, j = flat // n, flat % n
        ok = jnp.any(pair)
        n_i, n_j = count[i].astype(dtype), count[j].astype(dtype)
        n_k = count.astype(dtype)
        d_ij = squared[i, j]
        row = ((n_i + n_k) * squared[i] + (n_j + n_k) * squared[j] - n_k * d_ij) / (n_i + n_j + n_k)
        # Non-Euclidean dissimilarities can make the recurrence negative (scipy's sqrt: NaN).
        row = jnp.maximum(row, 0.0).at[i].set(0.0)
        merged = squared.at[i, :].set(row).at[:, i].set(row)
        low, high = jnp.minimum(label[i], label[j]), jnp.maximum(label[i], label[j])
        pairs, height, size = out
        out = (
            pairs.at[t].set(jnp.where(ok, jnp.stack([low, high]), -1)),
            height.at[t].set(jnp.where(ok, jnp.sqrt(d_ij), 0.0)),
            size.at[t].set(jnp.where(ok, count[i] + count[j], 0)),
        )
        return (
            jnp.where(ok, merged, squared),
            jnp.where(ok, alive.at[j].set(False), alive),
            jnp.where(ok, label.at[i].set(n + t), label),
            jnp.where(ok, count.at[i].set(count[i] + count[j]), count),
            out,
        )

    out = (
        jnp.full((n - 1, 2), -1, jnp.int32),
        jnp.zeros(n - 1, dtype),
        jnp.zeros(n - 1, jnp.int32),
    )
    start = (squared, active, index.astype(jnp.int32), jnp.ones(n, jnp.int32), out)
    *_, (pairs, height, size) = lax.fori_loop(0, n - 1, merge, start)
    return Linkage(pairs, height, size)


def node_weights(linkage: Linkage, weight: jax.Array) -> jax.Array:
    """f[2N−1]: each node's total weight, the N points' ``weight`` then the merged clusters'
    (0 for padding steps)."""
    chex.assert_rank(weight, 1)
    n = weight.shape[0]
    total = jnp.concatenate([weight, jnp.zeros(n - 1, weight.dtype)])

    def add(t, total):
        a, b = linkage.pairs[t, 0], linkage.pairs[t, 1]
        value = jnp.where(linkage.size[t] > 0, total[jnp.maximum(a, 0)] + total[b], 0.0)
        return total.at[n + t].set(value)

    return lax.fori_loop(0, n - 1, add, total)


def cut_by_weight(linkage: Linkage, weight: jax.Array, limit) -> jax.Array:
    """Each point's flat cluster: the largest subtree holding it whose total ``weight`` is at
    most ``limit``, named by its node id (N + t for step t's cluster), or the point itself when
    even its own weight exceeds the limit.

    This is ``fcluster(Z′, limit, "distance")`` for Z′ the tree with each height replaced by the
    merged cluster's weight (monotone up the tree for nonnegative weights), up to the numbering
    of the clusters. Points outside the tree (inactive) are their own cluster.

    Args:
      linkage: the tree (``ward_linkage``).
      weight: f[N] nonnegative weights of the points.
      limit: the largest weight of a cluster (float, possibly traced).

    Returns:
      i32[N] node ids in [0, 2N − 1).
    """
    n = weight.shape[0]
    fits = node_weights(linkage, weight) <= limit
    label = jnp.arange(2 * n - 1, dtype=jnp.int32)

    def down(s, label):
        # Top-down: a node's label is final before its children's.
        t = n - 2 - s
        node = n + t
        inherit = (linkage.size[t] > 0) & fits[node]
        children = jnp.maximum(linkage.pairs[t], 0)
        return label.at[children].set(jnp.where(inherit, label[node], label[children]))

    return lax.fori_loop(0, n - 1, down, label)[:n]
