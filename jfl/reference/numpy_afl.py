"""Active Federated Learning's selection and valuation as a plain NumPy round (Goetz et al.,
arXiv 1909.12641, Alg. 1), fed the three Gumbel noise arrays the JAX policy draws.

A draw without replacement ∝ exp(logit) is "the first clients in the order of logit + g" (g
standard Gumbel); a uniform draw is the order of g alone. Computed in float32 like the policy.
"""

from __future__ import annotations

import math

import numpy as np


def _first(clients, key, count) -> list[int]:
    return sorted(clients, key=key)[: max(count, 0)]


def afl_numpy(noise, valuation, available, m, alpha1, alpha2, alpha3) -> np.ndarray:
    """One round's selection, bool[N]. ``noise``: the three f[N] Gumbel arrays (never-seen
    draw, valued draw, uniform draw); ``valuation`` +inf for a client never seen."""
    n = len(available)
    clients = [i for i in range(n) if available[i]]
    k = min(m, len(clients))
    aside = math.floor(np.float32(alpha1) * np.float32(len(clients)))
    valued = math.floor(np.float32(1.0 - np.float32(alpha3)) * np.float32(k))
    seen = [i for i in clients if np.isfinite(valuation[i])]
    unseen = [i for i in clients if not np.isfinite(valuation[i])]
    low = set(_first(seen, lambda i: (valuation[i], i), aside))
    drawn = _first(unseen, lambda i: -noise[0][i], valued)
    logit = {i: np.float32(alpha2) * np.float32(valuation[i]) for i in seen}
    candidates = [i for i in seen if i not in low]
    drawn += _first(candidates, lambda i: -(logit[i] + np.float32(noise[1][i])),
                    valued - len(drawn))  # fmt: skip
    others = [i for i in clients if i not in drawn]
    drawn += _first(others, lambda i: -noise[2][i], k - len(drawn))
    selected = np.zeros(n, bool)
    selected[drawn] = True
    return selected


def afl_valuation(valuation, selected, data_size, local_loss) -> np.ndarray:
    """After the round: √n_k·F_k(w) for the selected clients, the others' kept."""
    value = np.sqrt(np.asarray(data_size, np.float32)) * np.asarray(local_loss, np.float32)
    return np.where(selected, value, valuation)
