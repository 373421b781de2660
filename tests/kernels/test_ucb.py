"""UCB helpers (``jfl.kernels.ucb``: CS-UCB family, CUCB) against plain NumPy.

``arm_stats_update`` is a float32 add, subtract and divide per arm, so it must match the same
float32 NumPy computation bit for bit; ``ucb_bonus`` / ``ucb_index`` involve ``log`` and ``sqrt``
and are compared with a float64 reference within a few float32 ulps.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfl.kernels import ArmStats, arm_stats_init, arm_stats_update, ucb_bonus, ucb_index

EPS32 = float(np.finfo(np.float32).eps)
BATCH, N = 256, 10


def numpy_stats_update(count, mean, played, reward):
    f32 = np.float32
    new_count = count + played.astype(f32)
    step = (np.asarray(reward, f32) - mean) / np.maximum(new_count, f32(1))
    return new_count, np.where(played, mean + step, mean)


def numpy_bonus(count, t, scale):
    """sqrt(scale · ln max(t, 1) / z) in float64, +inf where z = 0."""
    count = np.asarray(count, float)
    log_t = np.log(np.maximum(np.asarray(t, float), 1.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(count > 0, np.sqrt(scale * log_t / count), np.inf)


def random_stats(rng, count=BATCH, n=N):
    """Counts 0..30 (a quarter of the arms never played), means in [0, 1], rewards in [0, 1] or
    bool, play masks with probability 0, 0.5 or 1 per row, t in 0..5000, scale in (0, 10]."""
    plays = rng.integers(0, 31, (count, n)).astype(np.float32)
    plays[rng.random((count, n)) < 0.25] = 0.0
    mean = np.where(plays > 0, rng.random((count, n)), 0.0).astype(np.float32)
    played = rng.random((count, n)) < rng.choice([0.0, 0.5, 1.0], (count, 1))
    reward = rng.random((count, n)).astype(np.float32)
    t = rng.choice([0, 1, 2, 10, 5000], count).astype(np.int32)
    scale = rng.uniform(0.0, 10.0, count).astype(np.float32)
    return plays, mean, played, reward, t, scale


def _update_and_indices(count, mean, played, reward, t, scale):
    stats = ArmStats(count, mean)
    return (
        arm_stats_update(stats, played, reward),
        ucb_bonus(count, t, scale),
        ucb_index(stats, t, scale),
        ucb_index(stats, t, scale, cap=1.0),
    )


all_kernels = jax.vmap(_update_and_indices)  # one function object: one compilation per variant


class UcbTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_matches_numpy_on_random_instances(self):
        rng = np.random.default_rng(38)
        count, mean, played, reward, t, scale = random_stats(rng)
        stats, bonus, index, capped = self.variant(all_kernels)(
            count, mean, played, reward, t, scale
        )
        want_count, want_mean = numpy_stats_update(count, mean, played, reward)
        np.testing.assert_array_equal(np.asarray(stats.count), want_count)
        np.testing.assert_array_equal(np.asarray(stats.mean), want_mean)
        want_bonus = numpy_bonus(count, t[:, None], scale[:, None])
        bonus = np.asarray(bonus)
        np.testing.assert_array_equal(np.isinf(bonus), count == 0)
        finite = count > 0
        np.testing.assert_allclose(bonus[finite], want_bonus[finite], rtol=4 * EPS32, atol=0)
        want_index = mean.astype(float) + want_bonus
        np.testing.assert_allclose(np.asarray(index), want_index, rtol=8 * EPS32, atol=0)
        np.testing.assert_array_equal(np.asarray(capped), np.minimum(np.asarray(index), 1.0))

    @chex.variants(with_jit=True, without_jit=True)
    def test_edge_cases(self):
        """Unplayed arms: bonus +inf, capped index = cap; t ≤ 1: bonus 0 for played arms; a
        bool reward (COCS's success) and a scalar reward are accepted."""
        count = jnp.asarray([0.0, 1.0, 4.0, 100.0])
        mean = jnp.asarray([0.0, 0.5, 0.25, 0.9])
        bonus = self.variant(ucb_bonus)
        for t in (0, 1):
            np.testing.assert_array_equal(np.asarray(bonus(count, t, 2.0)), [np.inf, 0, 0, 0])
        index = self.variant(ucb_index)
        capped = np.asarray(index(ArmStats(count, mean), jnp.int32(7), 2.0, 1.0))
        assert capped[0] == 1.0 and np.all(capped <= 1.0)
        update = self.variant(arm_stats_update)
        played = jnp.asarray([True, False, True, False])
        new = update(ArmStats(count, mean), played, jnp.asarray([True, True, False, True]))
        np.testing.assert_array_equal(np.asarray(new.count), [1.0, 1.0, 5.0, 100.0])
        np.testing.assert_array_equal(np.asarray(new.mean), np.float32([1.0, 0.5, 0.2, 0.9]))
        new = update(ArmStats(count, mean), played, 1.0)
        np.testing.assert_array_equal(np.asarray(new.mean), np.float32([1.0, 0.5, 0.4, 0.9]))

    @chex.variants(with_jit=True, without_jit=True)
    def test_asserts_reject_bad_shapes(self):
        """Batched or mismatched statistics, integer counts, a play mask of another length, a
        non-scalar t / scale / cap are refused."""
        stats = arm_stats_init(4)
        update = self.variant(arm_stats_update)
        for args in [
            (stats, jnp.ones(5, bool), jnp.ones(5)),
            (stats, jnp.ones(4, bool), jnp.ones(3)),
            (ArmStats(jnp.zeros(4), jnp.zeros(3)), jnp.ones(4, bool), jnp.ones(4)),
            (ArmStats(jnp.zeros((2, 4)), jnp.zeros((2, 4))), jnp.ones((2, 4), bool), 1.0),
            (ArmStats(jnp.zeros(4, jnp.int32), jnp.zeros(4)), jnp.ones(4, bool), 1.0),
        ]:
            with pytest.raises(AssertionError):
                update(*args)
        bonus = self.variant(ucb_bonus)
        for args in [(jnp.zeros((2, 4)), 1, 2.0), (stats.count, jnp.ones(4), 2.0)]:
            with pytest.raises(AssertionError):
                bonus(*args)
        index = self.variant(ucb_index)
        with pytest.raises(AssertionError):
            index(stats, 1, jnp.ones(4))
        with pytest.raises(AssertionError):
            index(stats, 1, 2.0, jnp.ones(4))


def test_arm_stats_incremental_mean_equals_plain_mean():
    """arm_stats_update over 400 rounds: counts equal the play counts, means the plain sample means
    (float32 incremental mean, relative error ≲ eps32·#plays); unplayed arms stay at 0."""
    rng = np.random.default_rng(36)
    num_rounds, n = 400, 10
    played = rng.random((num_rounds, n)) < np.linspace(0.0, 0.9, n)  # arm 0 never played
    reward = rng.uniform(0.0, 1.0, (num_rounds, n)).astype(np.float32)

    @jax.jit
    def run(played, reward):
        def body(stats, x):
            return arm_stats_update(stats, *x), None

        return jax.lax.scan(body, arm_stats_init(n), (played, reward))[0]

    stats = run(played, reward)
    count = played.sum(axis=0)
    np.testing.assert_array_equal(np.asarray(stats.count), count)
    plain = np.where(count > 0, (played * reward).sum(axis=0) / np.maximum(count, 1), 0.0)
    np.testing.assert_allclose(np.asarray(stats.mean), plain, rtol=EPS32 * num_rounds, atol=0)
    assert float(stats.mean[0]) == 0.0 and float(stats.count[0]) == 0.0


def test_ucb_bonus_and_index():
    """ucb_bonus = sqrt(scale·ln t / z), +inf for unplayed arms, 0 at t = 1; ucb_index adds the
    mean and caps it (unplayed arms then reach the cap)."""
    count = jnp.asarray([0.0, 1.0, 4.0, 100.0])
    mean = jnp.asarray([0.0, 0.5, 0.25, 0.9])
    for t, scale in ((1, 2.0), (10, 2.0), (1000, 9.0)):
        bonus = np.asarray(ucb_bonus(count, t, scale))
        assert bonus[0] == np.inf
        want = np.sqrt(scale * np.log(t) / np.asarray(count[1:], float))
        np.testing.assert_allclose(bonus[1:], want, rtol=4 * EPS32)
        index = ucb_index(arm_stats_init(4)._replace(count=count, mean=mean), t, scale)
        np.testing.assert_allclose(np.asarray(index)[1:], np.asarray(mean)[1:] + want, rtol=1e-6)
        capped = np.asarray(
            ucb_index(arm_stats_init(4)._replace(count=count, mean=mean), t, scale, 1.0)
        )
        np.testing.assert_allclose(capped, np.minimum(np.asarray(index), 1.0))
        assert capped[0] == 1.0
