"""COCS's per-round P2 solvers against ``jfl.reference.milp_assignment``.

``budgeted_assignment`` and ``cardinality_assignment`` run under ``jit(vmap(...))`` on batches of
random float32 instances (ties in weights and costs, zero and negative weights, empty coverage,
zero, negative, tight, huge and infinite budgets; 4096-step searches, ``STEPS``). They are
checked for feasibility everywhere, mask by mask against their plain-loop mirrors
``budgeted_numpy`` / ``cardinality_numpy`` (at the default budgets on the CIFAR rounds), for
exactness against the MILP (``exact_assignment``) where they certify it, against enumeration on
small bin-packing instances (the max-|s| problem with uniform coverage), for the optimality ratio
on rounds of the ``hfl`` environment (on the CIFAR preset's, the hardest: optimal with
probability weights against stored MILP optima, with unit weights certified on nearly all and
exact wherever certified), for bit-identical
results alone or batched with traced budgets, and for ties spread evenly over clients and ESs
under a random tie-break. The long runs (every shape, thousands of MILP solves, both hfl
presets) are marked ``slow``, the shorter runs on the hfl presets' rounds ``paper``.
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
from jfl.kernels.assignment import (
    AssignmentResult,
    assignment_value,
    budgeted_assignment,
    cardinality_assignment,
    two_phase_assignment,
)
from jfl.reference.milp_assignment import _target as target
from jfl.reference.milp_assignment import (
    budgeted_numpy,
    can_pack,
    cardinality_numpy,
    cost_prefix,
    exact_assignment,
    hfl_instances,
    optimality_ratios,
    random_paper_instances,
)

EPS32 = float(np.finfo(np.float32).eps)
RTOL = assignment.BUDGET_RTOL
BATCH = 500  # every batched solve uses this many instances: one compilation per shape
# (N, M): the default runs use the hfl shape only (one compilation per solver; small instances
# are padded with uncovered clients); the slow runs every path (M = 1, a single client, M = 5,
# and N > 64 where the orders come from a sort).
SHAPES = ((50, 3),)
SLOW_SHAPES = ((1, 1), (1, 3), (5, 1), (8, 3), (12, 5), (80, 2))
# The step budget of the searches on random instances, solver and mirror alike. About one in
# six of them exhausts any budget, and under vmap a batch runs as long as its longest search:
# 500 instances take 15 s with the weighted solver's default 16384 steps on 2 cores, 2 s with
# 4096. The search is the same at any budget; the default budgets meet the mirror on the hfl
# CIFAR rounds (``paper``) and in the COCS policies' tests.
STEPS = 4096


def _card(cost, available, budget, tiebreak=None):
    return cardinality_assignment(cost, available, budget, tiebreak)


def _solver(name, steps=None):
    """``solver(weight, cost, available, budget, tiebreak)`` for either problem, searching at
    most ``steps`` steps (None: the solver's default)."""
    if name == "budgeted":
        return functools.partial(budgeted_assignment, max_steps=steps)
    return lambda w, c, a, b, t: cardinality_assignment(c, a, b, t, max_steps=steps)


@functools.cache
def batched(name, steps=None):
    # A tie-break of zeros is what ``tiebreak=None`` means: one compiled program serves both.
    return jax.jit(jax.vmap(_solver(name, steps)))


@functools.cache
def unbatched(name, steps=None):
    return jax.jit(_solver(name, steps))


def as_numpy(result) -> AssignmentResult:
    return AssignmentResult(np.asarray(result.mask), np.asarray(result.certified))


def solve(name, weight, cost, available, budget, tiebreak=None, steps=None) -> AssignmentResult:
    """jit(vmap(solver)) on a batch, results as NumPy arrays."""
    if tiebreak is None:
        tiebreak = np.zeros(weight.shape, np.float32)
    return as_numpy(batched(name, steps)(weight, cost, available, budget, tiebreak))


def mirror(name, weight, cost, available, budget, tiebreak=None, steps=None):
    if name == "budgeted":
        return budgeted_numpy(weight, cost, available, budget, tiebreak, max_steps=steps)
    return cardinality_numpy(cost, available, budget, tiebreak, max_steps=steps)


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
def random_case(shape, name):
    """BATCH random instances of ``shape`` (fixed seed per shape), a tie-break, the results
    (``STEPS``-step searches)."""
    rng = np.random.default_rng(10 + 100 * shape[0] + shape[1])
    instances = random_instances(rng, BATCH, *shape)
    tiebreak = rng.random((BATCH, *shape)).astype(np.float32)
    results = (solve(name, *instances, tb, steps=STEPS) for tb in (None, tiebreak))
    return instances, tiebreak, *results


def objective(name, weight, available):
    """The weights the solver maximises (unit weights on the covered pairs for cardinality)."""
    return weight if name == "budgeted" else available.astype(np.float32)


def check_feasible(result, weight, cost, available, budget):
    """Coverage, one ES per client, weight > 0 on chosen pairs (``weight``: what the solver
    maximises), budgets (documented slack)."""
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


def value64(mask, weight):
    return float(np.sum(np.where(mask, weight.astype(np.float64), 0.0)))


# --------------------------------------------------------------------------------------------
# hand examples and helpers
# --------------------------------------------------------------------------------------------


# Hand-solved instances, padded to the tests' shape (50 clients, 3 ESs; padding: uncovered
# clients, ESs with budget -1) and repeated to a whole batch, so that the jitted solvers are the
# programs the other tests compile: (weight, cost, available, budget) and the masks expected from
# budgeted_assignment and from cardinality_assignment (None: not checked).
def _hand_cases():
    def pad(weight, cost, available, budget):
        w, c = np.zeros((50, 3), np.float32), np.ones(50, np.float32)
        a, b = np.zeros((50, 3), bool), np.full(3, -1.0, np.float32)
        n, m = np.shape(weight)
        w[:n, :m], c[:n], a[:n, :m], b[:m] = weight, cost, available, budget
        return w, c, a, b

    def mask(*rows):
        out = np.zeros((50, 3), bool)
        out[: len(rows), : len(rows[0])] = np.array(rows, bool)
        return out

    cover2 = np.ones((2, 2), bool)
    return [
        # One ES, budget 10: A (w 1, c 1) and B (w 9, c 10) do not fit together: B alone.
        (pad([[1], [9]], [1, 10], [[1], [1]], [10]), mask([0], [1]), mask([1], [0])),
        # Two ESs of budget 1, unit costs: client 0 (0.5 on both) on ES 1 and client 1 (0.2 on
        # ES 0, 0.1 on ES 1) on ES 0 give 0.7, the optimum (the old greedy found 0.6).
        (pad([[0.5, 0.5], [0.2, 0.1]], [1, 1], cover2, [1, 1]), mask([0, 1], [1, 0]), None),
        # Budget 2 per ES: everybody on their best ES, ties to the lower ES without a tie-break.
        (pad([[0.5, 0.5], [0.2, 0.1]], [1, 1], cover2, [2, 2]), mask([1, 0], [1, 0]), None),
        # Packing: budgets 5 and 5, costs 2, 2, 3, 3. Cheapest first into the fullest ES takes
        # 2 + 2 and one 3; the optimum puts a 2 and a 3 on each ES.
        (pad(np.ones((4, 2)), [2, 2, 3, 3], np.ones((4, 2), bool), [5, 5]), 4, 4),
        # Coverage and weight <= 0: client 0 is not covered by ES 0, client 1 weighs 0 / -1.
        (
            pad([[0.9, 0.3], [0.0, -1.0]], [1, 1], [[0, 1], [1, 1]], [5, 5]),
            mask([0, 1], [0, 0]),
            mask([0, 1], [1, 0]),
        ),
        # One ES of budget 5, costs 2, 2, 3, 3, weights 1, 1, 1, 1.2: the heaviest pair is a 2 and
        # the heavier 3 (2.2), where cheapest first takes the two 2s (2.0), the most clients.
        (
            pad([[1], [1], [1], [1.2]], [2, 2, 3, 3], np.ones((4, 1), bool), [5]),
            mask([1], [0], [0], [1]),
            mask([1], [1], [0], [0]),
        ),
        # Zero budget: nothing is affordable.
        (pad([[1], [1]], [1, 1], [[1], [1]], [0]), mask([0], [0]), mask([0], [0])),
        # Costs 0.3 then 0.1 fit a budget of 0.4, although in float32 0.4 - 0.3 < 0.1 by an
        # ulp: the relative slack absorbs such rounding.
        (pad([[1], [0.2]], [0.3, 0.1], [[1], [1]], [0.4]), mask([1], [1]), mask([1], [1])),
        # Nobody covered: empty.
        (pad([[1], [1]], [1, 1], [[0], [0]], [5]), mask([0], [0]), mask([0], [0])),
    ]


class HandExamplesTest(chex.TestCase):
    @chex.variants(with_jit=True)
    def test_hand_examples(self):
        """Every hand case optimal and certified (one vmapped call per solver)."""
        self._hand_examples()

    def _hand_examples(self):
        cases = _hand_cases()
        inputs = [np.stack(x) for x in zip(*(case[0] for case in cases), strict=True)]
        inputs = [np.resize(x, (BATCH, *x.shape[1:])) for x in inputs]  # repeated to a batch
        tiebreak = np.zeros_like(inputs[0])
        for col, name in ((1, "budgeted"), (2, "cardinality")):
            result = as_numpy(self.variant(jax.vmap(_solver(name)))(*inputs, tiebreak))
            assert result.certified.all(), name
            for i, case in enumerate(cases):
                want = case[col]
                if isinstance(want, int):  # a number of clients, the packing case
                    assert result.mask[i].sum() == want, (name, i)
                    spent = inputs[1][i] @ result.mask[i]
                    assert sorted(spent.tolist()) == [0, 5, 5], (name, i)
                elif want is not None:
                    np.testing.assert_array_equal(result.mask[i], want, err_msg=f"{name} {i}")
        weight, cost, cover, budget = (x[1] for x in inputs)
        value, best = exact_assignment(weight, cost, cover, budget)
        assert value == pytest.approx(0.7) and best.tolist() == cases[1][1].tolist()
        # A scalar budget is broadcast to every ES.
        shape = jax.eval_shape(self.variant(budgeted_assignment), weight, cost, cover, 2.0)
        assert shape.mask.shape == (50, 3)

    @chex.variants(with_jit=True, without_jit=True)
    def test_asserts_reject_bad_shapes(self):
        """Wrong ranks, mismatched N or M, a non-bool coverage and a tie-break of another shape
        are refused at trace time."""
        budgeted, card = self.variant(budgeted_assignment), self.variant(_card)
        weight, cost, cover = jnp.ones((4, 2)), jnp.ones(4), jnp.ones((4, 2), bool)
        bad = [
            (weight, jnp.ones(3), cover, 1.0),  # cost of the wrong length
            (weight, jnp.ones((4, 1)), cover, 1.0),  # cost not [N]
            (weight, cost, jnp.ones((4, 2)), 1.0),  # coverage not bool
            (weight, cost, cover, jnp.ones(3)),  # budget not [M]
            (weight, cost, cover, jnp.ones((1, 2))),  # budget of rank 2
            (weight, cost, cover, 1.0, jnp.ones((4, 3))),  # tie-break of another shape
        ]
        first = [
            (jnp.ones(4), cost, cover, 1.0),  # weight not [N, M]
            (weight, cost, jnp.ones((4, 3), bool), 1.0),  # coverage of another shape
        ]
        for args in first + bad:
            with pytest.raises(AssertionError):
                budgeted(*args)
        for args in bad:  # the same without the weight
            with pytest.raises(AssertionError):
                card(*args[1:])
        with pytest.raises(AssertionError):
            self.variant(assignment_value)(jnp.ones((4, 2), bool), jnp.ones((2, 4)))


@pytest.mark.slow
class HandExamplesEagerTest(HandExamplesTest):
    """The hand examples without jit (op by op: slow to dispatch)."""

    @chex.variants(without_jit=True)
    def test_hand_examples(self):
        self._hand_examples()

    def test_asserts_reject_bad_shapes(self):
        pass  # run by the parent class


def test_counting_and_sort_orders_agree():
    """The two order paths (O(P^2) counting, stable sort) give the same order, ties included."""
    rng = np.random.default_rng(0)
    for size in (1, 7, 64, 150):
        keys = np.concatenate(
            [-rng.integers(0, 4, (200, size)), -rng.random((50, size))], dtype=np.float32
        )
        keys[:, ::5] = 1.0
        count = jax.jit(jax.vmap(lambda k: order.counting_order(order.materialise(k))))(keys)
        sort = jax.jit(jax.vmap(order.sort_order))(keys)
        np.testing.assert_array_equal(count, sort)
        np.testing.assert_array_equal(sort, np.argsort(keys, axis=1, kind="stable"))


# --------------------------------------------------------------------------------------------
# properties on random instances, kernel against its mirror
# --------------------------------------------------------------------------------------------


def _feasible(shape, name):
    instances, _, result, with_tiebreak = random_case(shape, name)
    weight = objective(name, instances[0], instances[2])
    for res in (result, with_tiebreak):
        check_feasible(res, weight, *instances[1:])
        # certified => the value is the MILP's (checked below); all-best => certified
        eligible = instances[2] & (weight > 0)
        best = np.max(np.where(eligible, weight, 0), axis=-1)
        chosen = np.max(np.where(res.mask, weight, 0), axis=-1)
        assert np.all(res.certified[np.all(chosen == best, axis=-1)])


def _matches_mirror(shape, name, count):
    """Same mask and flag as the plain loop (float32 both), with and without a tie-break."""
    instances, tiebreak, result, with_tiebreak = random_case(shape, name)
    mismatches = 0
    for i in range(count):
        args = [x[i] for x in instances]
        for res, tb in ((result, None), (with_tiebreak, tiebreak[i])):
            mask, certified = mirror(name, *args, tb, steps=STEPS)
            if not (np.array_equal(mask, res.mask[i]) and certified == res.certified[i]):
                mismatches += 1
    # XLA may fuse a product into an addition where NumPy rounds twice: a rare near-tie.
    assert mismatches <= max(1, count // 100), mismatches


@pytest.mark.parametrize("name", ["budgeted", "cardinality"])
@pytest.mark.parametrize("shape", SHAPES)
def test_feasible_and_matches_mirror(shape, name):
    _feasible(shape, name)
    _matches_mirror(shape, name, 60)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["budgeted", "cardinality"])
@pytest.mark.parametrize("shape", SHAPES + SLOW_SHAPES)
def test_feasible_and_matches_mirror_every_shape(shape, name):
    _feasible(shape, name)
    _matches_mirror(shape, name, BATCH)


def test_mirror_shares_the_kernels_constants():
    from jfl.reference import milp_assignment as ref

    for name in (
        "BUDGET_RTOL",
        "CARDINALITY_STEPS",
        "BUDGETED_STEPS",
        "COUNT_STEPS",
        "COUNT_THRESHOLD",
        "LAMBDA_SCALE",
        "LARGE_CLIENTS",
        "LARGE_STEPS",
    ):
        assert getattr(ref, name) == getattr(assignment, name), name
    for n in (1, 50, 256, 257, 10_000):
        for steps in (None, 7):
            for default in (assignment.CARDINALITY_STEPS, assignment.BUDGETED_STEPS):
                want = assignment.default_steps(n, steps, default)
                assert ref._steps(n, steps, default) == want
                assert want == (steps or (default if n <= 256 else assignment.LARGE_STEPS))


# --------------------------------------------------------------------------------------------
# against the MILP
# --------------------------------------------------------------------------------------------


def test_milp_matches_bruteforce():
    """``exact_assignment`` equals enumeration of all (M+1)^N assignments on tiny instances."""
    rng = np.random.default_rng(60)
    for _ in range(80):
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


@functools.cache
def _assignments(k, m):
    """Every assignment of k items to m bins as one-hot [m^k, k, m] floats."""
    choice = np.array(list(itertools.product(range(m), repeat=k)), np.int64).reshape(-1, k)
    return (choice[:, :, None] == np.arange(m)).astype(np.float64)


def brute_largest(items, capacity, rtol):
    """Largest k such that the k cheapest items pack into capacity·(1 + rtol) (float64,
    enumeration of every assignment)."""
    items = np.sort(np.asarray(items, np.float64))
    capacity = np.asarray(capacity, np.float64) * (1 + rtol)
    for k in range(len(items), 0, -1):
        sums = np.einsum("akm,k->am", _assignments(k, len(capacity)), items[:k])
        if np.any(np.all(sums <= capacity, axis=1)):
            return k
    return 0


def packing_instances(rng, count):
    """``count`` max-|s| instances of ≤ 9 clients covered by every open ES, 1 to 3 open ESs (the
    others closed, budget -1), padded to the hfl shape with uncovered clients: uniform costs,
    near-perfect packings (each budget split into parts, perturbed slightly either way), equal
    and unequal budgets, clients dearer than every budget, zero costs and budgets, none or one
    client. Returns ``(weight, cost, available, budget)`` and the number of open ESs."""
    cost = np.ones((count, 50))
    available = np.zeros((count, 50, 3), bool)
    budget = np.full((count, 3), -1.0)
    open_servers = 1 + np.arange(count) % 3
    for row, m in enumerate(open_servers):
        kind = row % 5
        cap = np.full(m, rng.uniform(2, 6)) if rng.random() < 0.5 else rng.uniform(2, 6, m)
        if kind == 0:  # uniform costs
            items = rng.uniform(0.3, 3.0, rng.integers(0, 10))
        elif kind in (1, 2):  # near-perfect packings
            parts = [c * rng.dirichlet(np.ones(rng.integers(1, 4))) for c in cap]
            items = np.concatenate(parts)
            items *= 1 + rng.uniform(-2e-3, 2e-3, len(items))
            items = np.concatenate([items, rng.uniform(0.3, 3.0, rng.integers(0, 3))])[:9]
        elif kind == 3:  # clients dearer than every budget, zero costs, a zero budget
            items = np.concatenate(
                [
                    rng.uniform(0.3, 3.0, rng.integers(0, 6)),
                    cap.max() * rng.uniform(1.01, 2.0, rng.integers(1, 3)),
                    np.zeros(rng.integers(0, 2)),
                ]
            )[:9]
            if m > 1 and rng.random() < 0.5:
                cap[rng.integers(m)] = 0.0
        else:  # no client, or one
            items = rng.uniform(0.3, 3.0, rng.integers(0, 2))
        cost[row, : len(items)] = rng.permutation(items)
        available[row, : len(items), :m] = True
        budget[row, :m] = cap
    f32 = np.float32
    weight = available.astype(f32)
    return (weight, cost.astype(f32), available, budget.astype(f32)), open_servers


def test_cardinality_matches_bruteforce_on_packings():
    """The max-|s| problem with every client covered by every ES is bin packing: the most
    clients are the k cheapest for the largest k whose costs pack into the budgets. On BATCH
    small instances (1 to 3 ESs, near-perfect packings, ties) cardinality_assignment is exact
    and certified, with and without a random tie-break, against enumeration (an optimum within
    float rounding of a budget may be either count); budgeted_assignment with unit weights is
    never above it and exact where it certifies."""
    rng = np.random.default_rng(11)
    instances, open_servers = packing_instances(rng, BATCH)
    weight, cost, available, budget = instances
    items = [c[a.any(axis=1)] for c, a in zip(cost, available, strict=True)]
    caps = [b[:m] for b, m in zip(budget, open_servers, strict=True)]
    lower = np.array([brute_largest(i, b, 0.0) for i, b in zip(items, caps, strict=True)])
    upper = np.array([brute_largest(i, b, 2 * RTOL) for i, b in zip(items, caps, strict=True)])
    assert np.mean(lower == upper) > 0.95
    assert upper.max() >= 8 and np.any(upper == 0)  # (the instances' range)
    tiebreak = rng.random(weight.shape).astype(np.float32)
    for name in ("cardinality", "budgeted"):
        for result in (solve(name, *instances), solve(name, *instances, tiebreak)):
            check_feasible(result, weight, cost, available, budget)
            count = result.mask.sum(axis=(1, 2))
            assert np.all(count <= upper), name
            certified = result.certified
            assert np.all(lower[certified] <= count[certified]), name
            if name == "cardinality":
                assert certified.all()


def _packing_test_cases(rng, count):
    """``count`` packing questions for the search's packing test, N = 12 clients by ascending
    cost (float32), 1 to 3 ESs: near-perfect packings (each budget split into parts, perturbed
    slightly either way) and uniform costs, a start depth, and j ≤ 8 clients to pack: mostly
    as many as the total budget holds. Returns the costs, budgets, starts, counts, and whether
    the j clients from ``start`` pack (enumeration in float64, the budgets as given)."""
    n = 12
    costs, budgets, starts, counts, packs = [], [], [], [], []
    for row in range(count):
        m = 1 + row % 3
        cap = rng.uniform(2, 6, m) if row % 2 else np.full(m, rng.uniform(2, 6))
        if row % 4 < 3:
            parts = np.concatenate([c * rng.dirichlet(np.ones(rng.integers(1, 4))) for c in cap])
            parts *= 1 + rng.uniform(-2e-3, 2e-3, len(parts))
            extra = rng.uniform(0.3, 3.0, n)
            items = np.concatenate([parts, extra])[:n]
        else:
            items = rng.uniform(0.3, 3.0, n)
        items = np.sort(items.astype(np.float32))
        budget = np.full(3, -1.0, np.float32)
        budget[:m] = cap
        start = int(rng.integers(0, 4))
        # (mostly the most clients that the total budget holds: whether they pack is the question)
        held = np.cumsum(items[start:].astype(np.float64)) <= cap.sum()
        j = int(np.clip(held.sum() + (row % 5 == 0), 1, 8))
        window = items[start : start + j].astype(np.float64)
        sums = np.einsum("akm,k->am", _assignments(len(window), m), window)
        packs.append(bool(np.any(np.all(sums <= budget[:m].astype(np.float64), axis=1))))
        costs.append(items), budgets.append(budget), starts.append(start), counts.append(j)
    return [np.array(x) for x in (costs, budgets, starts, counts, packs)]


def _fits(costs, budgets, starts):
    """How many of the cheapest clients from ``start`` fit into each budget alone (float64)."""
    fits = np.zeros(budgets.shape, np.int32)
    for i, (items, budget, start) in enumerate(zip(costs, budgets, starts, strict=True)):
        prefix = np.cumsum(items[start:].astype(np.float64))
        fits[i] = [np.sum(prefix <= b) for b in budget.astype(np.float64)]
    return fits


def test_packing_test_never_refutes_a_packing():
    """The search's packing test (``_can_pack``: the j cheapest undecided clients against what
    each ES can use of them) and its mirror: never False where the clients pack (enumeration),
    with each ES's exact count or a larger one; with the exact counts they refute most of the
    sets that do not pack, and half of those that the total budget would hold."""
    rng = np.random.default_rng(23)
    costs, budgets, starts, counts, packs = _packing_test_cases(rng, BATCH)
    fits = _fits(costs, budgets, starts)
    loose = fits + rng.integers(0, 3, fits.shape).astype(np.int32)  # (any upper bound is valid)

    def kernel(cost, budget, start, j, fits):
        n = cost.shape[0]
        ones = jnp.ones((n, 3), cost.dtype)
        every = jnp.ones((n, 3), bool)
        tables = assignment._search_tables(
            ones, every, cost, jnp.zeros((n, 3)), jnp.arange(n), 0.0, ones, True
        )
        limit = budget * (1 + RTOL)
        return assignment._can_pack(tables, start, j, limit, fits, cost[start])

    run = jax.jit(jax.vmap(kernel))
    for bound in (fits, loose):
        got = np.asarray(run(costs, budgets, starts, counts, bound))
        assert np.all(got[packs]), np.flatnonzero(packs & ~got)
        roomy = np.array(
            [
                c[s : s + j].sum() <= np.maximum(b, 0).sum()
                for c, b, s, j in zip(costs, budgets, starts, counts, strict=True)
            ]
        )
        if bound is fits:
            refuted = ~got & ~packs
            assert refuted.sum() >= 0.8 * (~packs).sum()
            assert (refuted & roomy).sum() >= 0.5 * (~packs & roomy).sum() > 10
        for i in range(0, BATCH, 5):
            cs = costs[i]
            pall, total_cost = cost_prefix(cs)
            limit = budgets[i] * np.float32(1 + RTOL)
            reference = can_pack(
                cs, pall, starts[i], counts[i], limit, bound[i], target(12, total_cost)
            )
            assert reference == got[i], i


def padded(instances, n):
    """Instances of N clients padded to 50 (the extra clients uncovered, at cost 1)."""
    weight, cost, available, budget = instances
    count, _, m = weight.shape
    out_w = np.zeros((count, 50, m), np.float32)
    out_c = np.ones((count, 50), np.float32)
    out_a = np.zeros((count, 50, m), bool)
    out_w[:, :n], out_c[:, :n], out_a[:, :n] = weight, cost, available
    return out_w, out_c, out_a, budget


def _against_milp(count, seed, sizes=(8,)):
    """Both solvers on small random instances (N in ``sizes``, M = 3, padded to the hfl shape):
    never above the MILP optimum, equal to it whenever certified; returns the fraction certified
    and the value ratios."""
    rng = np.random.default_rng(seed)
    stats = {}
    for name in ("budgeted", "cardinality"):
        certified_count, ratios = 0, []
        for n in sizes:
            instances = random_instances(rng, BATCH, n, 3)
            todo = count // len(sizes)
            for start in range(0, todo, BATCH):
                chunk = random_instances(rng, BATCH, n, 3) if start else instances
                result = solve(name, *padded(chunk, n))
                for i in range(min(BATCH, todo - start)):
                    weight, cost, available, budget = (x[i] for x in chunk)
                    target = objective(name, weight, available)
                    best, _ = exact_assignment(target, cost, available, budget)
                    got = value64(result.mask[i, :n], target)
                    assert got <= best + 1e-6, (name, n, i, got, best)
                    if result.certified[i]:
                        certified_count += 1
                        assert got == pytest.approx(best, abs=1e-6), (name, n, i)
                    ratios.append(1.0 if best == 0 else got / best)
        stats[name] = (certified_count / count, np.array(ratios))
    return stats


def test_exact_where_certified():
    """On 200 small instances per solver: certified ⇒ MILP optimum; cardinality always is."""
    stats = _against_milp(200, seed=1)
    share, ratios = stats["cardinality"]
    assert share == 1.0 and np.all(ratios == 1.0)
    share, ratios = stats["budgeted"]
    assert share > 0.97 and ratios.min() > 0.95


@pytest.mark.slow
def test_exact_where_certified_thousands():
    """The same on 6000 instances per solver (N = 4 … 12, M = 3): cardinality is exact on each."""
    stats = _against_milp(6000, seed=2, sizes=(4, 6, 8, 10, 12))
    share, ratios = stats["cardinality"]
    print(f"cardinality: certified {share:.4f}, worst ratio {ratios.min():.4f}")
    assert share == 1.0 and np.all(ratios == 1.0)
    share, ratios = stats["budgeted"]
    print(f"budgeted: certified {share:.4f}, mean {ratios.mean():.5f}, worst {ratios.min():.4f}")
    assert share > 0.97


def test_certified_when_budget_pays_for_everybody():
    """Budgets ≥ the total cost: each client on its best ES, certified, value = MILP optimum."""
    rng = np.random.default_rng(40)
    weight, cost, available, _ = random_instances(rng, BATCH, 50, 3)
    total = cost.astype(np.float64).sum(axis=1, keepdims=True)
    budget = np.repeat(total, 3, axis=1) * rng.choice([1.0, 1.5], (BATCH, 1))
    budget = budget.astype(np.float32)
    budget[::7] = np.inf
    result = solve("budgeted", weight, cost, available, budget)
    assert result.certified.all()
    for i in range(0, BATCH, 25):
        best, _ = exact_assignment(weight[i], cost[i], available[i], budget[i])
        assert value64(result.mask[i], weight[i]) == pytest.approx(best, abs=1e-6)


# Lower limits of budgeted_assignment's optimality ratio on the hfl presets' rounds (500
# instances each, bench/bench_assignment.py): (mean, worst), the targets of docs/decisions.md
# (#cocs-solvers). (Before the step budgets grew budgeted_assignment reached 0.9996 / 0.933 on
# the CIFAR preset with unit weights, 0.9998 / 0.9808 with probabilities.) Eq. 14's step is
# cardinality_assignment's, which must be exact on both presets.
RATIO_LIMITS = {
    "mnist/unit": (0.999, 0.995),
    "mnist/prob": (0.999, 0.995),
    "cifar/unit": (0.999, 0.995),
    "cifar/prob": (0.999, 0.995),
}


def _check_ratios(family, name, ratios):
    print(family, name, f"mean {ratios.mean():.4f} worst {ratios.min():.4f}")
    if name == "cardinality":
        np.testing.assert_allclose(ratios, 1.0, rtol=1e-9, err_msg=family)
    else:
        mean, worst = RATIO_LIMITS[family]
        assert ratios.mean() >= mean and ratios.min() >= worst, (family, name)


def _hfl_ratios(family, count):
    """Value / MILP optimum on ``count`` rounds of the family, for budgeted_assignment and (unit
    weights) cardinality_assignment; the solvers run on a whole BATCH (one compilation)."""
    assert count <= BATCH
    instances = hfl_instances(family, BATCH, seed=3)
    names = ["budgeted"] + (["cardinality"] if family.endswith("unit") else [])
    masks = {name: solve(name, *instances).mask for name in names}
    ratios = {name: [] for name in names}
    for i in range(count):
        weight, cost, available, budget = (x[i] for x in instances)
        best, _ = exact_assignment(weight, cost, available, budget)
        for name in names:
            got = value64(masks[name][i], weight)
            ratios[name].append(1.0 if best == 0 else got / best)
    return {name: np.array(r) for name, r in ratios.items()}


@pytest.mark.paper
def test_ratio_on_hfl_mnist_rounds():
    """MNIST preset (N = 50, M = 3): unit weights solved exactly, probabilities ≥ 0.995 mean."""
    for family in ("mnist/unit", "mnist/prob"):
        for name, ratios in _hfl_ratios(family, 60).items():
            _check_ratios(family, name, ratios)


@pytest.mark.slow
@pytest.mark.parametrize("family", list(RATIO_LIMITS))
def test_ratio_on_hfl_rounds(family):
    """Both presets, 500 rounds each: cardinality_assignment exact, budgeted_assignment above
    the limits."""
    for name, ratios in _hfl_ratios(family, 500).items():
        _check_ratios(family, name, ratios)


# MILP optima (``exact_assignment``, float64) of the first CIFAR_ROUNDS rounds of
# ``hfl_instances("cifar/prob", BATCH, seed=0)``, stored because solving them takes about 40 s;
# ``test_budgeted_optimal_on_hfl_cifar_rounds`` re-solves two rounds, the slow test all of them.
CIFAR_ROUNDS = 100
# fmt: off
CIFAR_OPTIMA = np.array([
    13.933011174201965, 13.774321615695953, 14.795565903186798, 14.868033528327942,
    13.842387914657593, 12.97517853975296, 14.765601098537445, 14.728612899780273,
    12.748986959457397, 14.865323901176453, 14.820981562137604, 12.519053757190704,
    14.897107720375061, 13.301976501941681, 13.482216596603394, 12.90557062625885,
    13.887808740139008, 11.974818468093872, 13.361998677253723, 15.739301681518555,
    12.710275709629059, 11.60198026895523, 14.847852051258087, 14.334834218025208,
    12.915136754512787, 15.080576539039612, 13.785452008247375, 13.818910598754883,
    13.942797780036926, 12.823929131031036, 12.957414209842682, 11.861424207687378,
    12.763357758522034, 12.671299815177917, 13.96651029586792, 15.737191677093506,
    14.01334062218666, 14.52663654088974, 14.25673657655716, 13.34924328327179,
    13.185497999191284, 14.835787773132324, 12.83422476053238, 14.82254821062088,
    12.760499060153961, 14.680853307247162, 15.844290316104889, 15.4970263838768,
    14.240782678127289, 13.381731569766998, 14.810598254203796, 14.605320870876312,
    12.74962568283081, 12.91143125295639, 11.94330382347107, 13.868794918060303,
    14.938407957553864, 13.579668045043945, 14.751294195652008, 14.674033045768738,
    13.683456778526306, 13.7529855966568, 12.358420014381409, 13.824293792247772,
    12.625115752220154, 14.750767409801483, 15.870672762393951, 12.817416965961456,
    11.870356321334839, 14.910384595394135, 13.318481028079987, 15.315991878509521,
    12.893491089344025, 13.744431018829346, 14.02553939819336, 12.804298162460327,
    12.94310337305069, 13.676310181617737, 12.92993700504303, 14.690606594085693,
    13.6731036901474, 13.886515140533447, 14.516121804714203, 13.877295970916748,
    14.465473890304565, 13.708192229270935, 13.23918753862381, 13.244597673416138,
    12.87828141450882, 13.861561238765717, 12.792122542858124, 13.55297577381134,
    12.862973690032959, 14.66099363565445, 13.771794140338898, 14.82078742980957,
    14.889853596687317, 14.771582901477814, 14.55480831861496, 13.30177515745163,
])
# fmt: on


@functools.cache
def cifar_case(family, name):
    """BATCH rounds of the CIFAR preset (seed 0), a random tie-break, and the solver's results
    without and with it."""
    instances = hfl_instances(family, BATCH, seed=0)
    tiebreak = np.random.default_rng(17).random(instances[0].shape, dtype=np.float32)
    return instances, tiebreak, (solve(name, *instances), solve(name, *instances, tiebreak))


def _check_cifar_optima(optima):
    """budgeted_assignment on the first CIFAR_ROUNDS rounds, with and without a tie-break:
    feasible, never above the optimum, optimal on every round, certified on nearly all."""
    instances, _, results = cifar_case("cifar/prob", "budgeted")
    weight = instances[0][:CIFAR_ROUNDS]
    for result in results:
        check_feasible(result, *instances)
        got = np.array([value64(result.mask[i], weight[i]) for i in range(CIFAR_ROUNDS)])
        assert np.all(got <= optima + 1e-6)
        np.testing.assert_allclose(got, optima, rtol=1e-6)
        assert np.mean(result.certified[:CIFAR_ROUNDS]) >= 0.97


@pytest.mark.paper
def test_budgeted_optimal_on_hfl_cifar_rounds():
    """CIFAR preset rounds with the oracle's success probabilities, the hardest family for the
    weighted search (budgets of 4-7 clients): the optimum on every round (against the stored
    MILP optima, two of them solved again)."""
    instances, _, _ = cifar_case("cifar/prob", "budgeted")
    for i in (0, 8):  # two rounds that the MILP solves quickly
        optimum, _ = exact_assignment(*(x[i] for x in instances))
        assert optimum == pytest.approx(CIFAR_OPTIMA[i], rel=1e-9)
    _check_cifar_optima(CIFAR_OPTIMA)


@pytest.mark.slow
def test_budgeted_optimal_on_hfl_cifar_rounds_solved_now():
    instances, _, _ = cifar_case("cifar/prob", "budgeted")
    optima = [exact_assignment(*(x[i] for x in instances))[0] for i in range(CIFAR_ROUNDS)]
    np.testing.assert_allclose(optima, CIFAR_OPTIMA, rtol=1e-9)
    _check_cifar_optima(np.asarray(optima))


def _count_bound(cost, budget):
    """The largest k allowed by the total budget and by how many of the k cheapest clients each
    ES could hold alone (float64, budgets with the kernel's slack)."""
    prefix = np.cumsum(np.sort(cost).astype(np.float64))
    capacity = budget.astype(np.float64) * (1 + RTOL)
    fits = [int(np.sum(prefix <= c)) for c in capacity]
    best = 0
    for k in range(1, len(prefix) + 1):
        if prefix[k - 1] <= capacity.sum() and sum(min(f, k) for f in fits) >= k:
            best = k
    return best


@pytest.mark.paper
def test_cardinality_on_hfl_cifar_rounds():
    """BATCH CIFAR preset rounds with unit weights (every client covered by every ES: eq. 14's
    step is bin packing), with and without a tie-break: certified on nearly all, and the count
    is the bound (the k cheapest fitting the total budget and each ES's share) or else the
    MILP's count (checked on every such round, on every uncertified one and on 13 others),
    except on an uncertified round: there at most one client short. (Without the search's
    packing test one of these 500 rounds, round 396, ended one client short, unfinished within
    32768 steps; with it every round is certified.)"""
    instances, _, results = cifar_case("cifar/unit", "cardinality")
    weight, cost, available, budget = instances
    assert available.all()
    top = np.array([_count_bound(cost[i], budget[i]) for i in range(BATCH)])
    counts = [result.mask.sum(axis=(1, 2)) for result in results]
    for result, count in zip(results, counts, strict=True):
        check_feasible(result, *instances)
        assert np.all(count <= top) and np.mean(result.certified) >= 0.99
    uncertified = ~results[0].certified | ~results[1].certified
    below = (counts[0] < top) | (counts[1] < top)
    checked = np.flatnonzero(below | uncertified | (np.arange(BATCH) % 40 == 0))
    for i in checked:
        best, _ = exact_assignment(weight[i], cost[i], available[i], budget[i])
        for result, count in zip(results, counts, strict=True):
            if result.certified[i]:
                assert count[i] == round(best), i
            else:
                assert round(best) - 1 <= count[i] <= round(best), i
    assert below.sum() >= 3  # rounds where the bound is not attained


@pytest.mark.paper
def test_matches_mirror_on_hfl_cifar_rounds():
    """On CIFAR preset rounds, where the searches run longest (thousands of steps), with a
    random tie-break: the mirror's mask and flag on every round not certified and on the first
    six."""
    for family, name in (("cifar/unit", "cardinality"), ("cifar/prob", "budgeted")):
        instances, tiebreak, (_, result) = cifar_case(family, name)
        rounds = [*np.flatnonzero(~result.certified)[:6], *range(6)]
        for i in rounds:
            weight, cost, available, budget = (x[i] for x in instances)
            mask, certified = mirror(name, weight, cost, available, budget, tiebreak[i])
            np.testing.assert_array_equal(result.mask[i], mask, err_msg=f"{family} round {i}")
            assert result.certified[i] == certified, (family, i)


def test_optimality_ratios_helper():
    """``optimality_ratios`` returns one ratio in (0, 1] per paper-like instance."""

    def mirror_solver(*instances):
        return np.stack([budgeted_numpy(*args)[0] for args in zip(*instances, strict=True)])

    ratios = optimality_ratios(12, 8, 3, seed=0, solver=mirror_solver)
    assert ratios.shape == (12,) and np.all(ratios > 0) and np.all(ratios <= 1 + 1e-6)


# --------------------------------------------------------------------------------------------
# vmap / batch independence, ties
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["budgeted", "cardinality"])
def test_traced_budgets_and_batch_independence(name):
    """Traced per-config budgets under vmap; a config's result is bit-identical alone or batched."""
    rng = np.random.default_rng(50)
    instance = [x[0] for x in random_paper_instances(rng, 1, 50, 3)]
    tiebreak = rng.random((50, 3)).astype(np.float32)
    budgets = rng.uniform(0.0, 12.0, (BATCH, 3)).astype(np.float32)
    weight, cost, available = (np.repeat(x[None], BATCH, axis=0) for x in instance[:3])
    tiebreaks = np.repeat(tiebreak[None], BATCH, 0)
    batch = solve(name, weight, cost, available, budgets, tiebreaks, steps=STEPS)
    assert batch.mask.any() and not batch.mask.all()
    single = unbatched(name, STEPS)
    for j in range(0, BATCH, 25):
        one = as_numpy(single(*instance[:3], budgets[j], tiebreak))
        np.testing.assert_array_equal(batch.mask[j], one.mask)
        assert batch.certified[j] == one.certified
    # Instances of a random batch, solved alone.
    instances, tiebreaks, _, result = random_case((50, 3), name)
    for i in range(0, BATCH, 25):
        one = as_numpy(single(*(x[i] for x in instances), tiebreaks[i]))
        np.testing.assert_array_equal(one.mask, result.mask[i])
        assert one.certified == result.certified[i]


def _spread(counts, samples, probability):
    """Frequencies within 5 binomial standard deviations of ``samples · probability``."""
    sd = np.sqrt(samples * probability * (1 - probability))
    assert np.all(np.abs(counts - samples * probability) <= 5 * sd), counts


@pytest.mark.parametrize("name", ["budgeted", "cardinality"])
def test_ties_spread_over_clients_and_servers(name):
    """Five identical clients (cost 1, weight 1), three identical ESs of budget 1 (45 more
    clients, uncovered, pad to the tests' shape): three clients are chosen, one per ES. With a
    random tie-break every client is chosen with probability 3/5 and every (client, ES) pair
    with 1/5; without one, the lowest indices, deterministically."""
    n, m = 50, 3
    weight = np.ones((BATCH, n, m), np.float32)
    cost = np.ones((BATCH, n), np.float32)
    available = np.zeros((BATCH, n, m), bool)
    available[:, :5] = True
    budget = np.ones((BATCH, m), np.float32)
    rng = np.random.default_rng(7)
    masks = []
    for _ in range(4):  # 4 · BATCH samples
        tiebreak = rng.random((BATCH, n, m)).astype(np.float32)
        result = solve(name, weight, cost, available, budget, tiebreak)
        assert np.all(result.mask.sum(axis=(1, 2)) == 3) and np.all(result.mask.sum(axis=1) == 1)
        masks.append(result.mask[:, :5])
    masks = np.concatenate(masks)
    samples = len(masks)
    _spread(masks.any(axis=2).sum(axis=0), samples, 3 / 5)
    _spread(masks.sum(axis=0).reshape(-1), samples, 1 / 5)
    plain = solve(name, weight, cost, available, budget)
    assert np.all(plain.mask == plain.mask[0])
    assert plain.mask[0].any(axis=1).tolist() == [True] * 3 + [False] * 47


@pytest.mark.parametrize("name", ["budgeted", "cardinality"])
def test_tight_packing_spread_over_servers(name):
    """Costs 1, 1, 2, 2, 3, 3 into three ESs of budget 4 (weight 1): every client placed, each
    ES spent exactly (1 + 3, 1 + 3, 2 + 2); with a random tie-break every ES gets the pair of
    2s on some instances."""
    weight = np.zeros((BATCH, 50, 3), np.float32)
    cost = np.ones((BATCH, 50), np.float32)
    available = np.zeros((BATCH, 50, 3), bool)
    cost[:, :6] = [1, 1, 2, 2, 3, 3]
    available[:, :6] = True
    weight[:, :6] = 1
    budget = np.full((BATCH, 3), 4.0, np.float32)
    tiebreak = np.random.default_rng(5).random(weight.shape).astype(np.float32)
    result = solve(name, weight, cost, available, budget, tiebreak)
    assert result.certified.all() and np.all(result.mask.sum(axis=(1, 2)) == 6)
    np.testing.assert_array_equal(np.einsum("bnm,bn->bm", result.mask, cost), 4.0)
    assert set(result.mask[:, 2].argmax(axis=1).tolist()) == {0, 1, 2}


# two phases in one program
# --------------------------------------------------------------------------------------------


def test_two_phase_is_the_two_solvers_in_sequence():
    """``two_phase_assignment``: ``cardinality_assignment`` on the first pairs, then
    ``budgeted_assignment`` in the budget the first phase's clients leave on each ES, the same
    masks and flags (with a tie-break, as COCS passes) on random instances: the second phase on the
    clients without a first-phase pair (COCS's split; then feasible together) or on every covered
    pair (both phases may hold a pair). The budget left is summed here in float32 in client order,
    the program's own sum may round its last bit differently: a rare near-tie, as the mirror's."""
    rng = np.random.default_rng(43)
    weight, cost, available, budget = random_instances(rng, BATCH, 50, 3)
    first = available & (rng.random(available.shape) < 0.3)
    split = rng.random(BATCH) < 0.5
    second = available & (~split[:, None, None] | ~np.any(first, axis=2, keepdims=True))
    tiebreak = rng.random(weight.shape).astype(np.float32)
    steps = {"first_steps": STEPS, "max_steps": STEPS}
    two_phase = jax.jit(jax.vmap(functools.partial(two_phase_assignment, **steps)))
    explore = solve("cardinality", weight, cost, first, budget, tiebreak, steps=STEPS)
    spent = np.zeros(budget.shape, np.float32)
    for n in range(cost.shape[1]):
        spent += np.where(explore.mask[:, n], cost[:, n, None], np.float32(0))
    exploit = solve("budgeted", weight, cost, second, budget - spent, tiebreak, steps=STEPS)
    got_first, got_second = (
        as_numpy(r) for r in two_phase(cost, first, weight, second, budget, tiebreak)
    )
    np.testing.assert_array_equal(got_first.mask, explore.mask)
    np.testing.assert_array_equal(got_first.certified, explore.certified)
    same = np.all(got_second.mask == exploit.mask, axis=(1, 2))
    same &= got_second.certified == exploit.certified
    assert np.sum(~same) <= BATCH // 100, np.sum(~same)
    # (with COCS's split the phases' clients are apart: one assignment within the budgets)
    together = AssignmentResult((got_first.mask | got_second.mask)[split], explore.certified[split])
    objective = np.where(first, np.float32(1), weight)[split]
    check_feasible(together, objective, cost[split], available[split], budget[split])
