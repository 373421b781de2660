"""Lyapunov virtual queues for long-term rate constraints."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def virtual_queue_update(queue_tm1: jax.Array, arrival, service) -> jax.Array:
    """Z_t = max(Z_{t-1} + arrival - service, 0).

    RBCS-F eq. 6 uses ``arrival = β`` and ``service = x_t``; CS-UCB-Q uses ``arrival = c_k`` and
    ``service = b_k(t-1)``. ``arrival`` broadcasts (a scalar rate or one per client).
    """
    service = jnp.asarray(service, queue_tm1.dtype)
    return jnp.maximum(queue_tm1 + arrival - service, 0.0)
