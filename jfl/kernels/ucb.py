"""Upper-confidence-bound helpers for per-arm sample means (CS-UCB family, CUCB)."""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp


class ArmStats(NamedTuple):
    count: jax.Array  # f[N]  z_k, number of plays
    mean: jax.Array  # f[N]  y_k, sample mean of the observed rewards


def _check_stats(stats: ArmStats) -> None:
    chex.assert_rank([stats.count, stats.mean], 1)
    chex.assert_type([stats.count, stats.mean], float)
    chex.assert_equal_shape([stats.count, stats.mean])


def arm_stats_init(num_arms: int, dtype=jnp.float32) -> ArmStats:
    """No plays yet: counts and means 0 for every arm."""
    return ArmStats(count=jnp.zeros(num_arms, dtype), mean=jnp.zeros(num_arms, dtype))


def arm_stats_update(stats: ArmStats, played, reward) -> ArmStats:
    """Incremental sample mean over the arms in ``played``.

    Args:
      stats: current counts and means, f[N] each.
      played: bool[N] arms played this round.
      reward: f[N] (or bool[N]) rewards, ignored where not played; a scalar broadcasts.
    """
    _check_stats(stats)
    played = jnp.asarray(played, bool)
    chex.assert_equal_shape([stats.count, played])
    chex.assert_is_broadcastable(jnp.shape(reward), stats.count.shape)
    count = stats.count + played
    safe = jnp.maximum(count, 1)
    mean = jnp.where(played, stats.mean + (reward - stats.mean) / safe, stats.mean)
    return ArmStats(count=count, mean=mean)


def ucb_bonus(count, t, scale) -> jax.Array:
    """sqrt(scale · ln t / z); +inf for arms never played (z = 0).

    Args:
      count: f[N] play counts z.
      t: round index (≥ 1; smaller values count as 1), possibly traced.
      scale: exploration factor, possibly traced.
    """
    chex.assert_rank([count, t, scale], [1, 0, 0])
    log_t = jnp.log(jnp.maximum(jnp.asarray(t, jnp.result_type(count, float)), 1.0))
    safe = jnp.maximum(count, 1)
    return jnp.where(count > 0, jnp.sqrt(scale * log_t / safe), jnp.inf)


def ucb_index(stats: ArmStats, t, scale, cap=None) -> jax.Array:
    """y + sqrt(scale · ln t / z), optionally capped (CS-UCB-Q truncates at 1).

    ``t``, ``scale`` and ``cap`` are scalars, possibly traced.
    """
    _check_stats(stats)
    if cap is not None:
        chex.assert_rank(cap, 0)
    index = stats.mean + ucb_bonus(stats.count, t, scale)
    if cap is not None:
        index = jnp.minimum(index, cap)
    return index
