"""The wireless environment (CS-UCB §V) against the NumPy reference and closed forms.

One transfer of m bits over a channel of bandwidth W with unit-gain SNR ``snr`` and Rayleigh
fading g ~ Exp(1) takes ``m/(W log2(1 + snr g))``, whose CDF is
``P(τ ≤ x) = exp(−(2^{m/(W x)} − 1)/snr)``. Statistical checks use fixed keys and tolerances of
5 standard errors (or a DKW band at level 1e-6) computed from the sample sizes.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jfl.envs import wireless
from jfl.envs.wireless import (
    PAPER_TAU_MAX,
    PRESETS,
    WirelessEnv,
    client_times,
    draw_distance,
    make_params,
    mean_snr,
    preset_params,
    reward_statistics,
)
from jfl.reference import (
    client_times_numpy,
    failure_probability_integral,
    paper_speed_bounds,
    snr_numpy,
    transfer_time_cdf,
)

ENV = WirelessEnv()
BITS, BANDWIDTH = 5e3, 15e3
NUM_MC = 1 << 17  # Monte Carlo samples of reward_statistics (a multiple of its batch of 8192)

# Jitted once per shape and reused (eager dispatch would compile every primitive separately).
RESET = jax.jit(ENV.reset)
STEP = jax.jit(ENV.step)
LAYOUT = jax.jit(ENV.layout)
STEP_MANY = jax.jit(jax.vmap(ENV.step, in_axes=(0, None, 0, None)))
REWARD_STATISTICS = jax.jit(reward_statistics, static_argnums=3)
CLIENT_TIMES = jax.jit(jax.vmap(client_times, in_axes=(0, None, None)))
DRAW_DISTANCE = jax.jit(draw_distance)
MEAN_SNR = jax.jit(mean_snr)


def five_se(p, n):
    """5 binomial standard errors of a frequency estimating ``p`` from ``n`` draws."""
    return 5.0 * np.sqrt(np.asarray(p) * (1.0 - np.asarray(p)) / n)


def reference_kwargs(params):
    """The NumPy reference's keyword arguments for ``params`` (all plain floats/arrays)."""
    return {
        "phi_low": np.asarray(params.phi_low, float),
        "phi_high": np.asarray(params.phi_high, float),
        "tau_max": params.tau_max,
        "bandwidth": params.bandwidth,
        "tx_power_dbm": params.tx_power_dbm,
        "noise_dbm": params.noise_dbm,
        "path_loss_intercept": params.path_loss_intercept,
        "path_loss_slope": params.path_loss_slope,
        "download_bits": params.download_bits,
        "upload_bits": params.upload_bits,
        "samples_per_update": params.samples_per_update,
        "coherence_slots": params.coherence_slots,
    }


# --------------------------------------------------------------------------------------------
# parameters
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"availability": 1.5}, "availability"),
        ({"availability": -0.1}, "availability"),
        ({"num_clients": 3, "availability": (0.5, 1.2, 0.5)}, "availability"),
        ({"num_clients": 3, "availability": (0.5, 0.5)}, "availability"),
        ({"num_clients": 2, "phi_low": 50.0, "phi_high": (60.0, 40.0)}, "phi_high"),
        ({"tau_max": 0.0}, "tau_max"),
        ({"tau_max": -1.0}, "tau_max"),
        ({"num_clients": 3, "distance": (100.0, 200.0)}, "distance"),
        ({"num_clients": 3, "distance": np.ones((3, 1))}, "distance"),
        ({"radius": 5.0, "min_distance": 10.0}, "radius"),
        ({"num_clients": 0}, "num_clients"),
    ],
)
def test_make_params_rejects_bad_input(kwargs, name):
    """make_params raises ValueError naming the offending parameter."""
    with pytest.raises(ValueError, match=name):
        make_params(**kwargs)


def test_unknown_preset_is_rejected():
    """preset_params and WirelessEnv.default_params reject an unknown preset name."""
    with pytest.raises(ValueError, match="preset"):
        preset_params("nope")
    with pytest.raises(ValueError, match="preset"):
        ENV.default_params("nope")


def test_presets_and_paper_defaults():
    """The presets hold the spec's values; φ bounds follow the paper's formula for k = 1..K."""
    ideal = preset_params("ideal")
    # τ_max: 0.5 s in both presets instead of the paper's 5 s (docs/decisions.md#cs-ucb-tau-max).
    assert ideal.num_clients == 20 and ideal.tau_max == 0.5 and ideal.distance is None
    assert PAPER_TAU_MAX == 5.0 and make_params().tau_max == 0.5
    np.testing.assert_array_equal(np.asarray(ideal.availability), 1.0)
    low, high = paper_speed_bounds(20)
    np.testing.assert_allclose(np.asarray(ideal.phi_low), low)
    np.testing.assert_allclose(np.asarray(ideal.phi_high), high)
    assert (low[0], high[0]) == (20.0, 40.0)
    fair = preset_params("fairness")
    assert fair.num_clients == 3 and fair.tau_max == 0.5
    np.testing.assert_allclose(np.asarray(fair.distance), 300.0)
    np.testing.assert_allclose(np.asarray(fair.availability), 0.9)
    assert set(PRESETS) == {"ideal", "fairness"}


# --------------------------------------------------------------------------------------------
# client times: reference and closed forms
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"tau_max": 0.2},
        {"tau_max": 0.3, "upload_bits": 0.0, "samples_per_update": 0.0},
        {"tau_max": 1.0, "download_bits": 2e4, "bandwidth": 1e4, "noise_dbm": -100.0},
        {"tau_max": 0.3, "coherence_slots": 3},
    ],
)
def test_client_times_match_reference(overrides):
    """client_times (float32) equals client_times_numpy (float64) on the same uniforms to 1e-5
    relative; the failure flags agree (away from the τ_max boundary); u = 0 fails."""
    rng = np.random.default_rng(11)
    num_clients, num_draws = 16, 2000
    params = make_params(num_clients, **overrides)
    distance = rng.uniform(10.0, 1500.0, num_clients).astype(np.float32)
    rows = wireless.num_draws(params)
    uniforms = rng.random((num_draws, rows, num_clients)).astype(np.float32)
    uniforms[0, :, 0] = 0.0  # zero fading gains: infinite transfer time
    time, failed = CLIENT_TIMES(jnp.asarray(uniforms), jnp.asarray(distance), params)
    time, failed = np.asarray(time), np.asarray(failed)
    want_time, want_failed = client_times_numpy(
        uniforms.astype(float), distance.astype(float), **reference_kwargs(params)
    )
    np.testing.assert_allclose(time, want_time, rtol=1e-5)
    raw, _ = client_times_numpy(
        uniforms.astype(float),
        distance.astype(float),
        **{**reference_kwargs(params), "tau_max": np.inf},
    )
    clear = np.abs(raw - params.tau_max) > 1e-5 * params.tau_max
    np.testing.assert_array_equal(failed[clear], want_failed[clear])
    assert 0 < want_failed.mean() < 1
    assert failed[0, 0] and time[0, 0] == np.float32(params.tau_max)


def test_coherence_slots_average_the_rate_to_the_ergodic_capacity():
    """With L slots the rate is the mean of log2(1 + snr g_l), g_l ~ Exp(1): for large L it tends
    to the ergodic capacity e^{1/snr} E1(1/snr) / ln 2 (closed form), within 5 standard errors of
    a mean of L draws; with L = 1 a round's times come from the first three rows of its draw (the
    golden runs check that the bits did not change)."""
    from scipy.special import exp1

    slots, num_clients = 4096, 5
    distance = np.array([50.0, 150.0, 300.0, 450.0, 500.0])
    params = make_params(
        num_clients, distance=distance, coherence_slots=slots, upload_bits=0.0,
        samples_per_update=0.0, tau_max=1e6,
    )  # fmt: skip

    @jax.jit
    def times_of_key(key):  # the draws and the times in one program (op by op: one per primitive)
        uniforms = jax.random.uniform(key, (wireless.num_draws(params), num_clients))
        return client_times(uniforms, params.distance, params)[0]

    time = times_of_key(jax.random.key(7))
    rate = params.download_bits / (params.bandwidth * np.asarray(time, float))
    snr = np.asarray(MEAN_SNR(distance, params), float)
    capacity = np.exp(1.0 / snr) * exp1(1.0 / snr) / math.log(2.0)
    # std of log2(1 + snr g) by a large NumPy sample (the closed form needs special functions).
    sample = np.log2(1.0 + snr * np.random.default_rng(8).exponential(size=(200_000, 1)))
    standard_error = sample.std(axis=0) / math.sqrt(slots)
    assert np.all(np.abs(rate - capacity) <= 5 * standard_error), (rate, capacity)

    one = make_params(num_clients, distance=distance)
    assert one.coherence_slots == 1 and wireless.num_draws(one) == 3
    key = jax.random.key(9)
    _, state = RESET(key, one)
    _, _, feedback = STEP(key, state, jnp.ones(num_clients, bool), one)

    @jax.jit
    def first_rows_times(key):
        return client_times(jax.random.uniform(key, (4, num_clients))[:3], one.distance, one)[0]

    expected = first_rows_times(key)
    np.testing.assert_allclose(np.asarray(feedback.time), np.asarray(expected), rtol=1e-6)
    with pytest.raises(ValueError, match="coherence_slots must be an integer >= 1, got 0"):
        make_params(3, coherence_slots=0)


def test_mean_snr_matches_reference():
    """mean_snr = p·10^(−PL/10)/σ² with PL = 128.1 + 37.6 log10(d/1 km): 1.9 dB at 1 km."""
    params = make_params(3)
    distance = np.array([10.0, 300.0, 1000.0])
    got = np.asarray(MEAN_SNR(jnp.asarray(distance, jnp.float32), params))
    np.testing.assert_allclose(got, snr_numpy(distance), rtol=1e-5)
    np.testing.assert_allclose(snr_numpy(1000.0), 10**0.19, rtol=1e-12)


def download_only(distance, tau_max):
    """Parameters with the upload and the local update switched off (τ = τ_D)."""
    distance = np.asarray(distance, float)
    return make_params(
        distance.size,
        distance=distance,
        tau_max=tau_max,
        upload_bits=0.0,
        samples_per_update=0.0,
    )


def test_download_failure_probability_closed_form():
    """Download only: reward_statistics' failure probability equals
    P(τ_D ≥ τ_max) = 1 − exp(−(2^{m0/(W τ_max)} − 1)/snr) within 5 standard errors, and the mean
    reward stays consistent with it."""
    distance = np.array([450.0, 525.0, 600.0, 750.0])
    tau_max = 0.2
    params = download_only(distance, tau_max)
    snr = np.asarray(MEAN_SNR(params.distance, params), float)
    want = 1.0 - np.exp(-(2.0 ** (BITS / (BANDWIDTH * tau_max)) - 1.0) / snr)
    assert np.all((want > 0.05) & (want < 0.5)), want  # moderate probabilities by design
    mu, p_fail = REWARD_STATISTICS(jax.random.key(21), params, params.distance, NUM_MC)
    p_fail = np.asarray(p_fail, float)
    assert np.all(np.abs(p_fail - want) <= five_se(want, NUM_MC)), (p_fail, want)
    np.testing.assert_allclose(
        want, 1.0 - transfer_time_cdf(tau_max, snr, BITS, BANDWIDTH), rtol=1e-12
    )
    assert np.all(np.asarray(mu) > 0) and np.all(np.asarray(mu) < 1 - want + 1e-6)


def test_download_time_cdf_closed_form():
    """Download only: the empirical CDF of τ_D from env.step (everyone selected) matches
    exp(−(2^{m0/(W x)} − 1)/snr) at its 5%…95% quantiles within a DKW band (level 1e-6)."""
    distance = np.array([100.0, 400.0, 800.0])
    params = download_only(distance, tau_max=5.0)
    num_rounds = 40_000
    _, state = RESET(jax.random.key(30), params)
    everyone = jnp.ones(distance.size, bool)

    @jax.jit
    def sample(keys):
        return jax.vmap(lambda k: ENV.step(k, state, everyone, params)[2].time)(keys)

    times = np.asarray(sample(jax.random.split(jax.random.key(31), num_rounds)), float)
    snr = np.asarray(MEAN_SNR(params.distance, params), float)
    eps = math.sqrt(math.log(2.0 / 1e-6) / (2 * num_rounds))
    quantiles = np.array([0.05, 0.2, 0.5, 0.8, 0.95])
    for k in range(distance.size):
        # x with exp(−(2^{a/x} − 1)/snr) = q  ⟺  x = a / log2(1 − snr ln q), a = m0/W
        points = (BITS / BANDWIDTH) / np.log2(1.0 - snr[k] * np.log(quantiles))
        assert np.all(points < params.tau_max)
        np.testing.assert_allclose(
            transfer_time_cdf(points, snr[k], BITS, BANDWIDTH), quantiles, rtol=1e-9
        )
        empirical = (times[:, k][:, None] <= points[None, :]).mean(axis=0)
        assert np.all(np.abs(empirical - quantiles) <= eps), (k, empirical, quantiles, eps)


def test_full_failure_probability_numerical_integral():
    """All three terms on (paper φ bounds, τ_max = 0.2 s): reward_statistics' failure probability
    equals P(τ_D + τ_U + ϱ/φ ≥ τ_max) from scipy integration of the closed-form transfer-time
    CDF/density and the uniform speed, within 5 standard errors."""
    distance = np.array([250.0, 300.0, 350.0, 400.0])
    params = make_params(distance.size, distance=distance, tau_max=0.2)
    low, high = paper_speed_bounds(distance.size)
    want = np.array(
        [failure_probability_integral(distance[k], low[k], high[k], 0.2) for k in range(4)]
    )
    assert np.all((want > 0.05) & (want < 0.5)), want
    _, p_fail = REWARD_STATISTICS(jax.random.key(40), params, params.distance, NUM_MC)
    p_fail = np.asarray(p_fail, float)
    assert np.all(np.abs(p_fail - want) <= five_se(want, NUM_MC)), (p_fail, want)


def test_mean_reward_matches_reference_sample():
    """μ_k from reward_statistics equals the mean of 1 − τ/τ_max over an independent NumPy sample
    of the reference, within 5 standard errors of the difference of the two means."""
    rng = np.random.default_rng(50)
    distance = np.array([20.0, 150.0, 300.0, 500.0])
    for tau_max, slots in ((0.2, 1), (5.0, 1), (0.5, 3)):
        params = make_params(
            distance.size, distance=distance, tau_max=tau_max, coherence_slots=slots
        )
        mu, _ = REWARD_STATISTICS(jax.random.key(51), params, params.distance, NUM_MC)
        num_np = 100_000
        rows = wireless.num_draws(params)
        time, _ = client_times_numpy(
            rng.random((num_np, rows, distance.size)), distance, **(reference_kwargs(params))
        )
        reward = 1.0 - time / tau_max
        se = reward.std(axis=0, ddof=1) * math.sqrt(1.0 / num_np + 1.0 / NUM_MC)
        diff = np.asarray(mu, float) - reward.mean(axis=0)
        assert np.all(np.abs(diff) <= 5 * se), (tau_max, diff, se)
    # τ_max = 0.2 s at 300 m spreads the rewards (docs/decisions.md#cs-ucb-tau-max: means ≈ 0.12 /
    # 0.19 / 0.24)
    fair = preset_params("fairness", tau_max=0.2)
    mu, _ = REWARD_STATISTICS(jax.random.key(52), fair, fair.distance, NUM_MC)
    np.testing.assert_allclose(np.asarray(mu), [0.12, 0.19, 0.24], atol=0.015)


def test_reward_statistics_rejects_bad_sample_size():
    """reward_statistics raises ValueError on a non-positive or non-integer sample count."""
    params = make_params(2, distance=(100.0, 200.0))
    for bad in (0, 2.5):
        with pytest.raises(ValueError, match="num_samples"):
            reward_statistics(jax.random.key(0), params, params.distance, bad)


# --------------------------------------------------------------------------------------------
# layout, availability, feedback
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("radius", "min_distance"), [(500.0, 10.0), (120.0, 60.0)])
def test_draw_distance_uniform_over_area(radius, min_distance):
    """draw_distance lies in [min_distance, radius] and d² ~ U[r0², R²] (KS test, p > 1e-3)."""
    params = make_params(5000, radius=radius, min_distance=min_distance)
    d = np.asarray(DRAW_DISTANCE(jax.random.key(60), params), float)
    assert d.min() >= min_distance * (1 - 1e-6) and d.max() <= radius * (1 + 1e-6)
    r0, r1 = min_distance**2, radius**2
    result = stats.kstest(d**2, stats.uniform(loc=r0, scale=r1 - r0).cdf)
    assert result.pvalue > 1e-3, result
    # the run's layout comes from the reset key: in range, and fixed by the key
    _, state = RESET(jax.random.key(61), params)
    _, again = RESET(jax.random.key(61), params)
    layout = np.asarray(state.distance)
    np.testing.assert_array_equal(layout, np.asarray(again.distance))
    np.testing.assert_array_equal(layout, np.asarray(LAYOUT(jax.random.key(61), params)))
    assert layout.min() >= min_distance * (1 - 1e-6) and layout.max() <= radius * (1 + 1e-6)


def test_explicit_distances_are_used():
    """Explicit distances pass through unchanged (even outside the disc) and stay fixed."""
    given = np.array([30.0, 300.0, 900.0], np.float32)
    params = make_params(3, distance=given)
    _, state = RESET(jax.random.key(70), params)
    np.testing.assert_array_equal(np.asarray(state.distance), given)
    _, state, _ = STEP(jax.random.key(71), state, jnp.ones(3, bool), params)
    np.testing.assert_array_equal(np.asarray(state.distance), given)
    np.testing.assert_array_equal(np.asarray(LAYOUT(jax.random.key(72), params)), given)


def test_availability_frequency():
    """a_k ~ Bernoulli(α_k): per-client availability frequency over 20000 rounds within 5
    binomial standard errors; α = 0 never and α = 1 always available; obs = state."""
    alpha = np.array([0.0, 0.05, 0.3, 0.9, 1.0])
    params = make_params(alpha.size, availability=alpha, distance=100.0)
    num_rounds = 20_000
    nobody = jnp.zeros(alpha.size, bool)

    @jax.jit
    def rollout(key):
        k_reset, k_rounds = jax.random.split(key)
        obs, state = ENV.reset(k_reset, params)

        def body(carry, k):
            obs, state = carry
            next_obs, next_state, _ = ENV.step(k, state, nobody, params)
            return (next_obs, next_state), (obs.available, state.available, state.t)

        _, out = jax.lax.scan(body, (obs, state), jax.random.split(k_rounds, num_rounds))
        return out

    obs_available, state_available, t = (np.asarray(x) for x in rollout(jax.random.key(80)))
    np.testing.assert_array_equal(obs_available, state_available)
    np.testing.assert_array_equal(t, np.arange(num_rounds))
    freq = obs_available.mean(axis=0)
    assert np.all(np.abs(freq - alpha) <= five_se(alpha, num_rounds)), (freq, alpha)
    assert freq[0] == 0.0 and freq[-1] == 1.0


def test_step_feedback():
    """env.step reveals time and reward only for the selected clients, reward = 1 − τ/τ_max,
    set_reward = min reward over the selected (0 if none), round_time = max time (0 if none),
    num_failed = selected clients at τ_max; a client's time does not depend on the others'
    selection; a tiny τ_max fails every selected client."""
    rng = np.random.default_rng(90)
    num_clients, num_rounds = 8, 400
    params = make_params(num_clients, distance=rng.uniform(50, 700, num_clients), tau_max=0.25)
    _, state = RESET(jax.random.key(91), params)
    actions = rng.random((num_rounds, num_clients)) < 0.5
    actions[::10] = False  # rounds with nobody selected
    actions[5::10] = True  # and with everyone
    keys = jax.random.split(jax.random.key(92), num_rounds)
    everyone = jnp.ones((num_rounds, num_clients), bool)
    _, next_state, fb = jax.tree.map(np.asarray, STEP_MANY(keys, state, actions, params))
    _, _, fb_all = jax.tree.map(np.asarray, STEP_MANY(keys, state, everyone, params))
    tau_max = np.float32(params.tau_max)

    np.testing.assert_array_equal(fb.time[~actions], 0.0)
    np.testing.assert_array_equal(fb.reward[~actions], 0.0)
    np.testing.assert_array_equal(fb.time[actions], fb_all.time[actions])
    assert np.all(fb_all.time > 0) and np.all(fb_all.time <= tau_max)
    np.testing.assert_allclose(
        fb.reward[actions], 1.0 - fb.time[actions] / params.tau_max, rtol=1e-6, atol=1e-7
    )
    at_max = actions & (fb.time == tau_max)
    assert 0 < at_max.sum() < actions.sum()  # some failures, not all
    np.testing.assert_array_equal(fb.num_failed, at_max.sum(axis=1))
    any_selected = actions.any(axis=1)
    want_set = np.where(any_selected, np.where(actions, fb.reward, np.inf).min(axis=1), 0.0)
    np.testing.assert_array_equal(fb.set_reward, want_set)
    np.testing.assert_array_equal(fb.round_time, fb.time.max(axis=1))
    np.testing.assert_array_equal(fb.round_time[~any_selected], 0.0)
    np.testing.assert_array_equal(next_state.t, 1)
    np.testing.assert_array_equal(
        next_state.distance, np.broadcast_to(np.asarray(state.distance), actions.shape)
    )

    tiny = params.replace(tau_max=1e-4)
    _, _, fb = jax.tree.map(np.asarray, STEP_MANY(keys, state, actions, tiny))
    np.testing.assert_array_equal(fb.num_failed, actions.sum(axis=1))
    np.testing.assert_array_equal(fb.reward, 0.0)
    np.testing.assert_allclose(fb.time[actions], 1e-4, rtol=1e-6)
    np.testing.assert_array_equal(fb.set_reward, 0.0)


def test_round_metrics():
    """The declared round metrics are the set reward, the failure count and the pseudo-reward
    μ(S) = min_{k∈S} μ_k of the feedback (NaN when the params hold no μ, 0 for S = ∅)."""
    params = make_params(4, distance=100.0)
    _, state = RESET(jax.random.key(100), params)
    action = jnp.array([1, 0, 1, 0], bool)
    _, _, fb = STEP(jax.random.key(101), state, action, params)
    metrics = ENV.compute_round_metrics(fb)
    assert list(metrics) == list(ENV.round_metrics)
    assert list(metrics) == ["set_reward", "num_failed", "mean_set_reward"]
    assert float(metrics["set_reward"]) == float(fb.set_reward)
    assert int(metrics["num_failed"]) == int(fb.num_failed)
    assert np.isnan(float(metrics["mean_set_reward"]))
    rng = np.random.default_rng(102)
    for _ in range(20):
        mu = rng.random(4)
        chosen = rng.random(4) < 0.5
        with_mu = make_params(4, distance=100.0, mean_reward=mu)
        _, _, fb = STEP(jax.random.key(101), state, jnp.asarray(chosen), with_mu)
        expected = mu[chosen].min() if chosen.any() else 0.0
        assert float(fb.mean_set_reward) == pytest.approx(expected, rel=1e-6)
        # μ only adds a metric: times and rewards are those of the same draws without it.
        _, _, plain = STEP(jax.random.key(101), state, jnp.asarray(chosen), params)
        np.testing.assert_array_equal(np.asarray(fb.time), np.asarray(plain.time))
    with pytest.raises(ValueError, match="mean_reward"):
        make_params(4, mean_reward=[0.5, 0.5, 0.5, 1.5])
