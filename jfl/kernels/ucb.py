"""Upper-confidence-bound helpers for per-arm sample means (CS-UCB family, CUCB)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class ArmStats(NamedTuple):
    count: jax.Array  # f[N]  z_k, number of plays
    mean: jax.Array  # f[N]  y_k, sample mean of the observed rewards


def arm_stats_init(num_arms: int, dtype=jnp.float32) -> ArmStats:
    return ArmStats(count=jnp.zeros(num_arms, dtype), mean=jnp.zeros(num_arms, dtype))


def arm_stats_update(stats: ArmStats, played, reward) -> ArmStats:
    """Incremental sample mean over the arms in ``played``."""
    played = jnp.asarray(played, bool)
    count = stats.count + played
    safe = jnp.maximum(count, 1)
    mean = jnp.where(played, stats.mean + (reward - stats.mean) / safe, stats.mean)
    return ArmStats(count=count, mean=mean)


def ucb_bonus(count, t, scale) -> jax.Array:
    """sqrt(scale · ln t / z); +inf for arms never played (z = 0)."""
    log_t = jnp.log(jnp.maximum(jnp.asarray(t, jnp.result_type(count, float)), 1.0))
    safe = jnp.maximum(count, 1)
    return jnp.where(count > 0, jnp.sqrt(scale * log_t / safe), jnp.inf)


def ucb_index(stats: ArmStats, t, scale, cap=None) -> jax.Array:
    """y + sqrt(scale · ln t / z), optionally capped (CS-UCB-Q truncates at 1)."""
    index = stats.mean + ucb_bonus(stats.count, t, scale)
    if cap is not None:
        index = jnp.minimum(index, cap)
    return index
