"""Clustered sampling by model similarity (Fraboni et al. 2021, Alg. 2) against the plain loops
of jfl.reference.numpy_clustered_similarity, fed the same draws: one round's m distributions and
draws (Ward on the angles, and on the rows of the angle matrix as the authors' code does) on many
random instances (never-seen clients with zero rows, repeated rows, unavailable clients, fewer
available than m, clients without data, a client whose share exceeds 1/m, equal shares); the
authors' own check that the distributions average to the shares; an 8-round trajectory from
all-zero rows; the refusal of a run without a learner. One compiled program."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfl.envs.wireless import Observation
from jfl.policies import LearnerObservation, get
from jfl.policies._clustered_similarity import (
    ClusteredSimilarityState,
    clustered_similarity,
    round_buckets,
    round_draws,
)
from jfl.reference.numpy_clustered_similarity import (
    clustered_similarity_numpy,
    clustered_similarity_numpy_loop,
)

N, M, K = 10, 3, 4
INSTANCES = 300
WARD_INPUTS = ("distances", "rows")


@pytest.fixture(scope="module")
def one_round():
    """One round of both variants, vmapped: each one's buckets and selection weights, the rows
    after the round with the first variant's selection, and the round's draws, in one program."""
    policies = [clustered_similarity(N, M, ward_input=w, sketch_dim=K) for w in WARD_INPUTS]

    def one(key, rows, available, size, update):
        signals = {"data_size": size, "update_sketch": update}
        obs = LearnerObservation(Observation(available), signals)
        state = ClusteredSimilarityState(rows)
        draws = round_draws(key, N)
        masked = jnp.where(available, size, 0.0)
        buckets = jnp.stack(
            [round_buckets(rows, available, masked, draws, M, w) for w in WARD_INPUTS]
        )
        chosen = [p.select(key, state, obs, {}) for p in policies]
        weight = jnp.stack([c.weight for c in chosen])
        new = policies[0].update(state, obs, chosen[0].clients, None, {})
        gumbel = jax.random.gumbel(draws.key, (M, N))
        return buckets, weight, new.updates, draws.order, draws.tie, draws.shuffle, gumbel

    jitted = jax.jit(jax.vmap(one))
    return lambda *args: tuple(np.asarray(a) for a in jitted(*args))


def instances(seed: int):
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=(INSTANCES, N, K)).astype(np.float32)
    rows[rng.uniform(size=(INSTANCES, N)) < 0.3] = 0.0  # never seen
    rows[:20] = 0.0  # the first round: every row 0
    rows[1::5, 6] = rows[1::5, 2]  # repeated rows
    rows[2::5, 7] = 3.0 * rows[2::5, 1]  # parallel rows
    available = rng.uniform(size=(INSTANCES, N)) < 0.8
    available[20:35] = rng.uniform(size=(15, N)) < 0.25  # often fewer than m
    available[35] = False
    size = rng.integers(1, 60, size=(INSTANCES, N)).astype(np.float32)
    size[rng.uniform(size=size.shape) < 0.1] = 0.0  # no data
    size[3::4, 0] = 600.0  # a share above 1/m
    size[40:60] = 5.0  # equal shares
    update = rng.normal(size=(INSTANCES, N, K)).astype(np.float32)
    keys = jax.random.split(jax.random.key(seed), INSTANCES)
    return keys, rows, available, size, update


@pytest.mark.parametrize("seed", range(2))
def test_clustered_similarity_round_matches_numpy(one_round, seed):
    args = instances(seed)
    _, rows, available, size, update = args
    buckets, weight, new_rows, order, tie, shuffle, gumbel = one_round(*args)
    for i in range(INSTANCES):
        msg = f"instance {i}"
        share = np.where(available[i], size[i], 0.0)
        for v, ward_input in enumerate(WARD_INPUTS):
            want_buckets, count = clustered_similarity_numpy(
                rows[i], available[i], size[i], M, order[i], tie[i], shuffle[i], gumbel[i],
                ward_input,
            )  # fmt: skip
            err = f"{msg} {ward_input}"
            np.testing.assert_allclose(buckets[i, v], want_buckets, atol=2e-6, err_msg=err)
            np.testing.assert_allclose(weight[i, v], count / M, err_msg=err)
            assert not np.any((weight[i, v] > 0) & ~available[i]), err
            if share.sum() > 0:
                # Every bucket a distribution; each client m·p_i over them (unbiased, 1/m).
                np.testing.assert_allclose(buckets[i, v].sum(axis=1), 1.0, rtol=1e-5)
                np.testing.assert_allclose(
                    buckets[i, v].mean(axis=0), share / share.sum(), atol=2e-6, err_msg=err
                )
            else:
                assert not weight[i, v].any(), err
        # The first variant's selected clients' rows become their updates.
        picked = weight[i, 0] > 0
        np.testing.assert_array_equal(new_rows[i], np.where(picked[:, None], update[i], rows[i]))


def test_clustered_similarity_heavy_client_has_a_bucket(one_round):
    """A client whose share exceeds 1/m (the authors' code does not handle it) fills a bucket of
    its own, so it is drawn every round, and its excess is poured with the others."""
    keys, rows, available, size, update = instances(2)
    available[:, 0] = True
    size[:, 0] = np.random.default_rng(2).uniform(0.5, 4.0, INSTANCES) * size[:, 1:].sum(axis=1)
    buckets, weight, *_ = one_round(keys, rows, available, size, update)
    for i in range(INSTANCES):
        share = size[i, 0] / np.where(available[i], size[i], 0.0).sum()
        if share > 1 / M:
            assert np.isclose(buckets[i, :, :, 0], 1.0).any(axis=-1).all(), f"instance {i}"
            assert weight[i, :, 0].min() >= 1 / M, f"instance {i}"


def test_clustered_similarity_trajectory_matches_numpy(one_round):
    """8 rounds from all-zero rows (every client never seen): the policy's selections, its rows
    fed forward with each round's updates of the selected clients, against the NumPy loop."""
    rng = np.random.default_rng(23)
    num_rounds = 8
    updates = rng.normal(size=(num_rounds, INSTANCES, N, K)).astype(np.float32)
    available = rng.uniform(size=(num_rounds, INSTANCES, N)) < 0.8
    size = rng.integers(1, 40, size=(INSTANCES, N)).astype(np.float32)
    rows = np.zeros((INSTANCES, N, K), np.float32)
    keys = jax.random.split(jax.random.key(8), (num_rounds, INSTANCES))
    counts, draws = [], []
    for t in range(num_rounds):
        _, weight, rows, *drawn = one_round(keys[t], rows, available[t], size, updates[t])
        counts.append(np.rint(weight[:, 0] * M).astype(int))
        draws.append(drawn)
    counts = np.stack(counts, axis=1)
    for i in range(0, INSTANCES, 3):
        round_draws_i = [tuple(d[i] for d in draws[t]) for t in range(num_rounds)]
        want = clustered_similarity_numpy_loop(
            updates[:, i], available[:, i], size[i], M, round_draws_i
        )
        np.testing.assert_array_equal(counts[i], want, err_msg=f"instance {i}")


def test_clustered_similarity_spec_and_refusal():
    """Algorithm 2 reads the learner's update sketches and data sizes: refused, in one line and
    before anything compiles, by a run without a learner."""
    spec = get("clustered_similarity")
    assert spec.requires == ("available", "data_size", "update_sketch")
    assert spec.signals == ("data_size", "update_sketch") == spec.build(N, M).signals
    with pytest.raises(ValueError, match=r"reads \['data_size', 'update_sketch'\]") as err:
        spec.check_learner(None)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="ward_input"):
        clustered_similarity(N, M, ward_input="square")
    with pytest.raises(ValueError, match="selection_size"):
        clustered_similarity(N, 0)
    policy = spec.build(N, M, sketch_dim=K)
    state = policy.init(jax.random.key(0), {})
    assert state.updates.shape == (N, K) and not np.asarray(state.updates).any()
    signals = {"data_size": jnp.ones(N), "update_sketch": jnp.zeros((N, K + 1))}
    obs = LearnerObservation(Observation(jnp.ones(N, bool)), signals)
    with pytest.raises(ValueError, match=rf"has {K + 1} coordinates.*sketch_dim={K}"):
        policy.update(state, obs, jnp.ones(N, bool), None, {})
