"""E3CS as a plain NumPy loop (Huang, Lin, Shen, Li and Zomaya, IEEE IoT-J 2022, arXiv
2011.08756, Algorithm 1), fed the draws the JAX policy makes, so that both select the same
clients.

Written from the paper's steps rather than from ``jfl.policies._e3cs``: weights w (not their
logarithms) in float64; the probability allocation caps, one client at a time, the largest weight
whose share of the Exp3 mass would exceed 1 (Exp3.M's capping, Uchiya et al. 2010); the k
clients are drawn by walking the points u, u + 1, …, u + k − 1 along the clients' segments of
length π laid end to end in the given order (systematic sampling; the JAX kernel's draws are
that order and that u). As in the policy, a round runs on its available clients only.
"""

from __future__ import annotations

import numpy as np


def e3cs_allocation_numpy(weights, available, m: int, fraction: float):
    """One round's allocation: ``(π f64[N], S′ bool[N], gain)``.

    Among the N available clients, k = min(m, N) and σ = fraction·k/N: π_i = σ + (k − Nσ)·w'_i/Σw'
    with the largest weights capped so that π ≤ 1; S′ holds the clients whose weight was capped
    (all of them when k = N); gain = (k − Nσ)·η/N without η (the caller multiplies).
    """
    weights = np.asarray(weights, np.float64)
    n = len(weights)
    clients = [i for i in range(n) if available[i]]
    pi = np.zeros(n)
    capped = np.zeros(n, bool)
    if not clients:
        return pi, capped, 0.0
    count = len(clients)
    k = min(m, count)
    sigma = fraction * k / count
    mass = k - count * sigma
    if k == count:  # every available client is selected: π = 1, all of them in S′
        for i in clients:
            pi[i] = 1.0
            capped[i] = True
        return pi, capped, mass / count
    # π_i = σ + (1 − σ)·q_i: q carries the Exp3 mass (k − Nσ)/(1 − σ), each q_i at most 1.
    total = mass / (1.0 - sigma)
    at_cap = []
    while True:
        rest = [i for i in clients if i not in at_cap]
        rest_weight = sum(weights[i] for i in rest)
        left = total - len(at_cap)
        if not rest or rest_weight <= 0:
            break
        top = max(rest, key=lambda i: weights[i])
        if left * weights[top] / rest_weight > 1.0:
            at_cap.append(top)
        else:
            break
    for i in clients:
        if i in at_cap:
            q = 1.0
        elif rest_weight > 0:
            q = min(1.0, left * weights[i] / rest_weight)
        else:
            q = 0.0
        pi[i] = sigma + (1.0 - sigma) * q
        capped[i] = i in at_cap
    return pi, capped, mass / count


def systematic_numpy(pi, order, u: float) -> np.ndarray:
    """The clients whose segment [start, start + π) holds one of the points u, u + 1, …, with
    the segments laid end to end in ``order``: bool[N]."""
    selected = np.zeros(len(pi), bool)
    start, point = 0.0, float(u)
    for i in order:
        end = start + float(pi[i])
        while point < end:
            selected[i] = True
            point += 1.0
        start = end
    return selected


def e3cs_round_numpy(weights, available, m, eta, fraction, order, u, success):
    """One round of Algorithm 1: ``(π, S′, selected, new weights)``; ``success`` bool[N] says
    whose update would arrive if selected (only the selected clients' values are read)."""
    pi, capped, gain = e3cs_allocation_numpy(weights, available, m, fraction)
    selected = systematic_numpy(pi, order, u)
    new = np.array(weights, np.float64)
    for i in range(len(new)):
        x_hat = (1.0 / pi[i]) if (selected[i] and success[i]) else 0.0
        if available[i] and not capped[i]:
            new[i] = new[i] * np.exp(gain * eta * x_hat)
    return pi, capped, selected, new


def e3cs_fraction(sigma: float, switch: float, round_index: int) -> float:
    """σ as a fraction of k/N in round ``round_index`` (0-based): ``sigma``, or with E3CS-inc
    (``switch`` > 0) 0 in the first ``switch`` rounds and 1 after."""
    if switch > 0:
        return 0.0 if round_index < switch else 1.0
    return float(sigma)


def e3cs_numpy_loop(available, orders, points, success_draws, success_probability, m, eta,
                    sigma, switch=0.0):  # fmt: skip
    """``T`` rounds of E3CS from w = 1: per round the availability bool[T, N], the sampling
    order int[T, N] and point u f[T], and the draws f[T, N] that decide success (a selected
    client succeeds when its draw is below its ``success_probability``). Returns π f[T, N],
    S′, selections bool[T, N] and the weights after each round f[T, N] (divided by their
    largest, which leaves π unchanged, so that they stay finite)."""
    num_rounds, n = np.shape(available)
    weights = np.ones(n)
    trace = {name: [] for name in ("pi", "capped", "selected", "weights")}
    for t in range(num_rounds):
        fraction = e3cs_fraction(sigma, switch, t)
        success = np.asarray(success_draws[t]) < np.asarray(success_probability)
        pi, capped, selected, weights = e3cs_round_numpy(
            weights, available[t], m, eta, fraction, orders[t], points[t], success
        )
        weights = weights / weights.max()
        for name, value in zip(trace, (pi, capped, selected, weights), strict=True):
            trace[name].append(value)
    return {name: np.stack(values) for name, values in trace.items()}
