"""A federated quadratic problem with a closed-form optimum, as a ``Learner`` the runner drives.

Client k's objective is ``F_k(w) = ½ h_k ‖w‖² − e_kᵀw + ½ ‖e_k‖²/h_k = ‖h_k w − e_k‖² / (2 h_k)``
(H_k = h_k·I: a scaled identity; F_k ≥ 0 with its minimum 0 at e_k/h_k), and the global one is
``F(w) = Σ_k p_k F_k(w)``, whose minimiser ``w* = Σ p_k e_k / Σ p_k h_k`` and optimality gap
``F(w) − F(w*) = ½ (Σ p_k h_k) ‖w − w*‖²`` are exact. The shares p_k stand for the clients'
data sizes (the ``data_size`` signal); there are no samples.

Each round every selected client runs ``local_steps`` full-gradient steps
``w ← w − η (h_k w − e_k)`` from the global model, and the server averages the models of the
participants whose update arrived, plainly (``aggregation="uniform"``, the default) or weighted by
p_k (``"data_size"``); a policy's ``jfl.policies.Selection`` weights move the model by
``Σ_k a_k (θ_k − w)`` instead, so m draws with replacement weighing ``count/m`` average a client
drawn twice twice. The learner evaluates the gap (``evaluations``: ``gap``, not an accuracy).

The instance (``QuadraticData``) is passed to the compiled program as an argument, like
``jfl.fl.FederatedData``: one program runs any instance of the same shape. Every sum over
clients or coordinates is an elementwise halving (``pairwise_sum``), so a run does not depend on
its batch. Everything is computed in the instance's dtype (float32 unless built as float64 with
x64 enabled).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jfl import checks
from jfl.fl.train import Learner
from jfl.kernels.reduce import pairwise_sum
from jfl.outputs import EVAL, Metric
from jfl.stats import NONNEGATIVE

AGGREGATIONS = ("uniform", "data_size")
# What ``signals`` computes: F_k(w) (also as the probe of one minibatch: there are no samples,
# so the estimate is exact), the share p_k, and after a round each participant's training loss.
PROVIDES = ("local_loss", "data_size", "minibatch_loss", "train_loss")
EVALUATIONS = {
    "gap": Metric((EVAL,), "optimality gap F(w) − F(w*) at rounds 0, k, 2k, …, T", NONNEGATIVE),
}


class QuadraticData(NamedTuple):
    """One instance of the problem, passed to the compiled program as an argument."""

    h: jax.Array  # f[N]  curvature h_k > 0 of client k's objective (H_k = h_k I)
    e: jax.Array  # f[N, D]  linear term e_k (client k's minimiser is e_k / h_k)
    p: jax.Array  # f[N]  weight p_k ≥ 0 of F_k in F (the data share, Σ p = 1)
    w0: jax.Array  # f[D]  the initial model


class QuadraticState(NamedTuple):
    w: jax.Array  # f[D]  the global model


def make_instance(
    seed: int,
    num_clients: int,
    dim: int,
    *,
    h_range: tuple[float, float] = (1.0, 20.0),
    e_scale: float = 100.0,
    w0_scale: float = 100.0,
    size_power: float = 3.0,
    dtype=np.float32,
) -> QuadraticData:
    """A random instance from NumPy's ``RandomState(seed)``, drawn in this order:
    ``e = e_scale·U(0, 1)^{N×D}``, ``h = low + (high − low)·U(0, 1)^N`` (``h_range``),
    sizes ``~ a·x^{a−1}`` on [0, 1] (NumPy's power distribution, ``a = size_power``) normalised
    into shares p, and ``w0 = w0_scale·N(0, I_D)``. ``h_range`` must keep h > 0."""
    num_clients, dim = checks.integer("num_clients", num_clients), checks.integer("dim", dim)
    low, high = (float(v) for v in h_range)
    if not 0.0 <= low <= high or high <= 0.0:
        raise ValueError(f"h_range must be 0 <= low <= high with high > 0, got {h_range!r}")
    if size_power <= 0:
        raise ValueError(f"size_power must be > 0, got {size_power!r}")
    rng = np.random.RandomState(seed)
    e = e_scale * rng.random_sample((num_clients, dim))
    h = low + (high - low) * rng.random_sample(num_clients)
    sizes = rng.power(size_power, num_clients)
    w0 = w0_scale * rng.randn(dim)
    if np.any(h <= 0) or np.sum(sizes) <= 0:
        raise ValueError(f"seed {seed} drew h = 0 or all sizes 0; choose another seed or h_range")
    arrays = (h, e, sizes / np.sum(sizes), w0)
    return QuadraticData(*(np.asarray(a, dtype) for a in arrays))


def local_losses(data: QuadraticData, w) -> jax.Array:
    """f[N]: every client's ``F_k(w) = ‖h_k w − e_k‖² / (2 h_k)``, at one model w (f[D]) or
    at each client's own (f[N, D])."""
    residual = data.h[:, None] * w - data.e
    return pairwise_sum(residual * residual) / (2 * data.h)


def optimum(data: QuadraticData) -> tuple[jax.Array, jax.Array]:
    """``(w*, h̄)``: the global minimiser Σp_k e_k / Σp_k h_k and the curvature h̄ = Σ p_k h_k."""
    curvature = pairwise_sum(data.p * data.h)
    return pairwise_sum(data.p[:, None] * data.e, axis=0) / curvature, curvature


def gap(data: QuadraticData, w) -> jax.Array:
    """``F(w) − F(w*) = ½ h̄ ‖w − w*‖²``, exact (no difference of large values)."""
    w_star, curvature = optimum(data)
    delta = w - w_star
    return 0.5 * curvature * pairwise_sum(delta * delta)


def local_steps_of(data: QuadraticData, w, learning_rate, steps: int):
    """``(θ, train_loss)``: every client's model after ``steps`` gradient steps from ``w``
    (f[N, D]) and the mean of its ``F_k`` at the iterates the steps start from (f[N])."""
    start = jnp.broadcast_to(w, data.e.shape)

    def one_step(theta, _):
        loss = local_losses(data, theta)
        return theta - learning_rate * (data.h[:, None] * theta - data.e), loss

    theta, losses = jax.lax.scan(one_step, start, None, length=steps)
    return theta, pairwise_sum(losses, axis=0) / steps


def make_quadratic_learner(num_clients: int, *, local_steps: int = 2, aggregation: str = "uniform"):
    """The quadratic problem's ``jfl.fl.train.Learner`` for N = ``num_clients`` clients.

    ``local_steps`` τ full-gradient steps per participant; the traced hyperparameter
    ``learning_rate`` is η. ``aggregation``: ``"uniform"`` (the participants' plain average) or
    ``"data_size"`` (weighted by p_k), unless the policy's ``Selection`` gives the weights.
    ``signals`` gives ``local_loss`` and ``minibatch_loss`` (both F_k(w): no samples to draw
    from) and ``data_size`` (p_k); ``step`` gives ``train_loss``; ``evaluate`` the ``gap``.
    """
    num_clients = checks.integer("num_clients", num_clients)
    local_steps = checks.integer("local_steps", local_steps)
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")

    def check(data: QuadraticData) -> None:
        if data.e.shape[0] != num_clients:
            raise ValueError(
                f"the instance has {data.e.shape[0]} clients, the learner {num_clients}"
            )

    def init(key, data: QuadraticData, hparams) -> QuadraticState:
        del key, hparams
        check(data)
        return QuadraticState(w=jnp.asarray(data.w0))

    def step(key, state, action, delivered, t, data: QuadraticData, hparams, weight=None):
        """Every selected client trains, the delivered ones are aggregated. Metrics:
        ``num_delivered``, ``untrained`` (always 0: every client can train) and ``train_loss``
        f[N] (0 for clients not selected)."""
        del key, t
        if action.ndim != 1:
            raise ValueError("the quadratic learner takes a bool[N] selection (one server)")
        dtype = data.e.dtype
        lr = jnp.asarray(hparams["learning_rate"], dtype)
        theta, losses = local_steps_of(data, state.w, lr, local_steps)
        arrived = action & delivered
        if weight is not None:
            share = jnp.where(arrived, weight, 0.0).astype(dtype)
        else:
            mass = arrived.astype(dtype)
            if aggregation == "data_size":
                mass = mass * data.p
            total = pairwise_sum(mass)
            share = mass / jnp.where(total > 0, total, 1)  # no arrival: all 0, w kept
        w = state.w + pairwise_sum(share[:, None] * (theta - state.w), axis=0)
        metrics = {
            "num_delivered": jnp.sum(arrived, dtype=jnp.int32),
            "untrained": jnp.zeros((), jnp.int32),
            "train_loss": jnp.where(action, losses, 0.0),
        }
        return QuadraticState(w=w), metrics

    def evaluate(state: QuadraticState, data: QuadraticData) -> dict:
        """The optimality gap F(w) − F(w*) of the global model."""
        return {"gap": gap(data, state.w)}

    def signals(key, state: QuadraticState, data: QuadraticData, hparams, names) -> dict:
        """``local_loss`` and ``minibatch_loss`` F_k(w), ``data_size`` p_k."""
        del key, hparams
        loss = local_losses(data, state.w)
        values = {"local_loss": loss, "minibatch_loss": loss, "data_size": data.p}
        return {name: values[name] for name in names}

    return Learner(
        init=init,
        step=step,
        evaluate=evaluate,
        num_servers=1,
        signals=signals,
        provides=PROVIDES,
        evaluations=EVALUATIONS,
        batch_invariant=True,  # every sum over clients or coordinates is a halving
    )
