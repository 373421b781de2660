"""Reductions whose float result does not depend on the batch shape.

XLA may order a reduction differently when the same per-instance computation is vmapped over a
different number of configurations, which changes the last bits of a sum. Sums that feed
decisions or recorded metrics go through these elementwise-only versions, so that a
configuration's result is bit-identical whatever batch or chunk it runs in.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


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
    x = jnp.asarray(x)
    return pairwise_sum(x, axis) / x.shape[axis]
