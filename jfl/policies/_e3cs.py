"""E3CS (Huang, Lin, Shen, Li and Zomaya, "Stochastic client selection for federated learning
with volatile clients", IEEE Internet of Things Journal 2022, arXiv 2011.08756, Algorithm 1):
Exp3 over the clients with a fairness floor, for clients whose round may fail.

Each client keeps an exponential weight w_i (w = 1 at the start). A round's probability
allocation, with the fairness quota σ (the least inclusion probability of every client),

    π_i = σ + (k − Nσ)·w'_i / Σ_j w'_j,

where w' is w with the largest weights lowered to a common level so that no π exceeds 1: the
clients so capped (the set S′) get π = 1 and the mass they would have taken is shared by the
others in proportion to their weights. This is Exp3.M's capping (Uchiya, Nakamura and Kudo, ALT
2010, Alg. 1) with γ = Nσ/k: the cap applies to the whole π, and in terms of the plain capping
kernel π = σ + (1 − σ)·capped(w, (k − Nσ)/(1 − σ)) (docs/decisions.md#e3cs-capping). k clients
are drawn with inclusion probabilities exactly π (the paper's DepRound; jfl uses systematic
sampling on a random order of the clients, ``jfl.kernels.systematic_sample``, which has the same
marginals π, all that the estimator below needs; docs/decisions.md#e3cs-sampling). After the
round the selected clients report whether their update arrived (x_i ∈ {0, 1}, the environment's
``success``) and, with the unbiased estimate x̂_i = x_i/π_i for the selected clients (0 for the
others), every client outside S′ updates

    w_i ← w_i · exp((k − Nσ)·η·x̂_i / N).

jfl keeps log w: its additive update never overflows, and the capping is computed from log
weights (``capped_inclusion_log``: the capped clients' weights can be e^100 times the others',
and the others' π depend only on their weights relative to one another).

Hyperparameters: the learning rate η (``eta``, 0.5) and the fairness floor as a fraction of the
uniform share k/N (``sigma`` ∈ [0, 1]: σ = sigma·k/N; the paper's E3CS-0, E3CS-0.5 and E3CS-0.8
are 0, 0.5 and 0.8, and 1 is uniform sampling). E3CS-inc, the paper's increasing quota (σ = 0
for the first quarter of the rounds, then k/N), is the option ``switch``: σ = 0 in the first
``switch`` rounds and k/N from then on (``switch`` = T/4 for the paper's schedule; 0: off, σ
from ``sigma``). The paper's clients are always available; here a round runs the same algorithm
on its available clients only (N and k those of the round, σ = sigma·k/N; an unavailable client
has π = 0 and keeps its weight; docs/decisions.md#e3cs-availability).

``most_reliable`` is the FedCS-like baseline of the paper's experiments: the k available clients
most likely to succeed, from the environment's oracle ``success_probability``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jfl.kernels import random_priority, selection_count, systematic_sample, topk_mask
from jfl.policies.base import HParam, Policy, PolicySpec, check_selection_size, register, stateless


class E3csState(NamedTuple):
    log_weight: jax.Array  # f[N]  log w_i (Exp3's exponential weights), 0 at the start
    round: jax.Array  # i32[]  rounds selected so far (the ``switch`` schedule's clock)


class Allocation(NamedTuple):
    """One round's probability allocation."""

    inclusion: jax.Array  # f[N]  π_i, 0 for an unavailable client; Σπ = k
    capped: jax.Array  # bool[N]  S′: the clients whose weight was capped (π_i = 1)
    gain: jax.Array  # f[]  (k − Nσ)·η/N, the factor of x̂ in the weight update


def capped_inclusion_log(log_weight: jax.Array, m) -> tuple[jax.Array, jax.Array]:
    """``jfl.kernels.capped_inclusion`` from log weights: π_i = min(1, λ·w_i), Σπ = m, with
    w = exp(log_weight) (−inf: weight 0, π = 0). The water level is found on the sorted log
    weights and their reverse cumulative log-sum-exp, so that weights far apart (e^±100) give
    the π that exact arithmetic would, where exponentiating them first would round the smaller
    ones to 0.

    Returns ``(π f[N] in [0, 1], capped bool[N])``: the clients whose weight was lowered to the
    water level (π = 1 through the capping; a client whose λ·w rounds to 1 is not one of them).
    """
    num = log_weight.shape[0]
    order = jnp.argsort(-log_weight)
    lw = log_weight[order]  # descending
    tail = jax.lax.cumlogsumexp(lw, reverse=True)  # log Σ_{i ≥ j} w_i
    j = jnp.arange(num)
    left = m - j
    # j clients capped is consistent once (m − j)·w_j ≤ Σ_{i ≥ j} w_i (or j ≥ m).
    fits = (j >= m) | (jnp.log(jnp.where(left > 0, left, 1.0)) + lw <= tail)
    capped = jnp.where(jnp.any(fits), jnp.argmax(fits), num)
    rest = tail[jnp.minimum(capped, num - 1)]
    level = jnp.log(jnp.maximum(m - capped, 0.0)) - rest  # log λ
    scaled = jnp.where(jnp.isneginf(lw) | jnp.isneginf(rest), 0.0, jnp.exp(lw + level))
    pi = jnp.where(j < capped, 1.0, jnp.minimum(scaled, 1.0))
    unsort = lambda x: jnp.zeros_like(x).at[order].set(x)  # noqa: E731
    return unsort(pi), unsort(j < capped)


def sigma_fraction(hparams, round_index):
    """The round's fairness floor as a fraction of k/N: ``sigma``, or with the E3CS-inc schedule
    (``switch`` > 0) 0 in the first ``switch`` rounds and 1 from then on."""
    scheduled = jnp.where(round_index < hparams["switch"], 0.0, 1.0)
    return jnp.where(hparams["switch"] > 0, scheduled, hparams["sigma"])


def allocation(log_weight, available, selection_size: int, fraction, eta) -> Allocation:
    """E3CS's probability allocation (Huang et al. 2022, Alg. 1) among the available clients.

    With N the available clients and k = min(m, N): σ = fraction·k/N,
    π_i = σ + (1 − σ)·q_i with q = min(1, λ·w) of total (k − Nσ)/(1 − σ) (so π ≤ 1 and Σπ = k),
    and S′ the clients whose weight the capping lowered. When k = N every available client has
    π = 1 and is in S′ (set as such, not left to the rounding of (k − Nσ)/(1 − σ) = N).
    """
    k = selection_count(available, selection_size).astype(log_weight.dtype)
    count = jnp.sum(available, dtype=jnp.int32).astype(log_weight.dtype)
    count = jnp.maximum(count, 1.0)
    everyone = k >= count
    floor = fraction * k / count  # σ
    exp3_mass = k * (1.0 - fraction)  # k − Nσ, exactly 0 when σ = k/N
    spread = jnp.where(everyone, 1.0, 1.0 - floor)  # > 0 when k < N
    q, capped = capped_inclusion_log(jnp.where(available, log_weight, -jnp.inf), exp3_mass / spread)
    q = jnp.where(everyone, 1.0, q)
    inclusion = jnp.where(everyone, 1.0, floor + spread * q)
    inclusion = jnp.where(available, inclusion, 0.0)
    return Allocation(inclusion, available & (capped | everyone), exp3_mass * eta / count)


def e3cs(num_clients: int, selection_size: int) -> Policy:
    """E3CS's selection (Huang et al. 2022, Alg. 1): k = min(m, #available) clients drawn with
    inclusion probabilities π (``allocation``); after the round, Exp3's weight update from the
    environment's ``success`` (the selected clients whose update arrived)."""
    check_selection_size(num_clients, selection_size)

    def init(key, hparams):
        del key, hparams
        return E3csState(jnp.zeros(num_clients, jnp.float32), jnp.zeros((), jnp.int32))

    def _allocation(state, obs, hparams):
        fraction = sigma_fraction(hparams, state.round)
        return allocation(state.log_weight, obs.available, selection_size, fraction, hparams["eta"])

    def select(key, state, obs, hparams):
        return systematic_sample(key, _allocation(state, obs, hparams).inclusion) & obs.available

    def update(state, obs, action, feedback, hparams):
        alloc = _allocation(state, obs, hparams)
        arrived = action & feedback.success & ~alloc.capped
        # x̂_i = x_i/π_i for the selected clients; clients in S′ keep their weight.
        step = alloc.gain / jnp.where(arrived, alloc.inclusion, 1.0)
        log_weight = state.log_weight + jnp.where(arrived, step, 0.0)
        return E3csState(log_weight, state.round + 1)

    return Policy(init, select, update)


def most_reliable(num_clients: int, selection_size: int) -> Policy:
    """The FedCS-like baseline of E3CS's experiments (Huang et al. 2022, §VI): the k = min(m,
    #available) available clients most likely to succeed, ties broken at random each round.
    Reads the environment's oracle ``success_probability`` (the volatile environment's)."""
    check_selection_size(num_clients, selection_size)

    def select(key, state, obs, hparams):
        del state, hparams
        k = selection_count(obs.available, selection_size)
        priority = random_priority(key, num_clients)
        return topk_mask(obs.success_probability, obs.available, k, priority)

    return stateless(select)


register(
    PolicySpec(
        "e3cs",
        e3cs,
        {
            "eta": HParam(0.5, 0.0, help="learning rate η of the exponential weights"),
            "sigma": HParam(
                0.5, 0.0, 1.0, help="fairness floor σ as a fraction of k/N (E3CS-0/0.5/0.8)"
            ),
            "switch": HParam(
                0.0, 0.0, help="E3CS-inc: σ = 0 in the first `switch` rounds, k/N after (0: off)"
            ),
        },
        "E3CS: Exp3 with a fairness floor σ, k clients with inclusion probabilities π",
        requires=("available", "success"),
    )
)
register(
    PolicySpec(
        "most_reliable",
        most_reliable,
        {},
        "the m available clients most likely to succeed (oracle; E3CS's FedCS-like baseline)",
        requires=("available", "success_probability"),
    )
)
