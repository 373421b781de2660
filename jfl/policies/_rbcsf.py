"""RBCS-F: reputation-based client selection with fairness (Huang et al., Alg. 1-2)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jfl.envs.rbcsf import paper_bounds
from jfl.kernels import (
    RidgeState,
    divide_and_conquer,
    lower_confidence_bound,
    random_priority,
    ridge_estimate,
    ridge_init,
    ridge_update,
    virtual_queue_update,
)
from jfl.policies.base import HParam, Policy, PolicySpec, check_selection_size, register

CONTEXT_DIM = 3  # c = [1/μ, s, M/B]
ALPHA_SCHEDULES = ("constant", "lemma1")
# Lemma 1's R, S, L for the paper's environment (η in bits): R = 19, S ≈ 4.24, L ≈ 10.25. A run
# on other environment parameters passes its own (``jfl.envs.rbcsf.bandit_bounds``).
_PAPER_BOUNDS = paper_bounds()


class RbcsfState(NamedTuple):
    ridge: RidgeState  # gram f[N, 3, 3], target f[N, 3]
    queue: jax.Array  # f[N]  Z_t, eq. 6
    t: jax.Array  # i[]  rounds played
    priority: jax.Array  # i32[N]  per-run random order breaking ties in P4 (random_priority)


def lemma1_alpha(t, lam, noise_scale, delta, theta_bound, context_bound):
    """α_t = R·sqrt(3 ln((1 + t L²/λ)/δ)) + sqrt(λ)·S (Lemma 1)."""
    inner = (1.0 + t * context_bound**2 / lam) / delta
    return noise_scale * jnp.sqrt(3.0 * jnp.log(inner)) + jnp.sqrt(lam) * theta_bound


def rbcsf(num_clients: int, selection_size: int = 8, alpha_schedule: str = "constant") -> Policy:
    """RBCS-F over ``num_clients`` clients selecting ``k = min(selection_size, #available)`` per
    round.

    Hyperparameters (traced): ``V`` penalty factor, ``beta`` guaranteed rate, ``alpha`` exploration
    (constant schedule), ``lam`` ridge regulariser; with ``alpha_schedule="lemma1"`` the exploration
    follows Lemma 1 with ``noise_scale`` R, ``delta``, ``theta_bound`` S and ``context_bound`` L
    (defaults: the bounds of the paper's environment, ``jfl.envs.rbcsf.bandit_bounds``).

    P4 is solved exactly (``divide_and_conquer``); its ties (in round 1 every τ̄ and Z is 0, and
    never-selected clients keep τ̄ = 0 and equal queues) follow a random order of the clients drawn
    once per run from the ``init`` key, so that no class is favoured by its clients' indices.
    """
    check_selection_size(num_clients, selection_size)
    if alpha_schedule not in ALPHA_SCHEDULES:
        raise ValueError(f"alpha_schedule must be one of {ALPHA_SCHEDULES}, got {alpha_schedule!r}")

    def init(key, hparams) -> RbcsfState:
        lam = hparams["lam"]
        dtype = jnp.result_type(float)
        return RbcsfState(
            ridge=ridge_init(num_clients, CONTEXT_DIM, lam, dtype),
            queue=jnp.zeros(num_clients, dtype),
            t=jnp.asarray(0, jnp.int32),
            priority=random_priority(key, num_clients),
        )

    def exploration(state, hparams):
        if alpha_schedule == "constant":
            return hparams["alpha"]
        return lemma1_alpha(
            state.t + 1,
            hparams["lam"],
            hparams["noise_scale"],
            hparams["delta"],
            hparams["theta_bound"],
            hparams["context_bound"],
        )

    def optimistic_time(state, obs, hparams):
        """τ̄ of eq. 19 (clamped at 0)."""
        estimate = ridge_estimate(state.ridge, obs.context)
        return lower_confidence_bound(estimate, exploration(state, hparams))

    def select(key, state, obs, hparams):
        del key
        tau_bar = optimistic_time(state, obs, hparams)
        return divide_and_conquer(
            tau_bar, state.queue, obs.available, selection_size, hparams["V"], state.priority
        )

    def update(state, obs, action, feedback, hparams) -> RbcsfState:
        return RbcsfState(
            ridge=ridge_update(state.ridge, obs.context, action, feedback.time),
            queue=virtual_queue_update(state.queue, hparams["beta"], action),
            t=state.t + 1,
            priority=state.priority,
        )

    return Policy(init=init, select=select, update=update)


RBCSF = register(
    PolicySpec(
        name="rbcsf",
        build=rbcsf,
        hparams={
            "V": HParam(10.0, 0.0, help="penalty factor V ≥ 0"),
            "beta": HParam(0.15, 0.0, 1.0, help="guaranteed selection rate β"),
            "alpha": HParam(0.1, 0.0, help="exploration α (constant schedule)"),
            "lam": HParam(1.0, 0.0, low_open=True, help="ridge regulariser λ > 0"),
            "noise_scale": HParam(_PAPER_BOUNDS.noise, 0.0, help="Lemma-1 R ≥ |τ − τ*|"),
            "delta": HParam(0.05, 0.0, 1.0, low_open=True, high_open=True, help="Lemma-1 δ"),
            "theta_bound": HParam(_PAPER_BOUNDS.theta_norm, 0.0, help="Lemma-1 S ≥ ‖θ*‖"),
            "context_bound": HParam(_PAPER_BOUNDS.context_norm, 0.0, help="Lemma-1 L ≥ ‖c‖"),
        },
        description="RBCS-F: ridge LCB of exchange time, fairness queues, exact P4",
        queue_rate="beta",
        requires=("available", "context", "time"),
    )
)
