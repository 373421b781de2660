"""The federated quadratic learner (jfl.fl.quadratic) against plain float64 NumPy loops.

Random small instances check the per-client losses, the shares, the closed-form gap, one round
of local steps and aggregation (plain average, p-weighted, a ``Selection``'s weights with a
client drawn twice), and whole runs through the runner whose selections are fixed in advance
(a test policy replays them), so that every round can be compared with
``jfl.reference.numpy_quadratic``. The jitted functions and the compiled runs are built once per
module.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfl.envs import RbcsfEnv
from jfl.fl.quadratic import (
    EVALUATIONS,
    QuadraticData,
    make_instance,
    make_quadratic_learner,
)
from jfl.outputs import Metric, output_dims
from jfl.policies import Policy, Selection, get
from jfl.reference import numpy_quadratic as ref
from jfl.runner import make_run
from jfl.stats import NONNEGATIVE

N, D, STEPS, LR = 6, 3, 3, 0.01
T = 8
# float32 against float64: relative rounding of a few ulps per step.
TOL = {"rtol": 2e-5, "atol": 1e-5}


def instance(seed: int) -> QuadraticData:
    return make_instance(seed, N, D, h_range=(1.0, 20.0), e_scale=10.0, w0_scale=10.0)


def as_float64(data: QuadraticData):
    return [np.asarray(a, np.float64) for a in data]


LEARNER = make_quadratic_learner(N, local_steps=STEPS)
P_WEIGHTED = make_quadratic_learner(N, local_steps=STEPS, aggregation="data_size")


def _step(learner):
    if id(learner) not in _STEPS:
        _STEPS[id(learner)] = _jitted_step(learner)
    return _STEPS[id(learner)]


_STEPS = {}


def _jitted_step(learner):
    def step(w, action, delivered, data, weight):
        state, metrics = learner.step(
            None, learner.init(None, data, {})._replace(w=w), action, delivered, 1, data,
            {"learning_rate": LR}, weight,
        )  # fmt: skip
        return state.w, metrics["train_loss"], metrics["num_delivered"]

    return jax.jit(step)


@jax.jit
def _signals_and_gap(w, data):
    state = LEARNER.init(None, data, {})._replace(w=w)
    names = ("local_loss", "minibatch_loss", "data_size")
    return LEARNER.signals(None, state, data, {}, names), LEARNER.evaluate(state, data)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_signals_and_gap_match_numpy(seed):
    data = instance(seed)
    h, e, p, _ = as_float64(data)
    w = np.float32(np.random.default_rng(seed).normal(scale=5.0, size=D))
    signals, evaluation = _signals_and_gap(w, data)
    np.testing.assert_allclose(signals["local_loss"], ref.local_loss(h, e, w), **TOL)
    np.testing.assert_array_equal(signals["minibatch_loss"], signals["local_loss"])
    np.testing.assert_allclose(signals["data_size"], p, rtol=1e-7)
    np.testing.assert_allclose(np.sum(p), 1.0, rtol=1e-6)
    assert set(evaluation) == set(EVALUATIONS) == {"gap"}
    np.testing.assert_allclose(evaluation["gap"], ref.global_gap(h, e, p, w), rtol=1e-5)
    # The gap is 0 at w* and positive elsewhere.
    w_star = (p @ e) / (p @ h)
    assert ref.global_gap(h, e, p, w_star) == pytest.approx(0.0, abs=1e-9)
    assert float(_signals_and_gap(np.float32(w_star), data)[1]["gap"]) < 1e-6


def test_instance_follows_its_recipe():
    """RandomState(seed) draws e, h, the power-law sizes and w₀ in that order."""
    data = make_instance(7, N, D, h_range=(0.0, 9.0))
    rng = np.random.RandomState(7)
    e = 100 * rng.random_sample((N, D))
    h = 9 * rng.random_sample(N)
    sizes = rng.power(3.0, N)
    w0 = 100 * rng.randn(D)
    for got, want in zip(data, (h, e, sizes / sizes.sum(), w0), strict=True):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-6)
    with pytest.raises(ValueError, match="h_range"):
        make_instance(0, N, D, h_range=(2.0, 1.0))


@pytest.mark.parametrize("seed", [0, 3])
@pytest.mark.parametrize("learner", ["uniform", "data_size", "weights"])
def test_one_round_matches_numpy(seed, learner):
    data = instance(seed)
    h, e, p, w0 = as_float64(data)
    rng = np.random.default_rng(seed)
    action = np.zeros(N, bool)
    action[rng.choice(N, 3, replace=False)] = True
    delivered = action.copy()
    delivered[np.flatnonzero(action)[0]] = False  # one participant's update is lost
    w = np.asarray(data.w0)
    if learner == "weights":
        weight = np.where(action, rng.uniform(0.1, 0.5, N), 0.0).astype(np.float32)
        got_w, got_loss, arrived = _step(LEARNER)(w, action, delivered, data, weight)
        want_w, want_loss = ref.fl_round(h, e, p, w0, LR, STEPS,
                                         weight=np.where(delivered, weight, 0.0))  # fmt: skip
    else:
        chosen = P_WEIGHTED if learner == "data_size" else LEARNER
        got_w, got_loss, arrived = _step(chosen)(w, action, delivered, data, None)
        draws = list(np.flatnonzero(delivered))
        want_w, want_loss = ref.fl_round(h, e, p, w0, LR, STEPS, draws=draws, aggregation=learner)
    assert int(arrived) == delivered.sum()
    np.testing.assert_allclose(got_w, want_w, **TOL)
    # Every selected client trained (its loss is reported even if its update was lost).
    _, lost_loss = ref.local_training(h[~delivered & action][0], e[~delivered & action][0], w0,
                                      LR, STEPS)  # fmt: skip
    want_loss[~delivered & action] = lost_loss
    np.testing.assert_allclose(got_loss, want_loss, **TOL)
    assert np.all(np.asarray(got_loss)[~action] == 0)


def test_nobody_arriving_keeps_the_model():
    data = instance(0)
    none = np.zeros(N, bool)
    w, loss, arrived = _step(LEARNER)(np.asarray(data.w0), none, none, data, None)
    np.testing.assert_array_equal(w, data.w0)
    assert int(arrived) == 0 and np.all(np.asarray(loss) == 0)


# --------------------------------------------------------------------------- whole runs


def replay(schedule: np.ndarray) -> Policy:
    """A policy that plays ``schedule[t]`` in round t (bool[T, N], or weights f[T, N] returned
    as a ``Selection``)."""
    weighted = schedule.dtype.kind == "f"
    table = jnp.asarray(schedule)

    def init(key, hparams):
        return jnp.zeros((), jnp.int32)

    def select(key, t, obs, hparams):
        row = table[t]
        return Selection(row > 0, row) if weighted else row

    def update(t, obs, action, feedback, hparams):
        return t + 1

    return Policy(init, select, update)


def schedules(seed: int):
    """Random bool selections of 3 clients, and m = 3 draws with replacement as count/m
    weights (a client drawn twice weighs 2/3), for T rounds; their NumPy participant lists."""
    rng = np.random.default_rng(seed)
    masks = np.zeros((T, N), bool)
    weights = np.zeros((T, N), np.float32)
    plain, drawn = [], []
    for t in range(T):
        chosen = rng.choice(N, 3, replace=False)
        masks[t, chosen] = True
        plain.append(sorted(chosen))
        draws = rng.choice(N, 3, replace=True)
        if t == 0:
            draws = np.array([2, 2, 5])  # a client drawn twice, for sure
        np.add.at(weights[t], draws, np.float32(1 / 3))
        drawn.append(list(draws))
    return masks, plain, weights, drawn


@functools.cache
def _env():
    env = RbcsfEnv()
    return env, env.default_params(num_clients=N, p_available=1.0)


def _run(schedule, data):
    env, params = _env()
    run = make_run(env, params, replay(schedule), T, learner=LEARNER, eval_every=1)
    return jax.jit(run)(jax.random.key(0), {"learning_rate": jnp.float32(LR)}, data)


@pytest.mark.parametrize("kind", ["mask", "weights"])
def test_runs_match_a_numpy_loop(kind):
    """The runner drives the learner: every round's gap and training losses are the NumPy
    loop's, for plain averages of the selected clients and for draws with replacement whose
    weights count a client drawn twice twice."""
    data = instance(5)
    h, e, p, w0 = as_float64(data)
    masks, plain, weights, drawn = schedules(5)
    out = _run(masks if kind == "mask" else weights, data)
    gaps, _ = ref.fl_run(h, e, p, w0, LR, STEPS, plain if kind == "mask" else drawn)
    assert out.accuracy is None and out.test_loss is None
    assert out.gap.shape == (T + 1,)
    np.testing.assert_allclose(out.gap, gaps, rtol=1e-4)
    np.testing.assert_array_equal(out.num_delivered, [len(set(x)) for x in drawn]
                                  if kind == "weights" else [3] * T)  # fmt: skip
    np.testing.assert_array_equal(out.untrained, 0)
    assert np.all(np.diff(gaps) < 0)  # every round descends on this instance


def test_the_runs_outputs_declare_the_gap():
    env, _ = _env()
    dims = output_dims(env, learner=LEARNER)
    assert dims["gap"] == ("eval",)
    assert "accuracy" not in dims and "test_loss" not in dims
    names = list(dims)
    assert names.index("num_delivered") < names.index("gap") < names.index("untrained")
    # A learner that declares nothing evaluates accuracy and test loss, as before.
    assert {"accuracy", "test_loss"} <= set(output_dims(env, learner=True))


def test_policies_that_read_what_it_lacks_are_refused():
    get("pow_d").check_learner(LEARNER)
    with pytest.raises(ValueError, match="local_accuracy"):
        get("local_accuracy").check_learner(LEARNER)


@pytest.mark.parametrize(
    "options, match",
    [
        ({"local_steps": 0}, "local_steps"),
        ({"aggregation": "median"}, "aggregation"),
    ],
)
def test_bad_options_are_refused(options, match):
    with pytest.raises(ValueError, match=match):
        make_quadratic_learner(N, **options)


def test_a_learner_must_evaluate_what_it_declares():
    """A learner whose ``evaluate`` returns other names than its ``evaluations`` is refused
    when the run is traced; a declaration that is not per evaluation, at once."""
    env, params = _env()
    masks = schedules(0)[0]
    wrong = LEARNER._replace(evaluations={"distance": EVALUATIONS["gap"]})
    run = make_run(env, params, replay(masks), T, learner=wrong, eval_every=1)
    with pytest.raises(ValueError, match=r"returned \['gap'\], but it declares \['distance'\]"):
        jax.eval_shape(run, jax.random.key(0), {"learning_rate": jnp.float32(LR)}, instance(0))
    scalar = LEARNER._replace(evaluations={"gap": Metric((), "one value", NONNEGATIVE)})
    with pytest.raises(TypeError, match="dims \\('eval',\\)"):
        output_dims(env, learner=scalar)
