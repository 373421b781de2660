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
from jfl.outputs import output_dims

CLASS_SIZE = 1000
RATES = (0.1, 0.3, 0.6, 0.9)


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
    successes, ``round_time`` is the deadline, ``delivered`` the successes. One round of many
    clients: every class's frequencies come from its 1000 clients."""
    env = VolatileEnv()
    availability = np.repeat([0.2, 0.5, 0.8, 1.0], CLASS_SIZE)
    params = volatile_env.make_params(
        4 * CLASS_SIZE, success_rates=RATES, availability=availability, round_time=2.5
    )
    action = np.arange(4 * CLASS_SIZE) % 2 == 0  # half of each class

    @jax.jit
    def one(key):
        _, state = env.reset(key, params)
        obs, _, feedback = env.step(jax.random.fold_in(key, 1), state, action, params)
        return state.available, obs.available, feedback, env.delivered(action, feedback)

    first, available, feedback, delivered = jax.tree.map(np.asarray, one(jax.random.key(1)))
    success = feedback.success
    assert not np.any(success & ~action)
    np.testing.assert_array_equal(delivered, success)
    assert feedback.num_success == success.sum() and feedback.round_time == np.float32(2.5)
    by_class = np.arange(4 * CLASS_SIZE) // CLASS_SIZE
    for c, (p, a) in enumerate(zip(RATES, [0.2, 0.5, 0.8, 1.0], strict=True)):
        trials = action[by_class == c]
        frequency = success[by_class == c][trials].mean()
        assert abs(frequency - p) <= 4.5 * np.sqrt(p * (1 - p) / trials.sum()), (c, frequency)
        for drawn in (first, available):  # the reset's draw and the step's
            frequency = drawn[by_class == c].mean()
            assert abs(frequency - a) <= 4.5 * np.sqrt(a * (1 - a) / CLASS_SIZE) + 1e-12
    assert available[by_class == 3].all()  # availability 1: always


def test_wireless_success_is_the_selected_clients_that_did_not_fail():
    """The wireless feedback's ``success`` (selected and not failed) is what it delivers."""
    env = WirelessEnv()
    params = env.default_params(num_clients=60, tau_max=0.15)  # some clients fail
    action = jnp.arange(60) % 3 != 0

    @jax.jit
    def one(key):
        _, state = env.reset(key, params)
        _, _, feedback = env.step(jax.random.fold_in(key, 1), state, action, params)
        return feedback.success, feedback.failed, env.delivered(action, feedback)

    success, failed, delivered = (np.asarray(a) for a in one(jax.random.key(4)))
    np.testing.assert_array_equal(success, np.asarray(action) & ~failed)
    np.testing.assert_array_equal(delivered, success)
    assert failed.any() and success.any() and "success" in WirelessEnv.provides
