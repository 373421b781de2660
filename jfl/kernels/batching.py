"""Loop carries batched from the start: less tracing under ``vmap``.

A ``lax.scan`` or ``lax.while_loop`` under ``vmap`` traces its body, finds which carries come
out batched, and traces it again if one that came in unbatched (a zero counter, an empty stack)
comes out batched; nested loops multiply those traces. A carry that depends on the loop's
batched inputs from the start is traced once.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def batched_like(tree, inputs):
    """``tree`` unchanged, as values that depend on every array of ``inputs`` (PRNG keys as
    their key data): under ``vmap`` batched wherever one of them is. ``select(p, x, x)``, which
    XLA folds away."""
    firsts = [jnp.ravel(_numeric(x))[:1].astype(jnp.float32) for x in jax.tree.leaves(inputs)]
    if not firsts:
        return tree
    p = jnp.sum(jnp.concatenate(firsts)) > 0  # (any value will do: both cases are x)
    return jax.tree.map(lambda x: jnp.where(p, x, x), tree)


def _numeric(x):
    x = jnp.asarray(x)
    return jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x
