"""The hfl environment (COCS §III, §VI) against the NumPy reference and closed forms.

Deterministic parts are compared on identical raw draws (float32 in JAX, float64 in NumPy).
Statistical checks use fixed keys and tolerances of 5 standard errors computed from the sample
sizes (binomial for frequencies, the sample variance of per-round means otherwise).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from jfl.envs.hfl import (
    PRESETS,
    HflEnv,
    HflState,
    Observation,
    download_rate,
    make_params,
    pair_times,
    preset_params,
    success_now,
    success_probability,
    success_probability_context,
)
from jfl.reference.numpy_hfl import (
    PAPER_PRESETS,
    HflDraws,
    context_success_probability_numpy,
    download_rate_numpy,
    hfl_numpy_draws,
    pair_times_numpy,
    round_feedback_numpy,
    snr_numpy,
    success_numpy,
    success_probability_numpy,
)

ENV = HflEnv()
BATCH = 1000  # rounds, runs or states per batched check; one batch size keeps compilations few
NUM_MC = 20_000  # uplink-fading samples per state in the oracle check

# Jitted once and reused: every call below with the default shapes (N = 50, M = 3, D = 2) hits
# the same compiled programs, whichever preset or p_cover (traced leaves of the params).
RESET = jax.jit(ENV.reset)
STEP = jax.jit(ENV.step)
RESET_MANY = jax.jit(jax.vmap(ENV.reset, in_axes=(0, None)))
STEP_MANY = jax.jit(jax.vmap(ENV.step, in_axes=(0, 0, 0, None)))
PAIR_TIMES = jax.jit(pair_times)
SUCCESS_PROBABILITY = jax.jit(success_probability)
OBSERVATION = jax.jit(ENV.observation)
DOWNLOAD_RATE = jax.jit(download_rate)
SUCCESS_NOW = jax.jit(success_now)
CONTEXT_PROBABILITY = jax.jit(success_probability_context)
PAIR_FIELDS = ("distance", "shadowing_db", "fading_down", "fading_up", "bandwidth", "computation")
# Relative error of a float32 τ: the SNR exponent sums four dB terms of magnitude < 256, each
# float32 operation off by at most 2^-24·256 = 1.5e-5 dB, so ≤ 8e-5 dB with the log10; that is
# ≤ 1.9e-5 relative on the linear SNR (× ln10/10), which bounds the relative error of
# log2(1 + snr g) and hence of τ (a sum of positive terms). A few ulp more round it to 2e-5.
F32_TIME_RTOL = 2e-5


def five_se(p, n):
    """5 binomial standard errors of a frequency estimating ``p`` from ``n`` draws."""
    return 5.0 * np.sqrt(np.asarray(p) * (1.0 - np.asarray(p)) / n)


def channel(params):
    """The NumPy reference's channel keywords for ``params``."""
    return {
        "tx_power_dbm": params.tx_power_dbm,
        "noise_psd_dbm_hz": params.noise_psd_dbm_hz,
        "path_loss_intercept": params.path_loss_intercept,
        "path_loss_slope": params.path_loss_slope,
    }


def physics(params):
    """Model size, workload and deadline of ``params`` as reference keywords, channel included."""
    return {
        "model_size": params.model_size,
        "workload": params.workload,
        "deadline": params.deadline,
        **channel(params),
    }


def draw_kwargs(params):
    """``hfl_numpy_draws`` keywords for ``params``."""
    return {
        "p_cover": params.p_cover,
        "distance_range": (params.distance_low, params.distance_high),
        "shadowing_std_db": params.shadowing_std_db,
        "bandwidth_range": (params.bandwidth_low, params.bandwidth_high),
        "computation_range": (params.computation_low, params.computation_high),
    }


def f32_draws(rng, params, num_rounds):
    """Reference draws rounded to float32, so JAX and NumPy see identical inputs."""
    draws = hfl_numpy_draws(
        rng, params.num_clients, params.num_servers, num_rounds=num_rounds, **draw_kwargs(params)
    )
    return HflDraws(draws.coverage, *(np.asarray(x, np.float32).astype(float) for x in draws[1:]))


def state_from_draws(draws, price):
    """An HflState holding the reference draws (float32)."""
    return HflState(
        price=jnp.asarray(price, jnp.float32),
        coverage=jnp.asarray(draws.coverage),
        distance=jnp.asarray(draws.distance, jnp.float32),
        shadowing_db=jnp.asarray(draws.shadowing_db, jnp.float32),
        fading_down=jnp.asarray(draws.fading_down, jnp.float32),
        fading_up=jnp.asarray(draws.fading_up, jnp.float32),
        bandwidth=jnp.asarray(draws.bandwidth, jnp.float32),
        computation=jnp.asarray(draws.computation, jnp.float32),
        t=jnp.asarray(0, jnp.int32),
    )


# --------------------------------------------------------------------------------------------
# parameters
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"num_clients": 0}, "num_clients"),
        ({"num_clients": 2.5}, "num_clients"),
        ({"num_servers": 0}, r"num_servers must be in \[1, N\]"),
        ({"num_clients": 4, "num_servers": 5}, r"num_servers must be in \[1, N\]"),
        ({"budget": 0.0}, "budget"),
        ({"budget": -1.0}, "budget"),
        ({"budget": (1.0, 2.0)}, "budget"),
        ({"budget": (1.0, 0.0, 2.0)}, "budget"),
        ({"price_range": (0.0, 2.0)}, "price_range"),
        ({"price_range": (1.0, 0.5)}, "price_range"),
        ({"p_cover": 1.5}, "p_cover"),
        ({"p_cover": -0.1}, "p_cover"),
        ({"deadline": 0.0}, "deadline"),
        ({"deadline": -3.0}, "deadline"),
        ({"distance_range": (2.0, 0.05)}, "distance_range"),
        ({"distance_range": (0.0, 2.0)}, "distance_range"),
        ({"bandwidth_range": (1.0, 0.3)}, "bandwidth_range"),
        ({"computation_range": (4.0, 2.0)}, "computation_range"),
        ({"computation_range": (-1.0, 2.0)}, "computation_range"),
        ({"context_dim": 3}, "context_dim"),
        ({"shadowing_std_db": -1.0}, "shadowing_std_db"),
        ({"model_size": 0.0}, "model_size"),
        ({"workload": -1.0}, "workload"),
        ({"tx_power_dbm": np.inf}, "tx_power_dbm"),
        ({"noise_psd_dbm_hz": np.nan}, "noise_psd_dbm_hz"),
        ({"rate_range": (5.0, 1.0)}, "rate_range"),
    ],
)
def test_make_params_rejects_bad_input(kwargs, name):
    """make_params raises ValueError naming the offending parameter and its allowed range."""
    with pytest.raises(ValueError, match=name):
        make_params(**kwargs)


def test_presets_match_table_one():
    """The presets hold Table I's values (N = 50, M = 3, prices U[0.5, 2]), make_params's defaults
    the MNIST one; unknown names fail."""
    for name, table in PAPER_PRESETS.items():
        params = preset_params(name)
        assert (params.num_clients, params.num_servers, params.context_dim) == (50, 3, 2)
        assert (params.price_low, params.price_high, params.p_cover) == (0.5, 2.0, 1.0)
        assert (params.distance_low, params.distance_high) == (0.05, 2.0)
        assert (params.shadowing_std_db, params.tx_power_dbm, params.noise_psd_dbm_hz) == (
            8.0,
            23.0,
            -174.0,
        )
        assert (params.path_loss_intercept, params.path_loss_slope) == (128.1, 37.6)
        assert (params.bandwidth_low, params.bandwidth_high) == table["bandwidth_range"]
        assert (params.computation_low, params.computation_high) == table["computation_range"]
        for key in ("model_size", "workload", "deadline", "budget"):
            assert getattr(params, key) == table[key], (name, key)
        assert ENV.default_params(name) == params
        assert 0.0 <= params.rate_low < params.rate_high
    assert set(PRESETS) == {"mnist", "cifar"}
    assert make_params() == preset_params("mnist")  # the defaults are the MNIST setting
    assert preset_params("mnist", num_servers=5, p_cover=0.5).num_servers == 5
    with pytest.raises(ValueError, match="preset"):
        preset_params("nope")


# --------------------------------------------------------------------------------------------
# deterministic parts against the reference
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", ["mnist", "cifar"])
def test_pair_times_and_success_match_reference(preset):
    """pair_times (float32) equals pair_times_numpy (float64) on identical draws within
    F32_TIME_RTOL, and X = coverage & τ ≤ deadline agrees away from the deadline."""
    params = preset_params(preset, p_cover=0.7)
    draws = f32_draws(np.random.default_rng(1), params, BATCH)
    state = state_from_draws(draws, np.ones(params.num_clients))
    got = np.asarray(PAIR_TIMES(*(getattr(state, f) for f in PAIR_FIELDS), params), float)
    ref = pair_times_numpy(
        *draws[1:], model_size=params.model_size, workload=params.workload, **channel(params)
    )
    np.testing.assert_allclose(got, ref, rtol=F32_TIME_RTOL)
    want = success_numpy(draws, **physics(params))
    clear = np.abs(ref - params.deadline) > F32_TIME_RTOL * params.deadline
    assert clear.mean() > 0.999
    got_success = draws.coverage & (got <= np.float32(params.deadline))
    np.testing.assert_array_equal(got_success[clear], want[clear])
    assert 0.05 < want.mean() < 0.95  # both outcomes occur


def probability_tolerance(draws, params):
    """First-order bound on the float32 error of the closed-form probability, per pair.

    ``P = exp(−E)``, ``E = (2^c − 1)/snr``, ``c = a/(b·slack)``: ``|δP| ≤ P·E·|δE/E|`` with
    ``|δE/E| ≤ ρ + c ln2 · 2^c/(2^c − 1) · |δslack/slack|`` and ``|δslack| ≤ ρ·deadline`` (the
    times entering the slack are below the deadline), ρ = F32_TIME_RTOL; plus 1e-7 absolute.
    """
    b = draws.bandwidth[..., None]
    snr = snr_numpy(draws.distance, draws.shadowing_db, b, **channel(params))
    a = params.model_size
    rate = b * np.log2(1.0 + snr * draws.fading_down)
    slack = params.deadline - a / rate - params.workload / draws.computation[..., None]
    ok = (slack > 0) & draws.coverage
    slack = np.where(ok, slack, 1.0)
    c = a / (b * slack)
    with np.errstate(over="ignore", invalid="ignore"):
        exponent = np.expm1(c * math.log(2.0)) / snr
        gain = 1.0 + c * math.log(2.0) / -np.expm1(-c * math.log(2.0)) * params.deadline / slack
        bound = np.exp(-exponent) * exponent * gain * F32_TIME_RTOL
    return np.where(ok & np.isfinite(bound), bound, 0.0) + 1e-7


@pytest.mark.parametrize("preset", ["mnist", "cifar"])
def test_success_probability_matches_reference(preset):
    """success_probability (float32) equals the float64 closed form on identical draws within
    the first-order float32 error bound, and is 0 out of coverage."""
    params = preset_params(preset, p_cover=0.7)
    draws = f32_draws(np.random.default_rng(2), params, BATCH)
    state = state_from_draws(draws, np.ones(params.num_clients))
    got = np.asarray(SUCCESS_PROBABILITY(state, params), float)
    want = success_probability_numpy(draws, **physics(params))
    excess = np.abs(got - want) - probability_tolerance(draws, params)
    assert np.all(excess <= 0), np.max(excess)
    np.testing.assert_array_equal(got[~draws.coverage], 0.0)
    assert np.all((got >= 0) & (got <= 1))
    assert 0.05 < np.mean((want > 0.01) & (want < 0.99))  # intermediate values are common


# --------------------------------------------------------------------------------------------
# statistics
# --------------------------------------------------------------------------------------------


@jax.jit
def uplink_monte_carlo(key, state, params):
    """Frequency of X of every pair over NUM_MC fresh uplink fadings of ``state``."""
    fades = jax.random.exponential(key, (NUM_MC, *state.fading_up.shape), jnp.float32)

    def one(g):
        s = state.replace(fading_up=g)
        return s.coverage & (
            pair_times(*(getattr(s, f) for f in PAIR_FIELDS), params) <= params.deadline
        )

    return jax.vmap(one)(fades).mean(axis=0)


@pytest.mark.parametrize("preset", ["mnist", "cifar"])
def test_oracle_matches_uplink_monte_carlo(preset):
    """Given one state, the frequency of X over 20000 fresh uplink fadings matches
    obs.success_prob within 5 binomial standard errors plus one count (env.step's X is
    pair_times ≤ deadline: test_step_feedback_matches_reference)."""
    params = preset_params(preset, p_cover=0.8)
    obs, state = RESET(jax.random.key(10), params)
    freq = np.asarray(uplink_monte_carlo(jax.random.key(11), state, params), float)
    p = np.asarray(obs.success_prob, float)
    tol = five_se(p, NUM_MC) + 1.0 / NUM_MC
    assert np.all(np.abs(freq - p) <= tol), np.max(np.abs(freq - p) - tol)
    np.testing.assert_array_equal(freq[~np.asarray(obs.available)], 0.0)
    assert np.sum((p > 0.02) & (p < 0.98)) >= 5  # the check is not only on 0s and 1s


@pytest.mark.parametrize("preset", ["mnist", "cifar"])
def test_unconditional_success_rate_matches_numpy_sample(preset):
    """The success rate of all pairs over 1000 env rounds (reset states) equals that of 1000
    independent NumPy rounds within 5 standard errors of the difference of per-round means; the
    mean oracle probability equals the env's own success rate (E[X − p] = 0) within 5 SE."""
    params = preset_params(preset, p_cover=0.6)
    obs, state = RESET_MANY(jax.random.split(jax.random.key(20), BATCH), params)
    tau = np.asarray(PAIR_TIMES(*(getattr(state, f) for f in PAIR_FIELDS), params), float)
    x_env = np.asarray(state.coverage) & (tau <= params.deadline)
    p_env = np.asarray(obs.success_prob, float)
    draws = hfl_numpy_draws(
        np.random.default_rng(21),
        params.num_clients,
        params.num_servers,
        num_rounds=BATCH,
        **draw_kwargs(params),
    )
    x_np = success_numpy(draws, **physics(params))
    per_env, per_np = x_env.mean(axis=(1, 2)), x_np.mean(axis=(1, 2))
    se = math.sqrt((per_env.var(ddof=1) + per_np.var(ddof=1)) / BATCH)
    assert abs(per_env.mean() - per_np.mean()) <= 5 * se, (per_env.mean(), per_np.mean(), se)
    resid = (x_env - p_env).mean(axis=(1, 2))
    assert abs(resid.mean()) <= 5 * resid.std(ddof=1) / math.sqrt(BATCH)
    assert 0.2 < per_np.mean() < 0.6  # p_cover 0.6 times a success rate well inside (0, 1)


@pytest.fixture(scope="module")
def sample():
    """1000 reset states and the 1000 states after one step (nobody selected), p_cover = 0.3."""
    params = make_params(p_cover=0.3)
    obs, states = RESET_MANY(jax.random.split(jax.random.key(30), BATCH), params)
    nobody = np.zeros((BATCH, params.num_clients, params.num_servers), bool)
    keys = jax.random.split(jax.random.key(31), BATCH)
    next_obs, next_states, _ = STEP_MANY(keys, states, nobody, params)
    return params, jax.tree.map(np.asarray, (obs, states, next_obs, next_states))


def test_round_conditions_distributions(sample):
    """Drawn at reset and at step: coverage frequency ≈ p_cover (binomial 5 SE), available =
    coverage; d, b, y uniform on their ranges, shadowing N(0, 8²) dB, fading Exp(1) both ways
    and uncorrelated (means, shadowing std and correlation within 5 SE); conditions are redrawn
    every round; p_cover = 0 and 1 give no and full coverage."""
    params, (obs, states, next_obs, next_states) = sample
    for o, state in ((obs, states), (next_obs, next_states)):
        assert abs(state.coverage.mean() - 0.3) <= five_se(0.3, state.coverage.size)
        np.testing.assert_array_equal(o.available, state.coverage)

        def uniform_ok(x, low, high):
            x = x.astype(float)
            assert x.min() >= low and x.max() <= high
            se = (high - low) / math.sqrt(12 * x.size)
            assert abs(x.mean() - (low + high) / 2) <= 5 * se

        uniform_ok(state.distance, params.distance_low, params.distance_high)
        uniform_ok(state.bandwidth, params.bandwidth_low, params.bandwidth_high)
        uniform_ok(state.computation, params.computation_low, params.computation_high)
        s = state.shadowing_db.astype(float)
        sigma = params.shadowing_std_db
        assert abs(s.mean()) <= 5 * sigma / math.sqrt(s.size)
        assert abs(s.std() - sigma) <= 5 * sigma / math.sqrt(2 * s.size)
        for fading in (state.fading_down, state.fading_up):
            assert fading.min() > 0 and np.all(np.isfinite(fading))
            assert abs(fading.mean() - 1.0) <= 5 / math.sqrt(fading.size)
        corr = np.corrcoef(state.fading_down.ravel(), state.fading_up.ravel())[0, 1]
        assert abs(corr) <= 5 / math.sqrt(state.fading_up.size)
    for name in PAIR_FIELDS:  # mobility: everything is redrawn
        assert np.mean(getattr(states, name) == getattr(next_states, name)) < 1e-3, name
    obs0, state0 = RESET(jax.random.key(31), make_params(p_cover=0.0))
    assert not np.asarray(state0.coverage).any()
    np.testing.assert_array_equal(np.asarray(obs0.success_prob), 0.0)
    np.testing.assert_array_equal(np.asarray(obs0.context), 0.0)
    assert np.asarray(RESET(jax.random.key(31), make_params())[1].coverage).all()


def test_prices_fixed_per_run_and_costs(sample):
    """Prices are drawn once per run in [0.5, 2] (mean within 5 SE over 1000 runs) and stay
    fixed over 20 rounds while t counts them; cost = price × computation; the budget broadcasts
    to f[M] (a scalar or one per ES)."""
    params, (obs, states, next_obs, next_states) = sample
    price = states.price.astype(float)
    assert price.min() >= 0.5 and price.max() <= 2.0
    assert abs(price.mean() - 1.25) <= 5 * 1.5 / math.sqrt(12 * price.size)
    np.testing.assert_array_equal(next_states.price, states.price)
    np.testing.assert_array_equal(next_states.t, 1)
    for o, state in ((obs, states), (next_obs, next_states)):
        np.testing.assert_allclose(o.cost, state.price * state.computation, rtol=1e-7)
        np.testing.assert_array_equal(o.budget, 3.5)
    _, state = RESET(jax.random.key(32), params)
    first = np.asarray(state.price)
    nobody = np.zeros((params.num_clients, params.num_servers), bool)
    for t, key in enumerate(jax.random.split(jax.random.key(33), 20), start=1):
        _, state, _ = STEP(key, state, nobody, params)
        np.testing.assert_array_equal(np.asarray(state.price), first)
        assert int(state.t) == t
    per_server = make_params(budget=(1.0, 2.0, 3.0))
    np.testing.assert_array_equal(
        np.asarray(OBSERVATION(state, per_server).budget), [1.0, 2.0, 3.0]
    )


@pytest.mark.parametrize("context_dim", [2, 4])
def test_context_scaling(context_dim):
    """Contexts lie in [0, 1], are 0 out of coverage and equal the min-max scaled reference
    download rate and y (and b, d for D = 4)."""
    params = make_params(p_cover=0.8, context_dim=context_dim)
    _, state = RESET_MANY(jax.random.split(jax.random.key(50), BATCH), make_params(p_cover=0.8))
    context = np.asarray(jax.vmap(OBSERVATION, in_axes=(0, None))(state, params).context, float)
    cover = np.asarray(state.coverage)
    assert context.shape == (BATCH, 50, 3, context_dim)
    assert context.min() >= 0.0 and context.max() <= 1.0
    np.testing.assert_array_equal(context[~cover], 0.0)
    draws = HflDraws(cover, *(np.asarray(getattr(state, f), float) for f in PAIR_FIELDS))
    rate = download_rate_numpy(draws, **channel(params))
    got_rate = DOWNLOAD_RATE(
        state.distance, state.shadowing_db, state.fading_down, state.bandwidth, params
    )
    np.testing.assert_allclose(np.asarray(got_rate), rate, rtol=F32_TIME_RTOL)
    lo, hi = params.rate_low, params.rate_high
    want = [np.clip((rate - lo) / (hi - lo), 0, 1)]
    columns = [("computation", params.computation_low, params.computation_high)]
    if context_dim == 4:
        columns.append(("bandwidth", params.bandwidth_low, params.bandwidth_high))
    for name, low, high in columns:
        want.append(
            np.broadcast_to(((getattr(draws, name) - low) / (high - low))[..., None], cover.shape)
        )
    if context_dim == 4:
        want.append(
            (draws.distance - params.distance_low) / (params.distance_high - params.distance_low)
        )
    for column, expected in enumerate(want):
        np.testing.assert_allclose(
            context[..., column][cover], expected[cover], rtol=F32_TIME_RTOL, atol=1e-6
        )


def test_context_monotone_in_rate_and_computation():
    """With everything else fixed, the rate context grows with the download fading (the rate)
    and the y context with the computation; both span [0, 1] and the rate bounds are reached."""
    params = make_params()
    _, state = RESET(jax.random.key(55), params)
    n = params.num_clients
    # the inputs are data: NumPy builds them without compiling a program per operation
    grid = np.geomspace(1e-15, 1e3, n, dtype=np.float32)[:, None] * np.ones((1, 3), np.float32)
    ramp = np.linspace(params.computation_low, params.computation_high, n, dtype=np.float32)
    fixed = state.replace(
        coverage=np.ones((n, 3), bool),
        distance=np.full((n, 3), 0.05, np.float32),
        shadowing_db=np.full((n, 3), 24.0, np.float32),
        fading_down=grid,
        bandwidth=np.full(n, params.bandwidth_high, np.float32),
        computation=ramp,
    )
    # a budget per ES, which the contexts ignore: the observation program the prices test compiles
    per_server = make_params(budget=(1.0, 2.0, 3.0))
    context = np.asarray(OBSERVATION(fixed, per_server).context)
    assert np.all(np.diff(context[..., 0], axis=0) >= 0) and np.all(np.diff(ramp) > 0)
    assert np.all(np.diff(context[..., 1], axis=0) > 0)
    assert context[0, 0, 0] < 1e-3 and context[-1, 0, 0] == 1.0  # the rate bound is reached
    np.testing.assert_allclose(context[[0, -1], 0, 1], [0.0, 1.0], atol=1e-6)


# --------------------------------------------------------------------------------------------
# feedback, vectorisation
# --------------------------------------------------------------------------------------------


def random_assignments(rng, coverage, p_select=0.6):
    """Each client picks one covered ES uniformly w.p. ``p_select``, else none; bool[..., N, M]."""
    scores = rng.random(coverage.shape) * coverage
    best = scores.argmax(axis=-1)
    action = np.zeros(coverage.shape, bool)
    np.put_along_axis(action, best[..., None], True, axis=-1)
    keep = (rng.random(coverage.shape[:-1]) < p_select) & coverage.any(axis=-1)
    return action & keep[..., None] & coverage


def test_step_feedback_matches_reference():
    """Over 1000 random states and valid actions: success only on selected pairs, equal to the
    reference X (away from the deadline); time = τ of the selected pair (0 otherwise);
    round_time = max min(τ, deadline) over the selected (0 if none); utility = ΣX/M;
    num_success = ΣX; the declared round metrics are utility and num_success; t advances, price
    stays."""
    params = preset_params("cifar", p_cover=0.7)
    rng = np.random.default_rng(60)
    _, states = RESET_MANY(jax.random.split(jax.random.key(61), BATCH), params)
    coverage = np.asarray(states.coverage)
    actions = random_assignments(rng, coverage)
    actions[::10] = False  # rounds with nobody selected
    keys = jax.random.split(jax.random.key(62), BATCH)
    _, next_states, fb = STEP_MANY(keys, states, actions, params)
    fb = jax.tree.map(np.asarray, fb)
    draws = HflDraws(coverage, *(np.asarray(getattr(states, f), float) for f in PAIR_FIELDS))
    tau = pair_times_numpy(
        *draws[1:], model_size=params.model_size, workload=params.workload, **channel(params)
    )
    clear = np.abs(tau - params.deadline) > F32_TIME_RTOL * params.deadline
    assert not np.any(fb.success & ~actions)
    for i in range(BATCH):
        want = round_feedback_numpy(actions[i], tau[i], coverage[i], params.deadline)
        np.testing.assert_array_equal(fb.success[i][clear[i]], want["success"][clear[i]])
        np.testing.assert_allclose(fb.time[i], want["time"], rtol=F32_TIME_RTOL)
        np.testing.assert_allclose(fb.round_time[i], want["round_time"], rtol=F32_TIME_RTOL)
    np.testing.assert_array_equal(fb.num_success, fb.success.sum(axis=(1, 2)))
    np.testing.assert_allclose(fb.utility, fb.success.sum(axis=(1, 2)) / 3, rtol=1e-7)
    np.testing.assert_array_equal(fb.time[~actions.any(axis=-1)], 0.0)
    np.testing.assert_array_equal(fb.round_time[::10], 0.0)
    capped = np.where(actions, np.minimum(fb.time[..., None], np.float32(params.deadline)), 0)
    np.testing.assert_array_equal(fb.round_time, capped.max(axis=(1, 2)))
    assert 0 < fb.success.sum() < actions.sum()
    np.testing.assert_array_equal(np.asarray(next_states.t), 1)
    np.testing.assert_array_equal(np.asarray(next_states.price), np.asarray(states.price))
    one = jax.tree.map(lambda x: x[1], fb)
    metrics = ENV.compute_round_metrics(one)
    assert list(metrics) == list(ENV.round_metrics) == ["utility", "num_success"]
    assert float(metrics["utility"]) == float(one.utility)
    assert int(metrics["num_success"]) == int(one.num_success)
    # The observation's `available` is provided as `available_pairs`: per (client, ES) pair.
    pairs = set(Observation._fields) - {"available"} | {"available_pairs"}
    assert set(ENV.provides) == set(fb._fields) | pairs


def test_selection_out_of_coverage_fails():
    """A pair selected out of coverage never succeeds; its time is +inf and the round time is
    capped at the deadline."""
    params = make_params(p_cover=0.0)
    _, state = RESET(jax.random.key(70), params)
    action = np.zeros((50, 3), bool)
    action[0, 1] = True
    _, _, fb = STEP(jax.random.key(71), state, action, params)
    assert not np.asarray(fb.success).any() and int(fb.num_success) == 0
    assert np.isinf(float(fb.time[0])) and float(fb.round_time) == params.deadline


@jax.jit
@jax.vmap
def per_config(budget, deadline):
    """Reset and one step of fixed seeds with budget and deadline traced per configuration."""
    params = make_params().replace(budget=budget, deadline=deadline)
    obs, state = ENV.reset(jax.random.key(82), params)
    action = jnp.zeros((50, 3), bool).at[:, 0].set(True)
    _, _, fb = ENV.step(jax.random.key(83), state, action, params)
    now = jnp.sum(action & obs.success_now, dtype=jnp.int32)
    return obs.budget, obs.success_prob, fb.num_success, obs.success_prob_context, now


def test_jit_vmap_over_seeds_and_traced_hyperparameters():
    """reset/step vmapped over seeds equal the unbatched calls; budget and deadline can be traced
    per configuration (params.replace inside vmap): the observed budget follows, a longer
    deadline never lowers the oracle probabilities (success_prob, p(φ)) or the successes, the
    step's successes are those success_now announced, and p(φ) with a traced deadline equals
    p(φ) with that deadline given as a number."""
    params = make_params()
    keys = jax.random.split(jax.random.key(80), BATCH)
    step_keys = jax.random.split(jax.random.key(81), BATCH)
    action = np.zeros((BATCH, 50, 3), bool)
    action[:, :, 0] = True
    obs_b, state_b = RESET_MANY(keys, params)
    _, next_b, fb_b = STEP_MANY(step_keys, state_b, action, params)
    for i in (0, BATCH - 1):
        obs, state = RESET(keys[i], params)
        _, nxt, fb = STEP(step_keys[i], state, action[i], params)
        for got, want in ((obs_b, obs), (next_b, nxt), (fb_b, fb)):
            jax.tree.map(
                lambda a, b, i=i: np.testing.assert_allclose(np.asarray(a)[i], b, rtol=1e-6),
                got,
                want,
            )
    budgets = jnp.array([2.0, 3.5, 5.0, 10.0])
    deadlines = jnp.array([1.0, 2.0, 3.0, 8.0])
    budget, prob, num_success, prob_context, now = (
        np.asarray(x) for x in per_config(budgets, deadlines)
    )
    np.testing.assert_array_equal(budget, np.broadcast_to(np.asarray(budgets)[:, None], (4, 3)))
    assert np.all(np.diff(prob, axis=0) >= 0) and np.all(np.diff(num_success) >= 0)
    assert prob[0].mean() < prob[-1].mean()
    assert np.all(np.diff(prob_context, axis=0) >= 0)
    assert prob_context[0].mean() < prob_context[-1].mean()
    np.testing.assert_array_equal(now, num_success)
    for i in (0, 3):  # the traced deadline gives what a concrete one gives, to float32 rounding
        params = make_params(deadline=float(deadlines[i]))
        obs, _ = RESET(jax.random.key(82), params)
        np.testing.assert_allclose(obs.success_prob_context, prob_context[i], atol=1e-5)


# --------------------------------------------------------------------------------------------
# the oracles' information: this round's X (success_now) and p(φ) = E[X | φ]
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", ["mnist", "cifar"])
def test_success_now_is_the_steps_success(preset):
    """obs.success_now is this round's X of every pair: the success the step reports for every
    selected pair (bit for bit, pairs at the deadline included), False out of coverage, the
    reference X away from the deadline; the next observation's is that of the next state."""
    params = preset_params(preset, p_cover=0.7)
    rng = np.random.default_rng(90)
    obs, states = RESET_MANY(jax.random.split(jax.random.key(91), BATCH), params)
    now = np.asarray(obs.success_now)
    coverage = np.asarray(states.coverage)
    actions = random_assignments(rng, coverage, p_select=1.0)
    next_obs, next_states, fb = STEP_MANY(
        jax.random.split(jax.random.key(92), BATCH), states, actions, params
    )
    np.testing.assert_array_equal(np.asarray(fb.success), actions & now)
    assert not now[~coverage].any()
    draws = HflDraws(coverage, *(np.asarray(getattr(states, f), float) for f in PAIR_FIELDS))
    tau = pair_times_numpy(*draws[1:], params.model_size, params.workload, **channel(params))
    clear = np.abs(tau - params.deadline) > F32_TIME_RTOL * params.deadline
    np.testing.assert_array_equal(now[clear], success_numpy(draws, **physics(params))[clear])
    assert 0.1 < now[coverage].mean() < 0.9
    np.testing.assert_array_equal(
        np.asarray(next_obs.success_now),
        np.asarray(jax.vmap(SUCCESS_NOW, in_axes=(0, None))(next_states, params)),
    )


def reference_keywords(params):
    """``context_success_probability_numpy`` keywords for ``params`` (the context excluded)."""
    return {
        "model_size": params.model_size,
        "workload": params.workload,
        "deadline": params.deadline,
        "bandwidth_range": (params.bandwidth_low, params.bandwidth_high),
        "distance_range": (params.distance_low, params.distance_high),
        "shadowing_std_db": params.shadowing_std_db,
        **channel(params),
    }


def context_sample(preset, context_dim, num_contexts, seed, deadline=None):
    """``num_contexts`` contexts of pairs of 1000 env states (the preset's, with ``deadline``
    replacing its deadline: a traced argument) with a positive slack, more than half of them with
    p(φ) in (0.02, 0.98): the float64 inputs of the reference, p(φ) of the observation (float32)
    and the parameters."""
    _, state = RESET_MANY(jax.random.split(jax.random.key(seed), BATCH), preset_params(preset))
    params = preset_params(preset, context_dim=context_dim)
    if deadline is not None:
        params = params.replace(deadline=deadline)
    obs = jax.vmap(OBSERVATION, in_axes=(0, None))(state, params)
    p = np.asarray(obs.success_prob_context, float).ravel()
    rate = DOWNLOAD_RATE(
        state.distance, state.shadowing_db, state.fading_down, state.bandwidth, params
    )

    def per_pair(x):
        return np.broadcast_to(np.asarray(x, float)[..., None], rate.shape).ravel()

    context = {
        "rate": np.asarray(rate, float).ravel(),
        "computation": per_pair(state.computation),
        "bandwidth": per_pair(state.bandwidth),
        "distance": np.asarray(state.distance, float).ravel(),
    }
    middle = np.flatnonzero((p > 0.02) & (p < 0.98))[: (num_contexts + 1) // 2]
    rest = np.setdiff1d(np.flatnonzero(p > 0), middle)[: num_contexts - len(middle)]
    chosen = np.concatenate([middle, rest])
    assert len(chosen) == num_contexts
    return {k: v[chosen] for k, v in context.items()}, p[chosen], params


# Largest |JAX − reference| of p(φ) seen on the slow test's 3666 contexts per preset and D:
# 6.4e-4 (D = 2: mostly the bilinear interpolation of the 256² logit table) and 2.1e-5 (D = 4).
CONTEXT_TOLERANCE = {2: 1.5e-3, 4: 1e-4}


def check_context_probability(preset, context_dim, num_contexts, seed, deadline=None):
    """p(φ) of ``context_sample``'s contexts against the reference, within CONTEXT_TOLERANCE."""
    context, got, params = context_sample(preset, context_dim, num_contexts, seed, deadline)
    kwargs = reference_keywords(params)
    if context_dim == 2:
        context = {k: context[k] for k in ("rate", "computation")}
    want = context_success_probability_numpy(**context, **kwargs)
    error = np.abs(got - want)
    assert error.max() <= CONTEXT_TOLERANCE[context_dim], (error.max(), error.argmax())


@pytest.mark.parametrize(
    ("preset", "context_dim", "deadline"),
    [("mnist", 2, None), ("cifar", 2, None), ("mnist", 4, None), ("cifar", 4, 12.0)],
)
def test_context_probability_matches_reference(preset, context_dim, deadline):
    """p(φ) of the environment (the tabulated posterior mean) equals the reference's dense
    quadrature of E[X | φ] on contexts of env states: with D = 2 a function of the rate and y
    only, with D = 4 of the bandwidth and distance too; the deadline may be a traced argument
    (the table does not depend on it)."""
    check_context_probability(preset, context_dim, 40 if context_dim == 2 else 300, 93, deadline)


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["mnist", "cifar"])
@pytest.mark.parametrize("context_dim", [2, 4])
def test_context_probability_matches_reference_many(preset, context_dim):
    """As above on 2000, 1000 and 666 contexts: at the preset's deadline, half of it and twice
    it."""
    deadline = PRESETS[preset]["deadline"]
    for i, scale in enumerate((1.0, 0.5, 2.0)):
        check_context_probability(preset, context_dim, 2000 // (1 + i), 94 + i, scale * deadline)


@pytest.mark.parametrize("preset", ["mnist", "cifar"])
def test_context_probability_matches_monte_carlo(preset):
    """Over 4000 env rounds (600000 pairs) binned by the download rate (8 quantile bins) and y
    (3 bins), the success rate of each bin equals the mean p(φ) of the bin within 5 standard
    errors (sqrt(Σ p(1 − p)) / n) plus one count, and the 24 bins' squared z-scores sum to less
    than the chi-square 1e-6 quantile; the same for D = 4. p(φ) has a larger Brier score than
    the state-aware success_prob, which conditions on more, and E[X − p(φ)] = 0 overall."""
    params = preset_params(preset)
    params4 = preset_params(preset, context_dim=4)
    x, p, p4, p_state, rate, y = [], [], [], [], [], []
    for seed in range(4):
        obs, state = RESET_MANY(jax.random.split(jax.random.key(100 + seed), BATCH), params)
        obs4 = jax.vmap(OBSERVATION, in_axes=(0, None))(state, params4)
        x.append(np.asarray(obs.success_now).ravel())
        p.append(np.asarray(obs.success_prob_context, float).ravel())
        p4.append(np.asarray(obs4.success_prob_context, float).ravel())
        p_state.append(np.asarray(obs.success_prob, float).ravel())
        r = DOWNLOAD_RATE(
            state.distance, state.shadowing_db, state.fading_down, state.bandwidth, params
        )
        rate.append(np.asarray(r, float).ravel())
        y.append(np.repeat(np.asarray(state.computation, float).ravel(), params.num_servers))
    x, p, p4, p_state, rate, y = map(np.concatenate, (x, p, p4, p_state, rate, y))
    r_bin = np.digitize(rate, np.quantile(rate, np.linspace(0, 1, 9)[1:-1]))
    y_bin = np.digitize(y, np.linspace(params.computation_low, params.computation_high, 4)[1:-1])
    cell = r_bin * 3 + y_bin
    for prob in (p, p4):
        n = np.bincount(cell, minlength=24)
        freq = np.bincount(cell, x, 24) / n
        mean = np.bincount(cell, prob, 24) / n
        se = np.sqrt(np.bincount(cell, prob * (1 - prob), 24)) / n
        assert np.all(np.abs(freq - mean) <= 5 * se + 1 / n), np.max(np.abs(freq - mean) / se)
        z2 = np.sum(((freq - mean) / np.maximum(se, 1e-12))[se > 0] ** 2)
        assert z2 < scipy.stats.chi2.ppf(1 - 1e-6, 24), z2
        resid = x - prob
        assert abs(resid.mean()) <= 5 * resid.std() / math.sqrt(len(x))
    brier = [np.mean((x - q) ** 2) for q in (p, p4, p_state)]
    assert brier[0] > brier[1] > brier[2], brier
    assert np.mean((p > 0.05) & (p < 0.95)) > 0.2  # not only 0s and 1s


@pytest.mark.parametrize("context_dim", [2, 4])
def test_context_probability_monotone(context_dim):
    """p(φ) increases with the download rate and with y, stays in [0, 1], is 0 when the slack is
    not positive (0.18/rate + 2.41/y ≥ 3 s), positive with 0.1 s of slack or more, and tends
    to 1 for fast, strong pairs."""
    params = make_params(context_dim=context_dim)
    rate = np.geomspace(0.05, 30.0, 400, dtype=np.float32)
    y = np.linspace(2.0, 4.0, 9, dtype=np.float32)
    ones = np.ones((len(y), len(rate)), np.float32)
    p = np.asarray(
        CONTEXT_PROBABILITY(
            rate[None, :] * ones, y, 0.6 * ones[:, 0], np.full_like(ones, 0.5), params
        ),
        float,
    )  # [y, rate]
    assert np.all((p >= 0) & (p <= 1))
    assert np.all(np.diff(p, axis=1) >= -1e-6) and np.all(np.diff(p, axis=0) >= -1e-6)
    slack = params.deadline - params.model_size / rate[None, :] - params.workload / y[:, None]
    np.testing.assert_array_equal(p[slack <= 0], 0.0)
    assert np.all(p[slack > 0.1] > 0) and p[-1, -1] > 0.99
    assert np.mean((p > 0.05) & (p < 0.95)) > 0.1


def test_context_table_is_built_once_and_follows_context_dim():
    """make_params builds the table once per channel setting (cached, compared by value): the
    deadline, budget, model size, workload and p_cover leave it unchanged; the bandwidth range
    changes it; parameters without a table, or with one of another context dimension, are
    refused with a clear error when p(φ) is computed."""
    base = make_params()
    same = make_params(
        deadline=5.0, budget=(1.0, 2.0, 3.0), model_size=1.0, workload=3.0, p_cover=0.5
    )
    assert same.context_table == base.context_table
    assert same.context_table.values is base.context_table.values
    assert make_params() == base and make_params(budget=4.0) != base
    assert make_params(bandwidth_range=(0.3, 2.0)).context_table != base.context_table
    four = make_params(context_dim=4).context_table
    assert four.context_dim == 4 and four.values.ndim == 1 and base.context_table.values.ndim == 2
    _, state = RESET(jax.random.key(110), base)
    with pytest.raises(ValueError, match="context_table is for context_dim=2"):
        ENV.observation(state, base.replace(context_dim=4))
    with pytest.raises(ValueError, match="context_table is missing"):
        ENV.observation(state, base.replace(context_table=None))
