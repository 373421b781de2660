"""Active Federated Learning (Goetz, Malik, Bui, Moon, Liu and Kumar, arXiv 1909.12641, Alg. 1).

Each client that takes part reports a valuation of its data under the global model it received,
before training on it: v_k = √n_k · F_k(w) (the paper's (1/√n_k)·Σ loss, with F_k the mean loss
on the client's n_k samples). Valuations stay as they were until the client takes part again;
a client never seen has none and is drawn first (docs/decisions.md#afl-unseen). Each round, among
the available clients: the ⌊α₁·|A|⌋ lowest valuations are set aside, ⌊(1 − α₃)·m⌋ clients are
drawn without replacement with probability ∝ exp(α₂·v) among the others, and the remaining
slots are drawn uniformly among every available client not yet drawn (so that the ones set
aside can come back only this way). Defaults α₁ = 0.75, α₂ = 0.01, α₃ = 0.1 (§5).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jfl.kernels import fill_uniformly, gumbel_top_k, selection_count, topk_mask
from jfl.policies.base import HParam, Policy, PolicySpec, check_selection_size, register


class AflState(NamedTuple):
    valuation: jax.Array  # f[N]  √n_k·F_k(w) when k last took part; +inf: never seen


def afl_counts(k, num_available, hparams):
    """(how many valuations are set aside, how many clients are drawn ∝ exp(α₂·v))."""
    aside = jnp.floor(hparams["alpha1"] * num_available).astype(jnp.int32)
    valued = jnp.floor((1.0 - hparams["alpha3"]) * k).astype(jnp.int32)
    return aside, valued


def afl(num_clients: int, selection_size: int) -> Policy:
    """AFL's selection (Goetz et al., Alg. 1) over the available clients; reads the learner's
    ``local_loss`` and ``data_size`` to value the clients it selected."""
    check_selection_size(num_clients, selection_size)

    def init(key, hparams):
        del key, hparams
        return AflState(jnp.full(num_clients, jnp.inf, jnp.float32))

    def select(key, state, obs, hparams):
        k_unseen, k_valued, k_uniform = jax.random.split(key, 3)
        available = obs.available
        k = selection_count(available, selection_size)
        aside, valued = afl_counts(k, jnp.sum(available, dtype=jnp.int32), hparams)
        unseen = jnp.isposinf(state.valuation)
        seen = available & ~unseen
        # The lowest valuations (never a client without one); valuations tie with probability 0.
        low = topk_mask(-jnp.where(seen, state.valuation, 0.0), seen, aside)
        first = gumbel_top_k(k_unseen, jnp.zeros(num_clients), available & unseen, valued)
        left = valued - jnp.sum(first, dtype=jnp.int32)
        logits = hparams["alpha2"] * jnp.where(seen, state.valuation, 0.0)
        drawn = first | gumbel_top_k(k_valued, logits, seen & ~low, left)
        return fill_uniformly(k_uniform, drawn, available, k)

    def update(state, obs, action, feedback, hparams):
        del feedback, hparams
        value = jnp.sqrt(obs.data_size) * obs.local_loss
        return AflState(jnp.where(action, value, state.valuation))

    return Policy(init, select, update, signals=("data_size", "local_loss"))


register(
    PolicySpec(
        "afl",
        afl,
        {
            "alpha1": HParam(0.75, 0.0, 1.0, help="share of the lowest valuations set aside"),
            "alpha2": HParam(0.01, 0.0, help="softmax temperature on the valuations"),
            "alpha3": HParam(0.1, 0.0, 1.0, help="share of the m slots drawn uniformly"),
        },
        "Active FL: ∝ exp(α₂·√n·loss) among all but the lowest valuations, plus uniform slots",
        requires=("available", "data_size", "local_loss"),
    )
)
