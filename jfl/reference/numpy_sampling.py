"""The sampling-based selections as plain NumPy loops: clustered sampling's buckets (Fraboni et
al., ICML 2021, Alg. 1) poured client by client, and draws "∝ exp(logit)" written as the argmax
of logit + g for given standard Gumbel noise g (the law of ``jax.random.categorical``), so that a
test can feed them the noise a JAX policy draws."""

from __future__ import annotations

import numpy as np


def clustered_numpy(p: np.ndarray, m: int) -> np.ndarray:
    """Pour each client's mass m·p_i, in decreasing p, into m buckets of mass 1 (a plain loop)."""
    buckets, k, room = np.zeros((m, len(p))), 0, 1.0
    for i in sorted(range(len(p)), key=lambda i: (-p[i], i)):
        mass = m * p[i]
        while mass > 1e-9 and k < m:
            put = min(mass, room)
            buckets[k, i] += put
            mass, room = mass - put, room - put
            if room <= 1e-9:
                k, room = k + 1, 1.0
    return buckets


def draw_counts(weights: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """How many times each client is drawn when draw j takes ``argmax_i log w[j, i] + noise[j,
    i]`` (``weights`` f[N] for every draw alike, or f[draws, N]; ``noise`` f[draws, N])."""
    weights = np.broadcast_to(np.asarray(weights, np.float64), noise.shape)
    with np.errstate(divide="ignore"):
        keys = np.log(weights) + noise
    counts = np.zeros(noise.shape[1], int)
    for row in keys:
        counts[int(np.argmax(row))] += 1
    return counts
