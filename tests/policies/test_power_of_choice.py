"""Power-of-Choice's pow-d, cpow-d and rpow-d against the plain NumPy round
(jfl.reference.numpy_power_of_choice), fed the same Gumbel noise, on many random instances:
unavailable clients, clients without data, tied losses, d = 0 (2m), d < m, d beyond N; the
refusal without a learner; rand (``proportional``) against plain draws."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfl.envs import RbcsfEnv
from jfl.envs.wireless import Observation
from jfl.policies import LearnerObservation, cpow_d, get, pow_d, proportional, rpow_d
from jfl.policies._power_of_choice import PowerOfChoiceState, RecentLossState
from jfl.reference.numpy_power_of_choice import pow_d_numpy
from jfl.reference.numpy_sampling import draw_counts
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


# ---------------------------------------------------------------------------------------------
# cpow-d and rpow-d: the same round, ranked by another estimate of the loss


@pytest.fixture(scope="module")
def variants():
    """cpow-d's select (ranking by ``minibatch_loss``), rpow-d's select and update, vmapped."""
    cheap, recent = cpow_d(N, M), rpow_d(N, M)

    def cheap_select(key, state, available, data_size, loss, d, switch):
        signals = {"data_size": data_size, "minibatch_loss": loss}
        obs = LearnerObservation(Observation(available), signals)
        return cheap.select(key, state, obs, {"d": d, "switch": switch})

    def recent_round(key, state, available, data_size, train_loss, d, switch):
        obs = LearnerObservation(Observation(available), {"data_size": data_size})
        action = recent.select(key, state, obs, {"d": d, "switch": switch})
        after = LearnerObservation(Observation(available), {"train_loss": train_loss})
        return action, recent.update(state, after, action, None, {})

    return jax.jit(jax.vmap(cheap_select)), jax.jit(jax.vmap(recent_round))


def noise_of(key):
    k_first, k_candidates = jax.random.split(key)
    return [np.asarray(jax.random.gumbel(k, (N,), jnp.float32)) for k in (k_first, k_candidates)]


def test_cpow_d_ranks_its_candidates_by_the_minibatch_loss(variants):
    available, data_size, loss, d, rounds, priority, switch = instances(7)
    keys = jax.random.split(jax.random.key(300), INSTANCES)
    state = PowerOfChoiceState(jnp.asarray(priority), jnp.asarray(rounds))
    got = np.asarray(variants[0](keys, state, available, data_size, loss, d, switch))
    for i in range(INSTANCES):
        want = pow_d_numpy(*noise_of(keys[i]), data_size[i], loss[i], available[i], M, d[i],
                           priority[i], rounds[i], switch[i])  # fmt: skip
        np.testing.assert_array_equal(got[i], want, err_msg=f"instance {i}")


def test_rpow_d_ranks_by_the_last_training_loss_and_records_the_participants(variants):
    """Recorded losses with +inf for clients never selected (they go first, by priority); after
    the round each participant's record is its new training loss, the others' are kept."""
    available, data_size, recorded, d, rounds, priority, switch = instances(8)
    rng = np.random.default_rng(8)
    recorded[rng.uniform(size=recorded.shape) < 0.3] = np.inf
    train_loss = rng.uniform(0, 2, size=recorded.shape).astype(np.float32)
    keys = jax.random.split(jax.random.key(400), INSTANCES)
    state = RecentLossState(jnp.asarray(priority), jnp.asarray(rounds), jnp.asarray(recorded))
    action, after = variants[1](keys, state, available, data_size, train_loss, d, switch)
    action = np.asarray(action)
    for i in range(INSTANCES):
        want = pow_d_numpy(*noise_of(keys[i]), data_size[i], recorded[i], available[i], M, d[i],
                           priority[i], rounds[i], switch[i])  # fmt: skip
        np.testing.assert_array_equal(action[i], want, err_msg=f"instance {i}")
        record = [train_loss[i, c] if want[c] else recorded[i, c] for c in range(N)]
        np.testing.assert_array_equal(np.asarray(after.loss[i]), record)
    np.testing.assert_array_equal(after.round, rounds + 1)
    assert np.isinf(rpow_d(N, M).init(jax.random.key(0), {}).loss).all()


def test_variants_read_their_signals():
    assert get("cpow_d").signals == ("data_size", "minibatch_loss")
    assert get("rpow_d").signals == ("data_size", "train_loss")
    assert get("rpow_d").defaults() == get("pow_d").defaults()


# ---------------------------------------------------------------------------------------------
# rand (``proportional``): m draws ∝ p with replacement, each weighing 1/m


def test_proportional_draws_m_times_by_data_share():
    """Against the plain draws fed the same Gumbel noise: counts, weights count/m (summing to 1),
    never an unavailable client or one without data; nobody when no available client has data."""
    available, data_size, *_ = instances(9)
    available[:5] = False
    policy = proportional(N, M)

    def one(key, available, data_size):
        obs = LearnerObservation(Observation(available), {"data_size": data_size})
        return policy.select(key, policy.init(key, {}), obs, {})

    keys = jax.random.split(jax.random.key(500), INSTANCES)
    got = jax.jit(jax.vmap(one))(keys, available, data_size)
    for i in range(INSTANCES):
        noise = np.asarray(jax.random.gumbel(keys[i], (M, N), jnp.float32))
        p = np.where(available[i], data_size[i], 0.0)
        count = draw_counts(p, noise) if p.sum() > 0 else np.zeros(N, int)
        np.testing.assert_array_equal(np.asarray(got.clients[i]), count > 0, f"instance {i}")
        np.testing.assert_allclose(np.asarray(got.weight[i]), count / M)
        assert not np.any(np.asarray(got.clients[i]) & ~available[i])
    assert np.asarray(got.clients[:5]).sum() == 0
