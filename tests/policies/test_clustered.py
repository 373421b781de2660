"""Clustered sampling by data size (Fraboni et al. 2021, Alg. 1) against the plain pouring loop
and draws fed the same Gumbel noise (jfl.reference.numpy_sampling), on random instances with
unavailable clients, clients without data, a client whose share fills whole buckets."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jfl.envs.wireless import Observation
from jfl.policies import LearnerObservation, clustered_size, get
from jfl.reference.numpy_sampling import clustered_numpy, draw_counts

N, M = 8, 3
INSTANCES = 200


def test_clustered_size_draws_one_client_per_bucket():
    rng = np.random.default_rng(11)
    available = rng.uniform(size=(INSTANCES, N)) < 0.8
    available[:3] = False  # nobody available
    size = rng.integers(0, 60, size=(INSTANCES, N)).astype(np.float32)
    size[rng.uniform(size=size.shape) < 0.15] = 0.0
    size[3::4, 0] = 500.0  # a share above 1/m: client 0 fills whole buckets
    policy = clustered_size(N, M)

    def one(key, available, size):
        obs = LearnerObservation(Observation(available), {"data_size": size})
        return policy.select(key, policy.init(key, {}), obs, {})

    keys = jax.random.split(jax.random.key(600), INSTANCES)
    got = jax.jit(jax.vmap(one))(keys, available, size)
    for i in range(INSTANCES):
        share = np.where(available[i], size[i], 0.0)
        count = np.zeros(N, int)
        if share.sum() > 0:
            buckets = clustered_numpy(share / share.sum(), M)
            count = draw_counts(buckets, np.asarray(jax.random.gumbel(keys[i], (M, N))))
        np.testing.assert_array_equal(np.asarray(got.clients[i]), count > 0, f"instance {i}")
        np.testing.assert_allclose(np.asarray(got.weight[i]), count / M)
        if share.sum() > 0 and share[0] / share.sum() >= 1 / M:
            assert count[0] >= int(np.floor(M * share[0] / share.sum() + 1e-6))
    assert np.asarray(got.clients[:3]).sum() == 0
    assert get("clustered_size").signals == ("data_size",)


def test_clustered_size_equal_shares_select_m_distinct_clients():
    """N = m·j equal shares: each bucket holds j whole clients, so m distinct clients."""
    policy = clustered_size(6, 3)
    obs = LearnerObservation(Observation(jnp.ones(6, bool)), {"data_size": jnp.full(6, 5.0)})
    keys = jax.random.split(jax.random.key(1), 50)
    got = jax.jit(jax.vmap(lambda key: policy.select(key, (), obs, {})))(keys)
    clients = np.asarray(got.clients).reshape(50, 3, 2)  # bucket k holds clients 2k and 2k + 1
    np.testing.assert_array_equal(clients.sum(axis=2), 1)
    np.testing.assert_allclose(np.asarray(got.weight).sum(axis=1), 1.0)
