"""The volatile environment (E3CS's setting, jfl.envs.volatile): its parameters, the law of its
success and availability draws (frequencies against the probabilities within 4.5 binomial
standard errors, fixed seeds), its feedback and ``delivered``; and the wireless environment's
``success`` field, the other source of E3CS's signal."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfl.envs import ENVIRONMENTS, VolatileEnv, WirelessEnv
from jfl.envs import volatile as volatile_env
from jfl.runner import output_dims

N = 8
DRAWS = 4000


def test_paper_setting_and_parameter_checks():
    """Defaults: K = 100 clients in four equal classes with success rates 0.1/0.3/0.6/0.9,
    every client available, rounds of length 1; bad values are refused naming the parameter."""
    params = VolatileEnv().default_params()
    assert params.num_clients == 100 and params.round_time == 1.0
    np.testing.assert_allclose(params.success_probability, np.repeat([0.1, 0.3, 0.6, 0.9], 25))
    np.testing.assert_array_equal(params.availability, np.ones(100))
    small = volatile_env.make_params(6, success_rates=(0.2, 0.8), availability=[1, 0.5] * 3)
    np.testing.assert_allclose(small.success_probability, [0.2] * 3 + [0.8] * 3)
    np.testing.assert_allclose(small.availability, [1, 0.5] * 3)
    for kwargs, name in (
        ({"num_clients": 0}, "num_clients"),
        ({"success_rates": (0.5, 1.2)}, "success_rates"),
        ({"success_rates": ()}, "success_rates"),
        ({"availability": -0.1}, "availability"),
        ({"availability": [1.0, 1.0]}, "availability"),
        ({"round_time": 0.0}, "round_time"),
    ):
        with pytest.raises(ValueError, match=name):
            volatile_env.make_params(**kwargs)


def test_registered_with_its_outputs():
    assert ENVIRONMENTS["volatile"] is VolatileEnv and VolatileEnv.name == "volatile"
    assert {"available", "success", "round_time", "num_success"} <= set(VolatileEnv.provides)
    assert list(VolatileEnv.round_metrics) == ["num_success"]
    assert output_dims(VolatileEnv())["num_success"] == ("round",)


def test_success_and_availability_laws():
    """Each selected client succeeds with its class's probability, an unselected one never; the
    next round's availability is Bernoulli(availability) per client; ``num_success`` counts the
    successes, ``round_time`` is the deadline, ``delivered`` the successes."""
    env = VolatileEnv()
    availability = np.linspace(0.2, 1.0, N)
    params = volatile_env.make_params(
        N, success_rates=(0.1, 0.3, 0.6, 0.9), availability=availability, round_time=2.5
    )
    action = (np.arange(N)[None] + np.arange(DRAWS)[:, None]) % 2 == 0  # each client half the time
    _, state = env.reset(jax.random.key(0), params)

    def one(key, act):
        obs, _, feedback = env.step(key, state, act, params)
        return obs.available, feedback, env.delivered(act, feedback)

    keys = jax.random.split(jax.random.key(1), DRAWS)
    available, feedback, delivered = jax.tree.map(np.asarray, jax.jit(jax.vmap(one))(keys, action))
    success = feedback.success
    assert not np.any(success & ~action)
    np.testing.assert_array_equal(delivered, success)
    np.testing.assert_array_equal(feedback.num_success, success.sum(axis=1))
    np.testing.assert_array_equal(feedback.round_time, np.full(DRAWS, 2.5, np.float32))
    p = np.asarray(params.success_probability)
    trials = action.sum(axis=0)
    se = np.sqrt(p * (1 - p) / trials)
    assert np.all(np.abs(success.sum(axis=0) / trials - p) <= 4.5 * se)
    se = np.sqrt(availability * (1 - availability) / DRAWS)
    assert np.all(np.abs(available.mean(axis=0) - availability) <= 4.5 * se)
    assert available[:, -1].all()  # availability 1: always


def test_reset_availability():
    params = volatile_env.make_params(N, availability=0.6)
    _, state = jax.jit(jax.vmap(VolatileEnv().reset, in_axes=(0, None)))(
        jax.random.split(jax.random.key(2), DRAWS), params
    )
    frequency = np.asarray(state.available).mean(axis=0)
    assert np.all(np.abs(frequency - 0.6) <= 4.5 * np.sqrt(0.24 / DRAWS))
    assert np.all(np.asarray(state.t) == 0)


def test_wireless_success_is_the_selected_clients_that_did_not_fail():
    """The wireless feedback's ``success`` (selected and not failed) is what it delivers."""
    env = WirelessEnv()
    params = env.default_params(num_clients=N, tau_max=0.15)  # some clients fail
    _, state = env.reset(jax.random.key(0), params)
    action = jnp.arange(N) % 3 != 0

    def one(key):
        _, _, feedback = env.step(key, state, action, params)
        return feedback.success, feedback.failed, env.delivered(action, feedback)

    success, failed, delivered = (
        np.asarray(a) for a in jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(4), 200))
    )
    np.testing.assert_array_equal(success, np.asarray(action) & ~failed)
    np.testing.assert_array_equal(delivered, success)
    assert failed.any() and success.any() and "success" in WirelessEnv.provides
