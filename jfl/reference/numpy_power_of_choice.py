"""Power-of-Choice's pow-d as a plain NumPy loop (Cho, Wang and Joshi, AISTATS 2022, Alg. 1),
fed the Gumbel noise the JAX policy draws, so that both make the same random choices.

Successive sampling ∝ p without replacement is "the k largest log p_i + g_i" (g_i standard
Gumbel); here it is written as a sort of the candidates by that key, in float32 like the policy,
with the clients that hold no data after every other available client.
"""

from __future__ import annotations

import numpy as np


def successive_draw(noise, data_size, available, count) -> list[int]:
    """The first ``count`` available clients in the order of log n_i + g_i (no data: last, by
    their noise)."""
    with np.errstate(divide="ignore"):
        log_size = np.log(np.asarray(data_size, np.float32))
    clients = [i for i in range(len(noise)) if available[i]]
    positive = sorted((i for i in clients if data_size[i] > 0),
                      key=lambda i: -(log_size[i] + np.float32(noise[i])))  # fmt: skip
    empty = sorted((i for i in clients if data_size[i] <= 0), key=lambda i: -noise[i])
    return (positive + empty)[:count]


def pow_d_numpy(
    noise_first, noise_candidates, data_size, local_loss, available, m, d, priority, round_index,
    switch=0,
) -> np.ndarray:  # fmt: skip
    """One round of pow-d: bool[N]. ``d`` 0 means 2m; with ``switch`` > 0 (adapow-d) d is N
    before round ``switch`` (0-based, as ``round_index``) and m from it; round 0 draws the m
    clients ∝ p."""
    n = len(available)
    k = min(m, int(np.sum(available)))
    selected = np.zeros(n, bool)
    if round_index == 0:
        selected[successive_draw(noise_first, data_size, available, k)] = True
        return selected
    if switch > 0:
        d = n if round_index < switch else m
    count = max(int(d) if d > 0 else 2 * m, k)
    candidates = successive_draw(noise_candidates, data_size, available, count)
    ranked = sorted(candidates, key=lambda i: (-np.float32(local_loss[i]), priority[i]))
    selected[ranked[:k]] = True
    return selected
