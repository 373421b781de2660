"""FedCor as a plain NumPy float64 loop (Tang et al., CVPR 2022; Yoruko-Tang/FedCor d941083,
``src/GPR.py`` and ``src/federated_main.py``), fed the draws the JAX policy makes.

Written from the authors' code rather than from ``jfl.policies._fedcor``: the stored loss
changes are a dict {round: ΔL} with the authors' pop of old rounds (``Update_Training_Data``),
the marginal likelihood is summed round by round with an explicit inverse and log-determinant,
its gradient is the closed form ∂/∂X = X·(Σ_e w_e·(K⁻¹ − α_e α_eᵀ)) with α_e = K⁻¹(ΔL_e − μ)
(not automatic differentiation), Adam is written out (PyTorch's ``Adam``: β = (0.9, 0.999),
ε = 1e-8), and the greedy selection loops over the clients. Random rounds take the available
clients with the largest Gumbel noise (the JAX policy's ``gumbel_top_k`` with equal logits).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass
class FedcorOptions:
    """The static options and the hyperparameters, as the policy names them."""

    window: int = 100
    steps: int = 100
    first_steps: int = 1000
    warm_steps: int = 150
    warmup: int = 15
    refit_every: int = 10
    gamma: float = 0.95
    beta: float = 0.95
    lr: float = 1e-2
    noise: float = 0.01
    update_mean: bool = True
    every_round: bool = False


@dataclass
class FedcorNumpy:
    """The server's FedCor state: embedding X f64[D, N], annealing a f64[N], stored loss changes
    {round: f64[N]}, the last losses seen and the next round's index."""

    embedding: np.ndarray
    options: FedcorOptions
    discount: np.ndarray | None = None
    data: dict = field(default_factory=dict)
    last_loss: np.ndarray | None = None
    round: int = 0

    def __post_init__(self):
        n = self.embedding.shape[1]
        self.embedding = np.array(self.embedding, np.float64)
        self.discount = np.ones(n) if self.discount is None else np.array(self.discount, float)
        self.last_loss = np.zeros(n) if self.last_loss is None else np.array(self.last_loss, float)
        self.data = {int(e): np.array(v, float) for e, v in self.data.items()}

    # ----------------------------------------------------------------- the authors' schedule

    def is_warm(self, t: int) -> bool:
        return t <= self.options.warmup  # main.py:282, `epoch<=args.warmup`

    def is_refit(self, t: int) -> bool:
        return t > self.options.warmup and t % self.options.refit_every == 0  # main.py:291

    def observe(self, local_loss) -> None:
        """The end of round t − 1 once F(w^t) is known (main.py:279-302): store its ΔL if it
        was a random round, fit the GP if the schedule says so."""
        q = self.round - 1
        if q < 0:
            return
        opts = self.options
        change = np.asarray(local_loss, float) - self.last_loss
        if self.is_warm(q) or self.is_refit(q) or opts.every_round:
            self.store(change, q)
        if self.is_refit(q):
            self.train(opts.steps)
        elif self.is_warm(q) and not opts.update_mean:
            self.train(opts.warm_steps)
        elif self.is_warm(q) and q == opts.warmup:
            self.train(opts.first_steps)

    def store(self, change, epoch: int) -> None:
        """``Update_Training_Data`` (GPR.py:43-52)."""
        self.data[epoch] = np.array(change, float)
        for e in list(self.data):
            if e + self.options.window < epoch:
                del self.data[e]

    # ----------------------------------------------------------------- the GP

    def weights(self) -> dict:
        """γ^(current − e) of each stored round e, current the newest (GPR.py:155, 161)."""
        current = max(self.data)
        return {e: self.options.gamma ** (current - e) for e in self.data}

    def mean(self) -> np.ndarray:
        """``MLE_Mean`` (GPR.py:117-135), or 0 without ``update_mean``."""
        n = self.embedding.shape[1]
        if not self.options.update_mean:
            return np.zeros(n)
        total, sums = 0.0, np.zeros(n)
        for e, w in self.weights().items():
            sums += w * self.data[e]
            total += w
        return sums / total

    def train(self, steps: int) -> None:
        """``Train`` (GPR.py:137-174): a new Adam on X, ``steps`` steps, μ fixed at the start."""
        mean = self.mean()
        x = self.embedding
        first = np.zeros_like(x)
        second = np.zeros_like(x)
        b1, b2, eps = 0.9, 0.999, 1e-8
        for step in range(1, steps + 1):
            _, grad = nll_and_grad(x, self.data, self.weights(), mean, self.options.noise)
            first = b1 * first + (1 - b1) * grad
            second = b2 * second + (1 - b2) * grad**2
            first_hat = first / (1 - b1**step)
            second_hat = second / (1 - b2**step)
            x = x - self.options.lr * first_hat / (np.sqrt(second_hat) + eps)
        self.embedding = x

    # ----------------------------------------------------------------- selection

    def select(self, available, data_size, gumbel, m: int) -> np.ndarray:
        """Round t's clients, bool[N]: random in the warm-up and refit rounds (main.py:203-205,
        294), else ``Select_Clients`` among the available clients (GPR.py:187-223)."""
        t = self.round
        k = min(m, int(np.sum(available)))
        if self.is_warm(t) or self.is_refit(t):
            clients = [i for i in range(len(available)) if available[i]]
            drawn = sorted(clients, key=lambda i: -gumbel[i])[:k]
        else:
            drawn = greedy_numpy(self.sigma(), data_size, self.discount, available, k)
        selected = np.zeros(len(available), bool)
        selected[drawn] = True
        return selected

    def sigma(self) -> np.ndarray:
        """``Covariance`` (GPR.py:341-349): XᵀX + σ_n²·I."""
        x = self.embedding
        return x.T @ x + self.options.noise**2 * np.eye(x.shape[1])

    def update(self, selected, local_loss) -> None:
        """The end of round t's bookkeeping: a_k (main.py:292, 301-302), F(w^t), t + 1."""
        t = self.round
        if self.is_refit(t):
            self.discount = np.ones_like(self.discount)  # Reset_Discount
        elif not self.is_warm(t):
            for i in range(len(selected)):
                if selected[i]:
                    self.discount[i] *= self.options.beta  # Update_Discount
        self.last_loss = np.array(local_loss, float)
        self.round = t + 1

    def round_trip(self, local_loss, available, data_size, gumbel, m: int) -> np.ndarray:
        """One whole round: observe the losses, select, update. Returns the selection."""
        self.observe(local_loss)
        selected = self.select(available, data_size, gumbel, m)
        self.update(selected, local_loss)
        return selected


def nll_and_grad(x, data: dict, weights: dict, mean, noise: float):
    """−Σ_e w_e·log N(ΔL_e; μ, XᵀX + σ_n²·I) and its gradient with respect to X, f64[D, N].

    With K = XᵀX + σ_n²I and α = K⁻¹(y − μ), ∂(−log N)/∂K = ½(K⁻¹ − ααᵀ) =: G (symmetric),
    and dK = dXᵀX + XᵀdX gives ∂/∂X = 2·X·G."""
    n = x.shape[1]
    k = x.T @ x + noise**2 * np.eye(n)
    k_inv = np.linalg.inv(k)
    _, log_det = np.linalg.slogdet(k)
    loss = 0.0
    g = np.zeros((n, n))
    for e, y in data.items():
        r = y - mean
        alpha = k_inv @ r
        loss += weights[e] * 0.5 * (r @ alpha + log_det + n * math.log(2 * math.pi))
        g += weights[e] * 0.5 * (k_inv - np.outer(alpha, alpha))
    return loss, 2.0 * x @ g


def greedy_numpy(sigma, data_size, discount, available, k: int) -> list[int]:
    """``max_loss_decrease_client`` k times (GPR.py:192-221): among the available clients not
    yet selected the largest a_j/√Σ_jj · Σ_{i remaining} p_i Σ_ij, then condition Σ on it."""
    sigma = np.array(sigma, float)
    n = len(available)
    p = np.asarray(data_size, float) / np.sum(data_size)
    remaining = list(range(n))
    chosen: list[int] = []
    for _ in range(k):
        best, best_score = None, -np.inf
        for j in remaining:
            if not available[j]:
                continue
            gain = sum(p[i] * sigma[i, j] for i in remaining)
            score = discount[j] / math.sqrt(sigma[j, j]) * gain
            if best is None or score > best_score:
                best, best_score = j, score
        sigma = sigma - np.outer(sigma[:, best], sigma[best, :]) / sigma[best, best]
        chosen.append(best)
        remaining.remove(best)
    return chosen


def greedy_margins(sigma, data_size, discount, available, k: int) -> list[float]:
    """The gap between the best and the second best score of each greedy step, relative to the
    best's magnitude (inf when one candidate is left): how far a step is from a tie."""
    sigma = np.array(sigma, float)
    n = len(available)
    p = np.asarray(data_size, float) / np.sum(data_size)
    remaining = list(range(n))
    margins = []
    for _ in range(k):
        scores = {}
        for j in remaining:
            if available[j]:
                gain = sum(p[i] * sigma[i, j] for i in remaining)
                scores[j] = discount[j] / math.sqrt(sigma[j, j]) * gain
        ranked = sorted(scores.values(), reverse=True)
        margins.append((ranked[0] - ranked[1]) / abs(ranked[0]) if len(ranked) > 1 else np.inf)
        best = max(scores, key=lambda j: (scores[j], -j))
        sigma = sigma - np.outer(sigma[:, best], sigma[best, :]) / sigma[best, best]
        remaining.remove(best)
    return margins
