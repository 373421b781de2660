"""``jfl.kernels.prng``: the flat draws give ``jax.random``'s bits exactly.

The reference is ``jax.random`` itself, called with the shape as given: every value, every
shape (empty, one axis, several), every float dtype, vmapped or not, with and without
``jax_threefry_partitionable``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfl.kernels import prng

SHAPES = [(50, 17), (4, 7), (3, 5, 2), (1, 9), (9, 1), (0, 3), (7,), ()]


@pytest.fixture(params=[True, False], ids=["partitionable", "classic"])
def threefry(request):
    before = jax.config.jax_threefry_partitionable
    jax.config.update("jax_threefry_partitionable", request.param)
    yield request.param
    jax.config.update("jax_threefry_partitionable", before)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16])
def test_uniform_is_jax_uniform(threefry, shape, dtype):
    for seed in range(3):
        key = jax.random.key(seed)
        got = prng.uniform(key, shape, dtype)
        want = jax.random.uniform(key, shape, dtype)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))


@pytest.mark.parametrize("shape", [(6, 2), (2, 3, 2), (5,), (0, 2)])
def test_split_is_jax_split(threefry, shape):
    key = jax.random.key(11)
    got = jax.random.key_data(prng.split(key, shape))
    np.testing.assert_array_equal(got, jax.random.key_data(jax.random.split(key, shape)))


def test_vmapped_draws_are_jax_draws(threefry):
    keys = jax.random.split(jax.random.key(2), 5)
    got = jax.jit(jax.vmap(lambda k: prng.uniform(k, (4, 3))))(keys)
    want = jax.vmap(lambda k: jax.random.uniform(k, (4, 3)))(keys)
    np.testing.assert_array_equal(got, want)
    got = jax.vmap(lambda k: jax.random.key_data(prng.split(k, (3, 2))))(keys)
    want = jax.vmap(lambda k: jax.random.key_data(jax.random.split(k, (3, 2))))(keys)
    np.testing.assert_array_equal(got, want)
