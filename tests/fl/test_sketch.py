"""The sketch (jfl.fl.sketch) against the matrix product in NumPy float64 with the same
projection, its law (E‖Rᵀv‖² = ‖v‖², over many runs' projections), the Johnson–Lindenstrauss
bound on every pairwise distance, and its independence of the batch it is computed in."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from scipy.stats import chi2

from jfl.fl.sketch import SKETCH_BLOCK, flat_rows, projection_block, sketch

DIM = 128
LENGTH = 600  # three blocks, the last one padded


def projection_matrix(key, length, dim=DIM) -> np.ndarray:
    """R (f64[length, dim]) assembled block by block from the kernel's draws."""
    blocks = [np.asarray(projection_block(key, b, dim), np.float64)
              for b in range(math.ceil(length / SKETCH_BLOCK))]  # fmt: skip
    return np.concatenate(blocks)[:length]


@pytest.fixture(scope="module")
def sketch_fn():
    return jax.jit(sketch, static_argnums=2)


def test_sketch_is_the_projection_product(sketch_fn):
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(7, LENGTH)).astype(np.float32)
    key = jax.random.key(3)
    got = np.asarray(sketch_fn(key, vectors, DIM))
    want = vectors.astype(np.float64) @ projection_matrix(key, LENGTH)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # Entries N(0, 1/K): R's sample variance is 1/K to within its standard error.
    r = projection_matrix(key, LENGTH)
    assert abs(r.var() * DIM - 1) < 5 * math.sqrt(2 / r.size)


def test_a_vectors_sketch_does_not_depend_on_the_others(sketch_fn):
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(7, LENGTH)).astype(np.float32)
    key = jax.random.key(4)
    together = np.asarray(sketch_fn(key, vectors, DIM))
    alone = np.asarray(sketch_fn(key, vectors[2:3], DIM))
    np.testing.assert_array_equal(alone[0], together[2])
    batched = np.asarray(jax.jit(jax.vmap(sketch, (None, 0, None)), static_argnums=2)(
        key, np.stack([vectors, vectors[::-1]]), DIM))  # fmt: skip
    np.testing.assert_array_equal(batched[0], together)


def test_squared_norm_is_unbiased_over_projections():
    """K‖Rᵀv‖²/‖v‖² is χ²_K over the runs' projections: its mean over 400 keys is 1 within
    four standard errors, sqrt(2/K)/sqrt(400)."""
    runs = 400
    v = np.random.default_rng(2).normal(size=(1, LENGTH)).astype(np.float32)
    keys = jax.random.split(jax.random.key(5), runs)
    sketches = np.asarray(jax.jit(jax.vmap(sketch, (0, None, None)), static_argnums=2)(
        keys, v, DIM))[:, 0]  # fmt: skip
    ratio = (sketches.astype(np.float64) ** 2).sum(axis=1) / (v.astype(np.float64) ** 2).sum()
    assert abs(ratio.mean() - 1) < 4 * math.sqrt(2 / DIM) / math.sqrt(runs)
    # and it spreads as χ²_K/K does (variance 2/K), to within a quarter
    assert abs(ratio.var() * DIM / 2 - 1) < 0.25


def test_pairwise_distances_within_the_johnson_lindenstrauss_bound(sketch_fn):
    """n = 30 vectors: every squared distance kept within the factors that the union bound over
    the n(n−1)/2 pairs allows at δ = 1e-3. Each pair's ratio is exactly χ²_K/K (R Gaussian), so
    the factors are its δ/(2·pairs) quantiles: the Johnson–Lindenstrauss lemma with the exact
    tail in place of Dasgupta and Gupta's (2003) exponential bound, which at K = 128 certifies
    nothing for 435 pairs. And the sketch is no identity: the errors are not all 0."""
    n, delta = 30, 1e-3
    tail = delta / (2 * (n * (n - 1) // 2))
    low, high = chi2.ppf(tail, DIM) / DIM, chi2.isf(tail, DIM) / DIM
    rng = np.random.default_rng(6)
    vectors = (rng.normal(size=(n, LENGTH)) * rng.uniform(0.1, 3, size=(n, 1))).astype(np.float32)
    s = np.asarray(sketch_fn(jax.random.key(7), vectors, DIM), np.float64)
    v = vectors.astype(np.float64)
    i, j = np.triu_indices(n, 1)
    ratio = ((s[i] - s[j]) ** 2).sum(1) / ((v[i] - v[j]) ** 2).sum(1)
    assert np.all((low <= ratio) & (ratio <= high)), (low, high, ratio.min(), ratio.max())
    assert np.abs(ratio - 1).max() > 1e-3


def test_flat_rows_concatenate_leaves_in_tree_order():
    tree = {"b": np.arange(6.0).reshape(2, 3), "a": np.arange(8.0).reshape(2, 2, 2)}
    rows = np.asarray(flat_rows(tree))
    np.testing.assert_array_equal(rows[1], [4, 5, 6, 7, 3, 4, 5])
