"""The vectorised runner: ``lax.scan`` over rounds, ``vmap`` over seeds and configurations.

``make_run(env, env_params, policy, num_rounds)`` does the Python-side setup once and returns a pure
``run(key, hparams, queue_rate) -> RunOutput`` for one configuration and one seed (purejaxrl
style). ``make_batched_run`` vmaps it over seeds (inner) and configurations (outer) under one
``jit``; every hyperparameter is traced, so a whole grid shares one compiled program per shape.

Outputs are sized for large grids: per-round scalars and per-client totals. Full per-client
trajectories are recorded only when asked (``trajectories=True``).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jfl.kernels import virtual_queue_update
from jfl.kernels.reduce import pairwise_mean
from jfl.policies.base import Policy


class RunOutput(NamedTuple):
    round_time: jax.Array  # f[T]  max realised time over the selected clients (eq. 1)
    num_selected: jax.Array  # i[T]  |S_t|
    queue_mean: jax.Array  # f[T]  mean over clients of the fairness queue Z after round t
    queue_max: jax.Array  # f[T]  max over clients of Z after round t
    selection_count: jax.Array  # i[N]  pull record after T rounds
    final_queue: jax.Array  # f[N]  Z after round T
    last_unmet_round: jax.Array  # i[]  last round with count_n(t) < t·rate_n for some n (0: none)
    set_reward: jax.Array | None = None  # f[T]  r(S(t)), environments that report it (wireless)
    num_failed: jax.Array | None = None  # i[T]  selected clients that hit τ_max (wireless)
    utility: jax.Array | None = None  # f[T]  (1/M)·Σ successful clients (hfl, COCS eq. 8)
    num_success: jax.Array | None = None  # i[T]  selected clients received before the deadline
    wall_clock: jax.Array | None = None  # f[T]  simulated time at the end of round t (FL runs)
    num_delivered: jax.Array | None = None  # i[T]  trained models that reached their server
    accuracy: jax.Array | None = None  # f[E]  test accuracy at rounds 0, k, 2k, …, T (FL runs)
    test_loss: jax.Array | None = None  # f[E]  test loss at the same rounds
    untrained: jax.Array | None = None  # i[]  selections beyond the learner's slots (should be 0)
    selected: jax.Array | None = None  # bool[T, N]  only with trajectories=True
    queue: jax.Array | None = None  # f[T, N]  only with trajectories=True


PER_ROUND = (
    "round_time",
    "num_selected",
    "queue_mean",
    "queue_max",
    "set_reward",
    "num_failed",
    "utility",
    "num_success",
    "wall_clock",
    "num_delivered",
)
PER_CLIENT = ("selection_count", "final_queue")
PER_RUN = ("last_unmet_round", "untrained")
PER_EVALUATION = ("accuracy", "test_loss")
TRAJECTORY = ("selected", "queue")


def run_keys(key, learner: bool = False):
    """Keys ``(reset, policy init, rounds[, learner])`` that ``run`` splits its key into.

    The first three are the same with or without a learner (threefry splits are
    prefix-consistent), so adding federated training does not change the selections.
    """
    return jax.random.split(key, 4 if learner else 3)


def make_run(
    env,
    env_params,
    policy: Policy,
    num_rounds: int,
    *,
    trajectories: bool = False,
    env_hparams: tuple[str, ...] = (),
    learner=None,
    eval_every: int | None = None,
):
    """Pure single-configuration, single-seed run.

    ``last_unmet_round`` measures convergence to the guaranteed rates: from the round after it
    on, every client's running selection fraction is at least its ``queue_rate``.

    The fairness queue in the outputs follows eq. 6 with rate ``queue_rate`` (a scalar or one rate
    per client) for every policy (for RBCS-F with ``queue_rate = β`` and CS-UCB-Q with
    ``queue_rate = c`` it is the policy's own queue), so that baselines are measured on the same
    scale. ``env_hparams`` names fields of ``env_params`` that are taken from ``hparams`` instead,
    so that they are traced per configuration (e.g. the wireless ``availability``). Environments
    with a ``round_metrics(feedback)`` method add those per-round scalars to the output.

    With a ``learner`` (``jfl.fl.make_learner``) the run also trains a model: each round the
    selected clients train, the models the environment ``delivered`` (all selected ones if it
    has no such method) are aggregated, and the simulated wall-clock advances by the round
    time; the test accuracy is evaluated at round 0 and every ``eval_every`` rounds (default:
    only at the end; it must divide ``num_rounds``). ``run`` then takes the
    ``jfl.fl.FederatedData`` as its fourth argument.
    """
    if not isinstance(num_rounds, int | np.integer) or num_rounds < 1:
        raise ValueError(f"num_rounds must be an integer >= 1, got {num_rounds!r}")
    fields = {f.name for f in dataclasses.fields(env_params)}
    unknown = [name for name in env_hparams if name not in fields]
    if unknown:
        raise ValueError(f"env_hparams {unknown} are not fields of {type(env_params).__name__}")
    if learner is not None:
        eval_every = num_rounds if eval_every is None else eval_every
        if (
            not isinstance(eval_every, int | np.integer)
            or eval_every < 1
            or num_rounds % eval_every
        ):
            raise ValueError(
                f"eval_every must be an integer >= 1 that divides num_rounds={num_rounds}, "
                f"got {eval_every!r}"
            )
    round_metrics = getattr(env, "round_metrics", None)
    delivered_fn = getattr(env, "delivered", None)

    def run(key, hparams, queue_rate, data=None) -> RunOutput:
        k_reset, k_init, k_rounds, *k_learn = run_keys(key, learner is not None)
        params = env_params
        if env_hparams:
            params = env_params.replace(**{name: hparams[name] for name in env_hparams})
        obs, env_state = env.reset(k_reset, params)
        policy_state = policy.init(k_init, hparams)
        num_clients = obs.available.shape[0]
        queue = jnp.zeros(num_clients, jnp.result_type(float))
        count = jnp.zeros(num_clients, jnp.int32)
        last_unmet = jnp.asarray(0, jnp.int32)
        target = jnp.broadcast_to(queue_rate, (num_clients,))
        training = None
        if learner is not None:
            k_model, k_train = jax.random.split(k_learn[0])
            # (model, simulated clock, selections left untrained)
            training = (
                learner.init(k_model, data, hparams),
                jnp.zeros((), jnp.result_type(float)),
                jnp.asarray(0, jnp.int32),
            )

        def one_round(carry, xs):
            obs, env_state, policy_state, queue, count, last_unmet, training = carry
            k_select, k_step, t, *k_train_t = xs
            action = policy.select(k_select, policy_state, obs, hparams)
            action = action & obs.available  # defensive: a policy bug must not leak into metrics
            next_obs, env_state, feedback = env.step(k_step, env_state, action, params)
            policy_state = policy.update(policy_state, obs, action, feedback, hparams)
            # An action is bool[N], or bool[N, M] for client-to-server assignments (hfl).
            selected = action if action.ndim == 1 else jnp.any(action, axis=-1)
            queue = virtual_queue_update(queue, queue_rate, selected)
            count = count + selected
            # Integer count against rate·t, elementwise (batch-shape independent, unlike a running
            # mean). The relative slack absorbs float32 rounding of the rate: float32(0.6)·50
            # exceeds 30, which would count 30 selections in 50 rounds as unmet.
            unmet = jnp.any(count < target * t * (1.0 - 1e-6))
            last_unmet = jnp.where(unmet, t, last_unmet)
            per_round = {
                "round_time": feedback.round_time,
                "num_selected": jnp.sum(selected, dtype=jnp.int32),
                "queue_mean": pairwise_mean(queue),
                "queue_max": jnp.max(queue),
            }
            if round_metrics is not None:
                per_round.update(round_metrics(feedback))
            if training is not None:
                model, clock, untrained = training
                delivered = selected if delivered_fn is None else delivered_fn(action, feedback)
                model, learned = learner.step(
                    k_train_t[0], model, action, delivered, t, data, hparams
                )
                clock = clock + feedback.round_time
                training = (model, clock, untrained + learned["untrained"])
                per_round["wall_clock"] = clock
                per_round["num_delivered"] = learned["num_delivered"]
            if trajectories:
                per_round["selected"] = selected
                per_round["queue"] = queue
            carry = (next_obs, env_state, policy_state, queue, count, last_unmet, training)
            return carry, per_round

        carry = (obs, env_state, policy_state, queue, count, last_unmet, training)
        # All per-round keys up front: splitting inside the loop costs a PRNG call per round.
        keys = jax.random.split(k_rounds, (num_rounds, 2))
        rounds = jnp.arange(1, num_rounds + 1, dtype=jnp.int32)
        xs = (keys[:, 0], keys[:, 1], rounds)
        evaluation = {}
        if learner is None:
            carry, per_round = jax.lax.scan(one_round, carry, xs)
        else:
            # Rounds in blocks of eval_every, the model evaluated after each block.
            blocks = num_rounds // eval_every
            xs = (*xs, jax.random.split(k_train, num_rounds))
            xs = jax.tree.map(lambda a: a.reshape(blocks, eval_every, *a.shape[1:]), xs)

            def block(carry, xs_block):
                carry, per_round = jax.lax.scan(one_round, carry, xs_block)
                return carry, (per_round, learner.evaluate(carry[-1][0], data))

            initial = learner.evaluate(training[0], data)
            carry, (per_round, evaluation) = jax.lax.scan(block, carry, xs)
            per_round = jax.tree.map(lambda a: a.reshape(num_rounds, *a.shape[2:]), per_round)
            evaluation = jax.tree.map(
                lambda first, rest: jnp.concatenate([first[None], rest]), initial, evaluation
            )
            evaluation["untrained"] = carry[-1][2]
        *_, queue, count, last_unmet, _ = carry
        return RunOutput(
            selection_count=count,
            final_queue=queue,
            last_unmet_round=last_unmet,
            **per_round,
            **evaluation,
        )

    return run


def make_batched_run(run, data=None):
    """jit(vmap over configurations (outer) of vmap over seeds (inner)).

    Signature of the result: ``(keys[S], hparams{name: [C]}, queue_rate[C]) -> RunOutput`` with
    leading axes ``[C, S]``. ``data`` (federated runs) is shared by every run and passed to the
    compiled program as an argument.
    """
    over_seeds = jax.vmap(run, in_axes=(0, None, None, None))
    over_configs = jax.jit(jax.vmap(over_seeds, in_axes=(None, 0, 0, None)))
    return lambda keys, hparams, queue_rate: over_configs(keys, hparams, queue_rate, data)


def seed_keys(base_seed: int, seeds) -> jax.Array:
    """One key per seed index, independent of the configuration (common random numbers)."""
    root = jax.random.key(base_seed)
    return jax.vmap(lambda s: jax.random.fold_in(root, s))(jnp.asarray(seeds, jnp.uint32))
