"""The policy interface and the registry that lets sweeps name policies.

A policy is a triple of pure functions over its own state pytree (optax style):

* ``init(key, hparams) -> state``
* ``select(key, state, obs, hparams) -> bool[N]`` (never an unavailable client), or a
  ``Selection`` that also gives each selected client's aggregation weight
* ``update(state, obs, action, feedback, hparams) -> state``

``hparams`` is a dict of scalars that may be traced (so one compiled program runs a whole grid);
shapes and structural options are fixed when the policy is built, by a builder
``build(num_clients, size, **options) -> Policy``. The second parameter is the selection size
(``selection_size``), or for the COCS family, which assigns clients to edge servers, the number
of servers (``num_servers``).

A policy without state uses ``EmptyState`` with ``stateless_init``/``stateless_update``, or
``stateless(select)`` for the whole triple. Policies whose selections can tie draw a per-run
random order of the clients in ``init`` (``random_priority``) and pass it to the selection kernels,
so that ties favour no client index (with RBCS-F's class layout, the index is the class).

Besides the environment's observation a policy may read per-client signals that a federated
learner computes from its current global model (``LEARNER_SIGNALS``, e.g. each client's local
accuracy): it names them in ``Policy.signals`` (and in its spec's ``requires``), and the runner,
only then, computes them before each selection and passes a ``LearnerObservation``, which reads
like the environment's observation (``obs.available``) with the signals as more fields
(``obs.local_accuracy``). Signals of the round just trained (``ROUND_SIGNALS``, e.g. each
participant's training loss) are seen by ``update`` only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jfl.checks import describe_range, in_range
from jfl.registry import Registry

# Per-client signals of the global model that a federated learner computes each round, f[N]
# (``jfl.fl.train.local_signals``): what policies may read besides the environment's fields.
# The sketches are f[N, K] (``jfl.fl.sketch``: a fixed random projection of a model-sized vector),
# K = SKETCH_DIM unless the learner is built with another ``sketch_dim``.
SKETCH_DIM = 128
LEARNER_SIGNALS = (
    "local_accuracy",
    "local_loss",
    "local_loss_sq",
    "data_size",
    "minibatch_loss",
    "grad_sketch",
    "local_update_norm",
    "train_loss",
    "update_sketch",
    "update_norm",
    "grad_var",
    "update_scale",
)
# Of those, the signals of the round just trained (participants' values, 0 elsewhere):
# ``update`` sees them after the round, ``select`` never does.
ROUND_SIGNALS = ("train_loss", "update_sketch", "update_norm", "grad_var", "update_scale")


def check_sketch(sketch, sketch_dim: int, name: str) -> None:
    """ValueError (at trace time) unless the learner's ``sketch`` has ``sketch_dim`` columns: a
    policy that keeps sketches in its state sizes it when built."""
    if sketch.shape[-1] != sketch_dim:
        raise ValueError(
            f"the learner's {name} has {sketch.shape[-1]} coordinates, the policy was built with "
            f"sketch_dim={sketch_dim}: build it with the learner's sketch_dim"
        )


class Policy(NamedTuple):
    init: Callable[..., Any]
    select: Callable[..., Any]
    update: Callable[..., Any]
    # Learner signals (of ``LEARNER_SIGNALS``) that ``select``/``update`` read from the
    # observation; the runner computes them only for policies that name them.
    signals: tuple[str, ...] = ()


# The values of ``PolicySpec.aggregation``.
AGGREGATION_PROTOCOLS = ("data_size", "uniform", "policy_weights")


class Selection(NamedTuple):
    """A selection with aggregation weights: what ``select`` returns when the policy, not the
    learner, weighs the participants' updates (the unbiased sampling-based methods).

    The learner then moves the global model w to ``w + Σ_k weight_k·(θ_k − w)`` over the
    selected clients whose update arrived (θ_k the client's trained model), with no
    renormalisation: a multiplicity (a client drawn twice counts twice) is folded into the
    weight, e.g. ``count/m`` for m draws with replacement. A plain bool[N] selection is
    averaged as the learner's ``aggregation`` says.
    """

    clients: jax.Array  # bool[N]  the selected clients (each trained once)
    weight: jax.Array  # f[N]  aggregation weight of each selected client's update, 0 elsewhere


def draws_selection(count, draws: int) -> Selection:
    """The ``Selection`` of ``draws`` draws that picked client n ``count[n]`` times (i[N]): each
    draw weighs 1/draws, so a client drawn twice counts twice (the unbiased sampling schemes)."""
    return Selection(count > 0, count.astype(jnp.float32) / draws)


class LearnerObservation(NamedTuple):
    """The environment's observation with the learner's per-client signals as more fields.

    ``obs.available`` (any field of the environment's observation) and ``obs.local_accuracy``
    (any signal) both read as attributes, so a policy written for the environment's observation
    runs unchanged.
    """

    env: Any  # the environment's observation
    signals: dict[str, Any]  # name -> f[N]

    def __getattr__(self, name):
        signals = LearnerObservation.signals.__get__(self)
        if name in signals:
            return signals[name]
        return getattr(LearnerObservation.env.__get__(self), name)


class EmptyState(NamedTuple):
    """The state of a policy that keeps none."""


def stateless_init(key, hparams) -> EmptyState:
    """``init`` of a policy without state."""
    del key, hparams
    return EmptyState()


def stateless_update(state, obs, action, feedback, hparams):
    """``update`` that keeps the state as it is."""
    del obs, action, feedback, hparams
    return state


def stateless(select: Callable[..., Any]) -> Policy:
    """The policy of ``select`` alone: ``EmptyState``, never updated."""
    return Policy(init=stateless_init, select=select, update=stateless_update)


class TieBreakState(NamedTuple):
    """The state of a policy that keeps nothing but its per-run tie-breaking order."""

    priority: jax.Array  # i32[N]  random_priority: client n wins ties against higher values


@dataclass(frozen=True)
class HParam:
    """A traced hyperparameter: default and allowed closed/open range."""

    default: float
    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    help: str = ""

    def describe(self) -> str:
        """The allowed range, e.g. ``"[0, 1]"``."""
        return describe_range(self.low, self.high, self.low_open, self.high_open)

    def check(self, name: str, values) -> None:
        """ValueError naming ``name`` unless every one of ``values`` is in the range."""
        in_range(name, np.asarray(values, float).ravel(), self.low, self.high,
                 low_open=self.low_open, high_open=self.high_open)  # fmt: skip


@dataclass(frozen=True)
class PolicySpec:
    """Registry entry: how to build a policy and which hyperparameters it reads."""

    name: str
    build: Callable[..., Policy]  # build(num_clients, size, **options) -> Policy
    hparams: Mapping[str, HParam] = field(default_factory=dict)
    description: str = ""
    # The hyperparameter that is the policy's own fairness-queue rate (β, c), if any: sweeps
    # measure every policy's fairness queue at that rate.
    queue_rate: str | None = None
    # Observation / feedback fields the policy reads, checked against an environment's `provides`
    # (``LEARNER_SIGNALS`` against the run's learner instead).
    requires: tuple[str, ...] = ("available",)
    # The most clients one round can select, ``selects_at_most(num_clients, size)``; by default
    # the size itself. Federated runs train that many slots a round, so shapes stay static.
    selects_at_most: Callable[[int, int], int] | None = None
    # How a federated run averages the participants' models under the authors' protocol
    # (``--aggregation paper``, docs/decisions.md#aggregation-protocols): "data_size" (FedAvg's
    # n_k/Σn, McMahan et al.) or "uniform" (1/m) for a plain selection; "policy_weights" for a
    # policy whose ``select`` returns a ``Selection``, whose weights every aggregation keeps.
    aggregation: str = "data_size"

    def __post_init__(self) -> None:
        if self.aggregation not in AGGREGATION_PROTOCOLS:
            raise ValueError(
                f"policy {self.name!r}: aggregation must be one of {AGGREGATION_PROTOCOLS}, "
                f"got {self.aggregation!r}"
            )

    def defaults(self) -> dict[str, float]:
        """Every hyperparameter's default value."""
        return {k: h.default for k, h in self.hparams.items()}

    def validate(self, hparams: Mapping[str, Any]) -> None:
        """Check names and ranges of (possibly array-valued) hyperparameters, host side."""
        unknown = set(hparams) - set(self.hparams)
        if unknown:
            raise ValueError(
                f"policy {self.name!r} has no hyperparameter(s) {sorted(unknown)}; "
                f"it takes {sorted(self.hparams)}"
            )
        for name, values in hparams.items():
            self.hparams[name].check(name, values)

    def complete(self, hparams: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Defaults overridden by ``hparams``, validated."""
        hparams = dict(hparams or {})
        self.validate(hparams)
        return {**self.defaults(), **hparams}

    def max_selected(self, num_clients: int, size: int) -> int:
        """The most clients this policy selects in one round (see ``selects_at_most``)."""
        if self.selects_at_most is None:
            return int(size)
        return int(self.selects_at_most(num_clients, size))

    @property
    def signals(self) -> tuple[str, ...]:
        """The learner signals among ``requires``."""
        return tuple(f for f in self.requires if f in LEARNER_SIGNALS)

    def check_environment(self, env) -> None:
        """Raise if ``env`` does not provide what the policy reads (before anything compiles).

        Learner signals are not the environment's to provide: ``check_learner`` checks them.
        """
        provides = getattr(env, "provides", None)
        if provides is None:
            return
        missing = [f for f in self.requires if f not in provides and f not in LEARNER_SIGNALS]
        if missing:
            raise ValueError(
                f"policy {self.name!r} reads {missing}, which environment "
                f"{getattr(env, 'name', type(env).__name__)!r} does not provide"
            )

    def check_learner(self, learner) -> None:
        """Raise if the policy reads learner signals that ``learner`` (None: a run without
        federated training) does not compute (before anything compiles)."""
        check_signals(self.signals, learner, f"policy {self.name!r}")


def check_signals(signals, learner, who: str = "the policy") -> None:
    """ValueError unless ``learner`` computes every one of ``signals`` (what ``who`` reads)."""
    if not signals:
        return
    if learner is None:
        raise ValueError(
            f"{who} reads {list(signals)}, which only a federated learner computes "
            "(jfl.fl.make_learner); this run trains no model"
        )
    missing = [f for f in signals if f not in getattr(learner, "provides", ())]
    if missing:
        raise ValueError(f"{who} reads {missing}, which the run's learner does not compute")


REGISTRY: Registry[PolicySpec] = Registry("policy")


def register(spec: PolicySpec) -> PolicySpec:
    """Add ``spec`` to the registry (replacing one of the same name) and return it."""
    return REGISTRY.register(spec.name, spec)


def get(name: str) -> PolicySpec:
    """The registered spec ``name`` (ValueError listing the registered ones otherwise)."""
    return REGISTRY.lookup(name)


def readers(hparam: str) -> list[str]:
    """The registered policies that read hyperparameter ``hparam``, in registration order."""
    return [name for name, spec in REGISTRY.items() if hparam in spec.hparams]


def check_selection_size(num_clients: int, size: int, name: str = "selection_size") -> None:
    """Raise ValueError unless ``num_clients >= 1`` and ``1 <= size <= num_clients`` (integers).

    ``name`` is the builder's name of ``size`` (``selection_size`` or ``num_servers``), used in
    the message.
    """
    if not isinstance(num_clients, int | np.integer) or num_clients < 1:
        raise ValueError(f"num_clients must be an integer >= 1, got {num_clients!r}")
    if not isinstance(size, int | np.integer) or not 1 <= size <= num_clients:
        raise ValueError(
            f"{name} must be an integer in [1, num_clients={num_clients}], got {size!r}"
        )
