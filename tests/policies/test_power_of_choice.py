"""Power-of-Choice's pow-d against the plain NumPy round (jfl.reference.numpy_power_of_choice),
fed the same Gumbel noise, on many random instances: unavailable clients, clients without data,
tied losses, d = 0 (2m), d < m, d beyond N; and its refusal without a learner."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfl.envs import RbcsfEnv
from jfl.envs.wireless import Observation
from jfl.policies import LearnerObservation, get, pow_d
from jfl.policies._power_of_choice import PowerOfChoiceState
from jfl.reference.numpy_power_of_choice import pow_d_numpy
from jfl.runner import make_run

N, M = 7, 2
INSTANCES = 300


def instances(seed: int):
    rng = np.random.default_rng(seed)
    available = rng.uniform(size=(INSTANCES, N)) < 0.8
    data_size = rng.integers(0, 50, size=(INSTANCES, N)) * (rng.uniform(size=(INSTANCES, N)) > 0.1)
    # Losses on a coarse grid, so that ties among candidates are common.
    loss = np.round(rng.uniform(0, 2, size=(INSTANCES, N)), 1)
    d = rng.choice([0, 1, 2, 3, 5, 9], size=INSTANCES).astype(np.float32)
    rounds = rng.choice([0, 1, 5], size=INSTANCES).astype(np.int32)
    priority = np.stack([rng.permutation(N) for _ in range(INSTANCES)]).astype(np.int32)
    # adapow-d on a third of the instances: its switch before, at or after the round.
    switch = np.where(rng.uniform(size=INSTANCES) < 1 / 3, rng.choice([1, 5, 6], INSTANCES), 0)
    data_size, loss = data_size.astype(np.float32), loss.astype(np.float32)
    return available, data_size, loss, d, rounds, priority, switch.astype(np.float32)


@pytest.fixture(scope="module")
def select():
    policy = pow_d(N, M)

    def one(key, state, available, data_size, loss, d, switch):
        obs = LearnerObservation(
            Observation(available), {"data_size": data_size, "local_loss": loss}
        )
        return policy.select(key, state, obs, {"d": d, "switch": switch})

    return jax.jit(jax.vmap(one))


@pytest.mark.parametrize("seed", range(2))
def test_pow_d_matches_numpy(select, seed):
    available, data_size, loss, d, rounds, priority, switch = instances(seed)
    keys = jax.random.split(jax.random.key(100 + seed), INSTANCES)
    state = PowerOfChoiceState(jnp.asarray(priority), jnp.asarray(rounds))
    got = np.asarray(select(keys, state, available, data_size, loss, d, switch))
    for i in range(INSTANCES):
        k_first, k_candidates = jax.random.split(keys[i])
        noise = [
            np.asarray(jax.random.gumbel(k, (N,), jnp.float32)) for k in (k_first, k_candidates)
        ]
        want = pow_d_numpy(*noise, data_size[i], loss[i], available[i], M, d[i], priority[i],
                           rounds[i], switch[i])  # fmt: skip
        np.testing.assert_array_equal(got[i], want, err_msg=f"instance {i}")
        assert not np.any(got[i] & ~available[i])
        assert got[i].sum() == min(M, available[i].sum())


def test_pow_d_ranks_by_loss_among_its_candidates(select):
    """d = N: every available client is a candidate, so the m highest losses are selected; in
    round 1 the draw ignores the losses."""
    available = np.ones((1, N), bool)
    data_size = np.full((1, N), 10.0, np.float32)
    loss = np.arange(N, dtype=np.float32)[None]
    state = PowerOfChoiceState(jnp.arange(N, dtype=jnp.int32)[None], jnp.ones(1, jnp.int32))
    keys = jax.random.split(jax.random.key(0), 1)
    zero = np.zeros(1, np.float32)
    got = np.asarray(select(keys, state, available, data_size, loss, zero + N, zero))
    np.testing.assert_array_equal(np.flatnonzero(got[0]), [N - 2, N - 1])


def test_pow_d_needs_a_learner():
    spec = get("pow_d")
    assert spec.signals == ("data_size", "local_loss") and spec.defaults() == {
        "d": 0.0,
        "switch": 0.0,
    }
    with pytest.raises(ValueError, match="only a federated learner computes"):
        make_run(RbcsfEnv(), RbcsfEnv().default_params(num_clients=N), pow_d(N, M), 5)
