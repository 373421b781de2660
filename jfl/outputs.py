"""What a run outputs, declared once: each output's dims, meaning and range.

Every output of a run is declared by what produces it, as a :class:`Metric` (its dims after the
leading [config, seed] axes, a one-line description, its range): the runner's core outputs
(``CORE_OUTPUTS``), a learner's (``LEARNER_OUTPUTS``, with its own evaluations), the health of a
run (``HEALTH_OUTPUTS``), the trajectories (``TRAJECTORY_OUTPUTS``), an environment's per-round
metrics (``Environment.round_metrics``) and a tracker's outputs (``jfl.trackers.Tracker``).
:func:`output_metrics` gathers those of one run from its own environment, learner and trackers;
a sweep's outputs carry them (:class:`Outputs`), so labelling the arrays and clipping their
intervals never looks anything up in a registry. This module imports nothing of jfl but
``jfl.stats``, so that environments, trackers, the runner and the results all read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from jfl.stats import NONNEGATIVE, UNBOUNDED, UNIT_INTERVAL, Bounds

# Dimensions an output may have after the leading [config, seed] axes.
ROUND, CLIENT, EVAL = "round", "client", "eval"


class Metric(NamedTuple):
    """Declaration of one output: its dimensions (after [config, seed]), what it is, the range
    of its values (``jfl.stats.Bounds``: bands over seeds are clipped to it), and whether NaN
    is one of them: a value the run does not have (``missing``), which the runner's count of
    diverged runs then leaves alone (``jfl.runner.first_nonfinite_round``)."""

    dims: tuple[str, ...]
    doc: str
    bounds: Bounds = UNBOUNDED
    missing: bool = False


# Outputs declared by what produces them: name -> Metric(dims after [config, seed], doc,
# bounds). The environment declares its own per-round metrics (``Environment.round_metrics``).
CORE_OUTPUTS = {
    "round_time": Metric(
        (ROUND,), "max realised time over the selected clients (eq. 1)", NONNEGATIVE
    ),
    "num_selected": Metric((ROUND,), "|S_t|, the number of selected clients", NONNEGATIVE),
    "selection_count": Metric(
        (CLIENT,), "pull record: selections of each client in T rounds", NONNEGATIVE
    ),
}
# What a learner's ``evaluate`` returns unless it declares its own (``Learner.evaluations``).
EVALUATIONS = {
    "accuracy": Metric((EVAL,), "test accuracy at rounds 0, k, 2k, …, T", UNIT_INTERVAL),
    "test_loss": Metric((EVAL,), "test loss at the same rounds", NONNEGATIVE),
}
# With a federated learner (``make_run(..., learner=...)``), whose evaluations stand where
# ``EVALUATIONS`` do (``learner_outputs``).
LEARNER_OUTPUTS = {
    "wall_clock": Metric((ROUND,), "simulated time at the end of round t", NONNEGATIVE),
    "num_delivered": Metric((ROUND,), "trained models that reached their server", NONNEGATIVE),
    **EVALUATIONS,
    "untrained": Metric((), "selections beyond the learner's slots (should be 0)", NONNEGATIVE),
}
# Recorded by every run: where its numbers stopped being numbers (a diverged model, say), so
# that the summary can count such runs instead of averaging around them.
HEALTH_OUTPUTS = {
    "nonfinite_round": Metric(
        (),
        "first round with a NaN or ±inf output (an evaluation: the round it follows, 0 the "
        "initial one; a final value: round T); -1: every value finite",
    )
}
# With ``trajectories=True``.
TRAJECTORY_OUTPUTS = {
    "selected": Metric((ROUND, CLIENT), "the selection S_t as a mask", UNIT_INTERVAL)
}


def learner_evaluations(learner=True) -> dict[str, Metric]:
    """What ``learner.evaluate`` returns: its ``Learner.evaluations``, or ``EVALUATIONS`` (test
    accuracy and loss) for a learner that declares none (or ``True``)."""
    evaluations = getattr(learner, "evaluations", None)
    return dict(EVALUATIONS if evaluations is None else evaluations)


def learner_outputs(learner=True) -> dict[str, Metric]:
    """The outputs a run with ``learner`` records: ``LEARNER_OUTPUTS`` with the learner's
    evaluations (``learner_evaluations``, each of dims ("eval",)) in place of accuracy and test
    loss."""
    evaluations = learner_evaluations(learner)
    for name, metric in evaluations.items():
        if not isinstance(metric, Metric) or tuple(metric.dims) != (EVAL,):
            raise TypeError(
                f"the learner's evaluation {name!r} must be a Metric of dims ({EVAL!r},), "
                f"got {metric!r}"
            )
    outputs = {k: v for k, v in LEARNER_OUTPUTS.items() if k not in EVALUATIONS}
    untrained = outputs.pop("untrained")
    return {**outputs, **evaluations, "untrained": untrained}


def output_dims(
    env,
    *,
    learner=False,
    trajectories: bool = False,
    trackers: tuple = (),
) -> dict[str, tuple[str, ...]]:
    """Dims (after the leading [config, seed] axes) of every output ``run`` returns.

    Each is a tuple of "round", "client" and "eval" (the evaluations of a federated run), or
    () for one value per run; in the order of ``RunOutput.arrays()``. ``learner``: False or None
    (no federated training), True (a learner evaluating accuracy and test loss) or the run's
    learner, whose ``evaluations`` name what it evaluates (``learner_outputs``).
    """
    declared = output_metrics(env, learner=learner, trajectories=trajectories, trackers=trackers)
    return {name: tuple(metric.dims) for name, metric in declared.items()}


def output_metrics(
    env,
    *,
    learner=False,
    trajectories: bool = False,
    trackers: tuple = (),
) -> dict[str, Metric]:
    """The declaration (``Metric``) of every output ``run`` returns, as ``output_dims``."""
    tables = [CORE_OUTPUTS, *(t.outputs for t in trackers), env.round_metrics]
    if learner:  # a Learner (a non-empty NamedTuple) or True
        tables.append(learner_outputs(learner))
    if trajectories:
        tables.extend([TRAJECTORY_OUTPUTS, *(t.trajectories for t in trackers)])
    tables.append(HEALTH_OUTPUTS)
    declared = {}
    for table in tables:
        for name, metric in table.items():
            if name in declared:
                raise ValueError(f"output {name!r} is declared twice")
            declared[name] = metric
    return declared


class Outputs(dict):
    """A sweep's outputs by name (arrays with leading axes [config, seed]) and ``metrics``,
    the declaration of every output its runs record (:func:`output_metrics`), so that
    ``jfl.results.to_dataset`` labels them and the intervals are clipped to their ranges from
    the runs' own environment, learner and trackers."""

    def __init__(self, arrays: Mapping, metrics: Mapping[str, Metric]):
        super().__init__(arrays)
        self.metrics = dict(metrics)
