"""Ridge regression for many arms at once (LinUCB-style estimates, RBCS-F eqs. 17-19).

The state keeps the sufficient statistics ``H = λI + Σ x c cᵀ`` and ``b = Σ x τ c`` rather than an
inverse: accumulating sums is exact up to float rounding, while a Sherman-Morrison inverse drifts
over thousands of rounds in float32. Each estimate factors ``H`` afresh with a Cholesky
decomposition unrolled over the (small, static) feature dimension, which is both fast on a batch
of arms and free of batch-size-dependent library kernels.
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp


class RidgeState(NamedTuple):
    gram: jax.Array  # f[N, d, d]  H = λI + Σ_t x_t c_t c_tᵀ
    target: jax.Array  # f[N, d]  b = Σ_t x_t τ_t c_t


class RidgeEstimate(NamedTuple):
    mean: jax.Array  # f[N]  c·θ̂ with θ̂ = H⁻¹b (eq. 18)
    width: jax.Array  # f[N]  sqrt(cᵀ H⁻¹ c), the confidence width of eq. 19
    theta: jax.Array  # f[N, d]  θ̂


def _check_state(state: RidgeState) -> None:
    chex.assert_rank([state.gram, state.target], [3, 2])
    chex.assert_type([state.gram, state.target], float)
    chex.assert_shape(state.gram, (*state.target.shape, state.target.shape[-1]))


def _check_context(state: RidgeState, context) -> None:
    chex.assert_rank(context, 2)
    chex.assert_equal_shape([state.target, context])


def ridge_init(num_arms: int, dim: int, lam, dtype=jnp.float32) -> RidgeState:
    """H = λI, b = 0 for every arm (Alg. 2, line 2). ``lam`` is a scalar, possibly traced."""
    chex.assert_rank(lam, 0)
    eye = jnp.eye(dim, dtype=dtype)
    gram = jnp.broadcast_to(jnp.asarray(lam, dtype) * eye, (num_arms, dim, dim))
    return RidgeState(gram=gram, target=jnp.zeros((num_arms, dim), dtype))


def ridge_update(state: RidgeState, context, observed, value) -> RidgeState:
    """Add one observation for the arms where ``observed`` (Alg. 2, lines 15-16).

    Args:
      state: current statistics.
      context: f[N, d] contexts c_t.
      observed: bool[N] arms whose value was revealed (the selected clients x_t).
      value: f[N] observed values τ_t (ignored where not observed).
    """
    _check_state(state)
    _check_context(state, context)
    chex.assert_rank([observed, value], 1)
    chex.assert_type(observed, bool)
    chex.assert_equal_shape([observed, value])
    chex.assert_equal_shape_prefix([state.target, observed], 1)
    weight = jnp.asarray(observed, state.gram.dtype)
    c = jnp.asarray(context, state.gram.dtype)
    outer = c[:, :, None] * c[:, None, :]
    gram = state.gram + weight[:, None, None] * outer
    target = state.target + (weight * jnp.where(observed, value, 0))[:, None] * c
    return RidgeState(gram=gram, target=target)


def _cholesky_arms_last(a):
    """Lower Cholesky factor of small SPD matrices a[d, d, ...], unrolled over the static d."""
    d = a.shape[0]
    lower = [[None] * d for _ in range(d)]
    for j in range(d):
        diag = a[j, j] - sum((lower[j][p] ** 2 for p in range(j)), start=0.0)
        lower[j][j] = jnp.sqrt(diag)
        for i in range(j + 1, d):
            off = a[i, j] - sum((lower[i][p] * lower[j][p] for p in range(j)), start=0.0)
            lower[i][j] = off / lower[j][j]
    return lower


def _forward(lower, rhs):
    """Solve L y = rhs for a list-of-lists lower factor; rhs is f[d, ...]."""
    d = len(lower)
    y = []
    for i in range(d):
        acc = rhs[i] - sum((lower[i][p] * y[p] for p in range(i)), start=0.0)
        y.append(acc / lower[i][i])
    return y


def _backward(lower, y):
    """Solve Lᵀ x = y."""
    d = len(lower)
    x = [None] * d
    for i in reversed(range(d)):
        acc = y[i] - sum((lower[p][i] * x[p] for p in range(i + 1, d)), start=0.0)
        x[i] = acc / lower[i][i]
    return x


def ridge_estimate(state: RidgeState, context) -> RidgeEstimate:
    """θ̂ = H⁻¹b, the estimate c·θ̂ and the width sqrt(cᵀH⁻¹c) for every arm (eqs. 18-19).

    Args:
      state: statistics of N arms in d dimensions.
      context: f[N, d] contexts.
    """
    _check_state(state)
    _check_context(state, context)
    # Arms last: each matrix entry is one vector over arms for the unrolled factorisation.
    gram = jnp.moveaxis(state.gram, 0, -1)  # [d, d, N]
    target = jnp.moveaxis(state.target, 0, -1)  # [d, N]
    c = jnp.moveaxis(jnp.asarray(context, state.gram.dtype), 0, -1)  # [d, N]
    d = c.shape[0]
    lower = _cholesky_arms_last(gram)
    theta = _backward(lower, _forward(lower, target))
    whitened = _forward(lower, c)
    width = jnp.sqrt(sum((w**2 for w in whitened), start=0.0))
    mean = sum((c[i] * theta[i] for i in range(d)), start=0.0)
    return RidgeEstimate(mean=mean, width=width, theta=jnp.stack(theta, axis=-1))


def _check_estimate(estimate: RidgeEstimate) -> None:
    chex.assert_rank([estimate.mean, estimate.width], 1)
    chex.assert_equal_shape([estimate.mean, estimate.width])


def lower_confidence_bound(estimate: RidgeEstimate, alpha, floor=0.0):
    """τ̄ = max(c·θ̂ − α·width, floor) (RBCS-F eq. 19, clamped at 0 as written there).

    ``alpha`` and ``floor`` are scalars, possibly traced.
    """
    _check_estimate(estimate)
    chex.assert_rank([alpha, floor], 0)
    return jnp.maximum(estimate.mean - alpha * estimate.width, floor)


def upper_confidence_bound(estimate: RidgeEstimate, alpha):
    """c·θ̂ + α·width (LinUCB index for rewards); ``alpha`` is a scalar, possibly traced."""
    _check_estimate(estimate)
    chex.assert_rank(alpha, 0)
    return estimate.mean + alpha * estimate.width
