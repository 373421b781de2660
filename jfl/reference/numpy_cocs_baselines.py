"""NumPy (float64) references of COCS's baselines as the paper defines them (Qu et al. §VI-B).

Written from the paper and docs/reproductions/cocs.md#the-policies, independently of
``jfl.policies`` (the COCS family), plainly rather than
fast: the ground truth of ``tests/policies/test_cocs_baselines.py``. Every draw a policy makes
from its key (the random order and picks of Random, CUCB's proposals, the solver's tie-break) is
an input here, so the test feeds both sides the same numbers.

* ``random_feasible_numpy``: §VI-B's Random ("selects a client to an accessible ES randomly …
  under these two constraints"): the clients in the given order, each to the covering ES of rank
  ⌊u·k⌋ among the k it can still afford (budgets with the solver's slack).
* ``cucb_decisions_numpy``: §VI-B's CUCB ("runs UCB with feasible NO selection decisions s and
  learns the expected utility for each s"): per round, the first proposal never played; if every
  proposal was played before, the recorded decision feasible this round with the best index
  ``mean utility + (|s|/M)·sqrt(1.5 ln t / count)``; the table holds the first ``max_decisions``
  distinct decisions played.
* ``linucb_shared_numpy``: §VI-B's LinUCB ("the utility of an arm is a linear function of
  client-ES pairs' contexts"): one ridge model shared by all pairs, x = [1, φ],
  H = λI + Σ x xᵀ, b = Σ X x over the selected pairs, a pair's weight
  ``clip(x·H⁻¹b + α sqrt(xᵀH⁻¹x), 0, 1)``, the decision by ``solver`` on those weights.
"""

from __future__ import annotations

import math

import numpy as np

from jfl.reference.milp_assignment import BUDGET_RTOL

UCB_SCALE = 1.5


def random_feasible_numpy(order, pick, cost, available, budget, *, budget_rtol=BUDGET_RTOL):
    """Random's decision bool[N, M] from the client ``order`` i[N] and the picks ``pick`` f[N]
    in [0, 1) (indexed by client)."""
    available = np.asarray(available, bool)
    cost = np.asarray(cost, np.float64)
    num_clients, num_servers = available.shape
    left = np.broadcast_to(np.asarray(budget, np.float64), (num_servers,)) * (1 + budget_rtol)
    left = left.copy()
    mask = np.zeros((num_clients, num_servers), bool)
    for n in np.asarray(order):
        fits = [m for m in range(num_servers) if available[n, m] and 0 <= cost[n] <= left[m]]
        if not fits:
            continue
        m = fits[min(math.floor(pick[n] * len(fits)), len(fits) - 1)]
        mask[n, m] = True
        left[m] -= cost[n]
    return mask


def _feasible(mask, available, cost, budget, budget_rtol=BUDGET_RTOL):
    if np.any(mask & ~available):
        return False
    spend = [math.fsum(cost[mask[:, m]].tolist()) for m in range(mask.shape[1])]
    return all(s <= b * (1 + budget_rtol) for s, b in zip(spend, budget, strict=True))


def cucb_decisions_numpy(proposals, available, cost, budget, success, max_decisions=64):
    """CUCB over whole decisions on given per-round inputs.

    Args:
      proposals: bool[T, R, N, M] the random feasible decisions drawn each round.
      available: bool[T, N, M]; cost f[T, N]; budget f[T, M]; success bool[T, N, M] (X of every
        pair; the utility of a decision is Σ_{pairs in s} X / M, eq. 8).
      max_decisions: how many distinct decisions the table records.

    Returns:
      ``(selected bool[T, N, M], trace)`` with per-round ``explored`` bool[T] (an untried
      proposal was played) and ``index`` f[T] (the winning index when not, else NaN).
    """
    proposals = np.asarray(proposals, bool)
    available = np.asarray(available, bool)
    cost = np.asarray(cost, np.float64)
    budget = np.asarray(budget, np.float64)
    success = np.asarray(success, bool)
    num_rounds, _, num_clients, num_servers = proposals.shape
    table: list[list] = []  # [mask, count, total]
    selected = np.zeros((num_rounds, num_clients, num_servers), bool)
    explored = np.zeros(num_rounds, bool)
    winning = np.full(num_rounds, np.nan)

    def find(mask):
        for i, (recorded, _, _) in enumerate(table):
            if np.array_equal(recorded, mask):
                return i
        return None

    for row in range(num_rounds):
        t = row + 1
        untried = [p for p in proposals[row] if find(p) is None]
        if untried:
            choice = untried[0]
            explored[row] = True
        else:
            best, best_index = None, -math.inf
            for mask, count, total in table:
                if not _feasible(mask, available[row], cost[row], budget[row]):
                    continue
                bonus = (mask.sum() / num_servers) * math.sqrt(UCB_SCALE * math.log(t) / count)
                index = total / count + bonus
                if index > best_index:
                    best, best_index = mask, index
            choice = proposals[row, 0] if best is None else best
            winning[row] = best_index if best is not None else np.nan
            explored[row] = best is None
        selected[row] = choice
        utility = np.sum(success[row] & choice) / num_servers
        i = find(choice)
        if i is None and len(table) < max_decisions:
            table.append([choice.copy(), 0, 0.0])
            i = len(table) - 1
        if i is not None:
            table[i][1] += 1
            table[i][2] += utility
    return selected, {"explored": explored, "index": winning}


def linucb_features(contexts) -> np.ndarray:
    """x = [1, context], f[..., D + 1]."""
    contexts = np.asarray(contexts, np.float64)
    return np.concatenate([np.ones((*contexts.shape[:-1], 1)), contexts], axis=-1)


def linucb_shared_numpy(
    contexts, available, cost, budget, success, alpha, lam, tiebreak, solver, *, played=None
):
    """LinUCB with one model shared by all pairs on given per-round inputs.

    Args:
      contexts: f[T, N, M, D]; available bool[T, N, M]; cost f[T, N]; budget f[T, M];
      success: bool[T, N, M]; alpha, lam: the UCB weight and the ridge regulariser;
      tiebreak: f[T, N, M] the solver's tie-break each round;
      solver: ``solver(weight, cost, available, budget, tiebreak) -> bool[N, M]``;
      played: optional teacher-forced selections bool[T, N, M] for the updates.

    Returns:
      ``(selected, trace)``: selections bool[T, N, M] and the per-round ``weight`` f[T, N, M],
      with the final ``gram`` f[D+1, D+1] and ``target`` f[D+1].
    """
    x = linucb_features(contexts)
    num_rounds, num_clients, num_servers, dim = x.shape
    gram = float(lam) * np.eye(dim)
    target = np.zeros(dim)
    selected = np.zeros((num_rounds, num_clients, num_servers), bool)
    weights = np.zeros((num_rounds, num_clients, num_servers))
    for row in range(num_rounds):
        theta = np.linalg.solve(gram, target)
        inverse = np.linalg.inv(gram)
        for n in range(num_clients):
            for m in range(num_servers):
                feature = x[row, n, m]
                width = math.sqrt(max(feature @ inverse @ feature, 0.0))
                weights[row, n, m] = min(max(feature @ theta + alpha * width, 0.0), 1.0)
        selected[row] = solver(weights[row], cost[row], available[row], budget[row], tiebreak[row])
        chosen = selected[row] if played is None else np.asarray(played[row], bool)
        for n, m in zip(*np.nonzero(chosen), strict=True):
            gram += np.outer(x[row, n, m], x[row, n, m])
            target += float(success[row, n, m]) * x[row, n, m]
    return selected, {"weight": weights, "gram": gram, "target": target}
