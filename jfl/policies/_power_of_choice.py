"""Power-of-Choice (Cho, Wang and Joshi, "Towards understanding biased client selection in
federated learning", AISTATS 2022, Algorithm 1), the loss-aware selection FL papers compare with,
its cheaper variants cpow-d and rpow-d (§4), and its unbiased baseline rand.

pow-d, Algorithm 1 as docs/methods.md states it: a candidate set A of d
clients is drawn without replacement with probability ∝ p_k (p_k = n_k/Σn, the data share), the
candidates receive the global model and report their local loss F_k(w), and the m candidates
with the highest loss are selected; the global model is the plain average of their updates
(biased on purpose; the authors' code: "weight = 1/size",
docs/decisions.md#aggregation-protocols). The first round has no losses to rank: m clients drawn
∝ p. d = 2m unless given (the paper's K = 100, m = 3 runs use d ∈ {6, 9, 15}). adapow-d, the
paper's schedule that trades the bias for speed early only, is the option ``switch``: d = N
before that round (the first half of the rounds in the quadratic's reproduction,
docs/decisions.md#pow-d-quadratic-adapow), then d = m.

The variants rank the same candidates by cheaper estimates of F_k(w) (§4, "Variants of
Power-of-Choice"): cpow-d by the loss on one minibatch of b samples per candidate (the
learner's ``minibatch_loss``), rpow-d by no probe at all: the mean training loss each client
reported the last time it participated (``train_loss``; +∞ before, so unseen clients go first).

rand, the paper's unbiased baseline (§5: "m clients sampled with replacement ∝ p_k", the model
their simple average), is ``proportional``: a client drawn twice counts twice, each draw
weighing 1/m (a ``Selection``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jfl.kernels import (
    gumbel_top_k,
    random_priority,
    sample_with_replacement,
    selection_count,
    topk_mask,
)
from jfl.policies.base import (
    HParam,
    Policy,
    PolicySpec,
    check_selection_size,
    draws_selection,
    register,
    stateless,
)


class PowerOfChoiceState(NamedTuple):
    priority: jax.Array  # i32[N]  per-run random order breaking ties among equal losses
    round: jax.Array  # i32[]  rounds selected so far


class RecentLossState(NamedTuple):
    """rpow-d's state: pow-d's and each client's last reported training loss."""

    priority: jax.Array  # i32[N]
    round: jax.Array  # i32[]
    loss: jax.Array  # f[N]  train_loss of the client's last round (+inf: never participated)


def candidate_count(hparams, num_clients: int, selection_size: int, k, round_index):
    """How many candidates a round draws: ``d`` (0: 2m, the default), or with adapow-d's
    schedule (``switch`` > 0) N before round ``switch`` and m from it on; at least the ``k``
    clients it selects."""
    d = jnp.where(hparams["d"] > 0, hparams["d"], 2 * selection_size)
    adaptive = jnp.where(round_index < hparams["switch"], num_clients, selection_size)
    d = jnp.where(hparams["switch"] > 0, adaptive, d)
    return jnp.maximum(jnp.asarray(d).astype(jnp.int32), k)


def _select_by(num_clients: int, selection_size: int, score):
    """Algorithm 1's selection with candidates ranked by ``score(state, obs)`` (f[N])."""

    def select(key, state, obs, hparams):
        k_first, k_candidates = jax.random.split(key)
        logits = jnp.log(obs.data_size.astype(jnp.float32))  # log p_k + const; -inf: no data
        k = selection_count(obs.available, selection_size)
        first = gumbel_top_k(k_first, logits, obs.available, k)
        d = candidate_count(hparams, num_clients, selection_size, k, state.round)
        candidates = gumbel_top_k(k_candidates, logits, obs.available, d)
        chosen = topk_mask(score(state, obs), candidates, k, state.priority)
        return jnp.where(state.round == 0, first, chosen)

    return select


def _init(num_clients: int):
    def init(key, hparams):
        del hparams
        return PowerOfChoiceState(random_priority(key, num_clients), jnp.zeros((), jnp.int32))

    return init


def _count_round(state, obs, action, feedback, hparams):
    del obs, action, feedback, hparams
    return state._replace(round=state.round + 1)


def pow_d(num_clients: int, selection_size: int) -> Policy:
    """pow-d: ``d`` candidates drawn ∝ the data share without replacement among the available
    clients (``gumbel_top_k``), the ``min(m, |A(t)|)`` with the highest ``obs.local_loss``
    selected (Cho et al., Alg. 1); round 1 draws them ∝ p. Reads the learner's ``data_size``
    and ``local_loss``."""
    check_selection_size(num_clients, selection_size)
    select = _select_by(num_clients, selection_size, lambda state, obs: obs.local_loss)
    return Policy(_init(num_clients), select, _count_round, signals=("data_size", "local_loss"))


def cpow_d(num_clients: int, selection_size: int) -> Policy:
    """cpow-d (Cho et al. §4): pow-d with the candidates ranked by ``obs.minibatch_loss``, each
    candidate's loss on b of its samples (the learner's ``probe_batch``) instead of all."""
    check_selection_size(num_clients, selection_size)
    select = _select_by(num_clients, selection_size, lambda state, obs: obs.minibatch_loss)
    signals = ("data_size", "minibatch_loss")
    return Policy(_init(num_clients), select, _count_round, signals=signals)


def rpow_d(num_clients: int, selection_size: int) -> Policy:
    """rpow-d (Cho et al. §4): pow-d with the candidates ranked by the mean training loss each
    reported in its last round (``train_loss``, a round signal read in ``update``; +∞ for a
    client that never participated), so no candidate is probed."""
    check_selection_size(num_clients, selection_size)

    def init(key, hparams):
        del hparams
        loss = jnp.full(num_clients, jnp.inf, jnp.float32)
        return RecentLossState(random_priority(key, num_clients), jnp.zeros((), jnp.int32), loss)

    def update(state, obs, action, feedback, hparams):
        del feedback, hparams
        loss = jnp.where(action, obs.train_loss.astype(jnp.float32), state.loss)
        return RecentLossState(state.priority, state.round + 1, loss)

    select = _select_by(num_clients, selection_size, lambda state, obs: state.loss)
    return Policy(init, select, update, signals=("data_size", "train_loss"))


def proportional(num_clients: int, selection_size: int) -> Policy:
    """rand (Cho et al. §5; FedAvg's unbiased sampling, Li et al., ICLR 2020, scheme I): m
    independent draws ∝ the data share among the available clients (``sample_with_replacement``),
    each draw weighing 1/m in the aggregation, so a client drawn twice counts twice and the
    expected update is Σ p_k Δ_k. No available client with data: nobody."""
    check_selection_size(num_clients, selection_size)

    def select(key, state, obs, hparams):
        del state, hparams
        logits = jnp.where(obs.available, jnp.log(obs.data_size.astype(jnp.float32)), -jnp.inf)
        count = sample_with_replacement(key, logits, selection_size)
        count = jnp.where(jnp.any(jnp.isfinite(logits)), count, 0)
        return draws_selection(count, selection_size)

    return stateless(select)._replace(signals=("data_size",))


_CANDIDATES = {
    "d": HParam(0.0, 0.0, help="candidates d drawn ∝ data share (0: 2m)"),
    "switch": HParam(
        0.0, 0.0, help="adapow-d: d = N before this round, m from it (0: off, fixed d)"
    ),
}


def _pow_d_spec(name: str, build, description: str, ranking: str) -> PolicySpec:
    """The spec of a Power-of-Choice variant whose candidates are ranked by signal ``ranking``."""
    return PolicySpec(
        name,
        build,
        _CANDIDATES,
        description,
        requires=("available", "data_size", ranking),
        aggregation="uniform",  # the authors' code: weight = 1/size
    )


for _spec in (
    _pow_d_spec(
        "pow_d",
        pow_d,
        "Power-of-Choice: of d candidates drawn ∝ data share, the m with the highest local loss",
        "local_loss",
    ),
    _pow_d_spec(
        "cpow_d",
        cpow_d,
        "Power-of-Choice's cpow-d: the candidates ranked by the loss on one minibatch",
        "minibatch_loss",
    ),
    _pow_d_spec(
        "rpow_d",
        rpow_d,
        "Power-of-Choice's rpow-d: the candidates ranked by their last training loss",
        "train_loss",
    ),
    PolicySpec(
        "proportional",
        proportional,
        {},
        "rand: m draws ∝ data share with replacement, each weighing 1/m (unbiased)",
        requires=("available", "data_size"),
        aggregation="policy_weights",
    ),
):
    register(_spec)
