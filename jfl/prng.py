"""Faster threefry on CPU, with the same bits: draws of several axes made flat, and a lowering
without a rolled loop (opt-in).

JAX lowers the threefry hash on CPU as a 5-step rolled loop (to keep compile times short). In a
vmapped simulation that draws every round, the loop's per-step copies dominate the cost of the
environment. Registering JAX's own unrolled lowering (the one it uses on GPU and TPU) gives
bit-identical random numbers in one fused kernel; measured on the runner with a do-nothing policy,
a round costs about a third as much. This uses a private JAX module, so it is best effort: if
the module layout changes, nothing is registered and JAX's default stays in place.

Importing jfl changes nothing: the sweep driver calls :func:`use_unrolled_threefry_on_cpu` (unless
a sweep runs with ``--no-fast-prng``), and so may a user's own script. ``JFL_ROLLED_THREEFRY=1``
makes the call a no-op. Programs compiled before the call keep the lowering they were compiled
with.

XLA:CPU compiles a threefry call of rank ≥ 2 into far larger kernels than the same call on one
flat vector (vmapped over 64 keys, 2 cores, JAX's rolled lowering: ``uniform(key, (50, 17))``
0.68 s against 0.23 s; ``split(key, (300, 2))`` 0.37 s against 0.17 s, and 0.39 s against 0.18
s with the unrolled one). The bits of a call depend only on its number of elements (JAX counts
them in the flattened order, with or without ``jax_threefry_partitionable``), so ``uniform``
and ``split`` draw flat and reshape: the same values, less to compile.
"""

from __future__ import annotations

import math
import os

import jax
import jax.numpy as jnp


def uniform(key: jax.Array, shape: tuple[int, ...], dtype=jnp.float32) -> jax.Array:
    """``jax.random.uniform(key, shape, dtype)``, bit for bit, drawn flat: U[0, 1) of ``shape``."""
    return jax.random.uniform(key, (math.prod(shape),), dtype).reshape(shape)


def split(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """``jax.random.split(key, shape)``, the same keys, split flat: keys of ``shape``."""
    return jax.random.split(key, math.prod(shape)).reshape(shape)


def use_unrolled_threefry_on_cpu() -> bool:
    """Register the unrolled threefry lowering for CPU; return whether it was registered."""
    if os.environ.get("JFL_ROLLED_THREEFRY", "") not in ("", "0"):
        return False
    try:
        from jax._src.interpreters import mlir
        from jax._src.random import threefry2x32 as threefry
    except ImportError:
        return False
    rule = getattr(threefry, "_threefry2x32_lowering_rule", None)
    primitive = getattr(threefry, "threefry2x32_p", None)
    if rule is None or primitive is None:
        return False
    mlir.register_lowering(primitive, rule, platform="cpu")
    return True
