"""Ridge-regression kernels (RBCS-F eqs. 17-19) against plain NumPy computations."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfl.kernels import (
    RidgeEstimate,
    RidgeState,
    lower_confidence_bound,
    ridge_estimate,
    ridge_init,
    ridge_update,
    upper_confidence_bound,
)
from jfl.reference import expected_times, make_contexts, paper_theta

EPS32 = float(np.finfo(np.float32).eps)

# --------------------------------------------------------------------------------------------
# ridge regression
# --------------------------------------------------------------------------------------------


def rbcsf_like_data(rng, num_rounds, num_arms):
    """Contexts [1/μ, s, M/B] as in the rbcsf environment, realised times τ*(1+u), observed masks.

    Each arm has its own observation probability (5%..90%), so the arms see between a few hundred
    and a few thousand updates. Everything is rounded to float32 first: the float64 reference then
    works on exactly the numbers the float32 kernels see, and only accumulation/solve rounding
    differs.
    """
    mu = rng.uniform(0.5, 2.0, (num_rounds + 1, num_arms))
    bandwidth = rng.uniform(2.0, 4.0, (num_rounds + 1, num_arms))
    cold = (rng.random((num_rounds + 1, num_arms)) < 0.5).astype(float)
    context = make_contexts(mu, bandwidth, cold).astype(np.float32)
    theta = paper_theta(num_arms)
    noise = rng.uniform(-1.0, 1.0, (num_rounds + 1, num_arms))
    value = (expected_times(context.astype(float), theta) * (1.0 + noise)).astype(np.float32)
    observed = rng.random((num_rounds, num_arms)) < rng.uniform(0.05, 0.9, num_arms)
    return context, value, observed


@jax.jit
def run_ridge_updates(state, contexts, observed, values):
    def body(state, x):
        return ridge_update(state, *x), None

    state, _ = jax.lax.scan(body, state, (contexts, observed, values))
    return state


def numpy_ridge(contexts, observed, values, lam):
    """H = λI + Σ x c cᵀ and b = Σ x τ c accumulated in float64."""
    c = contexts.astype(float)
    x = observed.astype(float)
    gram = lam * np.eye(c.shape[-1]) + np.einsum("tn,tni,tnj->nij", x, c, c)
    target = np.einsum("tn,tn,tni->ni", x, values.astype(float), c)
    return gram, target


@pytest.mark.parametrize("lam", [1.0, 0.1])
def test_ridge_long_sequence_matches_float64_solve(lam):
    """float32 ridge_init/update/estimate after 3000 rounds vs numpy.linalg.solve in float64.

    Tolerance. The float32 statistics H and b are sums of up to T = 3000 terms; independent
    rounding errors of size eps32 per addition grow like a random walk, so ‖δH‖/‖H‖ and ‖δb‖/‖b‖
    are of order eps32·sqrt(T) (the Cholesky solve adds a backward error of a few eps32·‖H‖, which
    is smaller). First-order perturbation of H θ = b gives
        ‖δθ‖/‖θ‖ ≲ κ(H)·(‖δH‖/‖H‖ + ‖δb‖/‖b‖) ≈ κ(H)·eps32·sqrt(T),
    and, with δ(H⁻¹) ≈ −H⁻¹ δH H⁻¹, the same relative bound for cᵀH⁻¹c and hence (halved) for the
    width sqrt(cᵀH⁻¹c); |δ(c·θ)| ≤ ‖c‖·‖δθ‖ bounds the mean relative to ‖c‖·‖θ‖. So every relative
    error is checked against rtol = eps32·κ(H)·sqrt(T) per arm, with κ(H) the 2-norm condition
    number of the float64 H (a few hundred for these contexts, so rtol ≈ 2e-3); in practice the
    errors are about a hundred times smaller.
    """
    rng = np.random.default_rng(31)
    num_rounds, num_arms = 3000, 20
    context, value, observed = rbcsf_like_data(rng, num_rounds, num_arms)
    state = ridge_init(num_arms, 3, lam)
    state = run_ridge_updates(state, context[:-1], observed, value[:-1])
    estimate = ridge_estimate(state, context[-1])
    assert estimate.theta.dtype == jnp.float32

    gram, target = numpy_ridge(context[:-1], observed, value[:-1], lam)
    theta = np.linalg.solve(gram, target[..., None])[..., 0]
    c = context[-1].astype(float)
    mean = np.sum(c * theta, axis=1)
    width = np.sqrt(np.sum(c * np.linalg.solve(gram, c[..., None])[..., 0], axis=1))

    rtol = EPS32 * np.linalg.cond(gram) * np.sqrt(num_rounds)
    assert np.all(rtol < 1e-2)  # the check is meaningful: far below O(1) formula errors
    theta_err = np.linalg.norm(np.asarray(estimate.theta) - theta, axis=1)
    assert np.all(theta_err <= rtol * np.linalg.norm(theta, axis=1))
    mean_err = np.abs(np.asarray(estimate.mean) - mean)
    assert np.all(mean_err <= rtol * np.linalg.norm(c, axis=1) * np.linalg.norm(theta, axis=1))
    width_err = np.abs(np.asarray(estimate.width) - width)
    assert np.all(width_err <= rtol * width)
    # the statistics themselves: float32 sums vs float64 sums
    np.testing.assert_allclose(np.asarray(state.gram), gram, rtol=EPS32 * np.sqrt(num_rounds) * 4)
    np.testing.assert_allclose(
        np.asarray(state.target), target, rtol=EPS32 * np.sqrt(num_rounds) * 4
    )


def test_ridge_initial_estimate():
    """With H = λI and b = 0: θ̂ = 0, mean 0 and width ‖c‖/sqrt(λ)."""
    rng = np.random.default_rng(32)
    c = rng.uniform(0.1, 10.0, (5, 3)).astype(np.float32)
    for lam in (1.0, 4.0, 0.25):
        estimate = ridge_estimate(ridge_init(5, 3, lam), c)
        np.testing.assert_array_equal(np.asarray(estimate.theta), 0.0)
        np.testing.assert_array_equal(np.asarray(estimate.mean), 0.0)
        want = np.linalg.norm(c.astype(float), axis=1) / np.sqrt(lam)
        np.testing.assert_allclose(np.asarray(estimate.width), want, rtol=4 * EPS32)


class RidgeTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_ridge_update_ignores_unobserved_values(self):
        """Arms that are not observed keep their statistics, even if their value is NaN."""
        state = ridge_init(3, 3, 1.0)
        c = jnp.asarray([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
        observed = jnp.asarray([True, False, False])
        new = self.variant(ridge_update)(state, c, observed, jnp.asarray([2.0, jnp.nan, 5.0]))
        np.testing.assert_array_equal(np.asarray(new.gram[1:]), np.asarray(state.gram[1:]))
        np.testing.assert_array_equal(np.asarray(new.target[1:]), 0.0)
        want = np.eye(3) + np.outer([1, 2, 3], [1, 2, 3])
        np.testing.assert_allclose(np.asarray(new.gram[0]), want)
        np.testing.assert_allclose(np.asarray(new.target[0]), [2.0, 4.0, 6.0])

    @chex.variants(with_jit=True, without_jit=True)
    def test_one_update_and_estimate_match_numpy(self):
        """One ridge_update from random statistics, then ridge_estimate, vs float64 NumPy on
        200 random arms (4 contexts each, SPD Gram matrices of moderate condition number)."""
        rng = np.random.default_rng(37)
        n, d = 200, 3
        basis = rng.normal(size=(n, 4, d))
        gram = (np.eye(d) + np.einsum("nki,nkj->nij", basis, basis)).astype(np.float32)
        target = rng.normal(size=(n, d)).astype(np.float32)
        context = rng.uniform(0.1, 3.0, (n, d)).astype(np.float32)
        observed = rng.random(n) < 0.5
        value = rng.uniform(0.0, 10.0, n).astype(np.float32)

        def step(state, context, observed, value):
            new = ridge_update(state, context, observed, value)
            return new, ridge_estimate(new, context)

        new, estimate = self.variant(step)(RidgeState(gram, target), context, observed, value)
        x, c = observed.astype(float), context.astype(float)
        want_gram = gram + x[:, None, None] * np.einsum("ni,nj->nij", c, c)
        want_target = target + (x * value)[:, None] * c
        np.testing.assert_allclose(np.asarray(new.gram), want_gram, rtol=4 * EPS32, atol=0)
        np.testing.assert_allclose(np.asarray(new.target), want_target, rtol=4 * EPS32, atol=1e-5)
        theta = np.linalg.solve(want_gram, want_target[..., None])[..., 0]
        width = np.sqrt(np.einsum("ni,ni->n", c, np.linalg.solve(want_gram, c[..., None])[..., 0]))
        cond = np.linalg.cond(want_gram)[:, None]
        scale = np.linalg.norm(theta, axis=1, keepdims=True)
        assert np.all(np.abs(np.asarray(estimate.theta) - theta) <= 16 * EPS32 * cond * scale)
        width_err = np.abs(np.asarray(estimate.width) - width)
        assert np.all(width_err <= 16 * EPS32 * cond[:, 0] * width)
        mean = np.sum(c * theta, axis=1)
        atol = 16 * EPS32 * cond[:, 0] * np.linalg.norm(c, axis=1) * scale[:, 0]
        assert np.all(np.abs(np.asarray(estimate.mean) - mean) <= atol)

    @chex.variants(with_jit=True, without_jit=True)
    def test_confidence_bounds_and_clamp(self):
        """lower_confidence_bound = max(mean − α·width, floor), clamped at 0; upper = mean +
        α·width."""
        estimate = RidgeEstimate(
            mean=jnp.asarray([5.0, 1.0, 0.0, -2.0, 3.0]),
            width=jnp.asarray([1.0, 2.0, 1.0, 0.0, 0.0]),
            theta=jnp.zeros((5, 3)),
        )
        lower = self.variant(lower_confidence_bound)
        lcb = np.asarray(lower(estimate, 1.5))
        np.testing.assert_array_equal(lcb, [3.5, 0.0, 0.0, 0.0, 3.0])
        assert np.all(lcb >= 0.0) and not np.signbit(lcb).any()  # no -0.0 either
        np.testing.assert_array_equal(
            np.asarray(lower(estimate, 1.5, floor=1.0)), [3.5, 1.0, 1.0, 1.0, 3.0]
        )
        np.testing.assert_array_equal(
            np.asarray(self.variant(upper_confidence_bound)(estimate, 2.0)),
            [7.0, 5.0, 2.0, -2.0, 3.0],
        )

    @chex.variants(with_jit=True, without_jit=True)
    def test_asserts_reject_bad_shapes(self):
        """Mismatched arms or dimensions, a non-bool mask and non-scalar α are refused."""
        state = ridge_init(4, 3, 1.0)
        c, observed, value = jnp.ones((4, 3)), jnp.ones(4, bool), jnp.ones(4)
        update = self.variant(ridge_update)
        for args in [
            (state, jnp.ones((4, 2)), observed, value),  # context of another dimension
            (state, jnp.ones((5, 3)), observed, value),  # context of another arm count
            (state, jnp.ones(3), observed, value),  # context not [N, d]
            (state, c, jnp.ones(5, bool), value),  # observed of another length
            (state, c, jnp.ones(4), value),  # observed not bool
            (state, c, observed, jnp.ones(3)),  # values of another length
            (RidgeState(state.gram[:, :2], state.target), c, observed, value),  # gram not d×d
        ]:
            with pytest.raises(AssertionError):
                update(*args)
        with pytest.raises(AssertionError):
            self.variant(ridge_estimate)(state, jnp.ones((4, 2)))
        estimate = RidgeEstimate(jnp.zeros(4), jnp.zeros(4), jnp.zeros((4, 3)))
        with pytest.raises(AssertionError):
            self.variant(lower_confidence_bound)(estimate, jnp.ones(4))
        with pytest.raises(AssertionError):
            self.variant(upper_confidence_bound)(estimate._replace(width=jnp.zeros(3)), 1.0)
        with pytest.raises(AssertionError):
            ridge_init(4, 3, jnp.ones(2))  # λ not a scalar
