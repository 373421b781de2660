"""Volatile clients: the setting of E3CS's experiments (Huang, Lin, Shen, Li and Zomaya, IEEE
IoT-J 2022, arXiv 2011.08756, §VI; docs/decisions.md#e3cs-volatile).

N clients in equal classes (client n is in class ⌊C·n/N⌋, as in ``jfl.envs.rbcsf``), each class
with a success probability: a selected client's update arrives in a round with its class's
probability, independently of everything else (a Bernoulli draw each round). The paper's
setting: K = 100 clients in four classes with success rates 0.1, 0.3, 0.6 and 0.9, k = 20
selected a round, every client available. Availability is a parameter here (each client
available each round with probability ``availability``, 1 by default).

Rounds have a fixed deadline: the server waits ``round_time`` (1 by default) whoever succeeds,
so a federated run's simulated wall clock counts rounds. The feedback's ``success`` (the
selected clients whose update arrived) is what E3CS reads and what ``delivered`` returns; the
observation also carries each client's ``success_probability``, oracle information for a
FedCS-like baseline (like ``expected_time`` in ``jfl.envs.rbcsf``).

Gymnax style: the environment object is stateless; ``params`` and ``state`` are pytrees.
"""

from __future__ import annotations

from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jfl.checks import in_range
from jfl.envs.base import Environment, client_classes
from jfl.outputs import Metric
from jfl.prng import uniform
from jfl.stats import NONNEGATIVE

# §VI of the paper: four equal classes of clients with these success rates, K = 100, k = 20.
PAPER_SUCCESS_RATES = (0.1, 0.3, 0.6, 0.9)
PAPER_NUM_CLIENTS = 100
PAPER_SELECTION_SIZE = 20


@struct.dataclass
class VolatileParams:
    success_probability: jax.Array  # f[N]  P(a selected client's update arrives)
    availability: jax.Array  # f[N]  P(available in a round)
    round_time: float = 1.0  # the round's deadline: every round lasts this long

    @property
    def num_clients(self) -> int:
        return self.success_probability.shape[0]


@struct.dataclass
class VolatileState:
    available: jax.Array  # bool[N]  this round's availability
    t: jax.Array  # i[]  round index, 0-based


class Observation(NamedTuple):
    available: jax.Array  # bool[N]
    success_probability: jax.Array  # f[N]  oracle information (FedCS-like baselines only)


class Feedback(NamedTuple):
    success: jax.Array  # bool[N]  the selected clients whose update arrived
    round_time: jax.Array  # f[]  the deadline, every round
    num_success: jax.Array  # i[]  Σ success: the round's effective participation


def make_params(
    num_clients: int = PAPER_NUM_CLIENTS,
    success_rates=PAPER_SUCCESS_RATES,
    availability=1.0,
    round_time: float = 1.0,
    dtype=jnp.float32,
) -> VolatileParams:
    """Validated parameters: ``success_rates`` one per class (the classes split the clients
    equally), ``availability`` a scalar or one value per client, ``round_time`` > 0."""
    if not isinstance(num_clients, int | np.integer) or num_clients < 1:
        raise ValueError(f"num_clients must be an integer >= 1, got {num_clients!r}")
    rates = np.asarray(success_rates, float)
    if rates.ndim != 1 or len(rates) < 1:
        raise ValueError(f"success_rates must be a 1-D table of one rate per class, got {rates}")
    in_range("success_rates", rates, 0, 1)
    availability = np.asarray(availability, float)
    if availability.ndim == 0:
        availability = np.full(num_clients, float(availability))
    if availability.shape != (num_clients,):
        raise ValueError(
            f"availability must be a scalar or of shape ({num_clients},), got {availability.shape}"
        )
    in_range("availability", availability, 0, 1)
    in_range("round_time", round_time, 0, np.inf, low_open=True)
    probability = rates[client_classes(num_clients, len(rates))]
    return VolatileParams(
        success_probability=jnp.asarray(probability, dtype),
        availability=jnp.asarray(availability, dtype),
        round_time=float(round_time),
    )


class VolatileEnv(Environment):
    """Stateless environment; all randomness comes from the keys passed in."""

    name = "volatile"
    # Fields of Observation and Feedback, for policy compatibility checks.
    provides = ("available", "success_probability", "success", "round_time", "num_success")
    round_metrics: ClassVar[dict[str, Metric]] = {
        "num_success": Metric(
            ("round",),
            "selected clients whose update arrived (effective participation)",
            NONNEGATIVE,
        ),
    }

    def default_params(self, **overrides) -> VolatileParams:
        return make_params(**overrides)

    def _observation(self, state: VolatileState, params: VolatileParams) -> Observation:
        return Observation(state.available, params.success_probability)

    def reset(self, key, params: VolatileParams) -> tuple[Observation, VolatileState]:
        u = jax.random.uniform(key, (params.num_clients,), params.availability.dtype)
        state = VolatileState(u < params.availability, jnp.asarray(0, jnp.int32))
        return self._observation(state, params), state

    def step(self, key, state: VolatileState, action, params: VolatileParams):
        """Play ``action`` (bool[N]): each selected client succeeds with its probability; the
        next round's availability is drawn. One PRNG call: row 0 success, row 1 availability."""
        u = uniform(key, (2, params.num_clients), params.availability.dtype)
        success = jnp.asarray(action, bool) & (u[0] < params.success_probability)
        dtype = params.availability.dtype
        feedback = Feedback(
            success=success,
            round_time=jnp.asarray(params.round_time, dtype),
            num_success=jnp.sum(success, dtype=jnp.int32),
        )
        next_state = VolatileState(u[1] < params.availability, state.t + 1)
        return self._observation(next_state, params), next_state, feedback

    def delivered(self, action, feedback: Feedback):
        """The selected clients whose update arrived."""
        return action & feedback.success
