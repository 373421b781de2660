"""``budgeted_assignment`` (COCS's per-round P2) against ``jfl.reference.milp_assignment``.

The kernel runs under ``jit(vmap(...))`` on batches of random float32 instances of several shapes
(both the counting-order path, N·M ≤ 64, and the sort path), with ties in weights and costs, zero
and negative weights, empty coverage, zero, negative, tight, huge and infinite budgets. It is
checked for feasibility everywhere, for mask equality with the plain-loop ``greedy_numpy``, and
for its value against the MILP optimum on small instances.
"""

from __future__ import annotations

import functools
import itertools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfl.kernels import assignment, order
from jfl.kernels.assignment import AssignmentResult, assignment_value, budgeted_assignment
from jfl.reference.milp_assignment import (
    exact_assignment,
    greedy_numpy,
    optimality_ratios,
    random_paper_instances,
)

EPS32 = float(np.finfo(np.float32).eps)
RTOL = assignment.BUDGET_RTOL
# (N, M): single client / single ES, counting path (N·M ≤ 64) and sort path (N·M > 64).
SHAPES = ((1, 1), (1, 3), (5, 1), (8, 3), (12, 5), (50, 3))


BATCH = 1000  # every batched solve uses this many instances: one compilation per shape


@functools.cache
def batched():
    return jax.jit(jax.vmap(budgeted_assignment))


@functools.cache
def unbatched():
    return jax.jit(budgeted_assignment)


def solve(weight, cost, available, budget) -> AssignmentResult:
    """jit(vmap(budgeted_assignment)) on a batch of BATCH instances, results as NumPy arrays."""
    assert weight.shape[0] == BATCH
    result = batched()(weight, cost, available, budget)
    return AssignmentResult(np.asarray(result.mask), np.asarray(result.certified))


def solve_one(weight, cost, available, budget) -> AssignmentResult:
    result = unbatched()(weight, cost, available, budget)
    return AssignmentResult(np.asarray(result.mask), np.asarray(result.certified))


def random_instances(rng, count, n, m):
    """``count`` float32 instances of N = n clients and M = m ESs, mixing several regimes.

    Half the instances draw from small grids (weights in {0, 0.25, 0.5, 1}, costs in {1, 2, 3}:
    ties everywhere, exact float sums), half are continuous (weights U[0, 1], costs
    U[0.5, 2]·U[2, 4] as in the paper). About 10% of the weights are 0 and 3% negative. Coverage
    probability per instance in {0, 0.5, 0.8, 1}; budget per ES 0, −1, U[0, 8], 3.5, the total
    cost (room for everybody), 1e6 or +inf.
    """
    grid = rng.random(count) < 0.5
    weight = np.where(
        grid[:, None, None],
        rng.choice([0.0, 0.25, 0.5, 1.0], (count, n, m)),
        rng.uniform(0.0, 1.0, (count, n, m)),
    )
    u = rng.random((count, n, m))
    weight[u < 0.1] = 0.0
    weight[u > 0.97] = -rng.uniform(0.0, 1.0, np.sum(u > 0.97))
    cost = np.where(
        grid[:, None],
        rng.choice([1.0, 2.0, 3.0], (count, n)),
        rng.uniform(0.5, 2.0, (count, n)) * rng.uniform(2.0, 4.0, (count, n)),
    )
    p_cover = rng.choice([0.0, 0.5, 0.8, 1.0], count)
    available = rng.random((count, n, m)) < p_cover[:, None, None]
    regime = rng.integers(0, 7, (count, m))
    budget = np.choose(
        regime,
        [
            np.zeros((count, m)),
            np.full((count, m), -1.0),
            rng.uniform(0.0, 8.0, (count, m)),
            np.full((count, m), 3.5),
            np.repeat(cost.sum(axis=1, keepdims=True), m, axis=1),
            np.full((count, m), 1e6),
            np.full((count, m), np.inf),
        ],
    )
    f32 = np.float32
    return weight.astype(f32), cost.astype(f32), available, budget.astype(f32)


@functools.cache
def random_case(shape):
    """BATCH random instances of ``shape`` (fixed seed per shape) and the kernel's results."""
    rng = np.random.default_rng(10 + 100 * shape[0] + shape[1])
    instances = random_instances(rng, BATCH, *shape)
    return instances, solve(*instances)


def check_feasible(result, weight, cost, available, budget):
    """Coverage, one ES per client, weight > 0 on chosen pairs, budgets (documented slack)."""
    mask, certified = result
    assert mask.dtype == bool and certified.dtype == bool
    assert not np.any(mask & ~available), "assigned an uncovered pair"
    assert not np.any(mask & (weight <= 0)), "assigned a pair of weight <= 0"
    assert np.all(mask.sum(axis=-1) <= 1), "a client on two ESs"
    spent = np.einsum("bnm,bn->bm", mask.astype(np.float64), cost.astype(np.float64))
    taken = mask.sum(axis=1)
    b = budget.astype(np.float64)
    # B·(1 + 1e-6) plus the float32 rounding of the running budget (half an ulp of B per client).
    allowed = np.where(b > 0, b * (1 + RTOL) + (taken + 1) * EPS32 * b, 0.0)
    assert np.all((spent <= allowed) | np.isinf(b)), "budget exceeded"
    # certified => every client with a positive covered weight is on an ES of maximal weight.
    eligible = available & (weight > 0)
    best = np.max(np.where(eligible, weight, 0), axis=-1)
    chosen = np.max(np.where(mask, weight, 0), axis=-1)
    ok = np.all(chosen == best, axis=-1)
    np.testing.assert_array_equal(certified, ok, err_msg="certified flag")


def value64(mask, weight):
    return float(np.sum(np.where(mask, weight.astype(np.float64), 0.0)))


# --------------------------------------------------------------------------------------------
# hand examples and helpers
# --------------------------------------------------------------------------------------------


class HandExamplesTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_hand_examples(self):
        _hand_examples(self.variant(budgeted_assignment))

    @chex.variants(with_jit=True, without_jit=True)
    def test_asserts_reject_bad_shapes(self):
        """Wrong ranks, mismatched N or M and a non-bool coverage are refused at trace time."""
        solve = self.variant(budgeted_assignment)
        weight, cost, cover = jnp.ones((4, 2)), jnp.ones(4), jnp.ones((4, 2), bool)
        bad = [
            (jnp.ones(4), cost, cover, 1.0),  # weight not [N, M]
            (weight, jnp.ones(3), cover, 1.0),  # cost of the wrong length
            (weight, jnp.ones((4, 1)), cover, 1.0),  # cost not [N]
            (weight, cost, jnp.ones((4, 3), bool), 1.0),  # coverage of another shape
            (weight, cost, jnp.ones((4, 2)), 1.0),  # coverage not bool
            (weight, cost, cover, jnp.ones(3)),  # budget not [M]
            (weight, cost, cover, jnp.ones((1, 2))),  # budget of rank 2
        ]
        for args in bad:
            with pytest.raises(AssertionError):
                solve(*args)
        with pytest.raises(AssertionError):
            self.variant(assignment_value)(jnp.ones((4, 2), bool), jnp.ones((2, 4)))


def _hand_examples(solver):
    """Small instances solved by hand: density order, one-ES rule, budgets, modified-greedy fix."""

    def solve_one(*args):
        result = solver(*args)
        return AssignmentResult(np.asarray(result.mask), np.asarray(result.certified))

    f32 = functools.partial(np.array, dtype=np.float32)
    # One ES, budget 10: density takes A (w 1, c 1), then B (w 9, c 10) no longer fits; the fix
    # prefers B alone (9 > 1). Not certified (A is left out).
    mask, certified = solve_one(f32([[1], [9]]), f32([1, 10]), np.ones((2, 1), bool), f32([10]))
    assert mask.tolist() == [[False], [True]] and not certified
    # Two ESs of budget 1, unit costs. Client 0 (0.5 on both) goes first, to ES 0 (lower index);
    # client 1 (0.2 on ES 0, 0.1 on ES 1) then only fits ES 1: value 0.6, while client 0 on ES 1
    # and client 1 on ES 0 give 0.7. The greedy is not exact, and does not claim to be.
    weight, cost, cover = f32([[0.5, 0.5], [0.2, 0.1]]), f32([1, 1]), np.ones((2, 2), bool)
    mask, certified = solve_one(weight, cost, cover, f32([1, 1]))
    assert mask.tolist() == [[True, False], [False, True]] and not certified
    value, best = exact_assignment(weight, cost, cover, [1.0, 1.0])
    assert value == pytest.approx(0.7) and best.tolist() == [[False, True], [True, False]]
    # Budget 2 per ES (a scalar is broadcast): everybody fits, each client on its best ES (ties
    # to the lower ES): certified.
    mask, certified = solve_one(weight, cost, cover, 2.0)
    assert mask.tolist() == [[True, False], [True, False]] and certified
    assert float(assignment_value(mask, weight)) == pytest.approx(0.7)
    # Coverage and weight <= 0: client 0 is not covered by ES 0, client 1 has weight 0 / -1.
    cover = np.array([[False, True], [True, True]])
    mask, certified = solve_one(f32([[0.9, 0.3], [0.0, -1.0]]), cost, cover, f32([5, 5]))
    assert mask.tolist() == [[False, True], [False, False]] and certified
    # Zero budget: nothing is affordable. Costs 0.3 then 0.1 fit a budget of 0.4, although in
    # float32 0.4 - 0.3 < 0.1 by an ulp: the relative slack absorbs such rounding.
    mask, certified = solve_one(f32([[1], [1]]), f32([1, 1]), np.ones((2, 1), bool), f32([0]))
    assert not mask.any() and not certified
    mask, certified = solve_one(
        f32([[1], [0.2]]), f32([0.3, 0.1]), np.ones((2, 1), bool), f32([0.4])
    )
    assert mask.sum() == 2 and certified


def _counting_path_order(key):
    return order.counting_order(order.materialise(key))


def test_counting_and_sort_orders_agree():
    """The two order paths (O(P^2) counting, stable sort) give the same order, ties included."""
    rng = np.random.default_rng(0)
    for size in (1, 7, 64, 150):
        keys = np.concatenate(
            [-rng.integers(0, 4, (200, size)), -rng.random((50, size))], dtype=np.float32
        )
        keys[:, ::5] = 1.0  # the kernel's key for ineligible pairs
        count = jax.jit(jax.vmap(_counting_path_order))(keys)
        sort = jax.jit(jax.vmap(order.sort_order))(keys)
        np.testing.assert_array_equal(count, sort)
        np.testing.assert_array_equal(sort, np.argsort(keys, axis=1, kind="stable"))


# --------------------------------------------------------------------------------------------
# properties on thousands of random instances
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_feasible_on_random_instances(shape):
    """Never violates coverage, the one-ES rule or a budget, never takes weight <= 0 (1000 each)."""
    instances, result = random_case(shape)
    check_feasible(result, *instances)
    # certified => the value equals the upper bound Σ_n max_m weight
    weight, _, available, _ = instances
    upper = np.sum(np.max(np.where(available & (weight > 0), weight, 0), axis=-1), axis=-1)
    value = np.asarray(jax.vmap(assignment_value)(result.mask, weight))
    np.testing.assert_allclose(value[result.certified], upper[result.certified], rtol=1e-5)


@pytest.mark.parametrize("shape", SHAPES)
def test_matches_greedy_numpy(shape):
    """Same mask and flag as the plain NumPy loop (float32 both), up to counted near-ties."""
    instances, result = random_case(shape)
    count = 300
    near_ties = 0
    for i in range(count):
        weight, cost, available, budget = (x[i] for x in instances)
        mask, certified = greedy_numpy(weight, cost, available, budget)
        if np.array_equal(mask, result.mask[i]) and certified == result.certified[i]:
            continue
        # Allowed only if two eligible pairs have densities within 1e-6 relative but not equal.
        density = np.sort((weight / cost[:, None])[available & (weight > 0)].astype(np.float64))
        gaps = np.diff(density) / np.maximum(density[1:], 1e-30)
        assert np.any((gaps > 0) & (gaps <= 1e-6)), (i, mask, result.mask[i])
        near_ties += 1
    print(f"{shape}: {near_ties} near-tie mismatches in {count} instances")
    assert near_ties <= count // 100


# --------------------------------------------------------------------------------------------
# optimality against the MILP
# --------------------------------------------------------------------------------------------


def test_milp_matches_bruteforce():
    """``exact_assignment`` equals enumeration of all (M+1)^N assignments on tiny instances."""
    rng = np.random.default_rng(60)
    for _ in range(120):
        n, m = int(rng.integers(1, 6)), int(rng.integers(1, 3))
        weight, cost, available, budget = (x[0] for x in random_instances(rng, 1, n, m))
        w, c = weight.astype(float), cost.astype(float)
        b = np.maximum(budget.astype(float) * (1 + RTOL), 0)  # an empty ES is always feasible
        best = 0.0
        for choice in itertools.product(range(m + 1), repeat=n):  # m means "no ES"
            mask = np.arange(m) == np.array(choice)[:, None]
            if np.any(mask & ~available) or np.any(c @ mask > b):
                continue
            best = max(best, float(np.sum(np.where(mask, np.maximum(w, 0), 0))))
        value, mask = exact_assignment(weight, cost, available, budget)
        assert value == pytest.approx(best, abs=1e-9)
        assert value64(mask, weight) == pytest.approx(value, abs=1e-12)


def test_against_milp_on_small_instances():
    """Value <= MILP optimum (+1e-6) always, = optimum where certified; prints the ratios."""
    ratios, certified_count, total = [], 0, 0
    for shape in ((1, 1), (1, 3), (5, 1), (8, 3)):
        instances, result = random_case(shape)
        for i in range(60):
            weight, cost, available, budget = (x[i] for x in instances)
            best, _ = exact_assignment(weight, cost, available, budget)
            got = value64(result.mask[i], weight)
            assert got <= best + 1e-6, (shape, i, got, best)
            if result.certified[i]:
                certified_count += 1
                assert got == pytest.approx(best, abs=1e-6), (shape, i)
            if best > 0:
                ratios.append(got / best)
            total += 1
    ratios = np.array(ratios)
    print(
        f"greedy/MILP, {ratios.size} instances with a positive optimum: mean {ratios.mean():.4f}, "
        f"worst {ratios.min():.4f}, optimal {np.mean(ratios > 1 - 1e-9):.1%}; "
        f"certified {certified_count}/{total}"
    )


def test_certified_when_budget_pays_for_everybody():
    """Budgets >= the total cost: each client on its best ES, certified, value = MILP optimum."""
    rng = np.random.default_rng(40)
    weight, cost, available, _ = random_instances(rng, BATCH, 8, 3)
    total = cost.astype(np.float64).sum(axis=1, keepdims=True)
    budget = np.repeat(total, 3, axis=1) * rng.choice([1.0, 1.5], (BATCH, 1))
    budget = budget.astype(np.float32)
    budget[::7] = np.inf
    result = solve(weight, cost, available, budget)
    assert result.certified.all()
    for i in range(0, BATCH, 20):
        best, _ = exact_assignment(weight[i], cost[i], available[i], budget[i])
        assert value64(result.mask[i], weight[i]) == pytest.approx(best, abs=1e-6)


def test_optimality_ratios_helper():
    """``optimality_ratios`` returns one ratio in (0, 1] per paper-like instance."""
    ratios = optimality_ratios(12, 8, 3, seed=0)
    assert ratios.shape == (12,) and np.all(ratios > 0) and np.all(ratios <= 1 + 1e-6)


# --------------------------------------------------------------------------------------------
# vmap / batch independence
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(8, 3), (50, 3)])
def test_traced_budgets_and_batch_independence(shape):
    """Traced per-config budgets under vmap; a config's result is bit-identical alone or batched."""
    # One instance, 33 budget configurations in one vmapped call, each against a lone jitted call.
    rng = np.random.default_rng(50)
    weight, cost, available, _ = (x[0] for x in random_paper_instances(rng, 1, *shape))
    budgets = rng.uniform(0.0, 12.0, (33, shape[1])).astype(np.float32)
    over_budgets = jax.jit(jax.vmap(budgeted_assignment, in_axes=(None, None, None, 0)))
    batch = over_budgets(weight, cost, available, budgets)
    batch_mask, batch_certified = np.asarray(batch.mask), np.asarray(batch.certified)
    assert batch_mask.any() and not batch_mask.all()
    for j in range(33):
        single = solve_one(weight, cost, available, budgets[j])
        np.testing.assert_array_equal(batch_mask[j], single.mask)
        assert batch_certified[j] == single.certified
    # Instances of the 1000-instance batch, solved alone.
    instances, result = random_case(shape)
    for i in range(0, BATCH, 50):
        single = solve_one(*(x[i] for x in instances))
        np.testing.assert_array_equal(single.mask, result.mask[i])
        assert single.certified == result.certified[i]
