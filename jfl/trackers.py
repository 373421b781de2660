"""Trackers: what a run measures about its own selections, beside the policy's state.

An environment declares the per-round metrics of its clients (``Environment.round_metrics``); a
tracker declares what the runner keeps about the selections themselves, round after round, for
every policy alike, so that a policy and its baselines are measured on the same scale. A tracker
is a NamedTuple of pure functions (optax style) over a state of its own:

* ``init(num_clients, hparams) -> state`` and ``update(state, selected, t, hparams) -> state``,
  after each round's selection ``selected`` (bool[N]) in round ``t`` (1-based);
* ``record(state)``: the per-round outputs after round ``t``; ``trace(state)``: the per-round,
  per-client outputs recorded with ``trajectories=True``; ``final(state)``: the per-client and
  per-run outputs after the last round;
* ``outputs`` and ``trajectories`` declare them (dims and a one-line description), as
  ``round_metrics`` does, so that ``jfl.results.to_dataset`` can label them;
* ``hparams`` names the hyperparameters it reads; a sweep passes them, from the configuration
  table or per configuration, with the policy's own.

An experiment hands its trackers to ``jfl.runner.make_run(..., trackers=...)`` (through
``jfl.sweep.Plan``); without any, a run records the round times and the selections.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jfl.kernels import virtual_queue_update
from jfl.kernels.reduce import pairwise_mean
from jfl.outputs import CLIENT, ROUND, Metric
from jfl.registry import Registry
from jfl.stats import NONNEGATIVE

Hparams = Mapping[str, jax.Array]

# The hyperparameter holding every client's guaranteed selection rate (a scalar or one per
# client) that ``fairness_queue`` reads by default.
QUEUE_RATE = "queue_rate"


class Tracker(NamedTuple):
    """A tracker's declarations and pure functions (see the module docstring)."""

    outputs: Mapping[str, Metric]  # recorded in every run: dims ROUND, CLIENT or ()
    trajectories: Mapping[str, Metric]  # dims (ROUND, CLIENT), with trajectories=True
    hparams: tuple[str, ...]  # the hyperparameters it reads
    init: Callable[[int, Hparams], Any]
    update: Callable[[Any, jax.Array, jax.Array, Hparams], Any]
    record: Callable[[Any], dict[str, jax.Array]]
    trace: Callable[[Any], dict[str, jax.Array]]
    final: Callable[[Any], dict[str, jax.Array]]


class QueueState(NamedTuple):
    """The fairness queue's state after round t."""

    queue: jax.Array  # f[N]  the virtual queue Z
    count: jax.Array  # i[N]  selections so far
    last_unmet: jax.Array  # i[]  last round with count_n(t) < t·rate_n for some client n


def fairness_queue(rate: str = QUEUE_RATE) -> Tracker:
    """The long-term fairness queue Z of a guaranteed selection rate, for every policy.

    ``Z_n(t+1) = max(Z_n(t) + rate_n − x_n(t), 0)`` (``jfl.kernels.virtual_queue_update``; the
    virtual queue of Lyapunov optimisation that RBCS-F and CS-UCB-Q keep as their own state, with
    ``rate`` their β or c), and the last round in which some client's selections fell behind
    ``t·rate_n``, from which ``rounds_to_target`` follows. ``rate`` names the hyperparameter that
    holds the rate (a scalar or one per client): an experiment can point it at a policy's own
    rate or give a target for policies that have none.
    """
    outputs = {
        "queue_mean": Metric(
            (ROUND,), "mean over clients of the fairness queue Z after round t", NONNEGATIVE
        ),
        "queue_max": Metric((ROUND,), "max over clients of Z after round t", NONNEGATIVE),
        "final_queue": Metric((CLIENT,), "Z after round T", NONNEGATIVE),
        "last_unmet_round": Metric(
            (), "last round with count_n(t) < t·rate_n for some client n (0: none)", NONNEGATIVE
        ),
    }
    trajectories = {
        "queue": Metric((ROUND, CLIENT), "the fairness queue Z after round t", NONNEGATIVE)
    }

    def init(num_clients, hparams) -> QueueState:
        del hparams
        return QueueState(
            queue=jnp.zeros(num_clients, jnp.result_type(float)),
            count=jnp.zeros(num_clients, jnp.int32),
            last_unmet=jnp.asarray(0, jnp.int32),
        )

    def update(state: QueueState, selected, t, hparams) -> QueueState:
        target = jnp.broadcast_to(hparams[rate], selected.shape)
        count = state.count + selected
        # Integer count against rate·t, elementwise (batch-shape independent, unlike a running
        # mean). The relative slack absorbs float32 rounding of the rate: float32(0.6)·50
        # exceeds 30, which would count 30 selections in 50 rounds as unmet.
        unmet = jnp.any(count < target * t * (1.0 - 1e-6))
        return QueueState(
            queue=virtual_queue_update(state.queue, hparams[rate], selected),
            count=count,
            last_unmet=jnp.where(unmet, t, state.last_unmet),
        )

    def record(state: QueueState):
        return {"queue_mean": pairwise_mean(state.queue), "queue_max": jnp.max(state.queue)}

    def trace(state: QueueState):
        return {"queue": state.queue}

    def final(state: QueueState):
        return {"final_queue": state.queue, "last_unmet_round": state.last_unmet}

    return Tracker(outputs, trajectories, (rate,), init, update, record, trace, final)


# Every tracker the library provides, by name.
TRACKERS: Registry[Callable[..., Tracker]] = Registry("tracker", {"fairness_queue": fairness_queue})
