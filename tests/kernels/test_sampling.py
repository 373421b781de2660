"""The samplers' laws against their exact probabilities, on many draws (jfl.kernels.sampling).

Each law is checked on R draws (one vmapped program per sampler) against probabilities computed
independently: by enumerating every order of successive draws (``gumbel_top_k``), the π it is
given (``systematic_sample``), R·m·p (``sample_with_replacement``), a uniform share of the
slots left (``fill_uniformly``) and a plain capping loop (``capped_inclusion``). The tolerance
is Z_MAX binomial standard errors of R draws: with the fixed seeds below, a correct sampler
stays within it; a wrong law (k·p for successive sampling, say) is off by tens of them.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfl.kernels.sampling import (
    capped_inclusion,
    clustered_buckets,
    draw_per_bucket,
    fill_uniformly,
    gumbel_top_k,
    sample_with_replacement,
    systematic_sample,
)
from jfl.reference.numpy_sampling import clustered_numpy

R = 20_000  # draws per law
Z_MAX = 4.5  # binomial standard errors allowed (two-sided, ≈ 7e-6 per client)
N, K = 6, 3


def successive_inclusion(p: np.ndarray, k: int) -> np.ndarray:
    """P(i among k successive draws, each ∝ p among those left), by enumerating the orders."""
    n = len(p)
    inclusion = np.zeros(n)
    for sequence in itertools.permutations(range(n), k):
        prob, left = 1.0, 1.0
        for i in sequence:
            prob *= p[i] / left
            left -= p[i]
        inclusion[list(sequence)] += prob
    return inclusion


def capped_numpy(w: np.ndarray, m: float) -> np.ndarray:
    """Cap at 1 the clients whose share would exceed it, until none does (a plain loop)."""
    capped = np.zeros(len(w), bool)
    while True:
        rest = w[~capped].sum()
        scale = (m - capped.sum()) / rest if rest > 0 else 0.0
        over = ~capped & (scale * w >= 1.0)
        if not over.any():
            return np.where(capped, 1.0, np.minimum(scale * w, 1.0))
        capped |= over


def assert_frequencies(draws: np.ndarray, expected: np.ndarray) -> None:
    """Inclusion frequencies over the draws' first axis within Z_MAX binomial errors."""
    frequency = draws.mean(axis=0)
    error = np.sqrt(expected * (1 - expected) / draws.shape[0])
    np.testing.assert_array_less(np.abs(frequency - expected), Z_MAX * error + 1e-12)


def keys(seed: int) -> jax.Array:
    return jax.random.split(jax.random.key(seed), R)


@pytest.fixture(scope="module")
def p():
    raw = np.random.default_rng(0).gamma(1.0, size=N)
    return raw / raw.sum()


def test_gumbel_top_k_is_successive_sampling(p):
    draws = jax.jit(jax.vmap(gumbel_top_k, in_axes=(0, None, None, None)))
    available = jnp.ones(N, bool)
    picked = np.asarray(draws(keys(1), jnp.log(jnp.asarray(p, jnp.float32)), available, K))
    assert (picked.sum(axis=1) == K).all()
    exact = successive_inclusion(p, K)
    assert_frequencies(picked, exact)
    # Not k·p: the law the peers' numpy.random.choice(replace=False) draws is not proportional.
    assert np.abs(picked.mean(axis=0) - np.minimum(K * p, 1)).max() > 0.05

    # An unavailable client is never drawn; the others follow p renormalised among them, and a
    # zero-probability client only once the positive ones run out (here: never, k < 5).
    available = np.ones(N, bool)
    available[0] = False
    q = np.where(available, p, 0.0)
    q[1] = 0.0
    logits = jnp.log(jnp.asarray(q, jnp.float32))
    picked = np.asarray(draws(keys(2), logits, jnp.asarray(available), K))
    assert not picked[:, :2].any() and (picked.sum(axis=1) == K).all()
    assert_frequencies(picked[:, 2:], successive_inclusion(q[2:] / q.sum(), K))
    # More than there are available: all of them, the zero-probability one included.
    picked = np.asarray(draws(keys(3)[:50], logits, jnp.asarray(available), N))
    np.testing.assert_array_equal(picked, np.broadcast_to(available, picked.shape))


def test_fill_uniformly_keeps_the_picked_and_draws_the_rest_uniformly():
    """The picked clients stay; k − |picked| more come uniformly from the available rest (each
    with probability (k − |picked|)/#rest); fewer available than slots: all of them."""
    draws = jax.jit(jax.vmap(fill_uniformly, in_axes=(0, None, None, None)))
    picked = jnp.asarray([True, False, False, False, False, False])
    available = jnp.asarray([True, True, False, True, True, True])
    filled = np.asarray(draws(keys(7), picked, available, K))
    assert filled[:, 0].all() and not filled[:, 2].any() and (filled.sum(axis=1) == K).all()
    rest = np.asarray(available & ~picked)
    assert_frequencies(filled[:, rest], np.full(rest.sum(), (K - 1) / rest.sum()))
    filled = np.asarray(draws(keys(8)[:50], picked, available, N))
    np.testing.assert_array_equal(filled, np.broadcast_to(np.asarray(available), filled.shape))


def test_capped_inclusion_matches_the_plain_loop():
    rng = np.random.default_rng(4)
    cases = []
    for _ in range(200):
        w = rng.gamma(rng.uniform(0.2, 3.0), size=N) * (rng.uniform(size=N) > 0.2)
        m = float(rng.integers(1, N + 1))
        cases.append((w, m))
    cases += [(np.ones(N), 2.0), (np.array([100.0, 1, 1, 1, 1, 1]), 3.0), (np.zeros(N), 2.0)]
    weights = jnp.asarray([w for w, _ in cases], jnp.float32)
    ms = jnp.asarray([m for _, m in cases], jnp.float32)
    pis = np.asarray(jax.jit(jax.vmap(capped_inclusion))(weights, ms))
    for (w, m), pi in zip(cases, pis, strict=True):
        want = capped_numpy(w.astype(np.float32).astype(float), m)
        np.testing.assert_allclose(pi, want, atol=2e-6, err_msg=f"w={w}, m={m}")
        assert np.all((pi >= 0) & (pi <= 1))
        if (w > 0).sum() >= m:
            np.testing.assert_allclose(pi.sum(), m, rtol=1e-5)
        else:  # too few positive weights: every one of them certain
            np.testing.assert_array_equal(pi, (w > 0).astype(float))


def test_systematic_sample_has_exact_inclusion_probabilities(p):
    m = 3
    pi = np.array(capped_inclusion(jnp.asarray(p, jnp.float32), m), dtype=np.float64)
    pi[np.argmin(pi)] = 0.0  # edge cases: a client that can never be drawn ...
    pi[np.argmax(pi)] = 1.0  # ... and one always drawn, with the rest rescaled to Σπ = m
    free = (pi > 0) & (pi < 1)
    pi[free] *= (m - 1.0) / pi[free].sum()
    picked = np.asarray(jax.jit(jax.vmap(systematic_sample, in_axes=(0, None)))(keys(5), pi))
    assert (picked.sum(axis=1) == m).all()  # exactly Σπ every time
    assert picked[:, np.argmax(pi)].all() and not picked[:, pi == 0].any()
    assert_frequencies(picked, pi)


def test_sample_with_replacement_counts_m_draws_proportional_to_p(p):
    m = 4
    counts = np.asarray(
        jax.jit(jax.vmap(sample_with_replacement, in_axes=(0, None, None)), static_argnums=2)(
            keys(6), jnp.log(jnp.asarray(p, jnp.float32)), m
        )
    )
    assert counts.dtype == np.int32 and (counts.sum(axis=1) == m).all()
    error = np.sqrt(m * p * (1 - p) / R)
    np.testing.assert_array_less(np.abs(counts.mean(axis=0) - m * p), Z_MAX * error)


def test_clustered_buckets_match_the_plain_pouring():
    rng = np.random.default_rng(7)
    shares = rng.gamma(rng.uniform(0.1, 2.0, size=(100, 1)), size=(100, N))
    shares[:5] = 1.0  # equal shares, and one client holding almost everything
    shares[5] = [50.0, 1, 1, 1, 1, 1]
    shares /= shares.sum(axis=1, keepdims=True)
    got = np.asarray(jax.jit(jax.vmap(clustered_buckets, in_axes=(0, None)), static_argnums=1)(
        jnp.asarray(shares, jnp.float32), K))  # fmt: skip
    for p, buckets in zip(shares, got, strict=True):
        np.testing.assert_allclose(buckets, clustered_numpy(p, K), atol=2e-6)
        np.testing.assert_allclose(buckets.sum(axis=1), 1.0, rtol=1e-5)  # each a distribution
        np.testing.assert_allclose(buckets.sum(axis=0), K * p, atol=2e-6)  # unbiased


def test_draw_per_bucket_is_unbiased(p):
    buckets = clustered_buckets(jnp.asarray(p, jnp.float32), K)
    draw = jax.jit(jax.vmap(draw_per_bucket, in_axes=(0, None)))
    counts = np.asarray(draw(keys(8), buckets))
    assert counts.dtype == np.int32 and (counts.sum(axis=1) == K).all()
    r = np.asarray(buckets, np.float64)
    error = np.sqrt((r * (1 - r)).sum(axis=0) / R)
    np.testing.assert_array_less(np.abs(counts.mean(axis=0) - K * p), Z_MAX * error + 1e-12)
    # A bucket that one client fills alone always yields that client.
    full = (r > 1 - 1e-6).sum(axis=0)
    assert full.any() and (counts >= full).all()
