"""DELTA, FedIS and optimal client sampling (jfl.policies._importance) against the plain NumPy
loops of jfl.reference.numpy_importance, fed the same draws: one round (π, the selection, the
unbiased weights, the new sampling distribution) on many random instances with unavailable
clients, clients without data, fewer available than m, zero updates and huge norms that cap;
a trajectory; the optimal probabilities against eq. 7 as written, and the estimator's
unbiasedness; the refusals."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfl.envs import RbcsfEnv
from jfl.envs.wireless import Observation
from jfl.kernels import capped_inclusion
from jfl.policies import LearnerObservation, delta, fedis, get, ocs
from jfl.policies._importance import ImportanceState
from jfl.reference.numpy_importance import (
    importance_select_numpy,
    importance_update_numpy,
    ocs_numpy,
    optimal_probabilities,
)
from jfl.runner import make_run

N, M, DIM = 10, 3, 4
INSTANCES = 300


def instances(seed: int):
    """Random rounds: availability, data sizes, a sampling distribution, the participants'
    signals (sketch rows, norms, gradient variances, every client's update norm)."""
    rng = np.random.default_rng(seed)
    available = rng.uniform(size=(INSTANCES, N)) < 0.8
    available[:20] = rng.uniform(size=(20, N)) < 0.2  # often fewer available than m
    available[20] = False
    size = rng.integers(1, 80, size=(INSTANCES, N)).astype(np.float32)
    size[rng.uniform(size=size.shape) < 0.1] = 0.0
    prob = rng.dirichlet(np.ones(N), size=INSTANCES).astype(np.float32)
    prob[30:40, :5] = 0.0  # clients never to be drawn again
    prob[40:50] *= np.where(rng.uniform(size=(10, N)) < 0.3, 50.0, 1.0)  # a few capped
    prob /= prob.sum(axis=1, keepdims=True)
    sketch = rng.normal(size=(INSTANCES, N, DIM)).astype(np.float32)
    norm = rng.uniform(0, 3, size=(INSTANCES, N)).astype(np.float32)
    norm[50:60] = 0.0  # no update moved
    norm[60:70, 0] = 1e4  # one update dwarfs the others: capped at π = 1
    grad_var = rng.uniform(0, 2, size=(INSTANCES, N)).astype(np.float32)
    # α₁, α₂, then DELTA's gradient_scale (1: ζ of the sketches over η·K_i, 0: of the updates).
    alpha = rng.uniform(0, 2, size=(INSTANCES, 3)).astype(np.float32)
    alpha[::7, 0] = 0.0
    alpha[:, 2] = np.arange(INSTANCES) % 3 != 0
    # η·K_i: a learning rate times the steps; 0 for a client that took none (no data).
    scale = (0.3 * rng.integers(0, 12, size=(INSTANCES, N))).astype(np.float32)
    sketch = np.concatenate([sketch, scale[..., None]], axis=-1)  # carried with the sketches
    return available, size, prob, sketch, norm, grad_var, alpha


@pytest.fixture(scope="module")
def rounds():
    """One round of each policy, vmapped, with the draws its key gives."""
    policies = {"delta": delta(N, M), "fedis": fedis(N, M), "ocs": ocs(N, M)}

    def one(key, available, size, prob, sketch, norm, grad_var, alpha):
        hparams = {"alpha1": alpha[0], "alpha2": alpha[1], "gradient_scale": alpha[2]}
        sketch, scale = sketch[:, :-1], sketch[:, -1]
        before = {"data_size": size, "local_update_norm": norm}
        obs = LearnerObservation(Observation(available), before)
        state = ImportanceState(prob)
        out = {}
        for name in ("delta", "fedis"):
            policy = policies[name]
            chosen = policy.select(key, state, obs, hparams)
            after = {"data_size": size, "update_sketch": sketch, "update_norm": norm,
                     "grad_var": grad_var, "update_scale": scale}  # fmt: skip
            seen = LearnerObservation(Observation(available), after)
            new = policy.update(state, seen, chosen.clients, None, hparams)
            out[name] = (chosen.clients, chosen.weight, new.prob)
        chosen = policies["ocs"].select(key, None, obs, hparams)
        out["ocs"] = (chosen.clients, chosen.weight)
        k_order, k_point = jax.random.split(key)
        draws = (jax.random.permutation(k_order, N), jax.random.uniform(k_point, ()),
                 jax.random.uniform(key, (N,)))  # fmt: skip
        return out, draws

    jitted = jax.jit(jax.vmap(one))
    return lambda *args: jax.tree.map(np.asarray, jitted(*args))


@pytest.mark.parametrize("seed", range(2))
def test_one_round_matches_numpy(rounds, seed):
    available, size, prob, sketch, norm, grad_var, alpha = instances(seed)
    keys = jax.random.split(jax.random.key(seed), INSTANCES)
    out, (order, point, uniforms) = rounds(keys, available, size, prob, sketch, norm, grad_var,
                                           alpha)  # fmt: skip
    varied = 0
    for i in range(INSTANCES):
        for name in ("delta", "fedis"):
            clients, weight, new = out[name]
            _, sel, w = importance_select_numpy(prob[i], available[i], size[i], M, order[i],
                                                point[i])  # fmt: skip
            np.testing.assert_array_equal(clients[i], sel, f"{name} instance {i}")
            np.testing.assert_allclose(weight[i], w, rtol=1e-5, err_msg=f"{name} {i}")
            scale = sketch[i, :, -1] if alpha[i, 2] else None
            want = importance_update_numpy(prob[i], sel, size[i], sketch[i, :, :-1], norm[i],
                                           grad_var[i], *alpha[i, :2], name == "delta",
                                           scale)  # fmt: skip
            np.testing.assert_allclose(new[i], want, rtol=2e-5, atol=1e-7, err_msg=f"{name} {i}")
        _, sel, w = ocs_numpy(available[i], size[i], norm[i], M, uniforms[i])
        np.testing.assert_array_equal(out["ocs"][0][i], sel, f"ocs instance {i}")
        np.testing.assert_allclose(out["ocs"][1][i], w, rtol=1e-5, err_msg=f"ocs {i}")
        varied += out["ocs"][0][i].sum() != min(M, available[i].sum())
    # Independent Bernoulli draws vary in number; systematic sampling never does (but a client
    # with P = 0 is never drawn, so fewer than m may be).
    assert varied > 0
    drawable = (available & (prob > 0)).sum(1)
    assert np.all(out["delta"][0].sum(1) == np.minimum(M, drawable))
    assert not np.any(clients & ~available) and not np.any(out["ocs"][0] & ~available)


def test_optimal_probabilities_are_eq7_and_the_capped_inclusion():
    """The JAX inclusion (``capped_inclusion``: π = min(1, λũ), Σπ = m) is eq. 7 as written,
    on random norms with ties, zeros and a few that dominate."""
    rng = np.random.default_rng(3)
    u = rng.uniform(0, 1, size=(500, N))
    u[::5] = np.round(u[::5], 1)  # ties
    u[1::5, :3] = 0.0
    u[2::5, :2] *= 100.0
    got = np.asarray(jax.jit(jax.vmap(capped_inclusion, (0, None)))(u.astype(np.float32), M))
    for i in range(len(u)):
        want = optimal_probabilities(u[i], M)
        np.testing.assert_allclose(got[i], want, rtol=1e-5, atol=1e-6, err_msg=f"{i}")
        assert math.isclose(want.sum(), M) and want.max() <= 1 + 1e-12


def test_the_estimate_is_unbiased(rounds):
    """Over 300 draws of one instance the mean of Σ_S (d_i/π_i)·U_i (U_i a scalar per client)
    is Σ_i d_i·U_i, within four standard errors of the draws' own spread, for each policy."""
    available, size, prob, sketch, norm, grad_var, alpha = (
        np.broadcast_to(a[100], (INSTANCES, *a.shape[1:])).copy() for a in instances(5)
    )
    available[:] = True
    size[:] = np.arange(1, N + 1)
    keys = jax.random.split(jax.random.key(8), INSTANCES)
    out, _ = rounds(keys, available, size, prob, sketch, norm, grad_var, alpha)
    update = np.random.default_rng(9).normal(size=N)
    target = (size[0] / size[0].sum()) @ update
    for name in ("delta", "fedis", "ocs"):
        estimate = out[name][1] @ update
        error = 4 * estimate.std() / math.sqrt(INSTANCES)
        assert abs(estimate.mean() - target) < error, (name, estimate.mean(), target, error)


def test_a_trajectory_matches_numpy(rounds):
    """Twenty rounds of DELTA with fresh signals each round, the distribution carried over, on
    the one-round program (every row of its batch the trajectory's instance)."""
    rng = np.random.default_rng(12)
    steps = 20
    alpha = np.array([1.0, 0.5, 1.0], np.float32)  # ζ on the gradient scale
    available = rng.uniform(size=(steps, N)) < 0.8
    size = rng.integers(1, 50, N).astype(np.float32)
    sketch = rng.normal(size=(steps, N, DIM)).astype(np.float32)
    scale = (0.1 * rng.integers(1, 20, size=(steps, N, 1))).astype(np.float32)
    sketch = np.concatenate([sketch, scale], axis=-1)
    grad_var = rng.uniform(0, 1, size=(steps, N)).astype(np.float32)
    keys = jax.random.split(jax.random.key(13), steps)
    norm = np.zeros(N, np.float32)
    prob = np.asarray(delta(N, M).init(jax.random.key(0), {}).prob)
    want = prob.astype(np.float64)
    for t in range(steps):
        args = (available[t], size, prob, sketch[t], norm, grad_var[t], alpha)
        out, (order, point, _) = rounds(
            keys[np.full(INSTANCES, t)], *(np.stack([a] * INSTANCES) for a in args)
        )
        chosen, _, new = (v[0] for v in out["delta"])
        _, sel, _ = importance_select_numpy(want, available[t], size, M, order[0], point[0])
        np.testing.assert_array_equal(chosen, sel, f"round {t}")
        want = importance_update_numpy(want, sel, size, sketch[t, :, :-1], None, grad_var[t],
                                       1.0, 0.5, True, scale[t, :, 0])  # fmt: skip
        np.testing.assert_allclose(new, want, rtol=1e-4, err_msg=f"round {t}")
        prob = new
    assert np.abs(want - 1.0 / N).max() > 1e-3  # the distribution learnt something


@pytest.mark.parametrize("name", ["delta", "fedis", "ocs"])
def test_registry_entries_and_refusals(name):
    spec = get(name)
    assert spec.requires[:2] == ("available", "data_size")
    spec.check_environment(RbcsfEnv())
    with pytest.raises(ValueError, match="only a federated learner computes"):
        make_run(RbcsfEnv(), RbcsfEnv().default_params(num_clients=N), spec.build(N, M), 5)
    assert spec.max_selected(N, M) == (N if name == "ocs" else M)
    if name == "delta":
        assert spec.defaults() == {"alpha1": 1.0, "alpha2": 1.0, "gradient_scale": 1.0}
        with pytest.raises(ValueError, match="alpha2"):
            spec.validate({"alpha2": -0.5})
    with pytest.raises(ValueError, match="selection_size"):
        spec.build(N, N + 1)


def test_ocs_selects_nobody_unavailable_and_everyone_when_m_covers_them():
    policy = ocs(N, M)
    available = np.zeros(N, bool)
    available[[1, 4]] = True
    signals = {"data_size": jnp.ones(N), "local_update_norm": jnp.ones(N)}
    obs = LearnerObservation(Observation(jnp.asarray(available)), signals)
    chosen = jax.jit(policy.select)(jax.random.key(0), None, obs, {})
    np.testing.assert_array_equal(np.asarray(chosen.clients), available)
    np.testing.assert_allclose(np.asarray(chosen.weight)[available], [0.5, 0.5])


def test_an_instances_round_does_not_depend_on_its_neighbours(rounds):
    """In the one compiled program, an instance among others and in a batch of copies of itself
    gives the same bits (selection, weights, new distribution) for every policy."""
    args = instances(0)
    keys = jax.random.split(jax.random.key(0), INSTANCES)
    mixed, _ = rounds(keys, *args)
    pick = np.full(INSTANCES, 45)  # a few capped clients
    copies, _ = rounds(keys[pick], *(a[pick] for a in args))
    for name, values in mixed.items():
        for got, alone in zip(values, copies[name], strict=True):
            np.testing.assert_array_equal(got[45], alone[0], name)
            np.testing.assert_array_equal(alone[0], alone[-1], name)
