"""Local-accuracy-based scheduling (Xia Fig. 2's baseline) against a plain lowest-k reference,
the observation that carries learner signals, and the refusal to run without a learner.

The policy is a pure select over ``obs.local_accuracy`` and ``obs.available``: one jitted,
vmapped select over many random instances (accuracies with ties, random availability) is
compared with a NumPy loop. That the runner hands it the current model's accuracies is tested
with the learner in tests/fl/test_train.py.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from jfl.envs import WirelessEnv
from jfl.envs.wireless import Observation, make_params
from jfl.fl import make_learner
from jfl.fl.models import make_model
from jfl.policies import LEARNER_SIGNALS, LearnerObservation, get
from jfl.runner import make_run

K = 12
INSTANCES = 400


@functools.cache
def _select(num_clients, num_channels):
    policy = get("local_accuracy").build(num_clients, num_channels)

    def one(key, accuracy, available):
        obs = LearnerObservation(Observation(available=available), {"local_accuracy": accuracy})
        state = policy.init(key, {})
        return policy.select(key, state, obs, {})

    return jax.jit(jax.vmap(one))


def random_instances(seed, num_clients=K):
    """Accuracies on a coarse grid (many ties) and availability with a per-instance rate, some
    instances with fewer available clients than channels."""
    rng = np.random.default_rng(seed)
    accuracy = rng.integers(0, 6, (INSTANCES, num_clients)) / 5.0
    rate = rng.uniform(0.1, 1.0, (INSTANCES, 1))
    available = rng.random((INSTANCES, num_clients)) < rate
    keys = jax.random.split(jax.random.key(seed), INSTANCES)
    return keys, accuracy.astype(np.float32), available


def lowest_k_reference(accuracy, available, k, order):
    """The k available clients with the lowest accuracy (k = min(N, #available)), ties to the
    client earlier in ``order``: a plain loop over the clients sorted by (accuracy, position)."""
    position = np.empty(len(order), int)
    position[order] = np.arange(len(order))
    candidates = sorted(np.flatnonzero(available), key=lambda c: (accuracy[c], position[c]))
    selected = np.zeros(len(accuracy), bool)
    selected[candidates[:k]] = True
    return selected


@pytest.mark.parametrize("num_channels", [1, 5, K])
def test_selects_the_lowest_local_accuracy_among_the_available(num_channels):
    keys, accuracy, available = random_instances(num_channels)
    chosen = np.asarray(_select(K, num_channels)(keys, accuracy, available))
    orders = np.asarray(jax.vmap(lambda key: jax.random.permutation(key, K))(keys))
    for i in range(INSTANCES):
        k = min(num_channels, int(available[i].sum()))
        assert chosen[i].sum() == k and not np.any(chosen[i] & ~available[i])
        left = available[i] & ~chosen[i]
        if k and left.any():
            assert accuracy[i][chosen[i]].max() <= accuracy[i][left].min()
        # The exact set: ties go to the earlier client of the select key's random order.
        expected = lowest_k_reference(accuracy[i], available[i], k, orders[i])
        np.testing.assert_array_equal(chosen[i], expected, err_msg=f"instance {i}")
    # Six accuracy values among twelve clients: every instance has ties to break.
    assert all(len(np.unique(a)) < K for a in accuracy)


def test_ties_are_broken_uniformly_at_random():
    """Equal accuracies, every client available, one channel: each client is chosen about as
    often (4000 keys: 333 expected per client, a binomial s.d. of 17.5)."""
    batches = 10
    draws = batches * INSTANCES
    keys = jax.random.split(jax.random.key(11), draws).reshape(batches, INSTANCES)
    accuracy = np.full((INSTANCES, K), 0.5, np.float32)
    available = np.ones((INSTANCES, K), bool)
    select = _select(K, 1)
    counts = sum(np.asarray(select(k, accuracy, available)).sum(axis=0) for k in keys)
    assert counts.sum() == draws
    assert np.all(np.abs(counts - draws / K) < 6 * np.sqrt(draws / K)), counts


def test_learner_observation_reads_like_the_environments():
    env_obs = Observation(available=jnp.array([True, False, True]))
    obs = LearnerObservation(env_obs, {"local_accuracy": jnp.array([0.5, 0.1, 0.9])})
    np.testing.assert_array_equal(obs.available, env_obs.available)
    np.testing.assert_array_equal(obs.local_accuracy, np.float32([0.5, 0.1, 0.9]))
    assert obs.env is env_obs
    with pytest.raises(AttributeError):
        _ = obs.local_loss
    # A pytree like any observation: it goes through jit.
    doubled = jax.jit(lambda o: o.local_accuracy * 2 * o.available)(obs)
    np.testing.assert_array_equal(doubled, np.float32([0.5, 0.1, 0.9]) * 2 * [1, 0, 1])


def test_registry_entry():
    spec = get("local_accuracy")
    assert spec.requires == ("available", "local_accuracy")
    assert spec.signals == ("local_accuracy",) and set(spec.signals) <= set(LEARNER_SIGNALS)
    assert spec.hparams == {} and spec.max_selected(20, 5) == 5
    assert get("local_accuracy").build(num_clients=10, selection_size=3).signals == (
        "local_accuracy",
    )
    # Other policies read no learner signal: the runner computes none for them.
    for name in ("cs_ucb", "random", "round_robin", "rbcsf"):
        assert get(name).signals == () and get(name).build(10, 3).signals == ()
    # The environment is not asked for the learner's signals.
    spec.check_environment(WirelessEnv())


@pytest.mark.parametrize("size", [0, K + 1, 2.5])
def test_bad_selection_size(size):
    with pytest.raises(ValueError, match=r"selection_size must be an integer in \[1, num_clients"):
        get("local_accuracy").build(K, size)


# --------------------------------------------------------------------------- without a learner


def test_without_a_learner_the_run_is_refused_before_compiling():
    env, params = WirelessEnv(), make_params(K)
    policy = get("local_accuracy").build(K, 3)
    with pytest.raises(ValueError, match=r"reads \['local_accuracy'\], which only a federated"):
        make_run(env, params, policy, 10)
    with pytest.raises(ValueError, match=r"policy 'local_accuracy' reads \['local_accuracy'\]"):
        get("local_accuracy").check_learner(None)


def test_a_learner_without_the_signal_is_refused():
    learner = make_learner(make_model("logistic", 3), (4, 4, 1), K)
    get("local_accuracy").check_learner(learner)
    blind = learner._replace(provides=("local_loss",))
    with pytest.raises(ValueError, match=r"which the run's learner does not compute"):
        get("local_accuracy").check_learner(blind)
    with pytest.raises(ValueError, match=r"which the run's learner does not compute"):
        make_run(WirelessEnv(), make_params(K), get("local_accuracy").build(K, 3), 4, learner=blind)


def test_policy_grid_without_a_learner_names_the_policy():
    from jfl.sweep import Plan, run_policy_grid

    configs = pd.DataFrame({"policy": ["local_accuracy"]})
    plan = Plan(WirelessEnv(), make_params(K), configs, selection_size=3)
    with pytest.raises(ValueError, match=r"^policy 'local_accuracy' reads \['local_accuracy'\]"):
        run_policy_grid(plan, rounds=4, seeds=[0], chunk_size=1, show_progress=False)
