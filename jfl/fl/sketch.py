"""Sketches: a fixed Gaussian random projection of model-sized vectors to a few coordinates.

The update- and gradient-aware selection methods (DELTA, DivFL, clustered sampling's Algorithm
2) compare clients by the distances, norms and angles of their model updates or gradients. A
model has from hundreds to millions of parameters; a sketch ``Rᵀv`` with ``R`` a D × K matrix of
independent N(0, 1/K) entries keeps ``E‖Rᵀv‖² = ‖v‖²`` and, by the Johnson–Lindenstrauss lemma,
every pairwise distance of n vectors within a factor 1 ± ε with probability ≥ 1 − δ once
K ≳ 8·ln(n²/δ)/ε² (Dasgupta and Gupta 2003). K = 128 keeps relative errors near
1/sqrt(K/2) ≈ 0.125 per distance.

``R`` is never stored: its rows come in blocks of ``SKETCH_BLOCK``, block b drawn from
``fold_in(key, b)``, so that the memory is K·SKETCH_BLOCK floats whatever D, and one key (drawn
once per run) fixes the whole projection. Each block is one matrix product of a fixed inner
length, and the blocks are added in order, so that a vector's sketch does not depend on how many
others are sketched with it, nor on the batch of runs (``tests/fl/test_sketch.py`` checks it).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

SKETCH_BLOCK = 256  # rows of the projection drawn at a time


def flat_rows(tree) -> jax.Array:
    """f[B, D]: each of the B leading entries of ``tree``'s leaves (all [B, ...]) flattened and
    concatenated in leaf order (the vector a parameter pytree stands for)."""
    leaves = jax.tree.leaves(tree)
    return jnp.concatenate([leaf.reshape(leaf.shape[0], -1) for leaf in leaves], axis=1)


def projection_block(key: jax.Array, block, dim: int) -> jax.Array:
    """f[SKETCH_BLOCK, dim]: rows ``block·SKETCH_BLOCK`` onwards of the projection R (entries
    N(0, 1/dim))."""
    normal = jax.random.normal(jax.random.fold_in(key, block), (SKETCH_BLOCK, dim), jnp.float32)
    return normal / math.sqrt(dim)


def sketch(key: jax.Array, vectors: jax.Array, dim: int) -> jax.Array:
    """f[B, dim]: ``vectors`` (f[B, D]) projected by the projection of ``key``, ``vectors @ R``.

    Args:
      key: the projection's key (one per run: every sketch of the run uses the same R).
      vectors: f[B, D].
      dim: K, the sketch's dimension (static).
    """
    num_rows, length = vectors.shape
    num_blocks = max(1, math.ceil(length / SKETCH_BLOCK))
    padded = jnp.pad(vectors, ((0, 0), (0, num_blocks * SKETCH_BLOCK - length)))
    blocks = padded.reshape(num_rows, num_blocks, SKETCH_BLOCK).transpose(1, 0, 2)

    def add(total, xs):
        block, rows = xs
        product = jnp.dot(rows, projection_block(key, block, dim), precision="highest")
        return total + product, None

    start = jnp.zeros((num_rows, dim), jnp.float32)
    total, _ = jax.lax.scan(add, start, (jnp.arange(num_blocks), blocks))
    return total
