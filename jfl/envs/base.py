"""The environment interface (gymnax style): a stateless object, explicit ``params`` and ``state``.

An environment simulates the clients of one round at a time:

* ``reset(key, params) -> (obs, state)`` and ``step(key, state, action, params) ->
  (obs, state, feedback)`` are pure functions of their arguments (all randomness comes from the
  keys, ``params`` and ``state`` are pytrees);
* ``provides`` lists the observation and feedback fields that policies may read (a policy's
  ``requires`` is checked against it);
* ``delivered(action, feedback)`` says whose model update reached the server (federated runs);
* ``round_metrics`` declares the per-round outputs the environment adds to a run, with their
  dimensions, a one-line description and their range (``jfl.stats.Bounds``), and
  ``compute_round_metrics(feedback)`` computes them.
  The runner records them and ``jfl.results.to_dataset`` labels them from this declaration alone,
  so a new per-round metric is one entry here (plus a feedback field or an override of
  ``compute_round_metrics``), in the environment's own module.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from jfl.outputs import ROUND, Metric


def client_classes(num_clients: int, num_classes: int) -> np.ndarray:
    """Class of client n: ⌊num_classes·n/N⌋ (equal classes when N divides), for environments
    whose clients come in classes (``rbcsf``'s speeds, ``volatile``'s success rates)."""
    return (np.arange(num_clients) * num_classes) // num_clients


class Environment(abc.ABC):
    """Abstract base of the client simulators (``RbcsfEnv``, ``WirelessEnv``, ``HflEnv``)."""

    name: ClassVar[str]
    # Observation / feedback fields that policies may read (checked against ``Policy.requires``).
    provides: ClassVar[tuple[str, ...]] = ()
    # Per-round outputs besides the runner's own (round time, selections, queues). Every entry's
    # dims start with "round"; the rest are the dims of one round's value ("client": f[N]).
    round_metrics: ClassVar[Mapping[str, Metric]] = MappingProxyType({})

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name, metric in cls.round_metrics.items():
            if not isinstance(metric, Metric) or metric.dims[:1] != (ROUND,):
                raise TypeError(
                    f"{cls.__name__}.round_metrics[{name!r}] must be a Metric whose dims start "
                    f"with {ROUND!r}, got {metric!r}"
                )

    @abc.abstractmethod
    def default_params(self, **overrides) -> Any:
        """The environment's default parameters (the paper's setting), with ``overrides``."""

    @abc.abstractmethod
    def reset(self, key: jax.Array, params) -> tuple[Any, Any]:
        """``(obs, state)`` of the first round."""

    @abc.abstractmethod
    def step(self, key: jax.Array, state, action: jax.Array, params) -> tuple[Any, Any, Any]:
        """Play ``action`` in the current round: ``(next obs, next state, feedback)``."""

    def delivered(self, action: jax.Array, feedback) -> jax.Array:
        """bool[N]: the clients whose model update arrived; by default every selected client.

        ``action`` is bool[N], or bool[N, M] for client-to-server assignments (a client is
        selected when it is assigned to any server).
        """
        del feedback
        return action if action.ndim == 1 else jnp.any(action, axis=-1)

    def compute_round_metrics(self, feedback) -> dict[str, jax.Array]:
        """One round's values of the declared ``round_metrics``.

        By default the feedback fields of the same names; override to derive other values.
        """
        return {name: getattr(feedback, name) for name in self.round_metrics}
