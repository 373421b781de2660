"""``jfl.kernels.batching.batched_like``: the same values, batched wherever one of its inputs
is (so that a loop under ``vmap`` finds its carry batched from the start)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jfl.kernels.batching import batched_like


def test_values_unchanged():
    key = jax.random.key(0)
    tree = (jnp.arange(3.0), jnp.zeros((0, 2), bool), jnp.int32(7), key)
    for inputs in ([jnp.zeros(0)], [key, jnp.array([-1.0, jnp.nan])], {"a": jnp.ones(2)}, []):
        out = batched_like(tree, inputs)
        for got, want in zip(jax.tree.leaves(out), jax.tree.leaves(tree), strict=True):
            assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(out[0], tree[0])
        assert int(out[2]) == 7
        np.testing.assert_array_equal(jax.random.key_data(out[3]), jax.random.key_data(key))


def test_batched_where_an_input_is():
    seen = {}

    def f(x, y):
        seen["plain"] = jnp.zeros(2)
        seen["like_x"] = batched_like(jnp.zeros(2), [x])
        seen["like_y"] = batched_like(jnp.zeros(2), [y])
        return x

    jax.vmap(f, in_axes=(0, None))(jnp.arange(4.0), jnp.ones(3))
    # (inside vmap without jit, only batched values are tracers)
    assert not isinstance(seen["plain"], jax.core.Tracer)
    assert isinstance(seen["like_x"], jax.core.Tracer)
    assert not isinstance(seen["like_y"], jax.core.Tracer)


def test_a_loop_gives_the_same_values():
    def run(x):
        start = batched_like(jnp.zeros(()), [x])
        return lax.scan(lambda c, v: (c + v, None), start, jnp.broadcast_to(x, (3,)))[0]

    np.testing.assert_array_equal(jax.jit(jax.vmap(run))(jnp.arange(4.0)), 3 * jnp.arange(4.0))
