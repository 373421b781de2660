"""COCS's baselines as the paper defines them (§VI-B): Random, CUCB over whole decisions, the
shared-model LinUCB and the two oracles, against ``jfl.reference.numpy_cocs_baselines`` and the
MILP; shape checks; batch invariance.

The policies run (float32) on given per-round inputs; every draw they make from their keys is
recomputed here from the same keys and fed to the NumPy references, which run in float64.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfl.envs import HflEnv
from jfl.envs.hfl import Feedback, make_params, preset_params
from jfl.policies import (
    cocs_lookahead,
    cucb,
    get,
    linucb,
    oracle,
    random_feasible_decision,
)
from jfl.reference.milp_assignment import exact_assignment
from jfl.reference.numpy_cocs_baselines import (
    cucb_decisions_numpy,
    linucb_shared_numpy,
    random_feasible_numpy,
)
from jfl.runner import make_run
from tests.policies.cocs_inputs import observation, random_rounds, solver_numpy

# The shape every rollout here shares, instances included: one compilation per policy.
N, M, D = 5, 2, 2
INSTANCES, ROUNDS = 6, 60


# --------------------------------------------------------------------------------------------
# Random
# --------------------------------------------------------------------------------------------


def _random_draws(key, num_clients):
    """The order and picks ``random_feasible_decision`` draws from ``key``."""
    k_order, k_pick = jax.random.split(key)
    order = jax.random.permutation(k_order, num_clients)
    return np.asarray(order), np.asarray(jax.random.uniform(k_pick, (num_clients,)))


def test_random_feasible_decision_matches_numpy():
    """300 random rounds (coverage gaps, tight and loose budgets): the same decision."""
    rng = np.random.default_rng(0)
    inputs = random_rounds(rng, 300, N, M, D)
    keys = jax.random.split(jax.random.key(1), 300)
    masks = jax.jit(jax.vmap(random_feasible_decision))(
        keys, inputs["cost"], inputs["available"], inputs["budget"]
    )
    for i in range(300):
        order, pick = _random_draws(keys[i], N)
        expected = random_feasible_numpy(
            order, pick, inputs["cost"][i], inputs["available"][i], inputs["budget"][i]
        )
        np.testing.assert_array_equal(np.asarray(masks[i]), expected, err_msg=str(i))


def test_random_budget_is_uniform():
    """Everyone affordable, everyone covered: each client on each of the M = 3 ESs with
    probability 1/3; one slot in all: each client first with probability 1/4. Counts over 4000
    draws within 4.5 binomial standard deviations."""
    draws = 4000
    keys = jax.random.split(jax.random.key(2), draws)
    cost = jnp.ones(4)
    available = jnp.ones((4, 3), bool)
    sample = jax.jit(jax.vmap(random_feasible_decision, in_axes=(0, None, None, None)))
    # Both budgets float32 (not weakly typed): one compiled program for the two.
    loose = np.asarray(sample(keys, cost, available, jnp.full(3, 10.0, jnp.float32))).sum(0)
    p = 1 / 3
    assert np.all(np.abs(loose - draws * p) < 4.5 * np.sqrt(draws * p * (1 - p))), loose
    one_slot = jnp.array([1.0, 0.0, 0.0])
    tight = np.asarray(sample(keys, cost, available, one_slot)).sum((0, 2))
    p = 1 / 4
    assert tight.sum() == draws
    assert np.all(np.abs(tight - draws * p) < 4.5 * np.sqrt(draws * p * (1 - p))), tight


# --------------------------------------------------------------------------------------------
# rollouts of the learners on given inputs
# --------------------------------------------------------------------------------------------


@functools.cache
def _rollout(name):
    """jit(vmap over instances) of a run of ``name`` on given inputs, with traced
    hyperparameters: actions bool[T, N, M] and the round keys."""
    builders = {"cucb": cucb, "linucb": linucb, "oracle": oracle, "cocs_lookahead": cocs_lookahead}
    policy = builders[name](N, M)

    def one(key, inputs, hparams):
        k_init, k_rounds = jax.random.split(key)
        state0 = policy.init(k_init, hparams)

        def body(state, xs):
            key_t, x = xs
            obs = observation(x)
            action = policy.select(key_t, state, obs, hparams)
            success = action & x["success"]
            feedback = Feedback(
                success=success,
                time=jnp.zeros(N),
                round_time=jnp.float32(0),
                utility=jnp.sum(success).astype(jnp.float32) / M,
                num_success=jnp.sum(success, dtype=jnp.int32),
            )
            return policy.update(state, obs, action, feedback, hparams), action

        keys = jax.random.split(k_rounds, inputs["available"].shape[0])
        _, actions = jax.lax.scan(body, state0, (keys, inputs))
        return actions, keys

    return jax.jit(jax.vmap(one))


def _run(name, inputs, seed=0, hparams=None, keys=None):
    """``name`` on ``inputs`` [I, T, ...]: (actions, round keys); each instance's
    hyperparameters from ``hparams`` (default: the policy's defaults) and key from ``keys``
    (default: split from ``seed``)."""
    count = inputs["available"].shape[0]
    if hparams is None:
        hparams = {k: np.full(count, v, np.float32) for k, v in get(name).defaults().items()}
    if keys is None:
        keys = jax.random.split(jax.random.key(seed), count)
    inputs = {k: jnp.asarray(v) for k, v in inputs.items()}
    actions, round_keys = _rollout(name)(keys, inputs, hparams)
    return np.asarray(actions), round_keys


def _instance(inputs, i):
    return {k: np.asarray(v[i]) for k, v in inputs.items()}


def test_cucb_matches_numpy_reference():
    """CUCB over decisions on small instances, where the table of decisions fills up and the UCB
    phase runs: the same decision every round as the reference fed the same proposals."""
    rng = np.random.default_rng(3)
    inputs = random_rounds(rng, INSTANCES, N, M, D, num_rounds=ROUNDS, budgets=("tight", "one"))
    actions, round_keys = _run("cucb", inputs)
    propose = jax.jit(
        jax.vmap(
            lambda key, cost, available, budget: jax.vmap(
                random_feasible_decision, in_axes=(0, None, None, None)
            )(jax.random.split(key, 4), cost, available, budget)
        )
    )
    exploited = 0
    for i in range(INSTANCES):
        x = _instance(inputs, i)
        proposals = np.asarray(propose(round_keys[i], x["cost"], x["available"], x["budget"]))
        expected, trace = cucb_decisions_numpy(
            proposals, x["available"], x["cost"], x["budget"], x["success"]
        )
        np.testing.assert_array_equal(actions[i], expected, err_msg=f"instance {i}")
        exploited += int((~trace["explored"]).sum())
    assert exploited > 0, "no round of the UCB phase was exercised"


def test_linucb_matches_numpy_reference():
    """Shared-model LinUCB: the reference's weights give the same decision as jfl's, fed the
    same tie-break; a differing round must be a float near-tie (both decisions worth the same
    under the reference's weights within 1e-5)."""
    rng = np.random.default_rng(4)
    inputs = random_rounds(rng, INSTANCES, N, M, D, num_rounds=ROUNDS)
    actions, round_keys = _run("linucb", inputs)
    differing = 0
    for i in range(INSTANCES):
        x = _instance(inputs, i)
        tiebreak = np.stack(
            [np.asarray(jax.random.uniform(k, (N, M))) for k in round_keys[i]]
        ).astype(np.float64)
        expected, trace = linucb_shared_numpy(
            x["context"], x["available"], x["cost"], x["budget"], x["success"],
            alpha=1.0, lam=1.0, tiebreak=tiebreak, solver=solver_numpy, played=actions[i],
        )  # fmt: skip
        for t in np.flatnonzero((actions[i] != expected).any(axis=(1, 2))):
            w = trace["weight"][t]
            assert abs(w[actions[i][t]].sum() - w[expected[t]].sum()) <= 1e-5, (i, t)
            differing += 1
    assert differing <= 0.02 * INSTANCES * ROUNDS, differing


def test_cocs_lookahead_explores_only_pairs_that_will_succeed():
    """Round 1 (every counter 0): eq. 13 read literally makes only this round's successful pairs
    under-explored, so the first selection is the Oracle's count of them."""
    rng = np.random.default_rng(6)
    inputs = random_rounds(rng, INSTANCES, N, M, D, num_rounds=ROUNDS)
    lookahead, _ = _run("cocs_lookahead", inputs)
    best, _ = _run("oracle", inputs)
    np.testing.assert_array_equal(lookahead[:, 0].sum((1, 2)), best[:, 0].sum((1, 2)))
    assert not np.any(lookahead[:, 0] & ~inputs["success"][:, 0])


def test_oracle_takes_the_most_successful_clients_the_budgets_admit():
    """§VI-B's Oracle on random instances: every round it selects as many pairs as the MILP's
    maximum of this round's successful pairs under the budgets, each of them successful; no
    learner run on the same rounds has more successes in any round."""
    rng = np.random.default_rng(8)
    inputs = random_rounds(rng, INSTANCES, N, M, D, num_rounds=ROUNDS)
    best, _ = _run("oracle", inputs)
    assert not np.any(best & ~inputs["success"])
    for i in range(INSTANCES):
        x = _instance(inputs, i)
        for t in range(ROUNDS):
            good = x["available"][t] & x["success"][t]
            want, _ = exact_assignment(good.astype(float), x["cost"][t], good, x["budget"][t])
            assert best[i, t].sum() == want, (i, t)
    most = best.sum(axis=(2, 3))
    for name in ("cucb", "linucb", "cocs_lookahead"):
        actions, _ = _run(name, inputs)
        assert np.all((actions & inputs["success"]).sum(axis=(2, 3)) <= most), name


@pytest.mark.paper
def test_oracle_is_exact_on_hfl_rounds():
    """At the paper's size (MNIST preset, N = 50, M = 3), on 100 first rounds of independent
    runs: the Oracle's count equals the MILP's maximum of successful pairs."""
    env, params = HflEnv(), preset_params("mnist")
    policy = oracle(50, 3)
    keys = jax.random.split(jax.random.key(9), 100)

    @jax.jit
    @jax.vmap
    def first_round(key):
        k_reset, k_select = jax.random.split(key)
        obs, _ = env.reset(k_reset, params)
        return obs, policy.select(k_select, policy.init(key, {}), obs, {})

    obs, chosen = jax.tree.map(np.asarray, first_round(keys))
    assert chosen.sum() > 0 and not np.any(chosen & ~obs.success_now)
    for i in range(100):
        good = obs.available[i] & obs.success_now[i]
        want, _ = exact_assignment(good.astype(float), obs.cost[i], good, obs.budget[i])
        assert chosen[i].sum() == want, i


# --------------------------------------------------------------------------------------------
# shapes and the runner
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["cocs", "linucb", "linucb_pairs", "cocs_lookahead"])
def test_policy_refuses_a_context_of_another_dimension(name):
    """Built for D = 2, run on an environment with D = 4: a clear error while tracing."""
    params = make_params(6, 2, context_dim=4)
    policy = get(name).build(6, 2)
    run = make_run(HflEnv(), params, policy, 3)
    hparams = {k: jnp.float32(v) for k, v in get(name).defaults().items()}
    with pytest.raises(ValueError, match=r"context_dim=2.*context_dim=4"):
        jax.eval_shape(run, jax.random.key(0), hparams)


def test_policy_refuses_another_number_of_servers():
    policy = get("random_budget").build(6, 3)
    run = make_run(HflEnv(), make_params(6, 2), policy, 3)
    with pytest.raises(ValueError, match="6 clients and 3 edge servers"):
        jax.eval_shape(run, jax.random.key(0), {})


@pytest.mark.parametrize("name", ["cucb", "linucb"])
def test_an_instance_is_the_same_bits_among_others_and_among_copies_of_itself(name):
    """An instance (its rounds, key and traced hyperparameters) gives the same actions, bit for
    bit, among other instances with other hyperparameters and among copies of itself (the
    program the reference tests compile; the runner's configuration axis has its own tests)."""
    rng = np.random.default_rng(5)
    inputs = random_rounds(rng, INSTANCES, N, M, D, num_rounds=ROUNDS)
    scale = np.resize(np.array([1.0, 0.5, 2.0], np.float32), INSTANCES)
    hparams = {k: v * scale for k, v in get(name).defaults().items()}  # cucb: none
    keys = jax.random.split(jax.random.key(0), INSTANCES)
    actions, round_keys = _run(name, inputs, hparams=hparams, keys=keys)
    for c in (1, 4):
        copies = np.full(INSTANCES, c)
        alone, alone_keys = _run(
            name,
            {k: v[copies] for k, v in inputs.items()},
            hparams={k: v[copies] for k, v in hparams.items()},
            keys=keys[copies],
        )
        np.testing.assert_array_equal(alone[0], actions[c])
        np.testing.assert_array_equal(
            jax.random.key_data(alone_keys[0]), jax.random.key_data(round_keys[c])
        )
    assert not np.array_equal(actions[1], actions[4])  # the instances do differ
