"""Regret benchmarks of CS-UCB and CS-UCB-Q (Xia et al., the ``wireless`` setting).

The regret of a client-selection policy is measured against a benchmark computed from the
true mean rewards ``mu_k = E[r_k]`` (``r_k = 1 - tau_k / tau_max``):

* **CS-UCB** (ideal scenario, eq. 14): ``T * mu(S*) - sum_t r(S(t))`` with the best fixed super
  arm ``S* = argmax_{|S| = N} min_{k in S} mu_k`` (eq. 13) -- :func:`best_fixed_set`.
* **CS-UCB-Q** (availability and fairness, eq. 25): ``T * r* - sum_t r(S(t))`` where ``r*`` (eq. 24)
  is the optimum of the linear program (23) over *A-only* policies, i.e. stationary randomised
  rules that see only the set ``A(t)`` of available clients -- :func:`availability_lp`.

The LP is only feasible when the fairness vector ``c`` lies in the maximal feasibility region
``C`` of the paper (Sec. II-C).  With independent availabilities the region is explicit: the
selection rates ``E[b_k]`` (eq. 21) that A-only policies obeying the selection-size rule (10) can
reach form the Minkowski sum, over availability patterns ``e`` weighted by ``P(e)``, of the base
polytopes of the uniform matroid of rank ``min(N, |e|)`` on ``e``.  That sum is the base polytope
of the polymatroid with rank function ``f(U) = E[min(N, |A ∩ U|)]``
(:func:`fairness_capacity`), so ``c >= 0`` is feasible (some policy has ``E[b] >= c``) exactly
when ``c(U) <= f(U)`` for every subset ``U`` of clients -- :func:`check_fairness`.

Everything here is plain NumPy/SciPy: the benchmarks are computed once per configuration, not
inside the jitted runner.  Clients are indexed from 0 in arrays; error messages number them
from 1 (client 1 is index 0), as the paper does.
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from jfl import checks

__all__ = [
    "AvailabilityLP",
    "availability_lp",
    "best_fixed_set",
    "check_fairness",
    "fairness_capacity",
]

# Absolute slack for the feasibility checks: rates built from probabilities in floating point can
# sit on the boundary of C (e.g. the rates of an actual policy) and must not be refused.
_TOL = 1e-9
# 2^K rows of a (K, N+1) table: K = 20 is already ~10^6 rows.
_EXACT_MAX_LIMIT = 20


def _check_num_channels(num_channels: int, num_clients: int) -> int:
    if isinstance(num_channels, float):  # the number of channels, not a value that rounds to one
        raise ValueError(f"num_channels must be an integer, got {num_channels!r}")
    return checks.integer("num_channels", num_channels, 1, num_clients, "K")


def _clients(indices: npt.ArrayLike) -> str:
    """1-based client numbers for error messages."""
    return "{" + ", ".join(str(int(i) + 1) for i in np.asarray(indices).ravel()) + "}"


def _pb_step(dist: np.ndarray, p: float) -> np.ndarray:
    """Add one Bernoulli(p) client to a truncated Poisson-binomial law.

    ``dist[..., j] = P(X = j)`` for ``j < N`` and ``dist[..., N] = P(X >= N)``; the last bucket
    absorbs because only ``min(N, X)`` matters.
    """
    out = dist * (1.0 - p)
    out[..., 1:] += dist[..., :-1] * p
    out[..., -1] += dist[..., -1] * p
    return out


def best_fixed_set(mu: npt.ArrayLike, num_channels: int) -> tuple[np.ndarray, float]:
    """The best fixed super arm of the ideal scenario, eq. (13).

    ``S* = argmax_{|S| = N} min_{k in S} mu_k``: the ``N`` clients with the largest ``mu`` (ties
    go to the lower index).  Any set attaining the max-min is optimal; this is the canonical one.

    Args:
        mu: mean rewards ``mu_k``, shape ``[K]``.
        num_channels: ``N``, the number of selected clients, ``1 <= N <= K``.

    Returns:
        ``(mask, value)``: a bool mask ``[K]`` of ``S*`` and ``mu(S*)``, the ``N``-th largest mu
        (the per-round reward in the regret (14)).
    """
    mu = np.asarray(mu, dtype=float)
    if mu.ndim != 1 or mu.size == 0 or not np.all(np.isfinite(mu)):
        raise ValueError(f"mu must be a non-empty finite 1-D array, got shape {mu.shape}")
    n = _check_num_channels(num_channels, mu.size)
    # A stable sort of -mu keeps equal values in index order, which gives the lower-index tie rule.
    order = np.argsort(-mu, kind="stable")
    mask = np.zeros(mu.size, dtype=bool)
    mask[order[:n]] = True
    return mask, float(mu[order[n - 1]])


def fairness_capacity(
    subset_mask: npt.ArrayLike, availability: npt.ArrayLike, num_channels: int
) -> float:
    """``f(U) = E[min(N, |A ∩ U|)]`` for independent ``a_k ~ Bernoulli(availability_k)``.

    The most selections per round, on average, that the clients of ``U`` can receive under the
    selection-size rule (10); ``f`` is the rank function of the polymatroid whose base polytope is
    the set of reachable selection rates (eq. 21), i.e. the maximal feasibility region ``C``.
    Computed exactly with a Poisson-binomial dynamic programme truncated at ``N``.

    Args:
        subset_mask: bool ``[K]``, the clients in ``U``.
        availability: ``P(a_k = 1)``, shape ``[K]``, in ``[0, 1]``.
        num_channels: ``N >= 1`` (values above ``K`` simply never truncate).
    """
    u = np.asarray(subset_mask)
    a = np.asarray(availability, dtype=float)
    if u.ndim != 1 or a.ndim != 1 or u.shape != a.shape:
        raise ValueError(
            "subset_mask and availability must be 1-D of the same length, "
            f"got shapes {u.shape} and {a.shape}"
        )
    if u.dtype != bool:
        raise ValueError(f"subset_mask must be a bool array, got dtype {u.dtype}")
    if not np.all(np.isfinite(a)) or np.any((a < 0) | (a > 1)):
        raise ValueError(f"availability must be in [0, 1], got {a.tolist()}")
    if isinstance(num_channels, bool) or not isinstance(num_channels, int | np.integer):
        raise ValueError(f"num_channels must be an integer, got {num_channels!r}")
    n = int(num_channels)
    if n < 1:
        raise ValueError(f"num_channels must be >= 1, got {n}")
    probs = a[u]
    n = min(n, probs.size)
    if n == 0:
        return 0.0
    dist = np.zeros(n + 1)
    dist[0] = 1.0
    for p in probs:
        dist = _pb_step(dist, p)
    return float(dist @ np.arange(n + 1))


def check_fairness(
    fairness: npt.ArrayLike,
    availability: npt.ArrayLike,
    num_channels: int,
    exact_max_clients: int = 16,
) -> None:
    """Raise ``ValueError`` unless ``c`` lies in the maximal feasibility region ``C``.

    ``c`` is feasible (some A-only policy obeying (10) has ``E[b_k] >= c_k`` for all k, eq. 22)
    iff ``c(U) <= E[min(N, |A ∩ U|)]`` for every subset ``U`` (polymatroid region, see the module
    docstring).  Points on the boundary of ``C`` are accepted (the LP (23) is still feasible);
    Lemma 1 and Theorem 3 ask CS-UCB-Q's queues for ``c`` strictly inside ``C``.

    Always checked, cheapest first: shapes; ``c_k in [0, 1)`` (eq. 6); availability in
    ``[0, 1]``; ``1 <= N <= K``; ``sum c <= N``; ``c_k <= availability_k``;
    ``sum c <= E[min(N, |A|)]``; and the ``K`` nested subsets of the clients sorted by decreasing
    ``c_k`` (exact when all availabilities are equal, since ``f(U)`` then depends on ``|U|`` only).
    For ``K <= exact_max_clients`` every one of the ``2^K`` subsets is checked as well (vectorised,
    a ``[2^K, N+1]`` table); above that the check is necessary but not sufficient.

    Violating subsets are named with 1-based client numbers (client 1 is index 0).
    """
    c = np.asarray(fairness, dtype=float)
    a = np.asarray(availability, dtype=float)
    if c.ndim != 1 or a.ndim != 1 or c.shape != a.shape or c.size == 0:
        raise ValueError(
            "fairness and availability must be non-empty 1-D arrays of the same length K, "
            f"got shapes {c.shape} and {a.shape}"
        )
    k_total = c.size
    if not np.all(np.isfinite(c)) or np.any((c < 0) | (c >= 1)):
        raise ValueError(f"fairness c_k must be in [0, 1), got {c.tolist()}")
    if not np.all(np.isfinite(a)) or np.any((a < 0) | (a > 1)):
        raise ValueError(f"availability must be in [0, 1], got {a.tolist()}")
    n = _check_num_channels(num_channels, k_total)
    if isinstance(exact_max_clients, bool) or not isinstance(exact_max_clients, int | np.integer):
        raise ValueError(f"exact_max_clients must be an integer, got {exact_max_clients!r}")
    if not 0 <= exact_max_clients <= _EXACT_MAX_LIMIT:
        raise ValueError(
            f"exact_max_clients must be in [0, {_EXACT_MAX_LIMIT}] (the exhaustive check "
            f"tabulates 2^K subsets), got {exact_max_clients}"
        )

    total = float(c.sum())
    if total > n + _TOL:
        raise ValueError(
            f"fairness is infeasible: sum c = {total:.6g} > N = {n} "
            "(at most N clients are selected per round)"
        )
    over = np.flatnonzero(c > a + _TOL)
    if over.size:
        raise ValueError(
            f"fairness is infeasible: c_k > availability_k for client(s) {_clients(over)} "
            f"(1-based; c = {c[over].tolist()}, availability = {a[over].tolist()}); "
            "a client can only be selected when it is available"
        )
    cap = fairness_capacity(np.ones(k_total, dtype=bool), a, n)
    if total > cap + _TOL:
        raise ValueError(
            f"fairness is infeasible: sum c = {total:.6g} > E[min(N, |A|)] = {cap:.6g}, the mean "
            f"number of clients that can be selected per round (N = {n})"
        )

    if k_total <= exact_max_clients:
        _check_all_subsets(c, a, n)
    else:
        _check_sorted_prefixes(c, a, n)


def _subset_violation_error(members: np.ndarray, load: float, cap: float, n: int) -> ValueError:
    return ValueError(
        f"fairness is infeasible: the clients {_clients(members)} (1-based) need "
        f"sum c = {load:.6g} > E[min(N, |A ∩ U|)] = {cap:.6g} (N = {n}), the mean number of "
        "selections they can receive per round"
    )


def _check_sorted_prefixes(c: np.ndarray, a: np.ndarray, n: int) -> None:
    order = np.argsort(-c, kind="stable")
    dist = np.zeros(n + 1)
    dist[0] = 1.0
    load = 0.0
    weights = np.arange(n + 1)
    for j, k in enumerate(order):
        dist = _pb_step(dist, a[k])
        load += c[k]
        cap = float(dist @ weights)
        if load > cap + _TOL:
            raise _subset_violation_error(np.sort(order[: j + 1]), load, cap, n)


def _check_all_subsets(c: np.ndarray, a: np.ndarray, n: int) -> None:
    k_total = c.size
    # Row m describes the subset with bit i of m set for client i.  Rows [2^i, 2^(i+1)) are rows
    # [0, 2^i) plus client i, so the table fills in K vectorised doubling steps.
    dist = np.zeros((1 << k_total, n + 1))
    dist[0, 0] = 1.0
    load = np.zeros(1 << k_total)
    for i in range(k_total):
        lo, hi = 1 << i, 2 << i
        dist[lo:hi] = _pb_step(dist[:lo], a[i])
        load[lo:hi] = load[:lo] + c[i]
    cap = dist @ np.arange(n + 1)
    excess = load - cap
    worst = int(np.argmax(excess))
    if excess[worst] > _TOL:
        members = np.flatnonzero((worst >> np.arange(k_total)) & 1)
        raise _subset_violation_error(members, float(load[worst]), float(cap[worst]), n)


class AvailabilityLP(NamedTuple):
    """The solved LP (23) and the optimal A-only policy ``q*``.

    Attributes:
        r_star: the optimal per-round reward ``r*`` (eq. 24).
        patterns: bool ``[P, K]``, the availability patterns ``e`` with ``P(e) > 0``.
        pattern_prob: ``[P]``, ``P(e)``.
        sets: bool ``[V, K]``, the super arms ``S in Q(e)``, one LP variable each.
        set_pattern: int ``[V]``, the pattern (row of ``patterns``) of each variable.
        q: ``[V]``, the optimal ``q*_S(e)``; sums to 1 within each pattern.
        selection_rate: ``[K]``, ``E[b_k]`` under ``q*`` (eq. 21), ``>= c`` up to LP tolerance.
    """

    r_star: float
    patterns: np.ndarray
    pattern_prob: np.ndarray
    sets: np.ndarray
    set_pattern: np.ndarray
    q: np.ndarray
    selection_rate: np.ndarray


def _count_variables(a: np.ndarray, n: int) -> int:
    """Number of LP variables, ``sum_e C(|e|, min(N, |e|))``, without enumerating patterns."""
    sure = int(np.sum(a >= 1))
    free = int(np.sum((a > 0) & (a < 1)))
    return sum(math.comb(free, j) * math.comb(sure + j, min(n, sure + j)) for j in range(free + 1))


def _enumerate_patterns(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All availability patterns of positive probability and their probabilities."""
    k_total = a.size
    free = np.flatnonzero((a > 0) & (a < 1))
    codes = np.arange(1 << free.size)
    bits = ((codes[:, None] >> np.arange(free.size)) & 1).astype(bool)
    patterns = np.zeros((codes.size, k_total), dtype=bool)
    patterns[:, a >= 1] = True
    patterns[:, free] = bits
    prob = np.prod(np.where(bits, a[free], 1.0 - a[free]), axis=1)
    keep = prob > 0  # only underflow can zero a product of non-zero factors
    return patterns[keep], prob[keep]


def _enumerate_sets(patterns: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Super arms ``Q(e)`` of every pattern: all ``S ⊆ e`` with ``|S| = min(N, |e|)``."""
    k_total = patterns.shape[1]
    sizes = patterns.sum(axis=1)
    all_sets, all_owner = [], []
    # Patterns of one size share the same index combinations, so each size is one gather.
    for s in np.unique(sizes):
        rows = np.flatnonzero(sizes == s)
        size = min(n, int(s))
        combo_list = list(itertools.combinations(range(int(s)), size))
        combos = np.array(combo_list, dtype=np.intp).reshape(len(combo_list), size)
        # np.nonzero walks rows in order and columns ascending, so each row lists its members.
        members = np.nonzero(patterns[rows])[1].reshape(rows.size, int(s))
        chosen = members[:, combos]  # [R, C, size]
        mask = np.zeros((rows.size, combos.shape[0], k_total), dtype=bool)
        r_idx = np.arange(rows.size)[:, None, None]
        c_idx = np.arange(combos.shape[0])[None, :, None]
        mask[r_idx, c_idx, chosen] = True
        all_sets.append(mask.reshape(-1, k_total))
        all_owner.append(np.repeat(rows, combos.shape[0]))
    sets = np.concatenate(all_sets)
    owner = np.concatenate(all_owner)
    # Keep the variables of one pattern contiguous and in pattern order.
    order = np.argsort(owner, kind="stable")
    return sets[order], owner[order]


def _check_lp_size(mu: np.ndarray, a: np.ndarray, n: int, k_total: int, max_variables) -> None:
    """``ValueError`` for a bad ``mu`` or ``max_variables``, or an LP (23) with more variables
    than ``max_variables``, counted before anything is enumerated."""
    if mu.shape != (k_total,) or not np.all(np.isfinite(mu)):
        raise ValueError(f"mu must be a finite 1-D array of length K={k_total}, got {mu.shape}")
    if np.any((mu < 0) | (mu > 1)):
        raise ValueError(f"mu must be in [0, 1] (normalised rewards), got {mu.tolist()}")
    if isinstance(max_variables, bool) or not isinstance(max_variables, int | np.integer):
        raise ValueError(f"max_variables must be an integer, got {max_variables!r}")

    num_vars = _count_variables(a, n)
    if num_vars > max_variables:
        raise ValueError(
            f"K={k_total} is too large for the enumeration of the A-only LP (23): with N={n} and "
            f"this availability it has {num_vars} variables (one per availability pattern and "
            f"super arm), above max_variables={max_variables}"
        )


def _solve_joint(
    set_reward: np.ndarray,
    sets: np.ndarray,
    set_pattern: np.ndarray,
    pattern_prob: np.ndarray,
    c: np.ndarray,
) -> np.ndarray:
    """HiGHS's optimum of LP (23) in the joint probabilities ``x_S(e) = P(e) q_S(e)``."""
    # On use: scipy.optimize takes longer to import than a small sweep takes to plan, and only
    # the experiments with an LP benchmark solve one.
    from scipy import sparse
    from scipy.optimize import linprog

    num_patterns, num_vars = pattern_prob.shape[0], sets.shape[0]
    k_total = sets.shape[1]
    var_idx = np.arange(num_vars)
    a_eq = sparse.csr_array(
        (np.ones(num_vars), (set_pattern, var_idx)), shape=(num_patterns, num_vars)
    )
    member_var, member_client = np.nonzero(sets)
    # linprog wants A_ub x <= b_ub, so E[b_k] >= c_k is written as -E[b_k] <= -c_k.
    a_ub = sparse.csr_array(
        (-np.ones(member_var.size), (member_client, member_var)), shape=(k_total, num_vars)
    )
    res = linprog(
        -set_reward,
        A_ub=a_ub,
        b_ub=-c,
        A_eq=a_eq,
        b_eq=pattern_prob,
        bounds=(0, None),
        method="highs-ipm",
    )
    if res.status == 2:
        raise ValueError(
            f"fairness is infeasible: HiGHS found no A-only policy with E[b_k] >= c_k "
            f"({res.message})"
        )
    if res.status != 0:
        raise RuntimeError(f"HiGHS failed on the A-only LP (23): {res.message}")
    return res.x


def _per_pattern_policy(x: np.ndarray, set_pattern: np.ndarray, num_patterns: int) -> np.ndarray:
    """``q*``: the joint solution ``x`` as a distribution over ``Q(e)`` within each pattern."""
    # Solver round-off can leave tiny negatives, and HiGHS's absolute feasibility tolerance (1e-7)
    # can leave the mass of very rare patterns loose; renormalising per pattern makes q an exact
    # distribution in each pattern and moves r* and E[b] by at most that tolerance.  A pattern
    # left with no mass at all gets the uniform distribution over Q(e).
    x = np.clip(x, 0.0, None)
    per_pattern = np.bincount(set_pattern, weights=x, minlength=num_patterns)
    empty = per_pattern <= 0
    x = np.where(empty[set_pattern], 1.0, x)
    per_pattern = np.bincount(set_pattern, weights=x, minlength=num_patterns)
    return x / per_pattern[set_pattern]


def availability_lp(
    mu: npt.ArrayLike,
    availability: npt.ArrayLike,
    fairness: npt.ArrayLike,
    num_channels: int,
    max_variables: int = 200_000,
) -> AvailabilityLP:
    """Solve the LP (23) over A-only policies; ``r*`` (eq. 24) is the CS-UCB-Q regret benchmark.

    maximise   ``sum_e P(e) sum_{S in Q(e)} q_S(e) mu(S)``
    subject to ``sum_e P(e) sum_{S in Q(e), S ∋ k} q_S(e) >= c_k`` for every client k (eq. 21-22),
    ``sum_{S in Q(e)} q_S(e) = 1`` for every pattern e, ``q >= 0``.

    Decisions where the paper leaves room:

    * availability is independent across clients, ``a_k ~ Bernoulli(availability_k)``, so
      ``P(e) = prod_{k in e} availability_k * prod_{k not in e} (1 - availability_k)``; patterns
      with ``P(e) = 0`` are dropped (they carry no constraint or reward);
    * ``Q(e)`` holds the ``S ⊆ e`` with ``|S| = min(N, |e|)`` exactly: the selection-size rule
      (10) that CS-UCB-Q follows, so ``r*`` benchmarks policies of the same kind;
    * ``mu(S) = min_{k in S} mu_k`` as in the paper (docs/decisions.md#cs-ucb-regret), and
      ``mu(∅) = 0``: a round in
      which nobody is available earns nothing;
    * the LP is solved by HiGHS through ``scipy.optimize.linprog`` with sparse constraints, using
      the interior-point solver with crossover (``method="highs-ipm"``, which ends on a vertex):
      on the largest enumerations allowed here it is ~20x faster than the dual simplex that
      ``method="highs"`` picks (3 s instead of 55 s for K = 12, N = 3, 1.1e5 variables);
    * the variables are the joint probabilities ``x_S(e) = P(e) q_S(e)``, so every constraint
      coefficient is 0 or 1 (HiGHS drops matrix entries below 1e-9, which the ``P(e)`` of rare
      patterns would be); ``q`` is recovered per pattern.

    The LP has ``sum_e C(|e|, min(N, |e|))`` variables, which is exponential in K; the count is
    computed first and a ``ValueError`` is raised when it exceeds ``max_variables`` (K of about
    17 at most with the default).

    Args:
        mu: mean rewards ``mu_k = E[r_k]``, shape ``[K]``, in ``[0, 1]``.
        availability: ``P(a_k = 1)``, shape ``[K]``, in ``[0, 1]``.
        fairness: ``c``, shape ``[K]``, each in ``[0, 1)``; must lie in ``C`` (checked first
            by :func:`check_fairness`).
        num_channels: ``N``, ``1 <= N <= K``.
        max_variables: the largest LP to build.

    Returns:
        :class:`AvailabilityLP` with ``r*``, the patterns, super arms and the optimal policy.
    """
    mu = np.asarray(mu, dtype=float)
    a = np.asarray(availability, dtype=float)
    c = np.asarray(fairness, dtype=float)
    check_fairness(c, a, num_channels)
    n = int(num_channels)
    _check_lp_size(mu, a, n, c.size, max_variables)

    patterns, pattern_prob = _enumerate_patterns(a)
    sets, set_pattern = _enumerate_sets(patterns, n)
    set_reward = np.where(sets, mu, np.inf).min(axis=1)
    set_reward[~sets.any(axis=1)] = 0.0  # mu(∅) = 0

    x = _solve_joint(set_reward, sets, set_pattern, pattern_prob, c)
    q = _per_pattern_policy(x, set_pattern, patterns.shape[0])
    joint = pattern_prob[set_pattern] * q
    return AvailabilityLP(
        r_star=float(joint @ set_reward),
        patterns=patterns,
        pattern_prob=pattern_prob,
        sets=sets,
        set_pattern=set_pattern,
        q=q,
        selection_rate=joint @ sets,
    )
