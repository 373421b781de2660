"""NumPy/SciPy references for COCS's per-round assignment problem P2 (Qu et al., eq. 10).

P2, for one round: N clients, M edge servers (ES), value ``weight[n, m]`` of client n on ES m,
cost ``cost[n]`` (the same on every ES), coverage ``available[n, m]``, per-ES budget ``budget[m]``::

    maximise   Σ_{n,m} weight[n, m] · x[n, m]          over x ∈ {0, 1}^{N×M}
    subject to Σ_m x[n, m] ≤ 1                for every client n          (10d)
               Σ_n cost[n] · x[n, m] ≤ B_m    for every ES m              (10b)
               x[n, m] = 0 where n is not covered by m                    (10c)

* ``exact_assignment``: the optimum by ``scipy.optimize.milp`` (HiGHS branch and bound), float64
  — the ground truth for ``jfl.kernels.assignment``.
* ``budgeted_numpy`` / ``cardinality_numpy``: plain loops of the kernel's two solvers (density
  greedy, then the step-limited depth-first branch and bound), in the inputs' float dtype, for
  mask-by-mask equality tests. ``greedy_numpy`` is ``budgeted_numpy`` under the name the COCS
  references (``jfl.reference.numpy_cocs``) select with.
* ``hfl_instances``: rounds of the ``hfl`` environment as P2 instances (unit weights, or the
  oracle's success probabilities), the families the solvers are measured on;
  ``random_paper_instances``: the same distributions drawn directly.
* ``optimality_ratios`` / ``ratio_table``: solver value / MILP optimum on those instances.

All solvers read budgets with the kernel's relative slack ``BUDGET_RTOL`` (1e-6): a set is
feasible when its cost is at most ``B_m·(1 + 1e-6)``, so that the MILP's optimum is an upper bound
of the kernel's value on exactly the same problem. Pairs with weight ≤ 0 are never chosen (they
cannot raise the objective).

Written independently of the JAX code, except where named: ``hfl_instances`` and the ratio
helpers call JAX.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, sparse

BUDGET_RTOL = 1e-6  # the same slack as jfl.kernels.assignment.BUDGET_RTOL


def _eligible(weight, cost, available):
    return np.asarray(available, bool) & (weight > 0) & (cost[:, None] >= 0)


def exact_assignment(weight, cost, available, budget, *, budget_rtol=BUDGET_RTOL, time_limit=60.0):
    """Optimal value and assignment of P2 by ``scipy.optimize.milp``.

    Binary x[n, m] over every pair; x is fixed to 0 off coverage and where weight ≤ 0; one row per
    client (Σ_m x ≤ 1) and per ES (Σ_n c_n x ≤ B_m·(1 + budget_rtol), negative budgets read as 0).
    Everything in float64.

    Tolerances: HiGHS is run with a relative gap of 0 (``mip_rel_gap=0``); its absolute gap
    (1e-6) and feasibility tolerance (1e-6) remain, so the value is optimal within about 1e-6 and
    the returned set may exceed a budget by at most about 1e-6 (absolute). The value is recomputed
    exactly (``math.fsum``) from the rounded solution, which is checked for feasibility. (Some
    HiGHS builds print a stray ``HighsMipSolverData::transformNewIntegerFeasibleSolution`` line
    to stdout on some instances; it is harmless.)

    Args:
      weight: [N, M] pair values; cost: [N] > 0; available: bool[N, M]; budget: [M] or scalar.

    Returns:
      ``(value, mask)``: float optimum and bool[N, M] optimal assignment.
    """
    weight = np.asarray(weight, np.float64)
    cost = np.asarray(cost, np.float64)
    n_clients, n_servers = weight.shape
    capacity = np.broadcast_to(np.asarray(budget, np.float64), (n_servers,)) * (1 + budget_rtol)
    capacity = np.maximum(capacity, 0.0)
    eligible = _eligible(weight, cost, available) & (cost[:, None] <= capacity[None, :])
    if not eligible.any():
        return 0.0, np.zeros((n_clients, n_servers), bool)

    pairs = n_clients * n_servers
    column = np.arange(pairs)
    client = column // n_servers  # pair p = n·M + m, row-major
    server = column % n_servers
    one_server = sparse.csr_array((np.ones(pairs), (client, column)), shape=(n_clients, pairs))
    spend = sparse.csr_array((cost[client], (server, column)), shape=(n_servers, pairs))
    constraints = [
        optimize.LinearConstraint(one_server, -np.inf, 1.0),
        optimize.LinearConstraint(spend, -np.inf, capacity),
    ]
    result = optimize.milp(
        c=-np.where(eligible, weight, 0.0).reshape(-1),
        integrality=np.ones(pairs),
        bounds=optimize.Bounds(0.0, eligible.reshape(-1).astype(np.float64)),
        constraints=constraints,
        options={"mip_rel_gap": 0.0, "time_limit": time_limit},
    )
    if result.status != 0 or result.x is None:
        raise RuntimeError(f"milp did not solve P2: status {result.status}, {result.message}")
    mask = (result.x > 0.5).reshape(n_clients, n_servers) & eligible
    spent = np.array([math.fsum(cost[mask[:, m]].tolist()) for m in range(n_servers)])
    if np.any(mask.sum(axis=1) > 1) or np.any(spent > capacity + 1e-6 * np.maximum(capacity, 1)):
        raise RuntimeError("milp returned an infeasible assignment")
    return math.fsum(weight[mask].tolist()), mask


def _pairwise_sum(x):
    """Sum by repeated halving, zero-padded to a power of two (the kernel's summation order)."""
    x = np.asarray(x)
    size = 1 << max(len(x) - 1, 0).bit_length()
    x = np.concatenate([x, np.zeros(size - len(x), x.dtype)])
    while len(x) > 1:
        x = x[: len(x) // 2] + x[len(x) // 2 :]
    return x[0]


# --------------------------------------------------------------------------------------------
# plain-loop mirror of the kernel's solvers
# --------------------------------------------------------------------------------------------

# The kernel's constants (jfl.kernels.assignment), repeated rather than imported.
CARDINALITY_STEPS = 8192
BUDGETED_STEPS = 32768
COUNT_STEPS = 128
LARGE_CLIENTS = 256  # above it the default budgets are LARGE_STEPS
LARGE_STEPS = 256
COUNT_THRESHOLD = 0.5
LAMBDA_SCALE = 0.5


def _steps(num_clients, steps, default):
    """The kernel's ``default_steps``."""
    if steps is not None:
        return steps
    return default if num_clients <= LARGE_CLIENTS else LARGE_STEPS


def _prepare(weight, cost, available, budget, tiebreak, budget_rtol):
    weight = np.asarray(weight)
    dtype = np.result_type(weight, cost, budget, np.float32)
    weight = weight.astype(dtype)
    cost = np.asarray(cost, dtype)
    available = np.asarray(available, bool)
    n_clients, n_servers = weight.shape
    capacity = np.broadcast_to(np.asarray(budget, dtype), (n_servers,)) * dtype.type(
        1 + budget_rtol
    )
    with np.errstate(invalid="ignore"):
        eligible = (
            available
            & (weight > 0)
            & (cost[:, None] >= 0)
            & np.isfinite(cost)[:, None]
            & (cost[:, None] <= capacity[None, :])
        )
    limit = dtype.type(np.finfo(dtype).max / (4 * (n_clients + 1)))
    value = np.where(eligible, np.minimum(weight, limit), 0).astype(dtype)
    if tiebreak is None:
        tiebreak = np.zeros((n_clients, n_servers), dtype)
    else:
        tiebreak = np.asarray(tiebreak, dtype)
        tiebreak = np.where(np.isnan(tiebreak), 0, tiebreak).astype(dtype)
    return dtype, value, cost, eligible, capacity.astype(dtype), tiebreak


def _lex_order(key, tie):
    """Indices by ascending ``key``, then ``tie``, then index."""
    return np.lexsort((np.arange(len(key)), tie, key))


def _seq_sum(values, dtype):
    total = dtype.type(values[0])
    for x in values[1:]:
        total = dtype.type(total + x)
    return total


def _doubling(x, op):
    """The kernel's inclusive scan along axis 0 by recursive doubling (Hillis-Steele), in the
    same order of operations: step s combines entry i with entry i - s."""
    x = np.array(x)
    shift = 1
    while shift < len(x):
        x = np.concatenate([x[:shift], op(x[shift:], x[:-shift]).astype(x.dtype)])
        shift *= 2
    return x


def _prefix(values, dtype):
    """Prefix sums with a leading 0 (in ``dtype``), along axis 0, in the kernel's order."""
    values = np.asarray(values, dtype)
    return np.concatenate([np.zeros((1, *values.shape[1:]), dtype), _doubling(values, np.add)])


def _suffix(values, op):
    """op over values[d+1:] for every d (identity 0), in the kernel's order."""
    inclusive = _doubling(np.asarray(values)[::-1], op)[::-1]
    return np.concatenate([inclusive[1:], np.zeros((1, *inclusive.shape[1:]), inclusive.dtype)])


def _cost_order(cost, cand, tiebreak):
    """The search order: candidates by ascending cost, then smallest tie-break, then index."""
    return _lex_order(np.where(cand, cost, np.inf), tiebreak.min(axis=1))


def _density_order(value, eligible, cost, tiebreak):
    """Clients by descending max_m weight / cost (ties: smallest tie-break, then index), the
    others after them; and the densities."""
    dtype = value.dtype
    cand = eligible.any(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        density = np.where(
            cand, value.max(axis=1) / np.maximum(cost, np.finfo(dtype).tiny), -np.inf
        ).astype(dtype)
    return _lex_order(-density, tiebreak.min(axis=1)), density


def _critical_density(by_density, density, eligible, cost, capacity):
    """Density of the first client (in density order) overflowing the pooled budget, or 0."""
    dtype = density.dtype
    cand = eligible.any(axis=1)[by_density]
    spent = _prefix(np.where(cand, cost[by_density], 0), dtype)[1:]
    over = (spent > _seq_sum(np.maximum(capacity, 0), dtype)) & cand
    return density[by_density][np.argmax(over)] if over.any() else dtype.type(0)


def _density_greedy(value, eligible, cost, capacity, tiebreak, order):
    """The kernel's incumbent: clients in density order, each to the heaviest ES that can still
    pay (ties: tie-break, then index). Returns ``(mask, value)``."""
    dtype = value.dtype
    n_clients, n_servers = value.shape
    left = capacity.copy()
    mask = np.zeros((n_clients, n_servers), bool)
    total = dtype.type(0)
    for n in order.tolist():
        c = cost[n]
        can = [bool(eligible[n, m]) and c <= left[m] for m in range(n_servers)]
        if any(can):
            top = max(value[n, m] for m in range(n_servers) if can[m])
            m = min(
                (m for m in range(n_servers) if can[m] and value[n, m] == top),
                key=lambda m: (tiebreak[n, m], m),
            )
            left[m] = dtype.type(left[m] - c)
            mask[n, m] = True
            total = dtype.type(total + value[n, m])
        else:
            total = dtype.type(total + dtype.type(0))
    return mask, total


def _target(n_clients, total_cost):
    """The kernel's ``_target``: a remaining budget loosened for the count tests."""
    f = type(total_cost)
    slack = f(4 * (n_clients + 2) * np.finfo(f).eps)

    def target(r):
        return f(r + f(slack * f(abs(r) + total_cost)))

    return target


def cost_prefix(cs):
    """The search's prefix sums of the ascending candidate costs ``cs`` (+inf past them), N + 2
    entries: ``(pall, total_cost)``."""
    dtype = cs.dtype
    live = np.isfinite(cs)
    pall = _prefix(np.where(live, cs, 0).astype(dtype), dtype)
    pall = np.concatenate([pall, pall[-1:]])
    pall[int(live.sum()) + 1 :] = np.inf
    return pall, pall[min(int(live.sum()), len(cs))]


def can_pack(cs, pall, start, j, budget, fits, target):
    """The kernel's packing test (``assignment._can_pack``): whether the j cheapest clients from
    position ``start`` of the ascending costs ``cs`` (prefix sums ``pall``, +inf past the
    candidates) may fit into ESs with remaining budgets ``budget``, ES m taking at most
    ``fits[m]`` of them; ``target`` loosens a budget for rounding. False only if they cannot."""
    dtype = cs.dtype
    f = dtype.type
    N = len(cs)
    end = min(start + j, N + 1)
    total = f(pall[end] - pall[start])
    usable = []
    for m in range(len(budget)):
        limit = target(budget[m])
        single = min(int(np.searchsorted(cs, limit, side="right")) - 1, end - 1)
        take = max(min(fits[m], single - start + 1, j), 0)
        if take == 0:
            usable.append(f(0))
            continue
        one = cs[single]
        if take == 1:
            usable.append(one)
        elif take == 2:
            low = f(limit - cs[min(start, N - 1)])
            high = min(int(np.searchsorted(cs, low, side="right")) - 1, end - 1)
            half = min(int(np.searchsorted(cs, f(limit / 2), side="right")) - 1, end - 1)
            pair = f(cs[high] + cs[max(min(half, high - 1), 0)])
            usable.append(max(one, min(limit, pair)))
        else:
            usable.append(min(limit, f(pall[end] - pall[end - take])))
    return bool(total <= target(_seq_sum(usable, dtype)))


def _needed(gap, vmax, n_clients):
    """The fewest clients whose weights (each ≤ ``vmax``) could exceed ``gap``, or None where a
    failed packing test would not bound the gain by ``gap`` (the kernel's ``_needed``)."""
    f = type(gap)
    if not vmax > 0:
        return None
    need = f(np.floor(f(gap / vmax)) + 1)
    if not (need >= 1 and f((need - 1) * vmax) <= gap):
        return None
    return int(min(need, n_clients))


def _search(
    value, eligible, cost, capacity, tiebreak, init_value, max_steps, order, lam=None, prefer=None
):
    """The kernel's step-limited branch and bound, step by step, over the clients in ``order``
    (candidates first). Returns ``(path, complete, pairs)``: the best solution's ES per client
    (-1: left out, ``None``: nothing better than ``init_value``), whether the search finished,
    and its (client, ES) pairs in search order."""
    dtype = value.dtype
    f = dtype.type
    n_clients, n_servers = value.shape
    N, M = n_clients, n_servers
    inf = f(np.inf)
    K = int(eligible.any(axis=1).sum())
    live = np.arange(N) < K
    cs = np.where(live, cost[order], inf).astype(dtype)
    E = eligible[order] & live[:, None]
    W = value[order]
    TB = tiebreak[order]

    if lam is None:  # a count search: "leave out" last
        lam, skip_red = f(0), -inf
    else:
        lam, skip_red = f(lam), f(0)
    with np.errstate(invalid="ignore"):
        red = np.where(E, (W - (lam * cs[:, None]).astype(dtype)).astype(dtype), -inf)
    okey = np.concatenate([red, np.full((N, 1), skip_red, dtype)], axis=1)
    otie = np.concatenate([TB, np.full((N, 1), 2, dtype)], axis=1)
    opref = np.zeros((N, M + 1), dtype)
    if prefer is not None:
        opref = np.concatenate([prefer[order], np.full((N, 1), -inf, dtype)], axis=1)
    rank = np.zeros((N, M + 1), int)
    for d in range(N):
        options = sorted(range(M + 1), key=lambda j: (-okey[d, j], -opref[d, j], otie[d, j], j))
        for r, j in enumerate(options):
            rank[d, j] = r

    pre = _prefix(np.where(E, cs[:, None], 0).astype(dtype), dtype)  # [N+1, M]
    j0 = np.concatenate([np.zeros((1, M), int), np.cumsum(E, axis=0)], axis=0)
    pc = np.full((M, N + 2), inf, dtype)
    for m in range(M):
        pc[m, 0] = 0
        rows_m = np.nonzero(E[:, m])[0]
        pc[m, 1 : len(rows_m) + 1] = pre[rows_m + 1, m]
    pall, total_cost = cost_prefix(cs)
    target = _target(N, total_cost)

    vnext = _suffix(W, np.maximum)
    vsum = _suffix(W.max(axis=1), np.add)
    cnext = np.concatenate([cs[1:], [inf]]).astype(dtype)

    def twin(d, a, b):
        return np.array_equal(E[d:, a], E[d:, b]) and np.array_equal(W[d:, a], W[d:, b])

    def packs(start, R, fits, gap, vmax):
        j = _needed(gap, vmax, N)
        return j is None or can_pack(cs, pall, start, j, R, fits, target)

    k = [int(np.sum(pc[m, 1:] <= target(capacity[m]))) for m in range(M)]
    kall = int(np.sum(pall[1:] <= target(_seq_sum(np.maximum(capacity, 0), dtype))))

    R, tau, val, nxt, d = list(capacity), [f(0)] * M, f(0), 0, 0
    best, best_path = f(init_value), None
    stack, path = [], []
    steps, done = 0, K == 0
    while not done and steps < max_steps:
        steps += 1
        c = cs[d] if d < N else inf
        option = None
        if d < K and not c > max(R):
            basic = [bool(E[d, m]) and W[d, m] > tau[m] and c <= R[m] for m in range(M)]
            allowed = {}
            for m in range(M):
                dup = any(
                    basic[a]
                    and rank[d, a] < rank[d, m]
                    and R[a] == R[m]
                    and tau[a] == tau[m]
                    and twin(d, a, m)
                    for a in range(M)
                    if a != m
                )
                if basic[m] and not dup and rank[d, m] >= nxt:
                    allowed[rank[d, m]] = m
            if rank[d, M] >= nxt:
                allowed[rank[d, M]] = M
            if allowed:
                option = min(allowed)
        if option is None:  # backtrack
            if not stack:
                done = True
                break
            R, tau, val, k, kall, nxt, d = stack.pop()
            path.pop()
            continue
        b = allowed[option]
        if b == M:
            R2, val2, choice = R, val, -1
            tau2 = [max(tau[m], W[d, m]) for m in range(M)]
        else:
            R2 = list(R)
            R2[b] = f(R[b] - c)
            val2, tau2, choice = f(val + W[d, b]), tau, b
        k2 = list(k)
        for m in range(M):
            if E[d, m]:
                if k[m] >= 1:
                    i = min(j0[d, m] + 1 + k[m], N + 1)
                    fits = f(pc[m, i] - pc[m, j0[d, m] + 1]) <= target(R2[m])
                    k2[m] = k[m] - 1 + int(fits)
                else:
                    k2[m] = 0
        if kall >= 1:
            room = _seq_sum([max(r, f(0)) for r in R2], dtype)
            fits = f(pall[min(d + 1 + kall, N + 1)] - pall[d + 1]) <= target(room)
            kall2 = kall - 1 + int(fits)
        else:
            kall2 = 0
        q = f(min(sum(k2), kall2))
        vn = vnext[d]
        weighted = _seq_sum([f(f(k2[m]) * vn[m]) for m in range(M)], dtype)
        ub = min(min(f(q * vn.max()), weighted), vsum[d])
        better = val2 > best
        if better:
            best, best_path = val2, [*path, choice]
        descend = (
            d + 1 < K
            and cnext[d] <= max(R2)
            and f(val2 + ub) > best
            and packs(d + 1, R2, k2, f(best - val2), vn.max())
        )
        nxt = option + 1
        if descend:
            stack.append((R, tau, val, k, kall, nxt, d))
            path.append(choice)
            R, tau, val, k, kall, nxt, d = R2, tau2, val2, k2, kall2, 0, d + 1
    if best_path is None:
        return None, done, None
    result = np.full(N, -1)
    result[order[: len(best_path)]] = best_path
    return result, done, list(zip(order[: len(best_path)].tolist(), best_path, strict=True))


def _path_mask(path, n_servers):
    return np.asarray(path)[:, None] == np.arange(n_servers)[None, :]


def _all_best(mask, value):
    return bool(np.all(np.where(mask, value, 0).max(axis=1) == value.max(axis=1)))


def budgeted_numpy(
    weight,
    cost,
    available,
    budget,
    tiebreak=None,
    *,
    max_steps=None,
    count_steps=COUNT_STEPS,
    budget_rtol=BUDGET_RTOL,
):
    """``jfl.kernels.budgeted_assignment`` as a plain loop: ``(mask, certified)``.

    The density greedy, the cardinality search on the pairs of at least ``COUNT_THRESHOLD`` of
    the largest weight, then the weighted depth-first branch and bound of at most ``max_steps``
    steps, written step by step from the kernel's description (module docstring of
    ``jfl.kernels.assignment``) in the inputs' float dtype, operation by operation, so that the
    masks agree except on floating-point near-ties (XLA may fuse a product into an addition).
    """
    dtype, value, cost, eligible, capacity, tiebreak = _prepare(
        weight, cost, available, budget, tiebreak, budget_rtol
    )
    by_density, density = _density_order(value, eligible, cost, tiebreak)
    mask, total = _density_greedy(value, eligible, cost, capacity, tiebreak, by_density)
    by_cost = _cost_order(cost, eligible.any(axis=1), tiebreak)
    good = eligible & (value >= dtype.type(COUNT_THRESHOLD) * value.max())
    first = good.any(axis=1)[by_cost]
    count_order = np.concatenate([by_cost[first], by_cost[~first]])
    path, _, pairs = _search(
        good.astype(dtype),
        good,
        cost,
        capacity,
        tiebreak,
        dtype.type(0),
        count_steps,
        count_order,
        prefer=value,
    )
    if path is not None:
        chosen = np.zeros(len(value), dtype)  # by depth, summed as the kernel does
        for depth, (n, m) in enumerate(pairs):
            chosen[depth] = value[n, m] if m >= 0 else 0
        count_total = dtype.type(_pairwise_sum(chosen))
        if count_total > total:
            mask, total = _path_mask(path, value.shape[1]), count_total
    lam = dtype.type(LAMBDA_SCALE) * _critical_density(
        by_density, density, eligible, cost, capacity
    )
    max_steps = _steps(len(value), max_steps, BUDGETED_STEPS)
    path, complete, _ = _search(
        value, eligible, cost, capacity, tiebreak, total, max_steps, by_cost, lam
    )
    if path is not None:
        mask = _path_mask(path, value.shape[1])
    return mask, complete or _all_best(mask, value)


def cardinality_numpy(
    cost,
    available,
    budget,
    tiebreak=None,
    *,
    max_steps=None,
    budget_rtol=BUDGET_RTOL,
):
    """``jfl.kernels.cardinality_assignment`` as a plain loop: ``(mask, certified)``.

    The depth-first branch and bound of at most ``max_steps`` steps over the covered clients in
    ascending cost, with weight 1 on every covered pair, step by step as the kernel's.
    """
    available = np.asarray(available, bool)
    weight = np.ones(available.shape, np.result_type(cost, budget, np.float32))
    dtype, value, cost, eligible, capacity, tiebreak = _prepare(
        weight, cost, available, budget, tiebreak, budget_rtol
    )
    order = _cost_order(cost, eligible.any(axis=1), tiebreak)
    max_steps = _steps(len(value), max_steps, CARDINALITY_STEPS)
    path, complete, _ = _search(
        value, eligible, cost, capacity, tiebreak, dtype.type(0), max_steps, order
    )
    n_servers = value.shape[1]
    mask = np.zeros(value.shape, bool) if path is None else _path_mask(path, n_servers)
    return mask, complete or _all_best(mask, value)


def random_paper_instances(rng, num_instances, num_clients, num_servers):
    """Paper-like P2 instances (COCS §VI, MNIST setting), float32, full coverage.

    weight ~ U[0, 1] (success probabilities), cost = p·y with price p ~ U[0.5, 2] and computation
    y ~ U[2, 4], budget 3.5 per ES. Returns ``(weight, cost, available, budget)`` with a leading
    instance axis.
    """
    shape = (num_instances, num_clients)
    weight = rng.uniform(0.0, 1.0, (*shape, num_servers)).astype(np.float32)
    cost = (rng.uniform(0.5, 2.0, shape) * rng.uniform(2.0, 4.0, shape)).astype(np.float32)
    available = np.ones((*shape, num_servers), bool)
    budget = np.full((num_instances, num_servers), 3.5, np.float32)
    return weight, cost, available, budget


FAMILIES = ("mnist/unit", "mnist/prob", "cifar/unit", "cifar/prob")


def hfl_instances(family, num_instances, seed):
    """``num_instances`` rounds of the ``hfl`` environment as P2 instances (float32).

    ``family`` is ``"<preset>/<weights>"``: the preset ``mnist`` (N = 50, M = 3, y ~ U[2, 4],
    budget 3.5 per ES) or ``cifar`` (y ~ U[8, 15], budget 40), with default coverage; weights
    ``unit`` (1 on every covered pair: the max-cardinality step, eq. 14) or ``prob`` (the oracle's
    success probability of each pair, in [0, 1]: probability-like weights as in eqs. 17-18). Each
    instance is the first round of an independent run (``HflEnv.reset``), so prices, computation,
    channels and coverage are all drawn afresh. Returns ``(weight, cost, available, budget)``
    with a leading instance axis.
    """
    import jax

    from jfl.envs.hfl import HflEnv, preset_params

    preset, weights = family.split("/")
    if weights not in ("unit", "prob"):
        raise ValueError(f"unknown weights {weights!r}; choose 'unit' or 'prob'")
    env, params = HflEnv(), preset_params(preset)
    keys = jax.random.split(jax.random.PRNGKey(seed), num_instances)
    obs, _ = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(keys, params)
    available = np.asarray(obs.available)
    prob = np.asarray(obs.success_prob, np.float32)
    weight = available.astype(np.float32) if weights == "unit" else prob
    return weight, np.asarray(obs.cost, np.float32), available, np.asarray(obs.budget, np.float32)


def _ratios(masks, weight, cost, available, budget):
    ratios = np.empty(len(masks))
    for i in range(len(masks)):
        best, _ = exact_assignment(weight[i], cost[i], available[i], budget[i])
        got = math.fsum(weight[i][masks[i]].astype(np.float64).tolist())
        ratios[i] = 1.0 if best == 0.0 else got / best
    return ratios


def optimality_ratios(num_instances, N=50, M=3, seed=0, *, family=None, solver=None):
    """Solver value / MILP optimum, f64[num_instances] (1 where both values are 0).

    Instances: ``hfl_instances(family, ...)`` when ``family`` is given, else
    ``random_paper_instances`` with N clients and M ESs (weights U[0, 1]). ``solver(weight, cost,
    available, budget) -> mask`` runs on the whole batch (default: ``budgeted_assignment``,
    jitted and vmapped, in float32); values are computed in float64 from the masks.
    """
    import jax

    from jfl.kernels.assignment import budgeted_assignment

    if family is None:
        rng = np.random.default_rng(seed)
        instances = random_paper_instances(rng, num_instances, N, M)
    else:
        instances = hfl_instances(family, num_instances, seed)
    if solver is None:
        solve = jax.jit(jax.vmap(budgeted_assignment))

        def solver(*args):
            return solve(*args).mask

    masks = np.asarray(solver(*instances))
    return _ratios(masks, *instances)


def ratio_table(solvers, num_instances=500, seed=0, families=FAMILIES):
    """``{family: {name: ratios}}`` for batched ``solvers`` ``{name: solver(weight, cost,
    available, budget) -> mask}`` on ``hfl_instances`` (each family solved once by the MILP)."""
    table = {}
    for family in families:
        instances = hfl_instances(family, num_instances, seed)
        optima = [exact_assignment(*(x[i] for x in instances))[0] for i in range(num_instances)]
        table[family] = {}
        for name, solver in solvers.items():
            masks = np.asarray(solver(*instances))
            weight = instances[0]
            got = np.array(
                [
                    math.fsum(weight[i][masks[i]].astype(np.float64).tolist())
                    for i in range(num_instances)
                ]
            )
            best = np.asarray(optima)
            table[family][name] = np.where(best == 0, 1.0, got / np.where(best == 0, 1, best))
    return table
