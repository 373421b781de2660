"""The rbcsf environment against closed forms and the NumPy reference of its deterministic part.

Statistical checks use a 4000-round × 40-client sample from jitted reset/step with a fixed key and
a tolerance of 4 standard errors computed from that sample.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfl.envs.rbcsf import (
    ETA_BASES,
    PAPER_CLASSES,
    RbcsfEnv,
    RbcsfState,
    bandit_bounds,
    client_classes,
    make_params,
)
from jfl.reference import expected_times, make_contexts, paper_theta

ENV = RbcsfEnv()
NUM_ROUNDS = 4000
E_INV_MU = math.log(2.0 / 0.5) / 1.5  # E[1/μ], μ ~ U[0.5, 2]
E_INV_B = math.log(4.0 / 2.0) / 2.0  # E[1/B], B ~ U[2, 4]


@jax.jit
def rollout(key, params):
    """NUM_ROUNDS rounds with random actions: each available client selected w.p. 1/2, and
    nobody in every tenth round. Records the state, the observation and the feedback per round."""
    k_reset, k_rounds = jax.random.split(key)
    obs, state = ENV.reset(k_reset, params)
    n = params.num_clients

    def body(carry, key_t):
        obs, state = carry
        k_action, k_step = jax.random.split(key_t)
        action = jax.random.bernoulli(k_action, 0.5, (n,)) & obs.available
        action = action & (state.t % 10 != 9)
        next_obs, next_state, feedback = ENV.step(k_step, state, action, params)
        record = {
            "cpu_ratio": state.cpu_ratio,
            "bandwidth": state.bandwidth,
            "available": state.available,
            "cold_start": state.cold_start,
            "t": state.t,
            "context": obs.context,
            "obs_available": obs.available,
            "expected_time": obs.expected_time,
            "action": action,
            "time": feedback.time,
            "round_time": feedback.round_time,
            "success": feedback.success,
            "delivered": ENV.delivered(action, feedback),
        }
        return (next_obs, next_state), record

    _, records = jax.lax.scan(body, (obs, state), jax.random.split(k_rounds, NUM_ROUNDS))
    return records


@pytest.fixture(scope="module")
def params():
    return make_params()


@pytest.fixture(scope="module")
def sample(params):
    return jax.tree.map(np.asarray, rollout(jax.random.key(2024), params))


def within_4se(samples, expected):
    samples = np.asarray(samples, float)
    se = samples.std(ddof=1) / math.sqrt(samples.size)
    return abs(samples.mean() - expected) <= 4 * se, (samples.mean(), expected, se)


def test_availability_rate(sample, params):
    """Fraction of available client-rounds ≈ p_available = 0.8 within 4 standard errors."""
    available = sample["available"]
    np.testing.assert_array_equal(available, sample["obs_available"])
    p = params.p_available
    se = math.sqrt(p * (1 - p) / available.size)
    assert abs(available.mean() - p) <= 4 * se, (available.mean(), p, se)


def test_draw_ranges_and_means(sample):
    """μ in [0.5, 2] and B in [2, 4]; E[1/μ] = ln 4 / 1.5 and E[1/B] = ln 2 / 2 (4 SE)."""
    mu, bw = sample["cpu_ratio"], sample["bandwidth"]
    assert mu.min() >= 0.5 and mu.max() <= 2.0
    assert bw.min() >= 2.0 and bw.max() <= 4.0
    ok, info = within_4se(1.0 / mu, E_INV_MU)
    assert ok, info
    ok, info = within_4se(1.0 / bw, E_INV_B)
    assert ok, info


def test_expected_time_by_class_and_cold_start(sample, params):
    """Mean of τ* given the cold-start flag s, per class, equals
    E[1/μ]·τ_b + s·τ_s + M·E[1/B]/η with η = log₂(1 + SNR) (4 SE from the sample std)."""
    classes = client_classes(params.num_clients, 4)
    for c in range(4):
        tau_b = PAPER_CLASSES["train_time"][c]
        tau_s = PAPER_CLASSES["cold_start_time"][c]
        eta = math.log2(1.0 + PAPER_CLASSES["snr"][c])
        for s in (0.0, 1.0):
            rows = (sample["cold_start"] == s) & (classes == c)[None, :]
            assert rows.sum() > 1000
            closed = E_INV_MU * tau_b + s * tau_s + params.model_size * E_INV_B / eta
            ok, info = within_4se(sample["expected_time"][rows], closed)
            assert ok, (c, s, info)


def test_realised_time_noise(sample):
    """For selected clients τ/τ* = 1 + u with u ~ U(-1, 1): mean 1 and E[u²] = 1/3 (4 SE),
    range within [0, 2]; unselected clients report 0."""
    action = sample["action"]
    assert action.sum() > 10_000
    ratio = sample["time"][action] / sample["expected_time"][action]
    assert ratio.min() >= 0.0 and ratio.max() <= 2.0
    ok, info = within_4se(ratio, 1.0)
    assert ok, info
    ok, info = within_4se((ratio - 1.0) ** 2, 1.0 / 3.0)
    assert ok, info
    np.testing.assert_array_equal(sample["time"][~action], 0.0)


def test_round_time_is_max_over_selected(sample):
    """round_time = max τ over the selected clients, 0 in rounds with nobody selected."""
    want = np.where(sample["action"], sample["time"], 0.0).max(axis=1)
    np.testing.assert_array_equal(sample["round_time"], want)
    empty = ~sample["action"].any(axis=1)
    assert empty.sum() >= NUM_ROUNDS // 10
    np.testing.assert_array_equal(sample["round_time"][empty], 0.0)


def test_without_a_round_deadline_every_selected_client_succeeds(sample):
    np.testing.assert_array_equal(sample["success"], sample["action"])
    np.testing.assert_array_equal(sample["delivered"], sample["action"])


def test_a_round_deadline_drops_the_slower_clients():
    """success = selected and τ ≤ deadline (what ``delivered`` reports); the round lasts
    min(max τ, deadline); the times themselves are those of the run without a deadline."""
    deadline = 4.0
    free = jax.tree.map(np.asarray, rollout(jax.random.key(7), make_params()))
    capped = rollout(jax.random.key(7), make_params(round_deadline=deadline))
    capped = jax.tree.map(np.asarray, capped)
    np.testing.assert_array_equal(capped["time"], free["time"])
    want = free["action"] & (free["time"] <= deadline)
    np.testing.assert_array_equal(capped["success"], want)
    np.testing.assert_array_equal(capped["delivered"], want)
    np.testing.assert_array_equal(capped["round_time"], np.minimum(free["round_time"], deadline))
    late = free["action"] & ~want
    assert 0.05 < late.sum() / free["action"].sum() < 0.95  # the deadline bites, not always


def test_cold_start_and_context(sample, params):
    """s = 1 for everyone in round 1, then s_{t+1} = 1 − x_t; c = [1/μ, s, M/B] and τ* = c·θ*
    as in the NumPy reference; t counts rounds."""
    np.testing.assert_array_equal(sample["t"], np.arange(NUM_ROUNDS))
    cold = sample["cold_start"]
    np.testing.assert_array_equal(cold[0], 1.0)
    np.testing.assert_array_equal(cold[1:], 1.0 - sample["action"][:-1])
    context = make_contexts(sample["cpu_ratio"], sample["bandwidth"], cold, params.model_size)
    np.testing.assert_allclose(sample["context"], context, rtol=1e-6)
    expected = expected_times(context, paper_theta(params.num_clients))
    np.testing.assert_allclose(sample["expected_time"], expected, rtol=1e-5)


def test_observation_of_constructed_state():
    """observation() on a hand-built state (float64) equals the NumPy reference bit for bit."""
    rng = np.random.default_rng(41)
    n = 10
    with jax.enable_x64(True):
        params = make_params(num_clients=n)
        params = params.replace(theta=jnp.asarray(paper_theta(n)))
        mu, bw = rng.uniform(0.5, 2.0, n), rng.uniform(2.0, 4.0, n)
        cold = (rng.random(n) < 0.5).astype(float)
        state = RbcsfState(
            cpu_ratio=jnp.asarray(mu),
            bandwidth=jnp.asarray(bw),
            available=jnp.asarray(rng.random(n) < 0.8),
            cold_start=jnp.asarray(cold),
            t=jnp.asarray(3),
        )
        obs = ENV.observation(state, params)
        context = make_contexts(mu, bw, cold, params.model_size)
        np.testing.assert_array_equal(np.asarray(obs.context), context)
        np.testing.assert_allclose(
            np.asarray(obs.expected_time), expected_times(context, params.theta), rtol=1e-15
        )
        np.testing.assert_array_equal(np.asarray(obs.available), np.asarray(state.available))


@pytest.mark.parametrize("num_clients", [40, 10, 7, 1])
def test_client_classes_and_theta(num_clients):
    """Class of client n is floor(4n/N); θ*_n = [τ_b, τ_s, 1/log_b(1+SNR)] of its class, b = 2 by
    default and e with ``eta_base=e``; the base is recorded in the parameters."""
    want = np.array([math.floor(4 * n / num_clients) for n in range(num_clients)])
    np.testing.assert_array_equal(client_classes(num_clients, 4), want)
    thetas = []
    for base in (2.0, math.e):
        params = make_params(num_clients=num_clients, eta_base=base)
        assert params.eta_base == base
        thetas.append(np.asarray(params.theta))
        np.testing.assert_allclose(thetas[-1], paper_theta(num_clients, eta_base=base), rtol=1e-6)
    # 1/log₂(x) ÷ 1/ln(x) = ln 2 for every client; τ_b and τ_s do not depend on the base
    np.testing.assert_allclose(thetas[0][:, 2] / thetas[1][:, 2], math.log(2.0), rtol=1e-6)
    np.testing.assert_array_equal(thetas[0][:, :2], thetas[1][:, :2])
    if num_clients == 40:
        assert np.bincount(want).tolist() == [10, 10, 10, 10]
        assert ETA_BASES == {"2": 2.0, "e": math.e}


@pytest.mark.parametrize("base", [2.0, math.e])
def test_bandit_bounds_hold_on_a_rollout_and_are_attained(sample, base):
    """Lemma 1's R, S, L: ‖θ*_n‖ ≤ S with equality for some client; every context of the rollout
    has ‖c‖ ≤ L (within 3% of it: the sample nears the draw box's corner) and every realised
    |τ − τ*| ≤ R. Against a brute-force maximum over the box's corners, not the formula."""
    params = make_params(eta_base=base)
    bounds = bandit_bounds(params)
    theta = paper_theta(40, eta_base=base)
    assert bounds.theta_norm == pytest.approx(np.linalg.norm(theta, axis=1).max(), rel=1e-6)
    corners = np.array(
        [[1 / mu, s, 20.0 / b] for mu in (0.5, 2.0) for s in (0.0, 1.0) for b in (2.0, 4.0)]
    )
    assert bounds.context_norm == pytest.approx(np.linalg.norm(corners, axis=1).max())
    assert bounds.noise == pytest.approx((corners @ theta.T).max(), rel=1e-6)
    if base == 2.0:  # the figures quoted in the docs
        assert (bounds.noise, bounds.theta_norm**2, bounds.context_norm**2) == pytest.approx(
            (19.0, 18.0, 105.0), rel=1e-6
        )
    # the default-parameter rollout (η in bits) against its own bounds
    if base == 2.0:
        norms = np.linalg.norm(sample["context"], axis=-1)
        assert norms.max() <= bounds.context_norm and norms.max() > 0.97 * bounds.context_norm
        action = sample["action"]
        deviation = np.abs(sample["time"] - sample["expected_time"])[action]
        assert deviation.max() <= bounds.noise * (1 + 1e-6)


def test_reset_is_deterministic_in_the_key(params):
    """The same key gives the same first observation; s = 1 everywhere at reset."""
    obs_a, state_a = ENV.reset(jax.random.key(5), params)
    obs_b, _ = ENV.reset(jax.random.key(5), params)
    np.testing.assert_array_equal(np.asarray(obs_a.context), np.asarray(obs_b.context))
    np.testing.assert_array_equal(np.asarray(state_a.cold_start), 1.0)
    assert int(state_a.t) == 0


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"num_clients": 0}, "num_clients"),
        ({"num_clients": 2.5}, "num_clients"),
        ({"p_available": 1.5}, "p_available"),
        ({"p_available": -0.1}, "p_available"),
        ({"bandwidth_range": (-1.0, 4.0)}, "bandwidth_range"),
        ({"bandwidth_range": (4.0, 2.0)}, "bandwidth_range"),
        ({"cpu_range": (0.0, 2.0)}, "cpu_range"),
        ({"noise": 2.0}, "noise"),
        ({"model_size": 0.0}, "model_size"),
        ({"snr": (1000.0, 100.0, 10.0, -1.0)}, "snr"),
        ({"train_time": (1.0, 2.0, 3.0)}, "train_time"),
        ({"cold_start_time": (1.0, 1.0)}, "cold_start_time"),
        ({"eta_base": 1.0}, "eta_base"),
        ({"round_deadline": 0.0}, "round_deadline"),
    ],
)
def test_make_params_rejects_bad_input(kwargs, name):
    """make_params raises ValueError naming the offending parameter."""
    with pytest.raises(ValueError, match=name):
        make_params(**kwargs)
