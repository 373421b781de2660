"""DivFL (Balakrishnan et al., ICLR 2022) as plain float64 loops, fed the draws the JAX policy
makes (``jfl.policies._divfl``), so that both select the same clients.

Written from the authors' ``greedy`` and ``stochastic_greedy`` (melodi-lab/divfl,
``flearn/trainers/fedbase.py`` l. 168–210) and their round loop (``flearn/trainers/fedavg.py``
l. 58–133) rather than from the JAX code: distances by ``math.dist``, each step's value
Σ_i min(c_i, d_ij) summed client by client. Shared with the policy are only its documented
rules: candidates are the available clients, values within a relative ``TIE_RTOL`` of the best
are tied and go to the lower priority, and stochastic greedy's subset at step s is the
remaining candidates with the largest ``noise[s]``.
"""

from __future__ import annotations

import math

import numpy as np

TIE_RTOL = 1e-5  # as the policy's


def subset_size_numpy(num_available: int, k: int, epsilon: float, subsample: float) -> int:
    """⌈(n/k)·ln(1/ε)⌉ (Mirzasoleiman et al. 2015), or max(k, ⌊subsample·n⌋) when
    ``subsample`` > 0 (the authors' ``stochastic_greedy``); at least 1."""
    if subsample > 0:
        size = max(k, math.floor(subsample * num_available))
    else:
        size = math.ceil(num_available / max(k, 1) * math.log(1.0 / epsilon))
    return max(int(size), 1)


def divfl_select_numpy(grads, available, m: int, priority, cover_all: bool = True, noise=None,
                       size: int | None = None) -> np.ndarray:  # fmt: skip
    """One round's greedy facility location: bool[N], min(m, #available) available clients.

    ``grads`` f[N, K] the G rows this round reads; ``cover_all`` sums over every client (else
    over the available ones); with ``noise`` (f[m, N]) step s evaluates only the ``size``
    remaining candidates with the largest ``noise[s]`` (stochastic greedy).
    """
    n = len(grads)
    rows = [list(map(float, row)) for row in grads]
    dist = [[math.dist(rows[i], rows[j]) for j in range(n)] for i in range(n)]
    cover = [i for i in range(n) if cover_all or available[i]]
    k = min(m, int(np.sum(available)))
    cost = [math.inf] * n
    chosen = []
    for step in range(k):
        candidates = [j for j in range(n) if available[j] and j not in chosen]
        if noise is not None:
            candidates = sorted(candidates, key=lambda j: -noise[step][j])[:size]
        value = {}
        for j in candidates:
            total = 0.0
            for i in cover:
                total += min(cost[i], dist[i][j])
            value[j] = total
        best = min(value.values())
        tied = [j for j in candidates if value[j] <= best * (1.0 + TIE_RTOL)]
        pick = min(tied, key=lambda j: priority[j])
        chosen.append(pick)
        cost = [min(cost[i], dist[i][pick]) for i in range(n)]
    selected = np.zeros(n, bool)
    selected[chosen] = True
    return selected


def divfl_numpy_loop(gradients, available, m: int, priority, refresh_every: int = 0,
                     cover_all: bool = True, noises=None, epsilon: float = 0.1,
                     subsample: float = 0.0):  # fmt: skip
    """T rounds: round t's gradients ``gradients[t]`` (f[N, K], every client's at that round's
    model); G holds every client's at round 0 and at each ``refresh_every``-th round (when ≥ 1),
    and a selected client's row becomes its gradient of the round it was selected in. ``noises``
    (f[T, m, N]): stochastic greedy. Returns the selections, bool[T, N]."""
    grads = np.array(gradients[0], np.float64)
    out = []
    for t in range(len(available)):
        if t == 0 or (refresh_every >= 1 and t % refresh_every == 0):
            grads = np.array(gradients[t], np.float64)
        noise, size = None, None
        if noises is not None:
            k = min(m, int(np.sum(available[t])))
            size = subset_size_numpy(int(np.sum(available[t])), k, epsilon, subsample)
            noise = noises[t]
        selected = divfl_select_numpy(grads, available[t], m, priority, cover_all, noise, size)
        grads[selected] = np.asarray(gradients[t], np.float64)[selected]
        out.append(selected)
    return np.array(out)
