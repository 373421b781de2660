"""Tests of jfl.experiments.regret against plain brute-force references written here from the paper.

References: exhaustive search over super arms for eq. (13); enumeration of all availability
patterns for E[min(N, |A ∩ U|)]; vertex enumeration of the LP (23) built independently with
itertools; enumeration of all deterministic A-only rules.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from jfl.experiments.regret import (
    AvailabilityLP,
    availability_lp,
    best_fixed_set,
    check_fairness,
    fairness_capacity,
)

# The paper's fairness experiment (Sec. V) with tau_max = 0.2 s (docs/decisions.md#cs-ucb-tau-max):
# mean rewards of the three clients, availability 0.9, c = (0.6, 0.5, 0.4), N = 2.
PAPER_MU = np.array([0.12, 0.19, 0.24])
PAPER_AVAIL = np.full(3, 0.9)
PAPER_C = np.array([0.6, 0.5, 0.4])


# ---------------------------------------------------------------- plain references


def all_patterns(avail):
    """Every availability pattern e (as a tuple of clients) with its probability, P(e) = 0 kept."""
    k = len(avail)
    out = []
    for r in range(k + 1):
        for e in itertools.combinations(range(k), r):
            p = math.prod(avail[i] if i in e else 1.0 - avail[i] for i in range(k))
            out.append((e, p))
    return out


def brute_capacity(subset, avail, n):
    """E[min(N, |A ∩ U|)] by summing over all 2^K patterns."""
    return sum(p * min(n, len(set(e) & set(subset))) for e, p in all_patterns(avail))


def set_reward(s, mu):
    return min(mu[i] for i in s) if s else 0.0


def build_lp(mu, avail, n):
    """LP (23) in q: objective w, fairness rows F (F q = E[b]), pattern rows E (E q = 1)."""
    patterns = all_patterns(avail)
    variables = [
        (i, s)
        for i, (e, _) in enumerate(patterns)
        for s in itertools.combinations(e, min(n, len(e)))
    ]
    w = np.array([patterns[i][1] * set_reward(s, mu) for i, s in variables])
    f = np.zeros((len(mu), len(variables)))
    e_rows = np.zeros((len(patterns), len(variables)))
    for v, (i, s) in enumerate(variables):
        e_rows[i, v] = 1.0
        for k in s:
            f[k, v] = patterns[i][1]
    return w, f, e_rows, patterns, variables


def vertex_enumeration_lp(mu, avail, c, n):
    """max w q s.t. F q >= c, E q = 1, q >= 0 by checking every vertex; -inf when infeasible."""
    w, f, e_rows, _, _ = build_lp(mu, avail, n)
    num_vars = w.size
    # Inequalities as G q <= h: fairness -F q <= -c, then -q <= 0.
    g = np.vstack([-f, -np.eye(num_vars)])
    h = np.concatenate([-np.asarray(c, float), np.zeros(num_vars)])
    need = num_vars - e_rows.shape[0]
    actives = np.array(list(itertools.combinations(range(g.shape[0]), need)), dtype=int)
    actives = actives.reshape(-1, need)
    mats = np.concatenate(
        [np.broadcast_to(e_rows, (len(actives), *e_rows.shape)), g[actives]], axis=1
    )
    rhs = np.concatenate([np.ones((len(actives), e_rows.shape[0])), h[actives]], axis=1)
    regular = np.linalg.cond(mats) < 1e10  # skip singular systems: they define no vertex
    q = np.linalg.solve(mats[regular], rhs[regular][..., None])[..., 0]
    feasible = np.all(q @ g.T <= h + 1e-9, axis=1) & np.all(
        np.abs(q @ e_rows.T - 1.0) <= 1e-9, axis=1
    )
    return float((q[feasible] @ w).max()) if feasible.any() else -np.inf


def deterministic_rules(mu, avail, n):
    """(reward, rates) of every deterministic A-only rule: one super arm per pattern."""
    patterns = all_patterns(avail)
    choices = [list(itertools.combinations(e, min(n, len(e)))) for e, _ in patterns]
    for rule in itertools.product(*choices):
        reward = sum(p * set_reward(s, mu) for (_, p), s in zip(patterns, rule, strict=True))
        rates = np.zeros(len(mu))
        for (_, p), s in zip(patterns, rule, strict=True):
            rates[list(s)] += p
        yield reward, rates


def random_policy_rates(rng, avail, n):
    """Selection rates (eq. 21) of a random A-only policy: a point of the region C."""
    _, f, e_rows, _, _ = build_lp(np.zeros(len(avail)), avail, n)
    q = rng.random(f.shape[1])
    q /= (e_rows @ q) @ e_rows
    return f @ q


def random_instance(rng, k, n, scale):
    mu = rng.uniform(0.0, 1.0, k)
    avail = rng.uniform(0.3, 1.0, k)
    c = np.minimum(scale * random_policy_rates(rng, avail, n), 0.999)
    return mu, avail, c


def max_subset_excess(c, avail, n):
    """max_U c(U) - E[min(N, |A ∩ U|)] over non-empty U, by brute force."""
    k = len(c)
    return max(
        sum(c[i] for i in u) - brute_capacity(u, avail, n)
        for r in range(1, k + 1)
        for u in itertools.combinations(range(k), r)
    )


def assert_valid_policy(res: AvailabilityLP, c, n):
    """q is a distribution per pattern over super arms of size min(N, |e|) inside e."""
    assert np.all(res.q >= -1e-9)
    sums = np.bincount(res.set_pattern, weights=res.q, minlength=len(res.pattern_prob))
    np.testing.assert_allclose(sums, 1.0, atol=1e-9)
    own = res.patterns[res.set_pattern]
    assert not np.any(res.sets & ~own)
    np.testing.assert_array_equal(res.sets.sum(1), np.minimum(n, own.sum(1)))
    assert np.all(res.pattern_prob > 0)
    np.testing.assert_allclose(res.pattern_prob.sum(), 1.0, atol=1e-12)
    rates = (res.pattern_prob[res.set_pattern] * res.q) @ res.sets
    np.testing.assert_allclose(res.selection_rate, rates, atol=1e-12)
    assert np.all(res.selection_rate >= np.asarray(c) - 1e-7)


# ---------------------------------------------------------------- best_fixed_set


def test_best_fixed_set_matches_exhaustive_search():
    """S* and mu(S*) equal the exhaustive argmax of min mu over |S| = N (eq. 13), ties included."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        k = int(rng.integers(1, 8))
        n = int(rng.integers(1, k + 1))
        # Few distinct values so that ties are common.
        mu = rng.integers(0, 4, k) / 4.0 if rng.random() < 0.5 else rng.random(k)
        mask, value = best_fixed_set(mu, n)
        best = max(min(mu[list(s)]) for s in itertools.combinations(range(k), n))
        assert value == best
        assert mask.dtype == bool and mask.sum() == n
        assert min(mu[mask]) == best
        # Ties go to the lower index: no unselected client beats or ties a selected later one.
        for i in np.flatnonzero(mask):
            for j in np.flatnonzero(~mask):
                assert mu[i] > mu[j] or (mu[i] == mu[j] and i < j)


def test_best_fixed_set_rejects_bad_num_channels():
    """num_channels outside [1, K] raises a ValueError naming it and the range."""
    with pytest.raises(ValueError, match=r"num_channels must be an integer in \[1, K=3\]"):
        best_fixed_set([0.1, 0.2, 0.3], 4)
    with pytest.raises(ValueError, match="num_channels"):
        best_fixed_set([0.1, 0.2, 0.3], 0)


# ---------------------------------------------------------------- fairness_capacity


def test_fairness_capacity_matches_pattern_enumeration():
    """E[min(N, |A ∩ U|)] equals the sum over all 2^K availability patterns."""
    rng = np.random.default_rng(1)
    for _ in range(200):
        k = int(rng.integers(1, 9))
        n = int(rng.integers(1, k + 2))
        avail = rng.random(k)
        avail[rng.random(k) < 0.15] = 1.0
        avail[rng.random(k) < 0.15] = 0.0
        u = rng.random(k) < 0.6
        got = fairness_capacity(u, avail, n)
        assert got == pytest.approx(brute_capacity(np.flatnonzero(u), avail, n), abs=1e-12)


# ---------------------------------------------------------------- check_fairness


def test_check_fairness_agrees_with_subset_brute_force():
    """check_fairness raises exactly when some subset U has c(U) > E[min(N, |A ∩ U|)]."""
    rng = np.random.default_rng(2)
    raised = accepted = 0
    for _ in range(300):
        k = int(rng.integers(1, 6))
        n = int(rng.integers(1, k + 1))
        avail = rng.uniform(0.0, 1.0, k)
        avail[rng.random(k) < 0.2] = 1.0
        c = np.minimum(rng.uniform(0.0, 1.0, k) * rng.uniform(0.2, 1.2), 0.999)
        excess = max_subset_excess(c, avail, n)
        if abs(excess) < 1e-6:
            continue
        if excess > 0:
            with pytest.raises(ValueError, match="infeasible"):
                check_fairness(c, avail, n)
            raised += 1
        else:
            check_fairness(c, avail, n)
            accepted += 1
    assert raised > 30 and accepted > 30


def test_check_fairness_accepts_rates_of_actual_policies():
    """Selection rates of random A-only policies lie in C (on its boundary) and are accepted."""
    rng = np.random.default_rng(3)
    for _ in range(40):
        k = int(rng.integers(1, 6))
        n = int(rng.integers(1, k + 1))
        avail = rng.uniform(0.05, 0.95, k)
        rates = random_policy_rates(rng, avail, n)
        check_fairness(rates, avail, n)
        check_fairness(rates, avail, n, exact_max_clients=0)


def test_check_fairness_feasibility_matches_brute_force_lp():
    """c passes check_fairness iff the LP (23), solved by vertex enumeration, is feasible."""
    rng = np.random.default_rng(4)
    for k, n in [(2, 1), (3, 1), (3, 2)]:
        for _ in range(8):
            avail = rng.uniform(0.3, 1.0, k)
            c = np.minimum(rng.uniform(0.0, 1.0, k) * rng.uniform(0.3, 1.2), 0.999)
            if abs(max_subset_excess(c, avail, n)) < 1e-6:
                continue
            feasible = vertex_enumeration_lp(np.zeros(k), avail, c, n) > -np.inf
            if feasible:
                check_fairness(c, avail, n)
            else:
                with pytest.raises(ValueError, match="infeasible"):
                    check_fairness(c, avail, n)


def test_sum_above_num_channels_is_infeasible():
    """sum c > N raises a ValueError that says infeasible and sum c > N."""
    with pytest.raises(ValueError, match=r"infeasible.*sum c = 1\.2 > N = 1"):
        check_fairness([0.6, 0.6, 0.0], [1.0, 1.0, 1.0], 1)
    with pytest.raises(ValueError, match="infeasible"):
        availability_lp(PAPER_MU, PAPER_AVAIL, [0.9, 0.8, 0.4], 2)


@pytest.mark.parametrize("bad", [[1.0, 0.1, 0.1], [-0.1, 0.1, 0.1], [np.nan, 0.1, 0.1]])
def test_fairness_outside_unit_interval_is_rejected(bad):
    """c_k = 1, negative or NaN raises a ValueError naming fairness and [0, 1)."""
    with pytest.raises(ValueError, match=r"fairness c_k must be in \[0, 1\)"):
        check_fairness(bad, [1.0, 1.0, 1.0], 2)
    with pytest.raises(ValueError, match=r"fairness c_k must be in \[0, 1\)"):
        availability_lp(PAPER_MU, PAPER_AVAIL, bad, 2)


def test_fairness_above_availability_is_infeasible():
    """c_k > availability_k raises and names the client (1-based)."""
    with pytest.raises(ValueError, match=r"infeasible.*\{2\}"):
        check_fairness([0.1, 0.6, 0.1], [0.9, 0.5, 0.9], 2)


def test_subset_violation_missed_by_simple_checks_is_named():
    """A violation only some subset U shows (not sum c, not c_k <= a_k) raises naming U."""
    avail = np.array([0.5, 0.5, 1.0])
    c = np.array([0.45, 0.45, 0.05])
    n = 1
    # The simple checks pass: sum c = 0.95 <= N = 1, <= E[min(1, |A|)] = 1 (client 3 is always
    # there), and c_k <= a_k ...
    assert c.sum() <= n
    assert c.sum() <= brute_capacity((0, 1, 2), avail, n)
    assert np.all(c <= avail)
    # ... but clients 1 and 2 need 0.9 > P(either is available) = 0.75.
    assert brute_capacity((0, 1), avail, n) == pytest.approx(0.75)
    for exact in (16, 0):  # exhaustive subsets, and the sorted-prefix check used for large K
        with pytest.raises(ValueError, match=r"infeasible.*clients \{1, 2\}"):
            check_fairness(c, avail, n, exact_max_clients=exact)
    with pytest.raises(ValueError, match=r"infeasible.*clients \{1, 2\}"):
        availability_lp([0.2, 0.5, 0.9], avail, c, n)


def test_check_fairness_boundary_is_sharp():
    """c on the boundary of C is accepted; 1e-6 beyond it is refused."""
    avail = np.array([0.5, 0.5, 1.0])
    # f({1, 2}) = 1 - 0.5 * 0.5 = 0.75 for N = 1.
    check_fairness([0.375, 0.375, 0.0], avail, 1)
    with pytest.raises(ValueError, match=r"clients \{1, 2\}"):
        check_fairness([0.375 + 5e-7, 0.375 + 5e-7, 0.0], avail, 1)
    with pytest.raises(ValueError, match=r"clients \{1, 2\}"):
        check_fairness([0.375 + 5e-7, 0.375 + 5e-7, 0.0], avail, 1, exact_max_clients=0)


def test_large_k_subset_violation_with_equal_availability():
    """Above exact_max_clients, equal availabilities are still checked exactly (top-m prefixes)."""
    k, n, a = 20, 2, 0.3
    avail = np.full(k, a)
    c = np.zeros(k)
    c[[4, 9, 13]] = 0.3
    # Any 3 clients can get E[min(2, Binomial(3, 0.3))] = 0.9 - 0.3^3 < 0.9 selections per round.
    cap3 = sum(min(n, j) * stats.binom.pmf(j, 3, a) for j in range(4))
    assert cap3 == pytest.approx(0.9 - a**3)
    with pytest.raises(ValueError, match=r"infeasible.*clients \{5, 10, 14\}"):
        check_fairness(c, avail, n)
    c[[4, 9, 13]] = 0.29
    check_fairness(c, avail, n)


def test_exhaustive_check_handles_sixteen_clients():
    """The 2^16-subset check accepts feasible c and finds a violation hidden in a 5-subset."""
    rng = np.random.default_rng(5)
    k, n = 16, 2
    avail = rng.uniform(0.5, 0.9, k)
    check_fairness(0.05 * avail, avail, n)
    group = [1, 3, 6, 10, 15]
    in_group = np.isin(np.arange(k), group)
    cap = fairness_capacity(in_group, avail, n)
    c = np.where(in_group, cap / len(group) + 0.001, 0.0)
    # Only U = group shows it: sum c <= N and <= E[min(N, |A|)], and c_k <= a_k.
    assert c.sum() > cap
    assert c.sum() <= fairness_capacity(np.ones(k, bool), avail, n) and np.all(c <= avail)
    with pytest.raises(ValueError, match=r"clients \{2, 4, 7, 11, 16\}"):
        check_fairness(c, avail, n)


def test_bad_shapes_and_ranges_are_rejected():
    """Mismatched shapes, availability outside [0, 1], N outside [1, K] and bad mu raise."""
    with pytest.raises(ValueError, match="same length"):
        check_fairness([0.1, 0.1], [0.5, 0.5, 0.5], 1)
    with pytest.raises(ValueError, match=r"availability must be in \[0, 1\]"):
        check_fairness([0.1, 0.1], [0.5, 1.5], 1)
    with pytest.raises(ValueError, match=r"num_channels must be an integer in \[1, K=2\]"):
        check_fairness([0.1, 0.1], [0.5, 0.5], 3)
    with pytest.raises(ValueError, match="mu"):
        availability_lp([0.1, 1.5, 0.2], PAPER_AVAIL, PAPER_C, 2)
    with pytest.raises(ValueError, match="mu"):
        availability_lp([0.1, 0.2], PAPER_AVAIL, PAPER_C, 2)


# ---------------------------------------------------------------- availability_lp


@pytest.mark.parametrize(("k", "n"), [(2, 1), (3, 1), (3, 2)])
def test_lp_matches_vertex_enumeration(k, n):
    """r* equals the best vertex of the independently built LP (23); q is a feasible policy."""
    rng = np.random.default_rng(10 + 3 * k + n)
    cases = [random_instance(rng, k, n, scale) for scale in (0.3, 0.7, 0.95, 1.0, 1.0)]
    mu0, avail0, _ = random_instance(rng, k, n, 0.0)
    cases.append((mu0, avail0, np.zeros(k)))
    # A client that is always available: its P(e) = 0 patterns are dropped by the module only.
    mu1, avail1, _ = random_instance(rng, k, n, 0.0)
    avail1[0] = 1.0
    cases.append((mu1, avail1, 0.8 * random_policy_rates(rng, avail1, n)))
    for mu, avail, c in cases:
        res = availability_lp(mu, avail, c, n)
        expected = vertex_enumeration_lp(mu, avail, c, n)
        assert res.r_star == pytest.approx(expected, abs=1e-7)
        assert_valid_policy(res, c, n)
        reward = (
            res.pattern_prob[res.set_pattern]
            * res.q
            @ [set_reward(tuple(np.flatnonzero(s)), mu) for s in res.sets]
        )
        assert reward == pytest.approx(res.r_star, abs=1e-12)


def test_lp_on_paper_fairness_instance():
    """The paper's instance (N = 2, availability 0.9, c = (0.6, 0.5, 0.4)) matches brute force."""
    for c in (PAPER_C, np.zeros(3)):
        res = availability_lp(PAPER_MU, PAPER_AVAIL, c, 2)
        assert res.r_star == pytest.approx(
            vertex_enumeration_lp(PAPER_MU, PAPER_AVAIL, c, 2), abs=1e-7
        )
        assert_valid_policy(res, c, 2)
    # Fairness costs reward: client 1 (the slowest) must be picked 60% of the rounds.
    fair = availability_lp(PAPER_MU, PAPER_AVAIL, PAPER_C, 2)
    free = availability_lp(PAPER_MU, PAPER_AVAIL, np.zeros(3), 2)
    assert fair.r_star < free.r_star
    assert fair.selection_rate[0] >= 0.6 - 1e-7 > free.selection_rate[0]


@pytest.mark.parametrize(("k", "n"), [(2, 1), (3, 1), (3, 2), (4, 2), (4, 3)])
def test_lp_dominates_feasible_deterministic_rules(k, n):
    """r* >= every feasible deterministic A-only rule, with equality when c = 0."""
    rng = np.random.default_rng(20 + 5 * k + n)
    for scale in (0.0, 0.5, 0.9):
        mu, avail, c = random_instance(rng, k, n, scale)
        rules = list(deterministic_rules(mu, avail, n))
        res = availability_lp(mu, avail, c, n)
        feasible = [reward for reward, rates in rules if np.all(rates >= c - 1e-12)]
        if feasible:
            assert res.r_star >= max(feasible) - 1e-9
        if scale == 0.0:
            assert res.r_star == pytest.approx(max(reward for reward, _ in rules), abs=1e-9)


def test_full_availability_without_fairness_gives_best_fixed_set():
    """With every client always available and c = 0, r* equals mu(S*) of eq. (13)."""
    rng = np.random.default_rng(6)
    for _ in range(20):
        k = int(rng.integers(1, 7))
        n = int(rng.integers(1, k + 1))
        mu = rng.uniform(0.0, 1.0, k)
        res = availability_lp(mu, np.ones(k), np.zeros(k), n)
        _, value = best_fixed_set(mu, n)
        assert res.r_star == pytest.approx(value, abs=1e-9)
        assert len(res.pattern_prob) == 1 and res.pattern_prob[0] == 1.0
        assert res.sets.shape == (math.comb(k, n), k)


def test_empty_pattern_earns_nothing():
    """The all-unavailable pattern is one empty super arm with reward 0 (mu(∅) = 0)."""
    mu, avail = np.array([0.5, 0.8]), np.array([0.5, 0.5])
    res = availability_lp(mu, avail, np.zeros(2), 1)
    empty = np.flatnonzero(~res.patterns.any(axis=1))
    assert len(empty) == 1 and res.pattern_prob[empty[0]] == pytest.approx(0.25)
    assert not res.sets[res.set_pattern == empty[0]].any()
    # Best rule: client 2 whenever available, else client 1: 0.5 * 0.8 + 0.25 * 0.5.
    assert res.r_star == pytest.approx(0.5 * 0.8 + 0.25 * 0.5, abs=1e-9)


def test_too_many_clients_for_enumeration():
    """K = 30, N = 5 is refused before enumerating, with a message naming the enumeration."""
    k = 30
    with pytest.raises(ValueError, match=r"K=30 is too large for the enumeration"):
        availability_lp(np.full(k, 0.5), np.full(k, 0.5), np.zeros(k), 5)
    with pytest.raises(ValueError, match="max_variables=9"):
        availability_lp(PAPER_MU, PAPER_AVAIL, PAPER_C, 2, max_variables=9)
