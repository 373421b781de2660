"""Batch-independent reductions (``jfl.kernels.reduce``) against plain NumPy.

``pairwise_sum`` must equal a NumPy float32 sum by the same halving bit for bit, be within the
pairwise rounding bound of the exact sum, and not depend on the batch it is vmapped in.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from jfl.kernels.reduce import pairwise_mean, pairwise_norm, pairwise_sum

EPS32 = float(np.finfo(np.float32).eps)


def numpy_pairwise(x):
    """Sum over the last axis by halving, recursively: (first half) + (second half), where the
    halves split a zero-padding of the axis to the next power of two."""
    n = x.shape[-1]
    if n == 0:
        return np.zeros(x.shape[:-1], x.dtype)
    size = 1 << (n - 1).bit_length()
    padded = np.zeros((*x.shape[:-1], size), x.dtype)
    padded[..., :n] = x

    def halve(v):
        if v.shape[-1] == 1:
            return v[..., 0]
        half = v.shape[-1] // 2
        left, right = v[..., :half], v[..., half:]
        # level by level: the sum of the two halves elementwise, then recurse
        return halve(left + right)

    return halve(padded)


class ReduceTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters(((3, 40, 5), 1), ((33, 4), 0))
    def test_matches_numpy_halving(self, shape, axis):
        """Bit for bit equal to the NumPy halving (float32 random normal, mixed magnitudes)."""
        rng = np.random.default_rng(sum(shape))
        x = (rng.normal(size=shape) * 10.0 ** rng.integers(-3, 4, shape)).astype(np.float32)
        got = np.asarray(self.variant(pairwise_sum, static_argnums=1)(x, axis))
        want = numpy_pairwise(np.moveaxis(x, axis, -1))
        np.testing.assert_array_equal(got, want)
        assert got.dtype == np.float32
        mean = np.asarray(self.variant(pairwise_mean, static_argnums=1)(x, axis))
        # sum / n, within an ulp: XLA may divide by the constant n as a product with 1/n
        np.testing.assert_allclose(mean, want / np.float32(x.shape[axis]), rtol=EPS32, atol=0)
        # the norm: sqrt of the same halving of the squares (XLA may fuse a square into the sum)
        norm = np.asarray(self.variant(pairwise_norm, static_argnums=1)(x, axis))
        squares = numpy_pairwise(np.moveaxis(np.square(x), axis, -1))
        np.testing.assert_allclose(norm, np.sqrt(squares), rtol=2 * EPS32, atol=0)
        np.testing.assert_allclose(norm, np.linalg.norm(x.astype(np.float64), axis=axis), rtol=1e-5)

    @chex.variants(with_jit=True, without_jit=True)
    def test_edge_cases(self):
        """An empty axis sums to 0; one element is returned as is; ±inf and NaN propagate;
        integer and bool inputs keep their dtype."""
        fn = self.variant(pairwise_sum)
        np.testing.assert_array_equal(np.asarray(fn(jnp.zeros((3, 0)))), [0.0, 0.0, 0.0])
        np.testing.assert_array_equal(np.asarray(fn(jnp.asarray([[-0.5]]))), [-0.5])
        got = np.asarray(fn(jnp.asarray([[1.0, np.inf, 2.0], [1.0, np.nan, 0.0]])))
        assert got[0] == np.inf and np.isnan(got[1])
        ints = fn(jnp.arange(10, dtype=jnp.int32))
        assert ints.dtype == jnp.int32 and int(ints) == 45


@jax.jit
def _sums(x, ints, cube):
    """The reductions test_pairwise_sum_matches_numpy checks, as one compiled program per n
    (op by op, every halving step of every shape would compile on its own; the without_jit
    variants of ReduceTest cover eager execution)."""
    return pairwise_sum(x), pairwise_sum(ints), pairwise_mean(ints), pairwise_sum(cube, axis=1)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 8, 40, 1000])
def test_pairwise_sum_matches_numpy(n):
    """pairwise_sum vs np.sum in float64 (float32 input: pairwise rounding bound), and exactly
    for integer-valued input; pairwise_mean = sum / n; the axis argument is honoured."""
    rng = np.random.default_rng(34 + n)
    x = rng.normal(size=(6, n)).astype(np.float32)
    ints = rng.integers(-50, 50, (6, n)).astype(np.float32)
    cube = rng.integers(-5, 5, (3, n, 4)).astype(np.float32)
    got, int_sum, int_mean, cube_sum = (np.asarray(a) for a in _sums(x, ints, cube))
    # pairwise summation error ≤ ceil(log2 n)·eps32·Σ|x| (plus one rounding of the result)
    tol = (np.ceil(np.log2(max(n, 2))) + 1) * EPS32 * np.abs(x.astype(float)).sum(axis=1)
    assert np.all(np.abs(got - x.astype(float).sum(axis=1)) <= tol)
    np.testing.assert_array_equal(int_sum, ints.sum(axis=1))
    np.testing.assert_allclose(int_mean, ints.mean(axis=1), rtol=1e-6)
    np.testing.assert_array_equal(cube_sum, cube.sum(axis=1))


def test_pairwise_sum_empty_and_batch_invariance():
    """Empty axis gives zeros; a row's sum is bit-identical whatever the batch it is vmapped in."""
    assert np.asarray(pairwise_sum(jnp.zeros((3, 0)))).tolist() == [0.0, 0.0, 0.0]
    rng = np.random.default_rng(35)
    x = rng.normal(size=(64, 37)).astype(np.float32)
    fn = jax.jit(jax.vmap(pairwise_sum))
    full = np.asarray(fn(x))
    for size in (1, 5, 17):
        np.testing.assert_array_equal(np.asarray(fn(x[:size])), full[:size])
