"""Ridge, virtual-queue, reduction and UCB kernels against plain NumPy computations."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfl.kernels import (
    RidgeEstimate,
    arm_stats_init,
    arm_stats_update,
    lower_confidence_bound,
    ridge_estimate,
    ridge_init,
    ridge_update,
    ucb_bonus,
    ucb_index,
    upper_confidence_bound,
    virtual_queue_update,
)
from jfl.kernels.reduce import pairwise_mean, pairwise_sum
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


def test_ridge_update_ignores_unobserved_values():
    """Arms that are not observed keep their statistics, even if their value is NaN."""
    state = ridge_init(3, 3, 1.0)
    c = jnp.asarray([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    new = ridge_update(
        state, c, jnp.asarray([True, False, False]), jnp.asarray([2.0, jnp.nan, 5.0])
    )
    np.testing.assert_array_equal(np.asarray(new.gram[1:]), np.asarray(state.gram[1:]))
    np.testing.assert_array_equal(np.asarray(new.target[1:]), 0.0)
    np.testing.assert_allclose(np.asarray(new.gram[0]), np.eye(3) + np.outer([1, 2, 3], [1, 2, 3]))
    np.testing.assert_allclose(np.asarray(new.target[0]), [2.0, 4.0, 6.0])


def test_confidence_bounds_and_clamp():
    """lower_confidence_bound = max(mean − α·width, floor), clamped at 0; upper = mean + α·width."""
    estimate = RidgeEstimate(
        mean=jnp.asarray([5.0, 1.0, 0.0, -2.0, 3.0]),
        width=jnp.asarray([1.0, 2.0, 1.0, 0.0, 0.0]),
        theta=jnp.zeros((5, 3)),
    )
    lcb = np.asarray(lower_confidence_bound(estimate, 1.5))
    np.testing.assert_array_equal(lcb, [3.5, 0.0, 0.0, 0.0, 3.0])
    assert np.all(lcb >= 0.0) and not np.signbit(lcb).any()  # no -0.0 either
    np.testing.assert_array_equal(
        np.asarray(lower_confidence_bound(estimate, 1.5, floor=1.0)), [3.5, 1.0, 1.0, 1.0, 3.0]
    )
    np.testing.assert_array_equal(
        np.asarray(upper_confidence_bound(estimate, 2.0)), [7.0, 5.0, 2.0, -2.0, 3.0]
    )


# --------------------------------------------------------------------------------------------
# virtual queues
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("per_client_rate", [False, True])
def test_virtual_queue_update_matches_numpy_loop(per_client_rate):
    """Z_t = max(Z_{t-1} + arrival − service, 0) over 500 rounds vs a float32 NumPy loop."""
    rng = np.random.default_rng(33 + per_client_rate)
    num_rounds, n = 500, 12
    rate = rng.uniform(0.0, 0.6, n) if per_client_rate else np.asarray(0.15)
    rate = rate.astype(np.float32)
    service = rng.random((num_rounds, n)) < 0.3

    @jax.jit
    def run(rate, service):
        def body(q, s):
            q = virtual_queue_update(q, rate, s)
            return q, q

        return jax.lax.scan(body, jnp.zeros(n, jnp.float32), service)[1]

    got = np.asarray(run(rate, service))
    q = np.zeros(n, np.float32)
    want = np.empty((num_rounds, n), np.float32)
    for t in range(num_rounds):
        q = np.maximum(q + rate - service[t].astype(np.float32), np.float32(0.0))
        want[t] = q
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert np.all(got >= 0.0)


# --------------------------------------------------------------------------------------------
# batch-independent reductions
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 8, 40, 1000])
def test_pairwise_sum_matches_numpy(n):
    """pairwise_sum vs np.sum in float64 (float32 input: pairwise rounding bound), and exactly
    for integer-valued input; pairwise_mean = sum / n; the axis argument is honoured."""
    rng = np.random.default_rng(34 + n)
    x = rng.normal(size=(6, n)).astype(np.float32)
    got = np.asarray(pairwise_sum(x))
    # pairwise summation error ≤ ceil(log2 n)·eps32·Σ|x| (plus one rounding of the result)
    tol = (np.ceil(np.log2(max(n, 2))) + 1) * EPS32 * np.abs(x.astype(float)).sum(axis=1)
    assert np.all(np.abs(got - x.astype(float).sum(axis=1)) <= tol)
    ints = rng.integers(-50, 50, (6, n)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(pairwise_sum(ints)), ints.sum(axis=1))
    np.testing.assert_allclose(np.asarray(pairwise_mean(ints)), ints.mean(axis=1), rtol=1e-6)
    cube = rng.integers(-5, 5, (3, n, 4)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(pairwise_sum(cube, axis=1)), cube.sum(axis=1))


def test_pairwise_sum_empty_and_batch_invariance():
    """Empty axis gives zeros; a row's sum is bit-identical whatever the batch it is vmapped in."""
    assert np.asarray(pairwise_sum(jnp.zeros((3, 0)))).tolist() == [0.0, 0.0, 0.0]
    rng = np.random.default_rng(35)
    x = rng.normal(size=(64, 37)).astype(np.float32)
    fn = jax.jit(jax.vmap(pairwise_sum))
    full = np.asarray(fn(x))
    for size in (1, 5, 17):
        np.testing.assert_array_equal(np.asarray(fn(x[:size])), full[:size])


# --------------------------------------------------------------------------------------------
# UCB helpers
# --------------------------------------------------------------------------------------------


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
