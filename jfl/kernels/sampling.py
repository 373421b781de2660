"""Random selections with known laws: the samplers of the sampling-based selection methods.

Three laws, one instance each (callers ``vmap``):

* ``gumbel_top_k``: ``k`` clients without replacement, each draw ∝ p among those left
  (successive sampling; the law of ``numpy.random.choice(k, replace=False, p=p)``). Its inclusion
  probabilities are *not* k·p; Power-of-Choice and AFL draw their candidates this way, and
  ``fill_uniformly`` (p uniform) the slots a selection leaves over.
* ``systematic_sample``: exactly Σπ clients with inclusion probabilities exactly π (Madow's
  systematic sampling on a random order of the clients), for the methods whose aggregation
  weights 1/(m·π_i) need the true π (E3CS, DELTA); ``capped_inclusion`` turns weights into such
  π (π = min(1, λw), Σπ = m, as Exp3.M caps its probabilities).
* ``sample_with_replacement``: m independent draws ∝ p, as a multiplicity per client;
* ``clustered_buckets`` and ``draw_per_bucket``: clustered sampling's m distributions (Fraboni
  et al., ICML 2021, Algorithm 1), one client drawn from each, as a multiplicity per client.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from jfl.kernels.selection import topk_mask


def gumbel_top_k(key: jax.Array, logits: jax.Array, available: jax.Array, k) -> jax.Array:
    """``k`` available clients without replacement, each draw ∝ exp(logits) among the clients
    left: the ``k`` largest ``logits + Gumbel(0, 1)`` (Vieira 2014; Kool, van Hoof and Welling,
    ICML 2019, eq. 4). Clients with ``logits = -inf`` (p = 0) are drawn only once every other
    available client is; fewer than ``k`` available: all of them.

    Args:
      key: PRNG key.
      logits: f[N] log-probabilities up to a constant (log p).
      available: bool[N] the clients that may be drawn.
      k: how many (int, possibly traced).

    Returns:
      bool[N], ``min(k, #available)`` clients.
    """
    chex.assert_rank([logits, available], 1)
    chex.assert_equal_shape([logits, available])
    noise = jax.random.gumbel(key, logits.shape, jnp.float32)
    positive = available & ~jnp.isneginf(logits)
    drawn = topk_mask(jnp.where(positive, logits + noise, 0.0), positive, k)
    # Zero-probability clients only once the others run out, in the order of their own noise.
    left = jnp.asarray(k, jnp.int32) - jnp.sum(drawn, dtype=jnp.int32)
    return drawn | topk_mask(noise, available & ~positive, left)


def fill_uniformly(key: jax.Array, picked: jax.Array, available: jax.Array, k) -> jax.Array:
    """``picked`` and ``k − |picked|`` more of the available clients not in it, uniformly without
    replacement: the slots a selection leaves over (AFL's uniform share, Oort's last step).

    Args:
      key: PRNG key.
      picked: bool[N] the clients already selected.
      available: bool[N] the clients that may be drawn.
      k: the selection's size (int, possibly traced).

    Returns:
      bool[N], ``picked`` and ``min(k − |picked|, #(available ∖ picked))`` more clients.
    """
    left = k - jnp.sum(picked, dtype=jnp.int32)
    return picked | gumbel_top_k(key, jnp.zeros(picked.shape), available & ~picked, left)


def capped_inclusion(weights: jax.Array, m) -> jax.Array:
    """Inclusion probabilities π_i = min(1, λ·w_i) with Σπ = m: the largest weights capped at
    1 and the mass redistributed over the others in proportion to their weights (the capping of
    Exp3.M, Uchiya, Nakamura and Kudo, ALT 2010, Alg. 1). With fewer than m positive weights
    every positive one gets π = 1 (Σπ < m).

    Args:
      weights: f[N] nonnegative weights.
      m: the expected number of clients (int or float, possibly traced; 0 ≤ m ≤ N).

    Returns:
      f[N] π in [0, 1].
    """
    chex.assert_rank(weights, 1)
    order = jnp.argsort(-weights)
    w = weights[order]  # descending
    tail = jnp.cumsum(w[::-1])[::-1]  # tail[j] = Σ_{i ≥ j} w_i
    j = jnp.arange(w.shape[0])
    # j clients capped is consistent once the next weight, scaled, stays at most 1:
    # (m - j)·w_j ≤ Σ_{i ≥ j} w_i. The smallest such j (≤ m) is the water level.
    fits = ((m - j) * w <= tail) | (j >= m)
    capped = jnp.argmax(fits) if w.shape[0] else 0
    capped = jnp.where(jnp.any(fits), capped, w.shape[0])
    rest = jnp.where(capped < w.shape[0], tail[jnp.minimum(capped, w.shape[0] - 1)], 0.0)
    scale = jnp.where(rest > 0, (m - capped) / jnp.where(rest > 0, rest, 1.0), 0.0)
    pi = jnp.where(j < capped, 1.0, jnp.minimum(scale * w, 1.0))
    return jnp.zeros_like(pi).at[order].set(pi)


def systematic_sample(key: jax.Array, inclusion: jax.Array) -> jax.Array:
    """Exactly ``round(Σπ)`` clients, client i with probability exactly π_i: systematic sampling
    (Madow 1949) on a uniformly random order of the clients. Laid end to end in that order, the
    π_i cover [0, Σπ); the points u, u + 1, …, u + Σπ − 1 (u ~ U[0, 1)) each fall in one client's
    segment, which has length π_i ≤ 1. The random order makes the joint law not depend on the
    client index.

    Args:
      key: PRNG key.
      inclusion: f[N] π in [0, 1] whose sum is an integer (``capped_inclusion``).

    Returns:
      bool[N].
    """
    chex.assert_rank(inclusion, 1)
    k_order, k_point = jax.random.split(key)
    order = jax.random.permutation(k_order, inclusion.shape[0])
    pi = inclusion[order]
    end = jnp.cumsum(pi)
    total = jnp.round(end[-1])
    end = end * jnp.where(end[-1] > 0, total / end[-1], 1.0)  # float error: the sum is total
    start = jnp.concatenate([jnp.zeros(1, end.dtype), end[:-1]])
    u = jax.random.uniform(k_point, (), end.dtype)
    # Points u + j in [start, end): ceil(end - u) − ceil(start - u) of them, 0 or 1.
    hit = jnp.ceil(end - u) > jnp.ceil(start - u)
    return jnp.zeros(inclusion.shape, bool).at[order].set(hit)


def sample_with_replacement(key: jax.Array, logits: jax.Array, m: int) -> jax.Array:
    """``m`` independent draws ∝ exp(logits), as how many times each client was drawn.

    Args:
      key: PRNG key.
      logits: f[N] log-probabilities up to a constant.
      m: number of draws (a static int: it is a shape).

    Returns:
      i32[N] counts summing to ``m``.
    """
    chex.assert_rank(logits, 1)
    draws = jax.random.categorical(key, logits, shape=(m,))
    return jnp.zeros(logits.shape, jnp.int32).at[draws].add(1)


def clustered_buckets(p: jax.Array, m: int) -> jax.Array:
    """Clustered sampling's m distributions over the clients (Fraboni, Vidal, Kameni and
    Lorenzi, ICML 2021, Algorithm 1): the clients in decreasing p (ties by index) pour their mass
    m·p_i, in turn, into m buckets of mass 1, each filled before the next. Client i's mass in
    bucket k is the overlap of [m·P_{<i}, m·P_{≤i}) with [k, k + 1) (P cumulated in that order),
    so every bucket is a distribution and a client's total over the buckets is m·p_i: one draw
    from each bucket includes i m·p_i times in expectation (unbiased aggregation with 1/m).

    Args:
      p: f[N] the clients' shares, summing to 1.
      m: number of buckets (a static int: it is a shape).

    Returns:
      f[m, N] r[k, i], each row summing to 1.
    """
    chex.assert_rank(p, 1)
    order = jnp.argsort(-p, stable=True)
    end = m * jnp.cumsum(p[order])
    end = end * (m / end[-1])  # float error: the last client ends the last bucket
    start = jnp.concatenate([jnp.zeros(1, end.dtype), end[:-1]])
    k = jnp.arange(m, dtype=end.dtype)[:, None]
    overlap = jnp.clip(jnp.minimum(end, k + 1) - jnp.maximum(start, k), 0.0, None)
    return jnp.zeros_like(overlap).at[:, order].set(overlap)


def draw_per_bucket(key: jax.Array, buckets: jax.Array) -> jax.Array:
    """One client from each bucket's distribution (rows of ``buckets``, f[m, N]), independently:
    how many times each client was drawn, i32[N] summing to m."""
    chex.assert_rank(buckets, 2)
    logits = jnp.log(buckets)
    draws = jax.random.categorical(key, logits, axis=-1)
    return jnp.zeros(buckets.shape[1], jnp.int32).at[draws].add(1)
