"""Baselines of RBCS-F §6: Random, Dirichlet-random(γ₂) and FedCS(deadline)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jfl.kernels import random_priority, selection_count, topk_mask
from jfl.policies.base import (
    HParam,
    Policy,
    PolicySpec,
    TieBreakState,
    check_selection_size,
    register,
    stateless,
    stateless_update,
)


class DirichletState(NamedTuple):
    log_weight: jax.Array  # f[N]  log q' up to a constant, q' ~ Dir(γ₂·1) drawn once per run
    priority: jax.Array  # i32[N]  per-run tie-breaking order (random_priority)


def random(num_clients: int, selection_size: int = 8) -> Policy:
    """k = min(selection_size, #available) clients uniformly at random among the available ones.

    The top k of i.i.d. uniform scores; the rare exact ties of float scores follow a per-run
    random order of the clients rather than their index.
    """
    check_selection_size(num_clients, selection_size)

    def init(key, hparams) -> TieBreakState:
        del hparams
        return TieBreakState(priority=random_priority(key, num_clients))

    def select(key, state, obs, hparams):
        del hparams
        scores = jax.random.uniform(key, (num_clients,))
        k = selection_count(obs.available, selection_size)
        return topk_mask(scores, obs.available, k, state.priority)

    return Policy(init=init, select=select, update=stateless_update)


def dirichlet_random(num_clients: int, selection_size: int = 8) -> Policy:
    """Per run q' ~ Dir(γ₂·1); each round k = min(selection_size, #available) available clients
    without replacement ∝ q'.

    RBCS-F §6.2.2. Sampling without replacement proportionally to q' is the Gumbel-top-k of
    log q'; log q' comes from log-gamma draws so that tiny γ₂ does not underflow to 0/0.
    """
    check_selection_size(num_clients, selection_size)

    def init(key, hparams):
        k_weight, k_tie = jax.random.split(key)
        gamma2 = jnp.asarray(hparams["gamma2"], jnp.result_type(float))
        log_gamma = jax.random.loggamma(k_weight, jnp.broadcast_to(gamma2, (num_clients,)))
        return DirichletState(
            log_weight=log_gamma - jax.nn.logsumexp(log_gamma),
            priority=random_priority(k_tie, num_clients),
        )

    def select(key, state, obs, hparams):
        del hparams
        scores = state.log_weight + jax.random.gumbel(key, (num_clients,), state.log_weight.dtype)
        k = selection_count(obs.available, selection_size)
        # Tiny γ₂ leaves many log-weights at -inf (scores -inf): those ties go by the run's order.
        return topk_mask(scores, obs.available, k, state.priority)

    return Policy(init=init, select=select, update=stateless_update)


def fedcs(num_clients: int, selection_size: int = 8) -> Policy:
    """FedCS adapted as in RBCS-F §6.1: every available client with τ* ≤ deadline (not capped).

    Reads the oracle ``expected_time`` of the observation (full knowledge of θ* and c).
    ``selection_size`` is checked and accepted for a uniform signature, and otherwise ignored.
    """
    check_selection_size(num_clients, selection_size)

    def select(key, state, obs, hparams):
        del key, state
        return obs.available & (obs.expected_time <= hparams["deadline"])

    return stateless(select)


register(PolicySpec("random", random, {}, "uniform random among the available clients"))
register(
    PolicySpec(
        "dirichlet_random",
        dirichlet_random,
        {"gamma2": HParam(1.0, 0.0, low_open=True, help="Dirichlet concentration γ₂ > 0")},
        "random selection with per-run Dirichlet(γ₂) client weights (RBCS-F §6.2.2)",
    )
)
# FedCS selects every client that meets the deadline, not m of them
# (not capped: docs/decisions.md#rbcsf-fedcs).
_DEADLINE = HParam(3.0, 0.0, low_open=True, help="deadline (s) on expected time τ*")
register(
    PolicySpec(
        "fedcs",
        fedcs,
        {"deadline": _DEADLINE},
        "FedCS: all available clients whose expected time meets the deadline (oracle)",
        requires=("available", "expected_time"),
        selects_at_most=lambda num_clients, size: num_clients,
    )
)
