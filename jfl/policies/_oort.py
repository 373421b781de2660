"""Oort's training selector (Lai, Zhu, Madhyastha and Chowdhury, "Oort: Efficient Federated
Learning via Guided Participant Selection", OSDI 2021, §4 and Algorithm 1), as the authors' code
runs it: SymbioticLab/Oort ``oort/oort.py`` (commit 05a3aa1), class ``_training_selector``; line
numbers below are that file's.

Per client the selector keeps its statistical utility U_i = |B_i|·sqrt(mean loss²) (the
harness's ``clientUtility = math.sqrt(iteration_loss[i]) * size_of_sample_bin``,
``training/param_server.py``), its last duration D_i, the round L_i it last took part in, how
often it did, and whether it was ever explored. Before that, a client's reward is its prior
|B_i| (``register_client``: ``'reward': min(size, upload_epoch*batch_size)``). Here |B_i| is
the client's ``data_size`` (capped at ``sample_cap`` when given) and the loss² the learner's
``local_loss_sq`` of the global model; D_i is the environment's realised ``time``.

Each round R (1-based), ``getTopK``:

* the pacer (``pacer``, l. 174–205) first appends the mean utility of the last round's
  exploited participants; every W = ``pacer_window`` rounds (from round 2W) it compares the sums
  of the last two windows: |cur − last| ≤ 0.1·last (flat) raises the duration percentile θ by
  Δ = ``pacer_delta`` up to 100 (l. 190–191); else |cur − last| ≥ 5·last lowers it by Δ, not
  below Δ (l. 196–197);
* the preferred duration T is the θ-th percentile of the known durations,
  ``sortedDuration[min(int(len·θ/100), len − 1)]``, or +∞ once θ = 100 (l. 271–275);
* the rewards of the available clients with a positive reward (explored or not) give the clip
  value, their ``clip_bound`` quantile ``aList[min(int(len·clip_bound), len − 1)]``, the minimum
  ×0.999 and the range max − min (at least 1e-4) (``get_norm``, l. 394–403);
* every explored available client scores (min(U_i, clip) − min)/range + sqrt(0.1·ln R / L_i)
  (l. 292–296), times (T / max(1e-4, D_i))^α when D_i > T (α = ``round_penalty``, l. 301–303);
* ε ← max(ε·decay, ε_min) (l. 312); E = min(⌊m(1 − ε)⌋, #scored) clients are drawn without
  replacement ∝ score among those scoring at least ``cut_off_util`` × the score at index E of
  the descending order (l. 313–330: ``np2.random.choice(..., p=score/Σ, replace=False)``);
* min(#unexplored available, m − E) unexplored clients are drawn ∝ their prior (times the same
  speed penalty when their duration is known) among the ⌊``sample_window``·that⌋ with the
  largest prior (l. 333–355); once no client is unexplored, ε and its floor become 0 for good
  (l. 356–359);
* the remaining slots go to available clients uniformly at random (l. 361–364).

Draws without replacement ∝ p are ``gumbel_top_k`` (the law of NumPy's
``choice(replace=False, p=p)``); ties among priors follow a per-run random order; m is
min(m, #available). The docs' decisions page, section "Oort", records the defaults
(FedScale's configuration; ``#oort-defaults``) and where jfl reads the code
differently: the utility from ``local_loss_sq`` (``#oort-utility``); one round clock from round
1, the selector every round (``#oort-rounds``); durations known once a client took part, so T
is over the explored clients (``#oort-durations``); the pacer's exploited clients are the
participants explored before the round (``#oort-pacer``); the cut-off index clamped
(``#oort-cutoff``); draws NumPy refuses (``#oort-draws``); no over-commitment
(``#oort-left-out``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jfl.kernels import fill_uniformly, gumbel_top_k, random_priority, selection_count, topk_mask
from jfl.policies.base import HParam, Policy, PolicySpec, check_selection_size, register

# Constants of oort/oort.py, not arguments there.
STALENESS_WEIGHT = 0.1  # sqrt(0.1·ln R / L_i), l. 296
PACER_FLAT = 0.1  # |cur − last| ≤ 0.1·last: θ up, l. 190
PACER_JUMP = 5.0  # |cur − last| ≥ 5·last: θ down, l. 196
MIN_SHIFT = 0.999  # get_norm's minimum, l. 399
MIN_RANGE = 1e-4  # get_norm's thres, l. 400
MIN_DURATION = 1e-4  # max(1e-4, clientDuration), l. 303
UTIL_COUNT = 1e-4  # calculateSumUtil's cnt starts at 1e-4, l. 165


class OortState(NamedTuple):
    priority: jax.Array  # i32[N]  per-run random order breaking ties among priors
    utility: jax.Array  # f[N]  U_i = |B_i|·sqrt(loss²) when i last took part (0: never)
    duration: jax.Array  # f[N]  D_i, i's last realised duration (0: never observed)
    last_round: jax.Array  # i32[N]  L_i, the round (1-based) i last took part in (0: never)
    count: jax.Array  # i32[N]  rounds i took part in
    explored: jax.Array  # bool[N]  took part at least once
    epsilon: jax.Array  # f[]  ε of the last round (the exploration factor before round 1)
    exhausted: jax.Array  # bool[]  every client was explored at some selection: ε = 0 for good
    theta: jax.Array  # f[]  θ, the preferred-duration percentile (0–100)
    window_sum: jax.Array  # f[]  the pacer's exploit utility summed over the current window
    last_window_sum: jax.Array  # f[]  … over the window before it
    round: jax.Array  # i32[]  rounds completed


def sample_bin(data_size, hparams):
    """|B_i|: the client's samples, capped at ``sample_cap`` when positive (Oort's
    ``min(size, upload_epoch*batch_size)``)."""
    size = data_size.astype(jnp.float32)
    cap = hparams["sample_cap"]
    return jnp.where(cap > 0, jnp.minimum(size, cap), size)


def exploration(state, hparams):
    """ε of this round: max(ε·decay, floor), or 0 once every client was explored (l. 312, 358)."""
    decayed = jnp.maximum(state.epsilon * hparams["exploration_decay"], hparams["exploration_min"])
    return jnp.where(state.exhausted, 0.0, decayed)


def preferred_duration(state, theta):
    """T: the θ-th percentile of the known durations (the explored clients'), +∞ when θ ≥ 100
    or none is known (l. 271–275)."""
    known = jnp.sum(state.explored, dtype=jnp.int32)
    ordered = jnp.sort(jnp.where(state.explored, state.duration, jnp.inf))
    index = jnp.floor(known.astype(jnp.float32) * theta / 100.0).astype(jnp.int32)
    index = jnp.clip(jnp.minimum(index, known - 1), 0, None)
    return jnp.where((theta < 100.0) & (known > 0), ordered[index], jnp.inf)


def speed_penalty(value, duration, preferred, alpha):
    """``value`` × (T / max(1e-4, D))^α where D > T (l. 301–303, 341–343)."""
    factor = jnp.power(preferred / jnp.maximum(MIN_DURATION, duration), alpha)
    return jnp.where(duration > preferred, value * factor, value)


def reward_norm(reward, mask, clip_bound):
    """(clip value, minimum × 0.999, range) of the masked rewards (``get_norm``, l. 394–403);
    without any: (0, 0, 1e-4)."""
    n = jnp.sum(mask, dtype=jnp.int32)
    ordered = jnp.sort(jnp.where(mask, reward, jnp.inf))
    index = jnp.floor(n.astype(jnp.float32) * clip_bound).astype(jnp.int32)
    index = jnp.clip(jnp.minimum(index, n - 1), 0, None)
    some = n > 0
    clip = jnp.where(some, ordered[index], 0.0)
    top = jnp.where(some, ordered[jnp.maximum(n - 1, 0)], 0.0)
    low = jnp.where(some, ordered[0] * MIN_SHIFT, 0.0)
    return clip, low, jnp.maximum(top - low, MIN_RANGE)


def _log_positive(x):
    return jnp.where(x > 0, jnp.log(jnp.where(x > 0, x, 1.0)), -jnp.inf)


def draw_exploited(key, state, reward, available, preferred, k, hparams):
    """The exploited clients (l. 292–330): the explored available ones score their clipped,
    normalised ``reward`` plus the staleness term, penalised when slower than ``preferred``;
    E = min(⌊k(1 − ε)⌋, #scored) are drawn ∝ score among those within ``cut_off_util`` of the
    score at index E."""
    this_round = (state.round + 1).astype(jnp.float32)
    clip, low, spread = reward_norm(reward, available & (reward > 0), hparams["clip_bound"])
    last = jnp.maximum(state.last_round, 1).astype(jnp.float32)
    staleness = jnp.sqrt(STALENESS_WEIGHT * jnp.log(this_round) / last)
    score = (jnp.minimum(reward, clip) - low) / spread + staleness
    score = speed_penalty(score, state.duration, preferred, hparams["round_penalty"])
    scored = available & state.explored
    num_scored = jnp.sum(scored, dtype=jnp.int32)
    epsilon = exploration(state, hparams)
    count = jnp.floor(k.astype(jnp.float32) * (1.0 - epsilon)).astype(jnp.int32)
    count = jnp.minimum(count, num_scored)
    descending = -jnp.sort(-jnp.where(scored, score, -jnp.inf))
    at = jnp.clip(jnp.minimum(count, num_scored - 1), 0, None)
    cut = descending[at] * hparams["cut_off_util"]
    candidates = scored & (score >= cut)
    return gumbel_top_k(key, _log_positive(score), candidates, count)


def draw_unexplored(key, state, prior, available, preferred, slots, hparams):
    """The explored clients (l. 333–355): min(#unexplored available, ``slots``) unexplored ones
    drawn ∝ their ``prior`` (speed-penalised) among the ⌊``sample_window``·that⌋ largest."""
    unexplored = available & ~state.explored
    count = jnp.minimum(jnp.sum(unexplored, dtype=jnp.int32), slots)
    init_reward = speed_penalty(prior, state.duration, preferred, hparams["round_penalty"])
    window = jnp.floor(hparams["sample_window"] * count.astype(jnp.float32))
    window = topk_mask(init_reward, unexplored, window.astype(jnp.int32), state.priority)
    return gumbel_top_k(key, _log_positive(init_reward), window, count)


def pace(state, mean, entry, hparams):
    """The pacer (l. 174–205) once ``mean``, the last round's mean exploit utility, enters its
    history at round ``entry``: (θ, the current window's sum, the last window's sum)."""
    width = jnp.maximum(jnp.floor(hparams["pacer_window"]).astype(jnp.int32), 1)
    current = state.window_sum + mean
    ends = entry % width == 0
    check = ends & (entry >= 2 * width)
    previous = state.last_window_sum
    change = jnp.abs(current - previous)
    delta = hparams["pacer_delta"]
    flat = change <= previous * PACER_FLAT
    jump = ~flat & (change >= previous * PACER_JUMP)
    theta = jnp.where(check & flat, jnp.minimum(100.0, state.theta + delta), state.theta)
    theta = jnp.where(check & jump, jnp.maximum(delta, state.theta - delta), theta)
    return theta, jnp.where(ends, 0.0, current), jnp.where(ends, current, previous)


def oort(num_clients: int, selection_size: int) -> Policy:
    """Oort's guided participant selection (``_training_selector.getTopK``) over the available
    clients; reads the learner's ``data_size`` and ``local_loss_sq`` and the environment's
    realised ``time`` (feedback)."""
    check_selection_size(num_clients, selection_size)

    def init(key, hparams):
        zeros_f = jnp.zeros(num_clients, jnp.float32)
        zeros_i = jnp.zeros(num_clients, jnp.int32)
        scalar = jnp.zeros((), jnp.float32)
        return OortState(
            priority=random_priority(key, num_clients),
            utility=zeros_f,
            duration=zeros_f,
            last_round=zeros_i,
            count=zeros_i,
            explored=jnp.zeros(num_clients, bool),
            epsilon=jnp.asarray(hparams["exploration_factor"], jnp.float32),
            exhausted=jnp.zeros((), bool),
            theta=jnp.asarray(hparams["round_threshold"], jnp.float32),
            window_sum=scalar,
            last_window_sum=scalar,
            round=jnp.zeros((), jnp.int32),
        )

    def select(key, state, obs, hparams):
        k_exploit, k_explore, k_fill = jax.random.split(key, 3)
        available = obs.available
        k = selection_count(available, selection_size)
        prior = sample_bin(obs.data_size, hparams)
        reward = jnp.where(state.explored, state.utility, prior)
        preferred = preferred_duration(state, state.theta)
        picked = draw_exploited(k_exploit, state, reward, available, preferred, k, hparams)
        slots = k - jnp.sum(picked, dtype=jnp.int32)
        picked |= draw_unexplored(k_explore, state, prior, available, preferred, slots, hparams)
        return fill_uniformly(k_fill, picked, available, k)

    def update(state, obs, action, feedback, hparams):
        selected = jnp.asarray(action, bool)
        this_round = state.round + 1
        utility = sample_bin(obs.data_size, hparams) * jnp.sqrt(obs.local_loss_sq)
        new_utility = jnp.where(selected, utility, state.utility)

        # The pacer's record of this round: the mean utility of the clients it exploited.
        exploited = selected & state.explored
        total = jnp.sum(jnp.where(exploited, new_utility, 0.0))
        mean = total / (UTIL_COUNT + jnp.sum(exploited, dtype=jnp.int32).astype(jnp.float32))
        # It enters oort.py's history at the next selection, round this_round + 1.
        theta, window_sum, last_window_sum = pace(state, mean, this_round + 1, hparams)
        return OortState(
            priority=state.priority,
            utility=new_utility,
            duration=jnp.where(selected, feedback.time.astype(jnp.float32), state.duration),
            last_round=jnp.where(selected, this_round, state.last_round),
            count=state.count + selected.astype(jnp.int32),
            explored=state.explored | selected,
            epsilon=exploration(state, hparams),
            exhausted=state.exhausted | jnp.all(state.explored),
            theta=theta,
            window_sum=window_sum,
            last_window_sum=last_window_sum,
            round=this_round,
        )

    return Policy(init, select, update, signals=("data_size", "local_loss_sq"))


register(
    PolicySpec(
        "oort",
        oort,
        {
            "exploration_factor": HParam(0.9, 0.0, 1.0, help="initial exploration factor ε"),
            "exploration_decay": HParam(0.98, 0.0, 1.0, help="ε ← max(ε·decay, floor) a round"),
            "exploration_min": HParam(0.3, 0.0, 1.0, help="floor of ε"),
            "round_threshold": HParam(
                30.0, 0.0, 100.0, help="initial percentile θ of the durations giving T (100: ∞)"
            ),
            "round_penalty": HParam(2.0, 0.0, help="α: score × (T/D)^α when D > T"),
            "clip_bound": HParam(0.9, 0.0, 1.0, help="quantile at which utilities are clipped"),
            "cut_off_util": HParam(
                0.95, 0.0, help="exploit among scores ≥ this × the score at index E (descending)"
            ),
            "pacer_delta": HParam(5.0, 0.0, 100.0, help="pacer's step Δ of θ"),
            "pacer_window": HParam(
                20.0, 1.0, help="pacer's window W in rounds (oort.py's pacer_step)"
            ),
            "sample_window": HParam(
                5.0, 1.0, help="explore among the sample_window × count largest priors"
            ),
            "sample_cap": HParam(
                0.0, 0.0, help="|B_i| = min(n_i, cap), the samples trained (0: n_i)"
            ),
        },
        "Oort: ε-greedy over clipped loss utility + staleness, slower than the θ-th percentile "
        "penalised (T/D)^α, a pacer moving θ; unexplored ∝ data size",
        requires=("available", "time", "data_size", "local_loss_sq"),
        aggregation="uniform",  # the authors' harness: --is_even_avg, default True
    )
)
