"""Unbiased importance sampling of clients from their updates: DELTA and FedIS (Wang, Guo,
Lin and Tang, "DELTA: Diverse client sampling for fasting federated learning", NeurIPS 2023,
arXiv 2205.13925; code L3030/DELTA_FL) and optimal client sampling (Chen, Horváth and
Richtárik, "Optimal client sampling for federated learning", TMLR 2022, arXiv 2010.13723; code
SamuelHorvath/FL-optimal-client-sampling).

All three estimate the full-participation update Σ_i d_i·U_i (d_i = n_i/Σn the data share, U_i
client i's update) from a sample S with known inclusion probabilities π: the learner moves the
model by Σ_{i∈S} (d_i/π_i)·U_i (``jfl.policies.Selection``), unbiased whatever π, and the methods
choose π to make its variance small.

* ``fedis``: π ∝ d_i‖U_i‖ (the variance-optimal π when only the update norms matter).
* ``delta``: π ∝ d_i·sqrt(α₁ζ_i² + α₂σ_i²), ζ_i = ‖ĝ_i − ḡ‖ the distance of i's mean local
  gradient ĝ_i = U_i/(η·K_i) (its update over the learning rate times its local steps, the
  learner's ``update_scale``) to the participants' mean (the diversity term), and σ_i² the
  variance of its local minibatch gradients (the learner's ``grad_var``): both on the gradient
  scale, as the paper's ζ_G and σ_L; ``gradient_scale = 0`` measures ζ on the updates instead
  (docs/decisions.md#delta-score).
  Both learn the score from the participants only ("practical" DELTA / FedIS): a sampling
  distribution P (1/N each at the start) whose participants' entries are replaced, after each
  round, by their new scores rescaled to the participants' old total mass; the others keep
  theirs (``reweight_prac`` in ``Femnist and CIfar-10/local_update.py``). A round draws
  k = min(m, #available) of the available clients with inclusion probabilities
  π = min(1, λ·P) (Σπ = k) by systematic sampling (``jfl.kernels.systematic_sample``), where
  the authors draw without replacement ∝ P (docs/decisions.md#delta-sampling).
* ``ocs``: every available client computes its update (``local_update_norm``), and
  π = min(1, λ·d_i‖U_i‖) with Σπ = k, the paper's optimal probabilities (its eq. 7: with the
  norms sorted ascending, the largest l with 0 < k + l − N ≤ Σ_{j≤l} ũ_(j)/ũ_(l)); each client
  then communicates independently with probability π_i, so the number selected is random with
  mean k.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jfl.kernels import capped_inclusion, selection_count, systematic_sample
from jfl.kernels.reduce import pairwise_sum
from jfl.policies.base import (
    HParam,
    Policy,
    PolicySpec,
    Selection,
    check_selection_size,
    register,
    stateless,
)


class ImportanceState(NamedTuple):
    prob: jax.Array  # f[N]  the sampling distribution P (Σ = 1), 1/N at the start


def data_share(data_size, available) -> jax.Array:
    """f[N]: d_i = n_i/Σn over the available clients (0 for the others; all 0 without data)."""
    size = jnp.where(available, data_size.astype(jnp.float32), 0.0)
    total = pairwise_sum(size)
    return size / jnp.where(total > 0, total, 1.0)


def unbiased_selection(selected, share, inclusion) -> Selection:
    """The ``Selection`` of ``selected`` with weights d_i/π_i: E[Σ_S d_i/π_i·U_i] = Σ_i d_i·U_i."""
    weight = jnp.where(selected, share / jnp.where(selected, inclusion, 1.0), 0.0)
    return Selection(selected, weight)


def inclusion_of(weight, available, selection_size: int) -> jax.Array:
    """π = min(1, λ·w) over the available clients with Σπ = k = min(m, #available); uniform
    k/#available when no available client has a positive weight (then every choice is as good:
    the weights are all 0)."""
    k = selection_count(available, selection_size).astype(jnp.float32)
    weight = jnp.where(available, weight, 0.0)
    count = jnp.maximum(jnp.sum(available), 1).astype(jnp.float32)
    uniform = jnp.where(available, k / count, 0.0)
    return jnp.where(jnp.any(weight > 0), capped_inclusion(weight, k), uniform)


def delta_score(obs, action, hparams, diversity: bool) -> jax.Array:
    """f[N]: each participant's score d_i·sqrt(α₁ζ_i² + α₂σ_i²) (DELTA; ζ of the update
    sketches divided by ``update_scale`` η·K_i unless ``gradient_scale`` is 0) or d_i‖U_i‖
    (FedIS), with d over the participants (the authors' ``L / sum_L``; its scale cancels)."""
    share = data_share(obs.data_size, action)
    if not diversity:
        return share * obs.update_norm
    # A participant that took no step (no data) has a zero update: it stays 0 on either scale.
    scale = jnp.where(obs.update_scale > 0, obs.update_scale, 1.0)
    scale = jnp.where(hparams["gradient_scale"] > 0.5, scale, 1.0)
    rows = jnp.where(action[:, None], obs.update_sketch / scale[:, None], 0.0)
    count = jnp.maximum(jnp.sum(action), 1).astype(rows.dtype)
    mean = pairwise_sum(rows, axis=0) / count
    zeta_sq = pairwise_sum((rows - mean) ** 2, axis=1)
    return share * jnp.sqrt(hparams["alpha1"] * zeta_sq + hparams["alpha2"] * obs.grad_var)


def reweight(prob, score, action) -> jax.Array:
    """P with the participants' entries replaced by their scores rescaled to the participants'
    old total mass (``reweight_prac``); P unchanged if every participant scores 0."""
    old = pairwise_sum(jnp.where(action, prob, 0.0))
    total = pairwise_sum(jnp.where(action, score, 0.0))
    new = score * old / jnp.where(total > 0, total, 1.0)
    return jnp.where(action & (total > 0), new, prob)


def _importance(num_clients: int, selection_size: int, diversity: bool) -> Policy:
    check_selection_size(num_clients, selection_size)

    def init(key, hparams):
        del key, hparams
        return ImportanceState(jnp.full(num_clients, 1.0 / num_clients, jnp.float32))

    def select(key, state, obs, hparams):
        del hparams
        inclusion = inclusion_of(state.prob, obs.available, selection_size)
        selected = systematic_sample(key, inclusion) & obs.available
        return unbiased_selection(selected, data_share(obs.data_size, obs.available), inclusion)

    def update(state, obs, action, feedback, hparams):
        del feedback
        score = delta_score(obs, action, hparams, diversity)
        return ImportanceState(reweight(state.prob, score, action))

    signals = ("data_size", "update_norm")
    if diversity:
        signals = ("data_size", "update_sketch", "grad_var", "update_scale")
    return Policy(init, select, update, signals)


def delta(num_clients: int, selection_size: int) -> Policy:
    """DELTA (Wang et al. 2023, practical version): k clients with inclusion probabilities
    ∝ the sampling distribution P learnt from d_i·sqrt(α₁ζ_i² + α₂σ_i²), aggregated with the
    unbiased weights d_i/π_i."""
    return _importance(num_clients, selection_size, diversity=True)


def fedis(num_clients: int, selection_size: int) -> Policy:
    """FedIS (the importance-sampling baseline of Wang et al. 2023): as ``delta`` with the
    score d_i‖U_i‖."""
    return _importance(num_clients, selection_size, diversity=False)


def ocs(num_clients: int, selection_size: int) -> Policy:
    """Optimal client sampling (Chen, Horváth and Richtárik 2022, Alg. 1): every available
    client's update norm ũ_i = d_i‖U_i‖, π = min(1, λ·ũ) with Σπ = k, independent Bernoulli(π)
    draws, aggregation Σ_S (d_i/π_i)·U_i."""
    check_selection_size(num_clients, selection_size)

    def select(key, state, obs, hparams):
        del state, hparams
        share = data_share(obs.data_size, obs.available)
        inclusion = inclusion_of(share * obs.local_update_norm, obs.available, selection_size)
        selected = (jax.random.uniform(key, (num_clients,)) < inclusion) & obs.available
        return unbiased_selection(selected, share, inclusion)

    return stateless(select)._replace(signals=("data_size", "local_update_norm"))


_WEIGHT = "weight of {} in DELTA's score sqrt(α₁ζ² + α₂σ²)"

register(
    PolicySpec(
        "delta",
        delta,
        {
            "alpha1": HParam(1.0, 0.0, help=_WEIGHT.format("the diversity ζ²")),
            "alpha2": HParam(1.0, 0.0, help=_WEIGHT.format("the local variance σ²")),
            "gradient_scale": HParam(
                1.0, 0.0, 1.0, help="1: ζ on the gradient scale, as σ (update / η·K); 0: updates"
            ),
        },
        "DELTA: unbiased sampling ∝ d·sqrt(α₁ζ² + α₂σ²) learnt from the participants",
        requires=("available", "data_size", "update_sketch", "grad_var", "update_scale"),
        aggregation="policy_weights",
    )
)
register(
    PolicySpec(
        "fedis",
        fedis,
        {},
        "FedIS: unbiased sampling ∝ d·‖update‖ learnt from the participants",
        requires=("available", "data_size", "update_norm"),
        aggregation="policy_weights",
    )
)
register(
    PolicySpec(
        "ocs",
        ocs,
        {},
        "Optimal client sampling: every client's update norm, π = min(1, λ·d‖U‖), Bernoulli",
        requires=("available", "data_size", "local_update_norm"),
        aggregation="policy_weights",
        selects_at_most=lambda num_clients, size: num_clients,
    )
)
