"""DELTA, FedIS and optimal client sampling as plain NumPy loops in float64, written from the
papers' steps (Wang et al., arXiv 2205.13925, and the authors' ``reweight_prac``; Chen,
Horváth and Richtárik, arXiv 2010.13723, eq. 7), fed the draws the JAX policies make."""

from __future__ import annotations

import numpy as np

from jfl.reference.numpy_e3cs import systematic_numpy


def optimal_probabilities(u, m: float) -> np.ndarray:
    """Chen et al.'s eq. 7 as written: with ũ sorted ascending, the largest l with
    0 < m + l − N ≤ Σ_{j≤l} ũ_(j)/ũ_(l); π_(i) = (m + l − N)·ũ_(i)/Σ_{j≤l} ũ_(j) for i ≤ l,
    else 1. Every client with ũ > 0 that the formula leaves out (fewer positive ũ than m) is
    taken (π = 1)."""
    u = np.asarray(u, np.float64)
    n = len(u)
    order = sorted(range(n), key=lambda i: u[i])
    best = None
    for l in range(1, n + 1):
        head = sum(u[order[j]] for j in range(l))
        c = m + l - n
        if u[order[l - 1]] > 0 and 0 < c <= head / u[order[l - 1]] + 1e-12:
            best = (l, c, head)
    pi = np.zeros(n)
    if best is None:
        pi[u > 0] = 1.0
        return pi
    l, c, head = best
    for rank, i in enumerate(order):
        pi[i] = c * u[i] / head if rank < l else 1.0
    return pi


def inclusion_numpy(weight, available, m: int) -> np.ndarray:
    """π over the available clients, Σπ = min(m, #available); uniform when none weighs > 0."""
    clients = [i for i in range(len(weight)) if available[i]]
    pi = np.zeros(len(weight))
    if not clients:
        return pi
    k = min(m, len(clients))
    w = np.array([weight[i] for i in clients], np.float64)
    pi[clients] = optimal_probabilities(w, k) if np.any(w > 0) else k / len(clients)
    return pi


def shares_numpy(size, among) -> np.ndarray:
    total = sum(float(size[i]) for i in range(len(size)) if among[i])
    return np.array([float(size[i]) / total if among[i] and total > 0 else 0.0
                     for i in range(len(size))])  # fmt: skip


def importance_select_numpy(prob, available, size, m, order, u):
    """DELTA's / FedIS's round: ``(π, selected, weights d_i/π_i)``."""
    pi = inclusion_numpy(prob, available, m)
    selected = systematic_numpy(pi, order, u) & np.asarray(available, bool)
    share = shares_numpy(size, available)
    weight = np.array([share[i] / pi[i] if selected[i] else 0.0 for i in range(len(pi))])
    return pi, selected, weight


def importance_update_numpy(prob, selected, size, sketch, norm, grad_var, alpha1, alpha2,
                            diversity: bool, scale=None):  # fmt: skip
    """``reweight_prac``: the participants' scores rescaled to their old total mass; DELTA's ζ
    on each participant's sketch divided by ``scale[i]`` (η·K_i; None or 0: undivided)."""
    members = [i for i in range(len(prob)) if selected[i]]
    share = shares_numpy(size, selected)
    gradient = {}
    for i in members:
        factor = 1.0 if scale is None or scale[i] <= 0 else float(scale[i])
        gradient[i] = np.asarray(sketch[i], np.float64) / factor
    if diversity and members:
        mean = np.mean([gradient[i] for i in members], axis=0)
    scores = {}
    for i in members:
        if diversity:
            zeta_sq = float(np.sum((gradient[i] - mean) ** 2))
            scores[i] = share[i] * np.sqrt(alpha1 * zeta_sq + alpha2 * float(grad_var[i]))
        else:
            scores[i] = share[i] * float(norm[i])
    new = np.array(prob, np.float64)
    total = sum(scores.values())
    if total > 0:
        old = sum(float(prob[i]) for i in members)
        for i in members:
            new[i] = scores[i] / total * old
    return new


def ocs_numpy(available, size, update_norm, m, uniforms):
    """Optimal client sampling's round: ``(π, selected, weights)`` from Bernoulli(π) draws
    ``uniforms < π``."""
    share = shares_numpy(size, available)
    u = np.array([share[i] * float(update_norm[i]) for i in range(len(share))])
    pi = inclusion_numpy(u, available, m)
    selected = (np.asarray(uniforms) < pi) & np.asarray(available, bool)
    weight = np.array([share[i] / pi[i] if selected[i] else 0.0 for i in range(len(pi))])
    return pi, selected, weight
