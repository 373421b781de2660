"""Oort against the plain NumPy selector (jfl.reference.numpy_oort) round by round, fed the
same Gumbel noise, signals and durations, on many random instances and hyperparameters; then
its pieces one by one: the pacer, ε's decay and floor, the clipping, exploration before
exploitation, edge cases, and its refusals."""

from __future__ import annotations

import functools
import operator
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfl.envs import RbcsfEnv, WirelessEnv
from jfl.envs import rbcsf as rbcsf_env
from jfl.envs import wireless as wireless_env
from jfl.envs.wireless import Feedback, Observation
from jfl.fl import FederatedData, make_learner
from jfl.fl.models import make_model
from jfl.policies import LearnerObservation, get, oort
from jfl.policies._oort import reward_norm
from jfl.reference.numpy_oort import OortNumpy
from jfl.runner import make_run

N, M = 10, 3
ROUNDS = 24
INSTANCES = 64
NAMES = tuple(get("oort").defaults())


def feedback(time):
    """The wireless feedback of clients that took ``time`` (f[..., N]); only ``time`` is read."""
    zero = jnp.zeros(time.shape[:-1], jnp.float32)
    return Feedback(time=time, reward=jnp.zeros_like(time), round_time=zero,
                    set_reward=zero, num_failed=jnp.zeros(time.shape[:-1], jnp.int32))  # fmt: skip


def observation(available, data_size, loss_sq):
    signals = {"data_size": data_size, "local_loss_sq": loss_sq}
    return LearnerObservation(Observation(available), signals)


# One compiled round (select, the Gumbel arrays it drew, update) over a batch of ``INSTANCES``
# runs, shared by every test: each random draw costs about a second to compile on CPU, and in
# one program the regenerated noise is the select's own. The update alone is a second program.
POLICY = oort(N, M)
UPDATE = jax.jit(jax.vmap(POLICY.update))


@jax.jit
@functools.partial(jax.vmap, in_axes=(0, None, 0, 0, 0, 0, 0, 0, None))
def step(seed, t, state, available, data_size, loss_sq, duration, hparams, first):
    """(the state selected from, the selection, the three Gumbel arrays it drew (exploit,
    explore, fill), the state after the update) with round ``t``'s key of run ``seed`` (keys
    made here: no random program outside this one). ``first``: start from ``init``."""
    k_init, k_select = jax.random.split(jax.random.fold_in(jax.random.key(seed), t))
    start = jax.tree.map(
        lambda fresh, given: jnp.where(first, fresh, given), POLICY.init(k_init, hparams), state
    )
    obs = observation(available, data_size, loss_sq)
    chosen = POLICY.select(k_select, start, obs, hparams)
    noise = jnp.stack([jax.random.gumbel(k, (N,)) for k in jax.random.split(k_select, 3)])
    after = POLICY.update(start, obs, chosen, feedback(jnp.where(chosen, duration, 0.0)), hparams)
    return start, chosen, noise, after


def batched(tree):
    return jax.tree.map(lambda a: np.broadcast_to(a, (INSTANCES, *np.shape(a))), tree)


def as_hparams(values):
    return {k: np.asarray(v, np.float32) for k, v in values.items()}


def one(tree):
    return jax.tree.map(lambda a: np.asarray(a[0]), tree)


def placeholder():
    """A batch of states of the right shapes (zeros), for a ``step`` with ``first``."""
    hparams = as_hparams(get("oort").defaults())
    shapes = jax.eval_shape(POLICY.init, jax.random.key(0), hparams)
    return jax.tree.map(lambda s: np.zeros((INSTANCES, *s.shape), s.dtype), shapes)


SEEDS = np.arange(INSTANCES, dtype=np.int32)


def initial(hparams, **fields):
    """``init``'s state for ``hparams`` (one instance), with ``fields`` replaced."""
    ones = np.ones((INSTANCES, N), np.float32)
    start = step(SEEDS, 0, placeholder(), ones > 0, ones, ones, ones,
                 batched(as_hparams(hparams)), True)[0]  # fmt: skip
    state = one(start)
    return state._replace(**{k: np.asarray(v, getattr(state, k).dtype) for k, v in fields.items()})


def update_one(state, available, data_size, loss_sq, action, time, hparams):
    obs = observation(available, data_size, loss_sq)
    args = (state, obs, jnp.asarray(action, bool), feedback(jnp.asarray(time, jnp.float32)))
    return one(UPDATE(*batched((*args, as_hparams(hparams)))))


def select_many(t, state, available, data_size, loss_sq, hparams):
    """``INSTANCES`` selections from ``state`` (one instance), with round ``t``'s keys."""
    inputs = (state, available, data_size, loss_sq, np.ones(N, np.float32), as_hparams(hparams))
    return np.asarray(step(SEEDS, t, *batched(inputs), False)[1])


def random_instances(seed):
    rng = np.random.default_rng(seed)
    shape = (INSTANCES, ROUNDS, N)
    rate = rng.uniform(0.3, 1.0, (INSTANCES, 1, 1))
    available = rng.uniform(size=shape) < rate
    # Sizes on a coarse grid (tied priors), a few clients without data.
    data_size = (10 * rng.integers(0, 5, (INSTANCES, N))).astype(np.float32)
    loss_sq = rng.uniform(0, 4, shape).astype(np.float32)
    loss_sq[rng.uniform(size=shape) < 0.05] = 0.0
    duration = rng.uniform(1, 10, shape).astype(np.float32)
    h = {
        "exploration_factor": rng.uniform(0, 1, INSTANCES),
        "exploration_decay": rng.uniform(0.5, 1, INSTANCES),
        "exploration_min": rng.uniform(0, 0.5, INSTANCES),
        "round_threshold": rng.choice([0, 10, 30, 55, 95, 100], INSTANCES),
        "round_penalty": rng.uniform(0, 3, INSTANCES),
        "clip_bound": rng.choice([0, 0.5, 0.9, 1], INSTANCES),
        "cut_off_util": rng.choice([0, 0.5, 0.95, 1], INSTANCES),
        "pacer_delta": rng.choice([5, 10, 30], INSTANCES),
        "pacer_window": rng.choice([1, 2, 3, 4], INSTANCES),
        "sample_window": rng.choice([1, 1.5, 2, 5], INSTANCES),
        "sample_cap": rng.choice([0, 0, 15], INSTANCES),
    }
    hparams = {k: np.asarray(v, np.float32) for k, v in h.items()}
    for name, value in get("oort").defaults().items():  # every 8th instance: the defaults
        hparams[name][::8] = value
    return hparams, available, data_size, loss_sq, duration


@pytest.mark.parametrize("seed", range(2))
def test_oort_matches_numpy_round_by_round(seed):
    hparams, available, data_size, loss_sq, duration = random_instances(seed)
    hp = as_hparams(hparams)
    state, selected, states, noise = placeholder(), [], [], []
    seeds = SEEDS + INSTANCES * seed
    for t in range(ROUNDS):
        inputs = (available[:, t], data_size, loss_sq[:, t], duration[:, t], hp)
        start, chosen, drawn, state = step(seeds, t, state, *inputs, t == 0)
        if t == 0:
            priority = np.asarray(start.priority)
        selected.append(chosen), states.append(state), noise.append(drawn)
    selected, noise = np.stack(selected, 1), np.stack(noise, 1)
    states = jax.tree.map(lambda *x: np.stack(x, 1), *states)
    for i in range(INSTANCES):
        ref = OortNumpy(N, priority[i], {k: v[i] for k, v in hparams.items()})
        for t in range(ROUNDS):
            where = f"instance {i}, round {t + 1}"
            want = ref.select(noise[i, t], available[i, t], data_size[i], M)
            np.testing.assert_array_equal(selected[i, t], want, err_msg=where)
            assert selected[i, t].sum() == min(M, available[i, t].sum()), where
            assert not np.any(selected[i, t] & ~available[i, t]), where
            ref.update(want, data_size[i], loss_sq[i, t], np.where(want, duration[i, t], 0))
            state = jax.tree.map(operator.itemgetter((i, t)), states)
            explored = [c not in ref.unexplored for c in range(N)]
            np.testing.assert_array_equal(state.explored, explored, err_msg=where)
            np.testing.assert_array_equal(state.count, ref.count, err_msg=where)
            np.testing.assert_array_equal(state.last_round, ref.time_stamp, err_msg=where)
            np.testing.assert_allclose(state.duration, ref.duration, err_msg=where)
            explored = state.explored
            np.testing.assert_allclose(state.utility[explored], np.float32(ref.reward)[explored],
                                       rtol=1e-6, err_msg=where)  # fmt: skip
            assert state.theta == ref.round_threshold, where
            np.testing.assert_allclose(state.epsilon, ref.epsilon, rtol=1e-6, err_msg=where)
    # Covered: the pacer moved θ both ways, ε reached 0 (every client explored) in some runs.
    steps = np.diff(states.theta, axis=1)
    assert (steps > 0).any() and (steps < 0).any()
    assert states.exhausted[:, -1].any() and not states.exhausted[:, 0].any()


# --------------------------------------------------------------------------- the pieces

EVERYONE = np.ones(N, bool)
SIZE, LOSS_SQ = np.full(N, 10.0, np.float32), np.ones(N, np.float32)


@pytest.mark.parametrize(
    ("last", "theta", "want"),
    [
        (20.0, 30.0, 35.0),  # flat: |20 − 20| ≤ 0.1·20, θ up by Δ
        (20.0, 98.0, 100.0),  # … not beyond 100
        (2.0, 30.0, 25.0),  # jump: |20 − 2| ≥ 5·2, θ down by Δ
        (2.0, 7.0, 5.0),  # … not below Δ
        (15.0, 30.0, 30.0),  # neither: θ stays
        (0.0, 30.0, 25.0),  # from nothing to something is a jump
    ],
)
def test_pacer_moves_theta_at_the_end_of_a_window(last, theta, want):
    """W = 2: the update after round 3 closes oort.py's window of entries 3–4 (its check at the
    selection of round 4 = 2W); this round's exploited client adds ≈ 10 to the 10 before."""
    hparams = {**get("oort").defaults(), "pacer_window": 2.0}
    state = initial(hparams, explored=EVERYONE, round=2, theta=theta, window_sum=10.0,
                    last_window_sum=last)  # fmt: skip
    action = np.arange(N) == 4
    after = update_one(state, EVERYONE, SIZE, LOSS_SQ, action, action * 2.0, hparams)
    assert float(after.theta) == want
    # The window closes either way: it becomes the last one, a new one starts.
    np.testing.assert_allclose(after.last_window_sum, 10.0 + 10.0 / 1.0001, rtol=1e-6)
    assert float(after.window_sum) == 0.0
    # Mid-window (round 2, entry 3): no check, the sum accumulates.
    mid = update_one(state._replace(round=np.int32(1)), EVERYONE, SIZE, LOSS_SQ, action,
                     action * 2.0, hparams)  # fmt: skip
    assert float(mid.theta) == theta and float(mid.last_window_sum) == last
    np.testing.assert_allclose(mid.window_sum, 10.0 + 10.0 / 1.0001, rtol=1e-6)


def test_epsilon_decays_to_its_floor_then_zero_once_all_are_explored():
    hparams = get("oort").defaults()
    state, nobody = initial(hparams), np.zeros(N, bool)
    seen = []
    for _ in range(70):
        state = update_one(state, EVERYONE, SIZE, LOSS_SQ, nobody, nobody * 1.0, hparams)
        seen.append(float(state.epsilon))
    want = np.maximum(0.9 * 0.98 ** np.arange(1, 71), 0.3)
    np.testing.assert_allclose(seen, want, rtol=1e-5)
    assert seen[-1] == pytest.approx(0.3)
    # A round that starts with every client explored sets ε and its floor to 0 from the next.
    state = update_one(state._replace(explored=EVERYONE), EVERYONE, SIZE, LOSS_SQ, nobody,
                       nobody * 1.0, hparams)  # fmt: skip
    assert float(state.epsilon) == pytest.approx(0.3) and bool(state.exhausted)
    state = update_one(state, EVERYONE, SIZE, LOSS_SQ, nobody, nobody * 1.0, hparams)
    assert float(state.epsilon) == 0.0


def test_reward_norm_clips_at_the_quantile():
    """oort.py's get_norm: clip = sorted[min(int(n·q), n − 1)], min × 0.999, range from the max."""
    reward = np.arange(1.0, 11.0, dtype=np.float32)
    for q, mask, clip_at, top in [(0.5, 10, 6, 10), (0.9, 10, 10, 10), (0.0, 10, 1, 10),
                                  (1.0, 10, 10, 10), (0.9, 3, 3, 3)]:  # fmt: skip
        clip, low, spread = jax.jit(reward_norm)(reward, np.arange(10) < mask, np.float32(q))
        assert float(clip) == clip_at
        assert float(low) == pytest.approx(0.999) and float(spread) == pytest.approx(top - 0.999)
    clip, low, spread = jax.jit(reward_norm)(reward, np.zeros(10, bool), np.float32(0.9))
    assert (float(clip), float(low), float(spread)) == (0.0, 0.0, pytest.approx(1e-4))


def test_clipping_ties_the_outliers():
    """Clipped at the median, the clients above it score alike: with a cut-off of 1, nothing
    else unexplored and ε = 0, the m picks are among the clients at the clip."""
    hparams = {**get("oort").defaults(), "clip_bound": 0.5, "cut_off_util": 1.0,
               "exploration_factor": 0.0, "exploration_min": 0.0,
               "round_threshold": 100.0}  # fmt: skip
    utility = np.arange(1.0, N + 1) ** 3  # 1 … 1000: clip = sorted[5] = 216
    state = initial(hparams, explored=EVERYONE, utility=utility, last_round=np.ones(N), round=1,
                    duration=np.ones(N))  # fmt: skip
    chosen = select_many(1, state, EVERYONE, SIZE, LOSS_SQ, hparams)
    counts = chosen.sum(axis=0)
    assert counts[:5].sum() == 0 and np.all(counts[5:] > INSTANCES * M / 5 / 2), counts


def test_unexplored_clients_come_first_and_by_prior():
    """ε stays 0.9 (m(1 − ε) < 1: nothing exploited) with a window of 1: each round takes the
    unexplored clients with the largest data sizes, until none is left."""
    hparams = {**get("oort").defaults(), "exploration_decay": 1.0, "exploration_min": 0.9,
               "sample_window": 1.0}  # fmt: skip
    size = np.arange(1.0, N + 1, dtype=np.float32) * 10
    state = initial(hparams)
    for t in range(5):
        chosen = select_many(t, state, EVERYONE, size, LOSS_SQ, hparams)[0]
        if t < 3:  # the three largest unexplored
            np.testing.assert_array_equal(np.flatnonzero(chosen), N - 3 * t - np.arange(3, 0, -1))
        if t == 3:  # the last one unexplored, and two others
            assert chosen[0] and chosen.sum() == M
        state = update_one(state, EVERYONE, size, LOSS_SQ, chosen, chosen * 1.0, hparams)
    assert state.explored.all() and state.count.sum() == 5 * M


def test_fewer_available_than_m_and_none_available():
    hparams = get("oort").defaults()
    state = initial(hparams)
    for available in (np.arange(N) < 2, np.zeros(N, bool)):
        chosen = select_many(3, state, available, SIZE, LOSS_SQ, hparams)
        np.testing.assert_array_equal(chosen, np.broadcast_to(available, chosen.shape))
    nobody = np.zeros(N, bool)
    after = update_one(state, nobody, SIZE, LOSS_SQ, nobody, nobody * 1.0, hparams)
    assert not after.explored.any() and int(after.round) == 1


def test_registry_entry_and_refusals():
    spec = get("oort")
    assert spec.requires == ("available", "time", "data_size", "local_loss_sq")
    assert spec.signals == ("data_size", "local_loss_sq")
    defaults = spec.defaults()
    assert defaults["exploration_factor"] == 0.9 and defaults["exploration_decay"] == 0.98
    assert defaults["exploration_min"] == 0.3 and defaults["round_threshold"] == 30.0
    assert defaults["round_penalty"] == 2.0 and defaults["clip_bound"] == 0.9
    assert defaults["pacer_delta"] == 5.0 and defaults["pacer_window"] == 20.0
    spec.check_environment(RbcsfEnv())
    spec.check_environment(WirelessEnv())
    no_time = SimpleNamespace(name="static", provides=("available",))
    with pytest.raises(ValueError, match=r"^policy 'oort' reads \['time'\], which environment "
                                         r"'static' does not provide$"):  # fmt: skip
        spec.check_environment(no_time)
    with pytest.raises(ValueError, match="only a federated learner computes"):
        make_run(RbcsfEnv(), RbcsfEnv().default_params(num_clients=N), oort(N, M), 5)
    with pytest.raises(ValueError, match="round_penalty"):
        spec.validate({"round_penalty": -1.0})


@pytest.mark.parametrize(
    "env, params",
    [(RbcsfEnv(), rbcsf_env.make_params(N)), (WirelessEnv(), wireless_env.make_params(N))],
)
def test_runner_hands_oort_its_signals_and_durations(env, params):
    """A federated run traces (``eval_shape``: nothing compiles) with the learner's
    ``data_size`` and ``local_loss_sq`` before each selection and the environment's ``time`` in
    the update's feedback."""
    rng = np.random.default_rng(0)
    samples = 6
    count = rng.integers(1, samples + 1, (1, N)).astype(np.int32)
    data = FederatedData(
        x=rng.normal(size=(1, N, samples, 2, 2, 1)).astype(np.float32),
        y=rng.integers(0, 3, (1, N, samples)).astype(np.int32),
        mask=np.arange(samples) < count[..., None],
        count=count,
        x_test=np.zeros((4, 2, 2, 1), np.float32),
        y_test=np.zeros(4, np.int32),
    )
    learner = make_learner(make_model("logistic", 3), (2, 2, 1), N, slots=M)
    get("oort").check_environment(env)
    run = make_run(env, params, oort(N, M), 3, learner=learner, trajectories=True)
    hparams = {**get("oort").defaults(), "learning_rate": 0.1, "partition": 0}
    out = jax.eval_shape(run, jax.random.key(0), hparams, data)
    assert out.arrays()["selected"].shape == (3, N)
