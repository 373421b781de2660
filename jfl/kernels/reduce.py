"""Reductions whose float result does not depend on the batch shape.

XLA may order a reduction differently when the same per-instance computation is vmapped over a
different number of configurations, which changes the last bits of a sum. Sums that feed
decisions or recorded metrics go through these elementwise-only versions, so that a
configuration's result is bit-identical whatever batch or chunk it runs in.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def pairwise_sum(x: jax.Array, axis: int = -1) -> jax.Array:
    """Sum over ``axis`` by repeated halving (zero-padded to a power of two)."""
    x = jnp.moveaxis(jnp.asarray(x), axis, -1)
    n = x.shape[-1]
    if n == 0:
        return jnp.zeros(x.shape[:-1], x.dtype)
    size = 1 << (n - 1).bit_length()
    if size != n:
        x = jnp.concatenate([x, jnp.zeros((*x.shape[:-1], size - n), x.dtype)], axis=-1)
    while x.shape[-1] > 1:
        half = x.shape[-1] // 2
        x = x[..., :half] + x[..., half:]
    return x[..., 0]


def pairwise_mean(x: jax.Array, axis: int = -1) -> jax.Array:
    """The mean along ``axis`` by ``pairwise_sum``: the same bits for any batch shape."""
    x = jnp.asarray(x)
    return pairwise_sum(x, axis) / x.shape[axis]


def pairwise_norm(x: jax.Array, axis: int = -1) -> jax.Array:
    """The Euclidean norm along ``axis``, its squares summed by ``pairwise_sum``: the same bits
    for any batch shape."""
    return jnp.sqrt(pairwise_sum(jnp.square(x), axis))


def doubling_cumsum(x: jax.Array) -> jax.Array:
    """Inclusive prefix sums along axis 0 by recursive doubling (Hillis-Steele).

    log2(L) vectorised steps in a fixed order of operations, which the solvers' NumPy mirrors
    repeat: after the step of shift s, entry i holds the sum of x[i-2s+1 .. i] (the shifted
    operand is padded with zeros, and x + 0 is x).
    """
    shift = 1
    while shift < x.shape[0]:
        padding = [(shift, 0, 0)] + [(0, 0, 0)] * (x.ndim - 1)
        x = x + lax.pad(x[:-shift], jnp.zeros((), x.dtype), padding)
        shift *= 2
    return x


def sequential_sum(x: jax.Array) -> jax.Array:
    """Σ over the last axis of a short static length, left to right (the mirrors' order; an
    elementwise chain, which fuses, unlike a reduce)."""
    total = x[..., 0]
    for i in range(1, x.shape[-1]):
        total = total + x[..., i]
    return total


def sequential_max(x: jax.Array) -> jax.Array:
    """max over the last axis of a short static length, as an elementwise chain."""
    out = x[..., 0]
    for i in range(1, x.shape[-1]):
        out = jnp.maximum(out, x[..., i])
    return out


def sequential_min(x: jax.Array) -> jax.Array:
    """min over the last axis of a short static length, as an elementwise chain."""
    out = x[..., 0]
    for i in range(1, x.shape[-1]):
        out = jnp.minimum(out, x[..., i])
    return out
