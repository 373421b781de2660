"""Lyapunov virtual queues for long-term rate constraints."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp


def virtual_queue_update(queue_tm1: jax.Array, arrival, service) -> jax.Array:
    """Z_t = max(Z_{t-1} + arrival - service, 0).

    RBCS-F eq. 6 uses ``arrival = β`` and ``service = x_t``; CS-UCB-Q uses ``arrival = c_k`` and
    ``service = b_k(t-1)``. ``arrival`` broadcasts (a scalar rate or one per client).

    Args:
      queue_tm1: f[N] backlogs Z_{t-1}.
      arrival: scalar or f[N] arrivals (possibly traced).
      service: bool or f[N] service (the selection mask).
    """
    chex.assert_rank([queue_tm1, service], 1)
    chex.assert_type(queue_tm1, float)
    chex.assert_equal_shape([queue_tm1, service])
    chex.assert_is_broadcastable(jnp.shape(arrival), queue_tm1.shape)
    service = jnp.asarray(service, queue_tm1.dtype)
    return jnp.maximum(queue_tm1 + arrival - service, 0.0)
