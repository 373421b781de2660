"""Active Federated Learning against the plain NumPy round (jfl.reference.numpy_afl), fed the
same Gumbel noise, on many random instances: never-seen clients, unavailable ones, α's over
their ranges (none set aside, all of them, no uniform slot, only uniform slots)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfl.envs.wireless import Observation
from jfl.policies import LearnerObservation, afl, get
from jfl.policies._afl import AflState
from jfl.reference.numpy_afl import afl_numpy, afl_valuation

N, M = 8, 3
INSTANCES = 300


def instances(seed: int):
    rng = np.random.default_rng(seed)
    available = rng.uniform(size=(INSTANCES, N)) < 0.85
    valuation = rng.gamma(1.0, 20.0, size=(INSTANCES, N)).astype(np.float32)
    valuation[rng.uniform(size=(INSTANCES, N)) < 0.3] = np.inf  # never seen
    alphas = rng.uniform(size=(INSTANCES, 3)).astype(np.float32)
    alphas[:, 1] *= 0.2
    alphas[::7] = [0.0, 0.01, 0.0]  # nothing set aside, no uniform slot
    alphas[1::7] = [1.0, 0.01, 1.0]  # everything seen set aside, only uniform slots
    alphas[2::7] = [0.75, 0.01, 0.1]  # the paper's defaults
    return available, valuation, alphas


@pytest.fixture(scope="module")
def policy():
    return afl(N, M)


@pytest.mark.parametrize("seed", range(2))
def test_afl_matches_numpy(policy, seed):
    available, valuation, alphas = instances(seed)

    def one(key, valuation, available, alpha):
        hparams = {"alpha1": alpha[0], "alpha2": alpha[1], "alpha3": alpha[2]}
        obs = LearnerObservation(Observation(available), {})
        return policy.select(key, AflState(valuation), obs, hparams)

    keys = jax.random.split(jax.random.key(200 + seed), INSTANCES)
    got = np.asarray(jax.jit(jax.vmap(one))(keys, valuation, available, alphas))
    for i in range(INSTANCES):
        noise = [np.asarray(jax.random.gumbel(k, (N,))) for k in jax.random.split(keys[i], 3)]
        want = afl_numpy(noise, valuation[i], available[i], M, *alphas[i])
        np.testing.assert_array_equal(got[i], want, err_msg=f"instance {i}")
        assert got[i].sum() == min(M, available[i].sum()) and not (got[i] & ~available[i]).any()


def test_afl_values_the_clients_it_selected(policy):
    rng = np.random.default_rng(3)
    valuation = np.where(rng.uniform(size=N) < 0.5, np.inf, 5.0).astype(np.float32)
    selected = rng.uniform(size=N) < 0.5
    size, loss = rng.integers(0, 40, N).astype(np.float32), rng.uniform(0, 3, N).astype(np.float32)
    obs = LearnerObservation(
        Observation(jnp.ones(N, bool)), {"data_size": size, "local_loss": loss}
    )
    got = policy.update(AflState(jnp.asarray(valuation)), obs, jnp.asarray(selected), None, {})
    np.testing.assert_array_equal(got.valuation, afl_valuation(valuation, selected, size, loss))
    assert np.isinf(policy.init(jax.random.key(0), {}).valuation).all()
    assert get("afl").defaults() == {"alpha1": 0.75, "alpha2": 0.01, "alpha3": 0.1}
