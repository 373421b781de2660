"""The federated quadratic problem (``jfl.fl.quadratic``) as plain float64 NumPy loops.

Client k's objective ``F_k(w) = ½ h_k ‖w‖² − e_kᵀw + ½ ‖e_k‖²/h_k`` is written here term by
term (the JAX learner uses the equal ``‖h_k w − e_k‖²/(2 h_k)``), the global gap as
``Σ p_k F_k(w) − Σ p_k F_k(w*)`` with ``w* = Σ p_k e_k / Σ p_k h_k``, and a round of federated
training as a loop over the participants, each taking its gradient steps one at a time, as the
reproduction peng-ju/Power-of-Choice (``quadratic_optimization/quadratic_sim.py``) does.
"""

from __future__ import annotations

import numpy as np


def local_loss(h, e, w) -> np.ndarray:
    """f[N]: F_k(w) = ½ h_k wᵀw − e_kᵀw + ½ e_kᵀe_k / h_k for every client."""
    h, e, w = (np.asarray(a, np.float64) for a in (h, e, w))
    return np.array(
        [0.5 * h[k] * (w @ w) - e[k] @ w + 0.5 * (e[k] @ e[k]) / h[k] for k in range(len(h))]
    )


def global_gap(h, e, p, w) -> float:
    """F(w) − F(w*) with F = Σ p_k F_k, as a difference of the two sums."""
    h, e, p = (np.asarray(a, np.float64) for a in (h, e, p))
    w_star = (p @ e) / (p @ h)
    return float(p @ local_loss(h, e, w) - p @ local_loss(h, e, w_star))


def local_training(h_k, e_k, w, lr, steps) -> tuple[np.ndarray, float]:
    """``(θ_k, train_loss)``: ``steps`` gradient steps w ← w − η(h_k w − e_k) from ``w``, and
    the mean of F_k at the points the steps start from."""
    theta = np.array(w, np.float64)
    losses = []
    for _ in range(steps):
        losses.append(0.5 * h_k * (theta @ theta) - e_k @ theta + 0.5 * (e_k @ e_k) / h_k)
        theta = theta - lr * (h_k * theta - e_k)
    return theta, float(np.mean(losses))


def fl_round(h, e, p, w, lr, steps, draws=None, weight=None, aggregation="uniform"):
    """``(w_next, train_loss f[N])`` of one round.

    ``draws`` lists the participants, a client drawn twice listed twice: the new model is the
    plain average of their models (``"uniform"``) or weighted by p_k (``"data_size"``); with
    ``weight`` (f[N], a ``Selection``'s) the participants are the clients with a nonzero weight
    and w moves by Σ weight_k (θ_k − w) instead.
    """
    h, e, p, w = (np.asarray(a, np.float64) for a in (h, e, p, w))
    n = len(h)
    if weight is not None:
        draws = [k for k in range(n) if weight[k] != 0]
    train_loss = np.zeros(n)
    models = {}
    for k in dict.fromkeys(draws):
        models[k], train_loss[k] = local_training(h[k], e[k], w, lr, steps)
    if weight is not None:
        return w + sum(weight[k] * (models[k] - w) for k in models), train_loss
    if not draws:
        return w, train_loss
    mass = [1.0 if aggregation == "uniform" else p[k] for k in draws]
    return sum(a * models[k] for a, k in zip(mass, draws, strict=True)) / sum(mass), train_loss


def fl_run(h, e, p, w0, lr, steps, selections, eval_every=1, aggregation="uniform"):
    """The gaps at rounds 0, k, 2k, … of a run whose round t trains the participants
    ``selections[t]`` (a list of draws, or an f[N] of weights), and each round's train_loss."""
    w = np.asarray(w0, np.float64)
    gaps, losses = [global_gap(h, e, p, w)], []
    for t, chosen in enumerate(selections, start=1):
        if isinstance(chosen, np.ndarray) and chosen.dtype.kind == "f":
            w, loss = fl_round(h, e, p, w, lr, steps, weight=chosen)
        else:
            w, loss = fl_round(h, e, p, w, lr, steps, draws=list(chosen), aggregation=aggregation)
        losses.append(loss)
        if t % eval_every == 0:
            gaps.append(global_gap(h, e, p, w))
    return np.array(gaps), np.array(losses)
