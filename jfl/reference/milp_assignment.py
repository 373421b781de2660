"""NumPy/SciPy references for COCS's per-round assignment problem P2 (Qu et al., eq. 10).

P2, for one round: N clients, M edge servers (ES), value ``weight[n, m]`` of client n on ES m,
cost ``cost[n]`` (the same on every ES), coverage ``available[n, m]``, per-ES budget ``budget[m]``::

    maximise   Σ_{n,m} weight[n, m] · x[n, m]          over x ∈ {0, 1}^{N×M}
    subject to Σ_m x[n, m] ≤ 1                for every client n          (10d)
               Σ_n cost[n] · x[n, m] ≤ B_m    for every ES m              (10b)
               x[n, m] = 0 where n is not covered by m                    (10c)

* ``exact_assignment``: the optimum by ``scipy.optimize.milp`` (HiGHS branch and bound), float64
  — the ground truth for the optimality gap of ``jfl.kernels.budgeted_assignment``.
* ``greedy_numpy``: a plain loop of the kernel's algorithm (density greedy + modified-greedy fix),
  in the inputs' float dtype, for mask-by-mask equality tests; the COCS references
  (``jfl.reference.numpy_cocs``) select with it too.
* ``optimality_ratios``: kernel value / MILP optimum on random paper-like instances.

Both solvers read budgets with the kernel's relative slack ``BUDGET_RTOL`` (1e-6): a set is
feasible when its cost is at most ``B_m·(1 + 1e-6)``, so that the MILP's optimum is an upper bound
of the kernel's value on exactly the same problem. Pairs with weight ≤ 0 are never chosen (they
cannot raise the objective).

Written independently of the JAX code (``optimality_ratios`` calls the kernel it measures).
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


def greedy_numpy(weight, cost, available, budget, *, budget_rtol=BUDGET_RTOL, tiebreak=None):
    """The kernel's greedy for P2 as a plain loop: ``(mask, certified)``.

    1. Covered pairs with weight > 0 in descending density weight/cost (ties: ascending
       ``tiebreak`` f[N, M] when given, then lower client, then lower ES); take a pair if its
       client is free and ``cost ≤`` the ES's remaining capacity,
       which starts at ``B_m·(1 + budget_rtol)``.
    2. For each ES in index order: if a free client it covers, with cost within its whole
       capacity, weighs more than all the ES took, the ES takes that client alone instead
       (ties to the lower client index; strict improvement only).

    Arithmetic is in ``np.result_type(weight, cost, budget)`` (float32 inputs give float32, as the
    kernel), operation by operation as in the kernel, so the masks agree except on
    floating-point near-ties. The pair order of step 1 comes from one stable argsort of the
    eligible pairs in row-major order (ascending pair index n·M + m), which is the tie rule
    above. ``certified``: every client with a positive covered weight is on an ES of maximal
    weight (the value then equals its upper bound).

    The one NumPy greedy of the package: ``jfl.reference.numpy_cocs`` selects with it too.
    """
    weight = np.asarray(weight)
    dtype = np.result_type(weight, cost, budget, np.float32)
    weight = weight.astype(dtype)
    cost = np.asarray(cost, dtype)
    available = np.asarray(available, bool)
    n_clients, n_servers = weight.shape
    capacity = np.broadcast_to(np.asarray(budget, dtype), (n_servers,)) * dtype.type(
        1 + budget_rtol
    )
    eligible = _eligible(weight, cost, available)

    clients, servers = np.nonzero(eligible)  # row-major: ascending pair index n·M + m
    with np.errstate(divide="ignore", invalid="ignore"):
        density = (weight[clients, servers] / cost[clients]).astype(dtype)
    key = -np.minimum(density, np.finfo(dtype).max)
    if tiebreak is None:
        order = np.argsort(key, kind="stable")
    else:  # lexsort: the last key is the primary one
        order = np.lexsort((np.asarray(tiebreak, dtype)[clients, servers], key))

    # Scalars of ``dtype`` in the loop (Python floats are float64, the fast case).
    scalars = np.ndarray.tolist if dtype == np.float64 else list
    mask = np.zeros((n_clients, n_servers), bool)
    taken = [False] * n_clients
    left = scalars(capacity.astype(dtype))  # a copy
    costs = scalars(cost)
    client_list, server_list = clients.tolist(), servers.tolist()
    for p in order.tolist():
        n, m = client_list[p], server_list[p]
        if not taken[n] and costs[n] <= left[m]:
            taken[n] = True
            left[m] = left[m] - costs[n]
            mask[n, m] = True

    for m in range(n_servers):
        free = ~mask.any(axis=1)
        candidate = np.where(free & eligible[:, m] & (cost <= capacity[m]), weight[:, m], -np.inf)
        best = int(np.argmax(candidate))
        if candidate[best] > _pairwise_sum(np.where(mask[:, m], weight[:, m], 0).astype(dtype)):
            mask[:, m] = False
            mask[best, m] = True

    best_weight = np.max(np.where(eligible, weight, 0), axis=1)
    chosen_weight = np.max(np.where(mask, weight, 0), axis=1)
    return mask, bool(np.all(chosen_weight == best_weight))


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


def optimality_ratios(num_instances, N, M, seed):
    """Value of ``jfl.kernels.budgeted_assignment`` / MILP optimum on random paper-like instances.

    Instances from ``random_paper_instances`` (weights U[0, 1], costs U[0.5, 2]·U[2, 4], budget 3.5
    per ES, full coverage); the kernel runs once, jitted and vmapped over the instances, in
    float32; both values are computed in float64 from the masks. Returns f64[num_instances]
    (1 where both values are 0).
    """
    import jax  # the JAX kernel is what is measured; keep the rest of the module JAX-free

    from jfl.kernels.assignment import budgeted_assignment

    rng = np.random.default_rng(seed)
    weight, cost, available, budget = random_paper_instances(rng, num_instances, N, M)
    masks = np.asarray(jax.jit(jax.vmap(budgeted_assignment))(weight, cost, available, budget).mask)
    ratios = np.empty(num_instances)
    for i in range(num_instances):
        best, _ = exact_assignment(weight[i], cost[i], available[i], budget[i])
        got = math.fsum(weight[i][masks[i]].astype(np.float64).tolist())
        ratios[i] = 1.0 if best == 0.0 else got / best
    return ratios
