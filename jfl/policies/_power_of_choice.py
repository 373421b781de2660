"""Power-of-Choice (Cho, Wang and Joshi, "Towards understanding biased client selection in
federated learning", AISTATS 2022, Algorithm 1), the loss-aware selection FL papers compare with.

pow-d, as the project's specification (SPEC §10) states Algorithm 1: a candidate set A of d
clients is drawn without replacement with probability ∝ p_k (p_k = n_k/Σn, the data share), the
candidates receive the global model and report their local loss F_k(w), and the m candidates
with the highest loss are selected; the global model is the plain average of their updates
(biased on purpose). The first round has no losses to rank: m clients drawn ∝ p. d = 2m unless
given (the paper's K = 100, m = 3 runs use d ∈ {6, 9, 15}). adapow-d, the paper's schedule
that trades the bias for speed early only, is the option ``switch``: d = N before that round
(SPEC §10: the first half of the rounds), then d = m.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jfl.kernels import gumbel_top_k, selection_count, topk_mask
from jfl.policies.base import (
    HParam,
    Policy,
    PolicySpec,
    check_selection_size,
    random_priority,
    register,
)


class PowerOfChoiceState(NamedTuple):
    priority: jax.Array  # i32[N]  per-run random order breaking ties among equal losses
    round: jax.Array  # i32[]  rounds selected so far


def candidate_count(hparams, num_clients: int, selection_size: int, k, round_index):
    """How many candidates a round draws: ``d`` (0: 2m, the default), or with adapow-d's
    schedule (``switch`` > 0) N before round ``switch`` and m from it on; at least the ``k``
    clients it selects."""
    d = jnp.where(hparams["d"] > 0, hparams["d"], 2 * selection_size)
    adaptive = jnp.where(round_index < hparams["switch"], num_clients, selection_size)
    d = jnp.where(hparams["switch"] > 0, adaptive, d)
    return jnp.maximum(jnp.asarray(d).astype(jnp.int32), k)


def pow_d(num_clients: int, selection_size: int) -> Policy:
    """pow-d: ``d`` candidates drawn ∝ the data share without replacement among the available
    clients (``gumbel_top_k``), the ``min(m, |A(t)|)`` with the highest ``obs.local_loss``
    selected (Cho et al., Alg. 1); round 1 draws them ∝ p. Reads the learner's ``data_size``
    and ``local_loss``."""
    check_selection_size(num_clients, selection_size)

    def init(key, hparams):
        del hparams
        return PowerOfChoiceState(random_priority(key, num_clients), jnp.zeros((), jnp.int32))

    def select(key, state, obs, hparams):
        k_first, k_candidates = jax.random.split(key)
        logits = jnp.log(obs.data_size.astype(jnp.float32))  # log p_k + const; -inf: no data
        k = selection_count(obs.available, selection_size)
        first = gumbel_top_k(k_first, logits, obs.available, k)
        d = candidate_count(hparams, num_clients, selection_size, k, state.round)
        candidates = gumbel_top_k(k_candidates, logits, obs.available, d)
        chosen = topk_mask(obs.local_loss, candidates, k, state.priority)
        return jnp.where(state.round == 0, first, chosen)

    def update(state, obs, action, feedback, hparams):
        del obs, action, feedback, hparams
        return state._replace(round=state.round + 1)

    return Policy(init, select, update, signals=("data_size", "local_loss"))


register(
    PolicySpec(
        "pow_d",
        pow_d,
        {
            "d": HParam(0.0, 0.0, help="candidates d drawn ∝ data share (0: 2m)"),
            "switch": HParam(
                0.0, 0.0, help="adapow-d: d = N before this round, m from it (0: off, fixed d)"
            ),
        },
        "Power-of-Choice: of d candidates drawn ∝ data share, the m with the highest local loss",
        requires=("available", "data_size", "local_loss"),
    )
)
