"""The vectorised runner: ``lax.scan`` over rounds, ``vmap`` over seeds and configurations.

``make_run(env, env_params, policy, num_rounds)`` does the Python-side setup once and returns a pure
``run(key, hparams) -> RunOutput`` for one configuration and one seed (purejaxrl style).
``make_batched_run`` vmaps it over seeds (inner) and configurations (outer) under one ``jit``;
every hyperparameter is traced, so a whole grid shares one compiled program per shape.

Outputs are sized for large grids: per-round scalars and per-client totals. Full per-client
trajectories are recorded only when asked (``trajectories=True``). ``RunOutput`` holds the core
outputs (``CORE_OUTPUTS``) as fields and everything declared elsewhere (the environment's
``round_metrics``, the trackers' outputs (``jfl.trackers``), the learner's
(``learner_outputs``), ``TRAJECTORY_OUTPUTS``) in ``extras``; ``output_dims`` gives the dims of
every output a run returns.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import weakref
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

from jfl import prng
from jfl.envs.base import Environment
from jfl.kernels.batching import batched_like
from jfl.outputs import (
    CLIENT,
    CORE_OUTPUTS,
    EVAL,
    LEARNER_OUTPUTS,
    ROUND,
    TRAJECTORY_OUTPUTS,
    Metric,
    learner_evaluations,
    output_metrics,
)
from jfl.policies.base import (
    ROUND_SIGNALS,
    LearnerObservation,
    Policy,
    Selection,
    check_signals,
)
from jfl.trackers import Tracker


class _RunOutputFields(NamedTuple):
    round_time: jax.Array  # f[T]
    num_selected: jax.Array  # i[T]
    selection_count: jax.Array  # i[N]
    extras: dict[str, jax.Array]  # everything else the run records (see ``output_dims``)


class RunOutput(_RunOutputFields):
    """What ``run`` returns: the core outputs (``CORE_OUTPUTS``) and a dict of ``extras``.

    ``extras`` holds the environment's declared ``round_metrics``, the trackers' outputs, the
    learner's outputs and the trajectories, as this run records them; ``output_dims`` gives every
    name's dims. Extras read as attributes too (``out.set_reward``); ``arrays()`` is the flat dict
    of all outputs. The runner's optional outputs that this run does not record (the learner's
    without a learner, trajectories without ``trajectories=True``) read as None; any other name
    this run does not record (another environment's metric, a tracker's output without the
    tracker) raises AttributeError: only the run's own environment and trackers declare them.
    """

    __slots__ = ()

    def __getattr__(self, name):
        extras = _RunOutputFields.extras.__get__(self)
        if name in extras:
            return extras[name]
        if name in LEARNER_OUTPUTS or name in TRAJECTORY_OUTPUTS:
            return None
        raise AttributeError(
            f"{type(self).__name__} has no output {name!r} (this run records "
            f"{', '.join([*CORE_OUTPUTS, *extras])})"
        )

    def arrays(self) -> dict[str, jax.Array]:
        """All outputs as one flat dict: the core ones, then the extras."""
        core = {name: getattr(self, name) for name in CORE_OUTPUTS}
        return {**core, **self.extras}


class Training(NamedTuple):
    """The learner's part of the scan carry (federated runs)."""

    model: Any  # the learner's state
    clock: jax.Array  # f[]  simulated time
    untrained: jax.Array  # i[]  selections left untrained so far


class Carry(NamedTuple):
    """State carried from one round to the next by ``lax.scan``."""

    obs: Any  # this round's observation
    env_state: Any
    policy_state: Any
    count: jax.Array  # i[N]  selections so far
    tracked: tuple  # each tracker's state
    training: Training | None  # None without a learner


def run_keys(key, learner: bool = False):
    """Keys ``(reset, policy init, rounds[, learner])`` that ``run`` splits its key into.

    The first three are the same with or without a learner (threefry splits are
    prefix-consistent), so adding federated training does not change the selections.
    """
    return jax.random.split(key, 4 if learner else 3)


def make_run(
    env: Environment,
    env_params,
    policy: Policy,
    num_rounds: int,
    *,
    trajectories: bool = False,
    env_hparams: tuple[str, ...] = (),
    learner=None,
    eval_every: int | None = None,
    trackers: tuple[Tracker, ...] = (),
):
    """Pure single-configuration, single-seed run: ``run(key, hparams[, data]) -> RunOutput``.

    ``trackers`` (``jfl.trackers``, e.g. the fairness queue) keep their own state over the rounds,
    updated after every selection, and record their declared outputs; the hyperparameters they read
    are in ``hparams`` beside the policy's. ``env_hparams`` names fields of ``env_params`` that are
    taken from ``hparams`` instead, so that they are traced per configuration (e.g. the wireless
    ``availability``). The environment's declared ``round_metrics`` are recorded every round
    (``output_dims`` lists every output and its dims).

    With a ``learner`` (``jfl.fl.make_learner``) the run also trains a model: each round the
    selected clients train, the models the environment ``delivered`` are aggregated, and the
    simulated wall-clock advances by the round time; the test accuracy is evaluated at round 0
    and every ``eval_every`` rounds (default: only at the end; it must divide ``num_rounds``).
    ``run`` then takes the ``jfl.fl.FederatedData`` as its third argument. A policy that reads
    learner signals (``Policy.signals``, e.g. each client's local accuracy) gets them, computed
    from the learner's model before each selection, in a ``LearnerObservation``; other policies
    get the environment's observation and cost no evaluation. Such a policy without a learner
    that computes its signals is refused here, before anything compiles. The round signals
    (``ROUND_SIGNALS``, e.g. the participants' training loss) reach the policy's ``update``,
    which runs after the round's training. A policy may return a ``jfl.policies.Selection``:
    the environment sees its clients, the learner weighs their updates by its weights.
    """
    eval_every = _check_run(env, env_params, num_rounds, env_hparams, learner, eval_every)
    signals = tuple(getattr(policy, "signals", ()))
    check_signals(signals, learner)
    trackers = tuple(trackers)
    declared = output_metrics(env, learner=learner, trajectories=trajectories, trackers=trackers)
    before = tuple(name for name in signals if name not in ROUND_SIGNALS)
    after = tuple(name for name in signals if name in ROUND_SIGNALS)
    setup = _Setup(
        env, env_params, policy, num_rounds, trajectories, env_hparams, learner, eval_every,
        trackers, before, after, declared,
    )  # fmt: skip

    def run(key, hparams, data=None, params=None) -> RunOutput:
        k_reset, k_init, k_rounds, *k_learn = run_keys(key, learner is not None)
        params = env_params if params is None else params
        if env_hparams:
            params = env_params.replace(**{name: hparams[name] for name in env_hparams})
        carry, k_train, k_probe = _initial_carry(
            setup, params, k_reset, k_init, k_learn, data, hparams
        )
        one_round = functools.partial(_one_round, setup, params, data, hparams)
        # All per-round keys up front: splitting inside the loop costs a PRNG call per round.
        keys = prng.split(k_rounds, (num_rounds, 2))
        rounds = jnp.arange(1, num_rounds + 1, dtype=jnp.int32)
        xs = (keys[:, 0], keys[:, 1], rounds)
        if learner is None:
            carry, recorded = jax.lax.scan(one_round, carry, xs)
        else:
            xs = (*xs, jax.random.split(k_train, num_rounds), jax.random.split(k_probe, num_rounds))
            carry, recorded = _scan_with_evaluation(
                one_round, carry, xs, learner, data, num_rounds, eval_every
            )
        return _run_output(setup, carry, recorded)

    return run


class _Setup(NamedTuple):
    """What ``make_run`` fixes once for every run it returns (static, never traced)."""

    env: Environment
    env_params: Any
    policy: Policy
    num_rounds: int
    trajectories: bool
    env_hparams: tuple[str, ...]
    learner: Any  # None without federated training
    eval_every: int | None
    trackers: tuple[Tracker, ...]
    before: tuple[str, ...]  # learner signals the policy reads before selecting
    after: tuple[str, ...]  # round signals its update reads after the round's training
    declared: dict[str, Metric]  # every output of the run


def _initial_carry(s: _Setup, params, k_reset, k_init, k_learn, data, hparams):
    """The scan's first carry, and the learner's training and probe keys (None without one)."""
    obs, env_state = s.env.reset(k_reset, params)
    chex.assert_rank(obs.available, {1, 2})  # shape-only, at trace time
    num_clients = obs.available.shape[0]
    training, k_train, k_probe = None, None, None
    if s.learner is not None:
        # split(·, 3)[:2] == split(·, 2): the probe keys change no earlier draw.
        k_model, k_train, k_probe = jax.random.split(k_learn[0], 3)
        training = _initial_training(s.learner.init(k_model, data, hparams))
    # What each run owns, batched from the start: under vmap the rounds' scan then traces its
    # body once, not twice (``batched_like``; these would come out batched after one round).
    policy_state, count, tracked = batched_like(
        (
            s.policy.init(k_init, hparams),
            jnp.zeros(num_clients, jnp.int32),
            tuple(tracker.init(num_clients, hparams) for tracker in s.trackers),
        ),
        (k_init, hparams),
    )
    carry = Carry(
        obs=obs,
        env_state=env_state,
        policy_state=policy_state,
        count=count,
        tracked=tracked,
        training=training,
    )
    return carry, k_train, k_probe


def _one_round(s: _Setup, params, data, hparams, carry: Carry, xs) -> tuple[Carry, dict]:
    """One round: the policy selects, the environment steps, the trackers and the learner
    follow, the policy learns; returns the next carry and the round's recorded values."""
    k_select, k_step, t, *k_learner = xs
    seen, values = carry.obs, {}
    if s.before or s.after:
        if s.before:
            values = s.learner.signals(k_learner[1], carry.training.model, data, hparams, s.before)
        seen = LearnerObservation(carry.obs, values)
    action, weight = _split(s.policy.select(k_select, carry.policy_state, seen, hparams))
    action = action & carry.obs.available  # a policy bug must not leak into metrics
    next_obs, env_state, feedback = s.env.step(k_step, carry.env_state, action, params)
    chex.assert_shape(feedback.round_time, ())
    # An action is bool[N], or bool[N, M] for client-to-server assignments (hfl).
    selected = action if action.ndim == 1 else jnp.any(action, axis=-1)
    tracked = tuple(
        tracker.update(state, selected, t, hparams)
        for tracker, state in zip(s.trackers, carry.tracked, strict=True)
    )
    per_round = {
        "round_time": feedback.round_time,
        "num_selected": jnp.sum(selected, dtype=jnp.int32),
        **_recorded(s.trackers, tracked, "record"),
        **_round_metrics(s.env, feedback, carry.count.shape[0]),
    }
    training = carry.training
    if training is not None:
        delivered = s.env.delivered(action, feedback)
        training, learned, round_signals = _train_round(
            s.learner, training, k_learner[0], action, delivered, weight,
            feedback.round_time, t, data, hparams,
        )  # fmt: skip
        per_round.update(learned)
        if s.after:
            after_round = {name: round_signals[name] for name in s.after}
            seen = LearnerObservation(carry.obs, {**values, **after_round})
    policy_state = s.policy.update(carry.policy_state, seen, action, feedback, hparams)
    if s.trajectories:
        per_round.update(selected=selected, **_recorded(s.trackers, tracked, "trace"))
    count = carry.count + selected
    return Carry(next_obs, env_state, policy_state, count, tracked, training), per_round


def _run_output(s: _Setup, carry: Carry, recorded: dict) -> RunOutput:
    """The run's outputs: the recorded rounds, the trackers' final values, its health."""
    recorded.update(_recorded(s.trackers, carry.tracked, "final"))
    recorded["nonfinite_round"] = first_nonfinite_round(
        recorded, s.declared, s.num_rounds, s.eval_every or s.num_rounds
    )
    return RunOutput(
        round_time=recorded["round_time"],
        num_selected=recorded["num_selected"],
        selection_count=carry.count,
        # An OrderedDict keeps the declared order through jit (a dict's keys come back sorted).
        extras=collections.OrderedDict(
            (name, recorded[name]) for name in s.declared if name not in CORE_OUTPUTS
        ),
    )


def first_nonfinite_round(
    recorded, declared: dict[str, Metric], num_rounds: int, eval_every: int
) -> jax.Array:
    """The first round at which one run's float outputs hold a NaN or ±inf, -1 if none: a
    per-round output at its round, an evaluation at the round it follows (0: the initial one),
    any other (a final value) at round T. An output declared ``missing`` may be NaN (a value
    the run does not have); only ±inf counts there."""
    never = jnp.asarray(num_rounds + 1, jnp.int32)
    first = never
    for name, value in recorded.items():
        if name not in declared or not jnp.issubdtype(value.dtype, jnp.floating):
            continue
        leading = tuple(declared[name].dims)[:1]
        if leading == (ROUND,):
            rounds = jnp.arange(1, num_rounds + 1, dtype=jnp.int32)
        elif leading == (EVAL,):
            rounds = jnp.arange(value.shape[0], dtype=jnp.int32) * eval_every
        else:
            value, rounds = value[None], jnp.asarray([num_rounds], jnp.int32)
        wrong = jnp.isinf(value) if declared[name].missing else ~jnp.isfinite(value)
        bad = jnp.any(wrong.reshape(rounds.shape[0], -1), axis=1)
        first = jnp.minimum(first, jnp.min(jnp.where(bad, rounds, never)))
    return jnp.where(first == never, -1, first)


def _check_run(env, env_params, num_rounds, env_hparams, learner, eval_every) -> int | None:
    """``make_run``'s arguments checked before anything is traced; the evaluation period."""
    if not isinstance(env, Environment):
        raise TypeError(f"env must be a jfl.envs.Environment, got {type(env).__name__}")
    if not isinstance(num_rounds, int | np.integer) or num_rounds < 1:
        raise ValueError(f"num_rounds must be an integer >= 1, got {num_rounds!r}")
    fields = {f.name for f in dataclasses.fields(env_params)}
    unknown = [name for name in env_hparams if name not in fields]
    if unknown:
        raise ValueError(f"env_hparams {unknown} are not fields of {type(env_params).__name__}")
    if learner is None:
        return eval_every
    eval_every = num_rounds if eval_every is None else eval_every
    if not isinstance(eval_every, int | np.integer) or eval_every < 1 or num_rounds % eval_every:
        raise ValueError(
            f"eval_every must be an integer >= 1 that divides num_rounds={num_rounds}, "
            f"got {eval_every!r}"
        )
    return eval_every


def _initial_training(model) -> Training:
    return Training(
        model=model,
        clock=jnp.zeros((), jnp.result_type(float)),
        untrained=jnp.asarray(0, jnp.int32),
    )


def _recorded(trackers, tracked, method: str) -> dict[str, jax.Array]:
    """What every tracker's ``method`` (record, trace or final) gives for its state."""
    values = {}
    for tracker, state in zip(trackers, tracked, strict=True):
        values.update(getattr(tracker, method)(state))
    return values


def _split(choice):
    """(bool selection, aggregation weights or None) of what a policy's ``select`` returned."""
    if isinstance(choice, Selection):
        return choice.clients, choice.weight
    return choice, None


def _train_round(learner, training: Training, key, action, delivered, weight, round_time, t,
                 data, hp):  # fmt: skip
    """One round of federated training: the selected clients train, the delivered models are
    aggregated (weighted by the policy's ``weight`` when it gives them), the simulated clock
    advances by the round time. Returns the training carry, the per-round outputs and the
    round signals."""
    if weight is not None:
        weight = jnp.where(action, weight, 0.0)
        model, learned = learner.step(key, training.model, action, delivered, t, data, hp, weight)
    else:
        model, learned = learner.step(key, training.model, action, delivered, t, data, hp)
    training = Training(
        model=model,
        clock=training.clock + round_time,
        untrained=training.untrained + learned["untrained"],
    )
    outputs = {"wall_clock": training.clock, "num_delivered": learned["num_delivered"]}
    return training, outputs, {name: learned[name] for name in ROUND_SIGNALS if name in learned}


def _scan_with_evaluation(one_round, carry: Carry, xs, learner, data, num_rounds, eval_every):
    """The rounds in blocks of ``eval_every``, the model evaluated before the first and after
    each block: ``(carry, per-round outputs and evaluations)``."""
    blocks = num_rounds // eval_every
    xs = jax.tree.map(lambda a: a.reshape(blocks, eval_every, *a.shape[1:]), xs)

    def block(carry, xs_block):
        carry, per_round = jax.lax.scan(one_round, carry, xs_block)
        return carry, (per_round, learner.evaluate(carry.training.model, data))

    initial = learner.evaluate(carry.training.model, data)
    declared = set(learner_evaluations(learner))
    if set(initial) != declared:
        raise ValueError(
            f"the learner's evaluate returned {sorted(initial)}, but it declares "
            f"{sorted(declared)} (Learner.evaluations)"
        )
    carry, (per_round, evaluation) = jax.lax.scan(block, carry, xs)
    per_round = jax.tree.map(lambda a: a.reshape(num_rounds, *a.shape[2:]), per_round)
    evaluation = jax.tree.map(
        lambda first, rest: jnp.concatenate([first[None], rest]), initial, evaluation
    )
    evaluation["untrained"] = carry.training.untrained
    return carry, {**per_round, **evaluation}


def _round_metrics(env: Environment, feedback, num_clients: int) -> dict[str, jax.Array]:
    """The environment's declared per-round metrics, checked against the declaration."""
    values = env.compute_round_metrics(feedback)
    if set(values) != set(env.round_metrics):
        raise ValueError(
            f"{type(env).__name__}.compute_round_metrics returned {sorted(values)}, "
            f"but round_metrics declares {sorted(env.round_metrics)}"
        )
    sizes = {CLIENT: num_clients}
    for name, metric in env.round_metrics.items():
        shape = tuple(sizes.get(dim) for dim in metric.dims[1:])
        chex.assert_shape(values[name], shape, custom_message=f"round metric {name!r}")
    return {name: values[name] for name in env.round_metrics}


def make_batched_run(
    run,
    data=None,
    seed_hparams: tuple[str, ...] = (),
    reduce=None,
    params=None,
    reducer_hparams: tuple[str, ...] = (),
    reducer_reads: tuple[str, ...] | None = None,
):
    """jit(vmap over configurations (outer) of vmap over seeds (inner)).

    Signature of the result: ``(keys[S], hparams{name: [C]}, num_configs=None) -> RunOutput`` with
    leading axes ``[C, S]`` (``num_configs`` is C, needed only when ``hparams`` is empty). ``data``
    (federated runs) is shared by every run and passed to the compiled program as an argument, and
    so are the environment's parameters ``params`` when given (``run``'s own otherwise, which
    the program then holds as constants): their array and float fields are traced, so one
    compiled program serves every setting of the same shapes (the persistent compilation cache
    then finds it across processes), while their static fields (numbers of clients, …) stay
    static. The
    hyperparameters named in ``seed_hparams`` have a seed axis after the configuration axis (``[C,
    S, ...]``): each run reads its own seed's row, for values that depend on the seed, such as the
    mean rewards of the seed's client layout.

    With ``reduce`` (``jfl.reduction.make_reducer``) the result is instead
    ``(keys, hparams, num_configs=None, reference=None) -> dict``: what
    ``reduce(outputs[S, ...], hparams, seeded, reference)`` returns for each configuration
    (``seeded``: the ``seed_hparams``, with their seed axis; ``reference``: the reference table,
    one for every configuration, ``jfl.reduction.Reference``), with a leading axis ``[C]``: the
    reduction runs on the device, on the outputs the runs left there, and only its (small)
    outputs leave it. The hyperparameters named in ``reducer_hparams`` go to the reduction only,
    not to the runs; ``reducer_reads`` names the per-configuration hyperparameters it reads (by
    default every one): given, the runners of one sweep's policy groups that share ``reduce``
    share its compiled program too (their policies' own hyperparameters differ, the reduction's
    inputs do not). It is a program of its own: fused into the runs' program, XLA would compute
    some of its sums differently for different numbers of configurations. Its ``runs`` attribute
    is the runs' program alone (the function above, the same compiled program), which the sweep
    uses to compute the reference table.
    """

    def over_seeds(keys, hparams, data, params):
        shared = {k: v for k, v in hparams.items() if k not in seed_hparams}
        seeded = {k: hparams[k] for k in seed_hparams}
        return jax.vmap(lambda key, own: run(key, {**shared, **own}, data, params))(keys, seeded)

    @functools.partial(jax.jit, static_argnums=4)
    def over_configs(keys, hparams, data, params, num_configs):
        over = jax.vmap(over_seeds, in_axes=(None, 0, None, None), axis_size=num_configs)
        return over(keys, hparams, data, params)

    def batched(keys, hparams, num_configs=None):
        return over_configs(keys, hparams, data, params, _num_configs(hparams, num_configs))

    if reduce is None:
        return batched
    reduce_configs = _reduce_configs(reduce)

    def run_and_reduce(keys, hparams, num_configs=None, reference=None):
        own = {k: v for k, v in hparams.items() if k not in reducer_hparams}
        outputs = batched(keys, own, _num_configs(hparams, num_configs))
        shared = {
            k: v
            for k, v in hparams.items()
            if k not in seed_hparams and (reducer_reads is None or k in reducer_reads)
        }
        seeded = {k: hparams[k] for k in seed_hparams}
        return reduce_configs(outputs.arrays(), shared, seeded, dict(reference or {}))

    run_and_reduce.runs = batched
    return run_and_reduce


# One compiled reduction per reducer: the policy groups of a sweep share it.
_REDUCERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _reduce_configs(reduce):
    """``reduce`` vmapped over configurations (the reference table, the same for every
    configuration, is not) and jitted, once per ``reduce``."""
    if reduce not in _REDUCERS:
        _REDUCERS[reduce] = jax.jit(jax.vmap(reduce, in_axes=(0, 0, 0, None)))
    return _REDUCERS[reduce]


def _num_configs(hparams, num_configs: int | None) -> int:
    """The configuration axis' size: of the hyperparameters, or given when there are none."""
    sizes = {int(np.shape(v)[0]) for v in jax.tree.leaves(hparams)}
    if num_configs is not None:
        sizes.add(int(num_configs))
    if len(sizes) != 1:
        raise ValueError(
            f"hyperparameters need one leading configuration axis (num_configs={num_configs}), "
            f"got sizes {sorted(sizes)}"
        )
    return sizes.pop()


def seed_keys(base_seed: int, seeds) -> jax.Array:
    """One key per seed index, independent of the configuration (common random numbers)."""
    root = jax.random.key(base_seed)
    return jax.vmap(lambda s: jax.random.fold_in(root, s))(jnp.asarray(seeds, jnp.uint32))
