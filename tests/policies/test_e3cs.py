"""E3CS against the plain NumPy loop of Algorithm 1 (jfl.reference.numpy_e3cs), fed the same
sampling draws: π, S′, the selection and the new weights of one round on many random instances
(unavailable clients, capped weights, weights e^±60 apart, σ over [0, 1], the E3CS-inc
schedule), a 30-round trajectory, and a run of the real runner on the volatile environment; the
edge cases σ = 0 (Exp3.M's capping), σ = k/N (uniform), everything capped; its refusal where no
environment field says whose update arrived."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfl.envs import ENVIRONMENTS, HflEnv, VolatileEnv, WirelessEnv
from jfl.envs.volatile import Feedback, Observation
from jfl.experiments.common import check_policies
from jfl.kernels import capped_inclusion
from jfl.policies import e3cs, get
from jfl.policies._e3cs import E3csState, allocation, sigma_fraction
from jfl.reference.numpy_e3cs import e3cs_fraction, e3cs_numpy_loop, e3cs_round_numpy
from jfl.runner import make_run, run_keys

N, M = 10, 3
INSTANCES = 400


def hparams_of(eta, sigma, switch):
    return {"eta": eta, "sigma": sigma, "switch": switch}


@pytest.fixture(scope="module")
def one_round():
    """One round of the policy, vmapped: π, S′, the selection, the new state, and the draws the
    round's key gives (the order and point u of ``systematic_sample``, and the two rows of
    uniforms that the volatile environment's ``step`` would draw from that key), in one program.
    """
    policy = e3cs(N, M)

    def one(key, log_weight, round_index, available, success, eta, sigma, switch):
        hparams = hparams_of(eta, sigma, switch)
        state = E3csState(log_weight, round_index)
        obs = Observation(available, jnp.zeros(N))
        alloc = allocation(log_weight, available, M, sigma_fraction(hparams, round_index), eta)
        selected = policy.select(key, state, obs, hparams)
        arrived = selected & success
        feedback = Feedback(arrived, jnp.float32(1.0), jnp.sum(arrived, dtype=jnp.int32))
        new = policy.update(state, obs, selected, feedback, hparams)
        k_order, k_point = jax.random.split(key)
        order = jax.random.permutation(k_order, N)
        point = jax.random.uniform(k_point, (), jnp.float32)
        env_draws = jax.random.uniform(key, (2, N), jnp.float32)
        return (alloc.inclusion, alloc.capped, selected, new.log_weight, new.round, alloc.gain,
                order, point, env_draws)  # fmt: skip

    jitted = jax.jit(jax.vmap(one))
    return lambda *args: tuple(np.asarray(a) for a in jitted(*args))


def padded(rows: list[tuple], key=0):
    """The arguments of ``one_round`` for a few instances, ``rows`` of (log weight, round,
    available, success, eta, sigma, switch), repeated up to INSTANCES (one compiled shape)."""
    rows = [rows[i % len(rows)] for i in range(INSTANCES)]
    keys = jax.random.split(jax.random.key(key), INSTANCES)
    dtypes = (np.float32, np.int32, bool, bool, np.float32, np.float32, np.float32)
    return keys, *(np.asarray([r[j] for r in rows], d) for j, d in enumerate(dtypes))


def instances(seed: int):
    rng = np.random.default_rng(seed)
    available = rng.uniform(size=(INSTANCES, N)) < 0.8
    available[:40] = True
    available[40:60] = rng.uniform(size=(20, N)) < 0.25  # k < m: often everyone capped
    available[60] = False
    kind = np.arange(INSTANCES) % 4
    log_weight = np.zeros((INSTANCES, N))  # kind 0: the start, w = 1
    log_weight[kind == 1] = rng.normal(0, 1.5, size=((kind == 1).sum(), N))
    big = rng.uniform(size=((kind == 2).sum(), N)) < 0.25  # a few huge weights: capped
    log_weight[kind == 2] = rng.normal(0, 1, size=big.shape) + np.where(big, 40.0, 0.0)
    log_weight[kind == 3] = rng.normal(0, 20, size=((kind == 3).sum(), N))  # e^±60 apart
    sigma = rng.uniform(size=INSTANCES)
    sigma[::5] = 0.0
    sigma[1::5] = 1.0
    sigma[2::10] = 0.5
    sigma[3::10] = 0.8
    switch = np.where(rng.uniform(size=INSTANCES) < 0.2, 5.0, 0.0)
    round_index = rng.choice([0, 4, 5, 9], size=INSTANCES)
    eta = np.where(rng.uniform(size=INSTANCES) < 0.5, 0.5, rng.uniform(0, 2, INSTANCES))
    success = rng.uniform(size=(INSTANCES, N)) < 0.6
    f32 = np.float32
    return (available, log_weight.astype(f32), round_index.astype(np.int32), success,
            eta.astype(f32), sigma.astype(f32), switch.astype(f32))  # fmt: skip


@pytest.mark.parametrize("seed", range(2))
def test_e3cs_round_matches_numpy(one_round, seed):
    available, log_weight, round_index, success, eta, sigma, switch = instances(seed)
    keys = jax.random.split(jax.random.key(300 + seed), INSTANCES)
    pi, capped, selected, new, rounds, _, orders, points, _ = one_round(
        keys, log_weight, round_index, available, success, eta, sigma, switch
    )
    for i in range(INSTANCES):
        fraction = e3cs_fraction(sigma[i], switch[i], round_index[i])
        want = e3cs_round_numpy(np.exp(log_weight[i].astype(float)), available[i], M, eta[i],
                                fraction, orders[i], points[i], success[i])  # fmt: skip
        msg = f"instance {i}"
        np.testing.assert_allclose(pi[i], want[0], rtol=2e-5, atol=2e-6, err_msg=msg)
        np.testing.assert_array_equal(capped[i], want[1], err_msg=msg)
        np.testing.assert_array_equal(selected[i], want[2], err_msg=msg)
        np.testing.assert_allclose(new[i], np.log(want[3]), rtol=2e-5, atol=2e-5, err_msg=msg)
        k = min(M, available[i].sum())
        assert selected[i].sum() == k and not np.any(selected[i] & ~available[i]), msg
        assert abs(pi[i].sum() - k) < 1e-5 and np.all(pi[i][~available[i]] == 0), msg
        # Unavailable and capped clients keep their weight; so does everyone when σ = k/N.
        keep = ~available[i] | capped[i] | ~(selected[i] & success[i]) | (fraction == 1)
        np.testing.assert_array_equal(new[i][keep], log_weight[i][keep], err_msg=msg)
    np.testing.assert_array_equal(rounds, round_index + 1)


def test_e3cs_trajectory_matches_numpy(one_round):
    """30 rounds from w = 1 (E3CS-0, E3CS-0.5 and E3CS-inc with switch 10 side by side): the
    policy's π, weights and selections and the NumPy loop's, round by round."""
    rng = np.random.default_rng(7)
    num_rounds = 30
    available = rng.uniform(size=(num_rounds, INSTANCES, N)) < 0.9
    success_draws = rng.uniform(size=(num_rounds, INSTANCES, N))
    probability = np.tile([0.1, 0.3, 0.6, 0.9, 0.9], 2)
    sigma = np.where(np.arange(INSTANCES) % 3 == 0, 0.0, 0.5).astype(np.float32)
    switch = np.where(np.arange(INSTANCES) % 3 == 1, 10.0, 0.0).astype(np.float32)
    eta = np.full(INSTANCES, 0.5, np.float32)
    log_weight = np.zeros((INSTANCES, N), np.float32)
    keys = jax.random.split(jax.random.key(11), (num_rounds, INSTANCES))
    got = {name: [] for name in ("pi", "selected", "weights", "orders", "points")}
    for t in range(num_rounds):
        success = success_draws[t] < probability
        pi, _, selected, log_weight, _, _, order, point, _ = one_round(
            keys[t], log_weight, np.full(INSTANCES, t, np.int32), available[t], success,
            eta, sigma, switch,
        )  # fmt: skip
        weights = log_weight - log_weight.max(axis=1, keepdims=True)
        for name, value in zip(got, (pi, selected, weights, order, point), strict=True):
            got[name].append(value)
    got = {name: np.stack(v, axis=1) for name, v in got.items()}
    for i in range(0, INSTANCES, 4):
        draws = (got["orders"][i], got["points"][i], success_draws[:, i])
        want = e3cs_numpy_loop(available[:, i], *draws, probability, M, 0.5, sigma[i], switch[i])
        msg = f"instance {i}"
        np.testing.assert_array_equal(got["selected"][i], want["selected"], err_msg=msg)
        np.testing.assert_allclose(got["pi"][i], want["pi"], rtol=1e-4, atol=1e-5, err_msg=msg)
        np.testing.assert_allclose(
            got["weights"][i], np.log(want["weights"]), rtol=1e-4, atol=1e-4, err_msg=msg
        )


def test_e3cs_edge_cases(one_round):
    """σ = 0 is Exp3.M's capping of w (the kernel), σ = k/N is uniform, k = N caps everyone, an
    unavailable client gets π = 0, a weight e^200 times the others' is capped and the others
    share the rest (exponentiating first would round their shares to 0); E3CS-inc: σ = 0 in the
    first ``switch`` rounds, k/N after."""
    rng = np.random.default_rng(5)
    lw = rng.normal(0, 1, N).astype(np.float32)
    huge = lw.copy()
    huge[0] = 200.0
    everyone, few, none = np.ones(N, bool), np.arange(N) < 2, np.zeros(N, bool)
    rows = [
        (lw, 0, everyone, everyone, 0.5, 0.0, 0.0),  # 0: σ = 0
        (lw, 0, everyone, everyone, 0.5, 1.0, 0.0),  # 1: σ = k/N
        (lw, 0, few, few, 0.5, 0.0, 0.0),  # 2-4: k = N = 2
        (lw, 0, few, few, 0.5, 0.5, 0.0),
        (lw, 0, few, few, 0.5, 1.0, 0.0),
        (huge, 0, everyone, everyone, 0.5, 0.0, 0.0),  # 5: one huge weight
        (lw, 4, everyone, everyone, 0.5, 0.5, 5.0),  # 6: E3CS-inc, last round at σ = 0
        (lw, 5, everyone, everyone, 0.5, 0.5, 5.0),  # 7: first round at σ = k/N
        (lw, 0, none, none, 0.5, 0.5, 0.0),  # 8: nobody available
    ]
    pi, capped, selected, new, _, gain, *_ = one_round(*padded(rows))
    np.testing.assert_allclose(pi[0], capped_inclusion(jnp.exp(lw), M), atol=1e-6)
    assert gain[0] == pytest.approx(M * 0.5 / N) and gain[1] == 0.0
    np.testing.assert_allclose(pi[1], M / N, rtol=1e-6)
    np.testing.assert_array_equal(new[1], lw)
    for row in (2, 3, 4):
        np.testing.assert_array_equal(pi[row], np.where(few, 1.0, 0.0))
        np.testing.assert_array_equal(capped[row], few)
        np.testing.assert_array_equal(selected[row], few)
        np.testing.assert_array_equal(new[row], lw)
    np.testing.assert_array_equal(capped[5], np.arange(N) == 0)
    rest = np.exp(lw[1:].astype(float))
    np.testing.assert_allclose(pi[5][1:], np.minimum((M - 1) * rest / rest.sum(), 1), rtol=1e-5)
    assert pi[5][0] == 1.0 and selected[5][0] and new[5][0] == 200.0
    assert float(capped_inclusion(jnp.exp(huge - 200.0), M)[1:].sum()) == 0.0  # what it avoids
    np.testing.assert_allclose(pi[6], pi[0], rtol=1e-6)
    np.testing.assert_allclose(pi[7], pi[1], rtol=1e-6)
    assert not pi[8].any() and not selected[8].any()
    np.testing.assert_array_equal(new[8], lw)


def test_e3cs_inclusion_frequencies(one_round):
    """The selections' frequencies over 4000 draws from one state are its π (4.5 SE)."""
    rng = np.random.default_rng(9)
    row = (rng.normal(0, 1.5, N), 0, rng.uniform(size=N) < 0.8, np.zeros(N), 0.5, 0.3, 0.0)
    repeats, counts = 10, 0
    for r in range(repeats):
        pi, _, selected, *_ = one_round(*padded([row], key=50 + r))
        counts = counts + selected.sum(axis=0)
    draws = repeats * INSTANCES
    pi = pi[0]
    se = np.sqrt(pi * (1 - pi) / draws)
    assert np.all(np.abs(counts / draws - pi) <= 4.5 * se + 1e-9)


def test_e3cs_in_the_runner_matches_numpy(one_round):
    """A run of ``jfl.runner.make_run`` on the volatile environment (90% available, the paper's
    four classes) against the NumPy loop fed that run's draws."""
    num_rounds = 40
    env = VolatileEnv()
    params = env.default_params(num_clients=N, availability=0.9)
    run = make_run(env, params, e3cs(N, M), num_rounds, trajectories=True)
    hparams = {**get("e3cs").defaults(), "sigma": 0.2}
    key = jax.random.key(3)
    out = jax.jit(run)(key, hparams)
    k_reset, _, k_rounds = run_keys(key)
    keys = jax.random.split(k_rounds, (num_rounds, 2))
    # The round keys' draws through the compiled round (the rest of the batch is padding).
    args = padded([(np.zeros(N), 0, np.ones(N), np.ones(N), 0.5, 0.5, 0.0)])
    batch = jnp.concatenate([keys[:, 0], keys[:, 1], k_reset[None], args[0][: -2 * num_rounds - 1]])
    *_, orders, points, env_draws = one_round(batch, *args[1:])
    orders, points = orders[:num_rounds], points[:num_rounds]
    step_draws = env_draws[num_rounds : 2 * num_rounds]
    first = env_draws[2 * num_rounds, 0] < 0.9  # the reset's uniform(k_reset, (N,)): that row
    available = np.concatenate([first[None], step_draws[:-1, 1] < 0.9])
    probability = np.asarray(params.success_probability)
    want = e3cs_numpy_loop(available, orders, points, step_draws[:, 0], probability, M, 0.5, 0.2)
    np.testing.assert_array_equal(np.asarray(out.selected), want["selected"])
    success = want["selected"] & (step_draws[:, 0] < probability)
    np.testing.assert_array_equal(np.asarray(out.num_success), success.sum(axis=1))
    np.testing.assert_array_equal(np.asarray(out.num_selected), np.minimum(M, available.sum(1)))
    np.testing.assert_array_equal(np.asarray(out.round_time), np.ones(num_rounds))


class _NoSuccess(VolatileEnv):
    """The volatile environment, less the field that says whose update arrived."""

    name = "no_success"
    provides = ("available", "round_time", "num_success")


def test_e3cs_needs_a_success_signal(monkeypatch):
    """Refused, in one line and before anything compiles, by an environment that does not say
    whose update arrived (or has no client-level availability); accepted by the volatile and
    wireless environments."""
    spec = get("e3cs")
    assert spec.requires == ("available", "success") and spec.defaults() == {
        "eta": 0.5,
        "sigma": 0.5,
        "switch": 0.0,
    }
    with pytest.raises(ValueError, match=r"reads \['success'\].*'no_success'") as err:
        spec.check_environment(_NoSuccess())
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="available"):
        spec.check_environment(HflEnv())  # success per (client, server) pair, no `available`
    monkeypatch.setitem(ENVIRONMENTS, "no_success", _NoSuccess)
    with pytest.raises(ValueError, match=r"--policies: .*success"):
        check_policies(["e3cs"], "no_success")
    spec.check_environment(VolatileEnv())
    spec.check_environment(WirelessEnv())
    check_policies(["e3cs", "random"], "volatile")
    with pytest.raises(ValueError, match="sigma"):
        spec.validate({"sigma": 1.5})
