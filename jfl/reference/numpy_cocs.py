"""NumPy (float64) reference of COCS (Qu et al., Alg. 1) and its per-pair CUCB and LinUCB.

Written from the paper and docs/reproductions/cocs.md, independently of the JAX code, plainly
rather than fast:
the ground truth of ``tests/policies/test_cocs.py`` (the paper's own baselines are in
``jfl.reference.numpy_cocs_baselines``) and the plain per-seed loop that a benchmark
times against ``jfl``.

All three policies assign clients to edge servers (ES) by the plain-loop mirrors of the JAX
solvers of problem P2 (eq. 10), ``jfl.reference.milp_assignment.budgeted_numpy`` (each client on at
most one covering ES, each ES within its budget B_m, the most total weight) and, for COCS's
exploration, ``cardinality_numpy`` (the most clients); they differ in the weights. The round
counter t of the paper is 1-based.

* ``cocs_numpy`` (Alg. 1). The context space [0, 1]^D is cut into h_T^D hypercubes; the cell of
  coordinate x is ``min(floor(x·h_T), h_T − 1)`` and the cube index ``l = Σ_d cell_d·h_T^d``.
  Per (client, ES, cube): the counter C and the success estimate p̂ = (Σ observed X)/C (eq. 12,
  0 while C = 0). Each round, with ``K(t) = t^z ln t``:

  1. under-explored pairs: in coverage with ``C_{n,m}(l_{n,m}) ≤ K(t)`` (eq. 13);
  2. exploration: the most under-explored pairs the budgets admit (max |s|, eqs. 14–15);
  3. the clients without any under-explored pair share what is left of each budget (B_m minus
     the exploration costs on m, eq. 16) by the weights p̂_{n,m}(l_{n,m}) (eq. 17);
     with no under-explored pair at all this is the exploitation step, eq. (18).

  C and p̂ of the cube of every selected pair are updated with its outcome X (Alg. 1, 16–20).
* ``cucb_numpy`` (``cucb_pairs``): per-pair UCB on success,
  ``min(mean + sqrt(1.5 ln t / count), 1)``, 1 for a pair never played (no context).
* ``linucb_numpy`` (``linucb_pairs``): per-pair ridge regression of X on the features
  x = [1, context]:
  ``H = λI + Σ x xᵀ`` and ``b = Σ X x`` over the rounds the pair was selected,
  ``θ̂ = H⁻¹b`` and the weight ``clip(x·θ̂ + α sqrt(xᵀH⁻¹x), 0, 1)`` (``np.linalg.solve``).

Inputs are per-round arrays: contexts f[T, N, M, D] in [0, 1], coverage bool[T, N, M], costs
f[T, N], budgets f[T, M] and the outcome X bool[T, N, M] of every pair (only the selected pairs'
outcomes are used). Each function accepts ``played`` (bool[T, N, M]): when given, every round
still computes and records its own selection, but the state is updated with ``played[t]`` instead
(teacher forcing), so that a comparison with an implementation in another precision can continue
past a floating-point near-tie. ``return_trace=True`` adds a dict of per-round internals.

``cocs_numpy_loop`` is a whole per-seed simulation of COCS on the ``hfl`` environment with the
draws of ``jfl.reference.numpy_hfl`` (its own ``np.random.default_rng(seed)``), selecting with
the same solvers.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from jfl.reference.milp_assignment import budgeted_numpy, cardinality_numpy
from jfl.reference.numpy_hfl import (
    CHANNEL,
    PAPER_PRESETS,
    download_rate_numpy,
    hfl_numpy_draws,
    hfl_numpy_prices,
    success_numpy,
)

# The download-rate context is min-max scaled over [0, RATE_CONTEXT_SPAN · a / deadline] Mbit/s
# (docs/decisions.md#cocs-scaling: fixed bounds derived from the parameters; the hfl
# environment's default).
RATE_CONTEXT_SPAN = 20.0


# --------------------------------------------------------------------------------------------
# building blocks
# --------------------------------------------------------------------------------------------


def hypercube_index_numpy(context, cubes_per_dim) -> np.ndarray:
    """Cube index l [...] of contexts [..., D]: cell_d = min(floor(x_d·h), h − 1) (clipped at 0),
    l = Σ_d cell_d·h^d. Computed in float64 (exact for float32 contexts)."""
    h = int(cubes_per_dim)
    x = np.asarray(context, np.float64)
    cell = np.clip(np.floor(x * h), 0, h - 1).astype(np.int64)
    return (cell * h ** np.arange(x.shape[-1], dtype=np.int64)).sum(axis=-1)


def exploration_threshold_numpy(t, z) -> float:
    """K(t) = t^z ln t (0 at t = 1)."""
    return float(t) ** float(z) * math.log(float(t))


def _spent(mask, cost) -> np.ndarray:
    """Σ cost of the clients each ES took, f[M]."""
    return np.array([math.fsum(cost[mask[:, m]].tolist()) for m in range(mask.shape[1])])


def assignment_mask_numpy(weight, cost, available, budget, tiebreak=None):
    """``budgeted_numpy``'s mask: the selection of the most total weight."""
    return budgeted_numpy(weight, cost, available, budget, tiebreak)[0]


def cardinality_mask_numpy(weight, cost, available, budget, tiebreak=None):
    """``cardinality_numpy``'s mask (``weight`` unused): the most clients on ``available``."""
    del weight
    return cardinality_numpy(cost, available, budget, tiebreak)[0]


def _round(tiebreak, row):
    return None if tiebreak is None else np.asarray(tiebreak[row])


def cocs_select_numpy(
    count,
    estimate,
    available,
    cost,
    budget,
    threshold,
    *,
    solver=None,
    explore_solver=None,
    tiebreak=None,
):
    """One COCS selection from the counters and estimates of each pair's current cube.

    Args: ``count``, ``estimate`` f[N, M] (C and p̂ at the pair's cube), ``available`` bool[N, M],
    ``cost`` f[N], ``budget`` f[M], ``threshold`` K(t); ``solver(weight, cost, available,
    budget, tiebreak) -> mask`` for the exploitation (default ``assignment_mask_numpy``),
    ``explore_solver`` of the same signature for the exploration (default
    ``cardinality_mask_numpy``), and their ``tiebreak`` f[N, M] (the policy's draw of the round;
    None: ties by index).

    Returns ``(mask, under_explored, spent)``: the selection bool[N, M], the under-explored pairs
    and the budget each ES spent on exploration.
    """
    cost = np.asarray(cost, np.float64)
    budget = np.asarray(budget, np.float64)
    available = np.asarray(available, bool)
    solver = assignment_mask_numpy if solver is None else solver
    explore_solver = cardinality_mask_numpy if explore_solver is None else explore_solver
    under = available & (np.asarray(count) <= threshold)
    explore = explore_solver(under.astype(np.float64), cost, under, budget, tiebreak)
    spent = _spent(explore, cost)
    explored_clients = ~under.any(axis=1)
    exploit = solver(
        np.asarray(estimate, np.float64),
        cost,
        available & explored_clients[:, None],
        budget - spent,
        tiebreak,
    )
    return explore | exploit, under, spent


def _teacher(played, selected, row):
    return selected if played is None else np.asarray(played[row], bool)


# --------------------------------------------------------------------------------------------
# policies on given inputs
# --------------------------------------------------------------------------------------------


def cocs_numpy(
    contexts,
    available,
    cost,
    budget,
    success,
    h_T,
    z,
    max_cubes_per_dim: int = 10,
    *,
    played=None,
    tiebreak=None,
    return_trace: bool = False,
):
    """COCS (Alg. 1) on given per-round inputs; see the module docstring.

    Args:
      contexts: f[T, N, M, D] in [0, 1]. available: bool[T, N, M]. cost: f[T, N].
      budget: f[T, M]. success: bool[T, N, M] outcome X of every pair.
      h_T: hypercubes per dimension (integer ≤ ``max_cubes_per_dim``). z: K(t) = t^z ln t.
      max_cubes_per_dim: sizes the counters, L = max_cubes_per_dim^D (cube indices use h_T).
      played: optional teacher-forced selections bool[T, N, M] for the updates.
      tiebreak: optional f[T, N, M], the solver's tie-break of each round.

    Returns:
      ``(selected, count, estimate)``: selections bool[T, N, M]; after the last round, the
      counters C f[N, M, L] and the estimates p̂ f[N, M, L] (0 where C = 0). With
      ``return_trace`` also a dict with per-round ``under_explored`` bool[T, N, M], ``count`` and
      ``estimate`` at the pair's cube f[T, N, M], ``cube`` i[T, N, M], ``threshold`` f[T] and
      ``spent`` f[T, M] (budget used by exploration).
    """
    contexts = np.asarray(contexts, np.float64)
    available = np.asarray(available, bool)
    cost = np.asarray(cost, np.float64)
    budget = np.asarray(budget, np.float64)
    success = np.asarray(success, bool)
    num_rounds, num_clients, num_servers, dim = contexts.shape
    h = int(h_T)
    if not 1 <= h <= max_cubes_per_dim or h != h_T:
        raise ValueError(f"h_T must be an integer in [1, {max_cubes_per_dim}], got {h_T!r}")
    num_cubes = max_cubes_per_dim**dim
    count = np.zeros((num_clients, num_servers, num_cubes))
    wins = np.zeros((num_clients, num_servers, num_cubes))
    n_index, m_index = np.indices((num_clients, num_servers))

    selected = np.zeros((num_rounds, num_clients, num_servers), bool)
    trace = {
        "under_explored": np.zeros((num_rounds, num_clients, num_servers), bool),
        "count": np.zeros((num_rounds, num_clients, num_servers)),
        "estimate": np.zeros((num_rounds, num_clients, num_servers)),
        "cube": np.zeros((num_rounds, num_clients, num_servers), np.int64),
        "threshold": np.zeros(num_rounds),
        "spent": np.zeros((num_rounds, num_servers)),
    }
    for t in range(1, num_rounds + 1):
        row = t - 1
        cube = hypercube_index_numpy(contexts[row], h)
        c_here = count[n_index, m_index, cube]
        w_here = wins[n_index, m_index, cube]
        p_here = np.where(c_here > 0, w_here / np.maximum(c_here, 1), 0.0)
        threshold = exploration_threshold_numpy(t, z)
        mask, under, spent = cocs_select_numpy(
            c_here,
            p_here,
            available[row],
            cost[row],
            budget[row],
            threshold,
            tiebreak=_round(tiebreak, row),
        )
        selected[row] = mask
        if return_trace:
            trace["under_explored"][row] = under
            trace["count"][row] = c_here
            trace["estimate"][row] = p_here
            trace["cube"][row] = cube
            trace["threshold"][row] = threshold
            trace["spent"][row] = spent
        b = _teacher(played, mask, row)
        count[n_index[b], m_index[b], cube[b]] += 1  # one cube per pair: no repeated index
        wins[n_index[b], m_index[b], cube[b]] += success[row][b]
    estimate = np.where(count > 0, wins / np.maximum(count, 1), 0.0)
    if return_trace:
        return selected, count, estimate, trace
    return selected, count, estimate


def cucb_numpy(
    contexts,
    available,
    cost,
    budget,
    success,
    *,
    played=None,
    tiebreak=None,
    return_trace: bool = False,
):
    """Per-pair CUCB (``cucb_pairs``): index min(mean + sqrt(1.5 ln t / count), 1), 1 if never
    played.

    ``contexts`` is accepted for a uniform signature and ignored. Returns the selections
    bool[T, N, M] (and with ``return_trace`` a dict with the per-round ``weight`` f[T, N, M] and
    the final play ``count`` and sample ``mean`` of X per pair, f[N, M]).
    """
    available = np.asarray(available, bool)
    cost = np.asarray(cost, np.float64)
    budget = np.asarray(budget, np.float64)
    success = np.asarray(success, bool)
    num_rounds, num_clients, num_servers = available.shape
    count = np.zeros((num_clients, num_servers))
    wins = np.zeros((num_clients, num_servers))
    selected = np.zeros(available.shape, bool)
    weights = np.zeros(available.shape)
    for t in range(1, num_rounds + 1):
        row = t - 1
        index = np.ones((num_clients, num_servers))
        seen = count > 0
        index[seen] = np.minimum(
            wins[seen] / count[seen] + np.sqrt(1.5 * math.log(t) / count[seen]), 1.0
        )
        weights[row] = index
        selected[row] = assignment_mask_numpy(
            index, cost[row], available[row], budget[row], _round(tiebreak, row)
        )
        b = _teacher(played, selected[row], row)
        count[b] += 1
        wins[b] += success[row][b]
    if return_trace:
        mean = np.where(count > 0, wins / np.maximum(count, 1), 0.0)
        return selected, {"weight": weights, "count": count, "mean": mean}
    return selected


def linucb_features(contexts) -> np.ndarray:
    """x = [1, context], f[..., D + 1]."""
    contexts = np.asarray(contexts, np.float64)
    return np.concatenate([np.ones((*contexts.shape[:-1], 1)), contexts], axis=-1)


def linucb_weights_numpy(gram, target, features, alpha) -> np.ndarray:
    """clip(x·θ̂ + α sqrt(xᵀH⁻¹x), 0, 1) with θ̂ = H⁻¹b, per pair; f[N, M]."""
    theta = np.linalg.solve(gram, target[..., None])[..., 0]
    solved = np.linalg.solve(gram, features[..., None])[..., 0]
    width = np.sqrt(np.maximum(np.sum(features * solved, axis=-1), 0.0))
    return np.clip(np.sum(features * theta, axis=-1) + alpha * width, 0.0, 1.0)


def linucb_numpy(
    contexts,
    available,
    cost,
    budget,
    success,
    alpha,
    lam,
    *,
    played=None,
    tiebreak=None,
    return_trace: bool = False,
):
    """Per-pair LinUCB (``linucb_pairs``): a ridge regression of X on [1, context] per pair with
    a UCB bonus.

    Returns the selections bool[T, N, M] (and with ``return_trace`` a dict with the per-round
    ``weight`` f[T, N, M] and the final ``gram`` f[N, M, D+1, D+1] and ``target`` f[N, M, D+1]).
    """
    features = linucb_features(contexts)
    available = np.asarray(available, bool)
    cost = np.asarray(cost, np.float64)
    budget = np.asarray(budget, np.float64)
    success = np.asarray(success, bool)
    num_rounds, num_clients, num_servers, dim = features.shape
    gram = np.broadcast_to(float(lam) * np.eye(dim), (num_clients, num_servers, dim, dim)).copy()
    target = np.zeros((num_clients, num_servers, dim))
    selected = np.zeros(available.shape, bool)
    weights = np.zeros(available.shape)
    for row in range(num_rounds):
        x = features[row]
        weights[row] = linucb_weights_numpy(gram, target, x, float(alpha))
        selected[row] = assignment_mask_numpy(
            weights[row], cost[row], available[row], budget[row], _round(tiebreak, row)
        )
        b = _teacher(played, selected[row], row)
        gram[b] += x[b][:, :, None] * x[b][:, None, :]
        target[b] += success[row][b][:, None] * x[b]
    if return_trace:
        return selected, {"weight": weights, "gram": gram, "target": target}
    return selected


# --------------------------------------------------------------------------------------------
# Full simulation: COCS on the hfl environment
# --------------------------------------------------------------------------------------------


class CocsTrace(NamedTuple):
    selected: np.ndarray  # bool[T, N, M]  s(t)
    utility: np.ndarray  # f[T]  (1/M) Σ_selected X (eq. 8)
    num_success: np.ndarray  # i[T]  Σ_selected X
    available: np.ndarray  # bool[T, N, M]  coverage
    context: np.ndarray  # f[T, N, M, 2]  scaled (download rate, y); 0 out of coverage
    cost: np.ndarray  # f[T, N]  c_n = p_n·y_n
    budget: np.ndarray  # f[M]
    success: np.ndarray  # bool[T, N, M]  X of every pair (revealed only where selected)
    count: np.ndarray  # f[N, M, h_T^2]  C after the last round
    estimate: np.ndarray  # f[N, M, h_T^2]  p̂ after the last round


def cocs_numpy_loop(
    seed: int,
    num_rounds: int,
    N: int = 50,
    M: int = 3,
    h_T: int = 5,
    z: float = 0.4,
    preset: str = "mnist",
) -> CocsTrace:
    """One seed of COCS on the hfl environment (full coverage), one round at a time.

    The plain per-seed loop a benchmark times against jfl: its own ``np.random.default_rng(seed)``,
    prices p_n ~ U[0.5, 2] once, then per round (vectorised over clients and pairs) fresh
    conditions from ``hfl_numpy_draws``, the contexts (download rate b·c_DT scaled over
    [0, 20·a/deadline] and y over its range, both clipped to [0, 1]), the costs p_n·y_n, the COCS
    selection (``cocs_select_numpy``), the outcomes X (τ ≤ deadline) and the updates of C and p̂.
    """
    if preset not in PAPER_PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {sorted(PAPER_PRESETS)}")
    setting = PAPER_PRESETS[preset]
    h = int(h_T)
    a, q, deadline = setting["model_size"], setting["workload"], setting["deadline"]
    y_low, y_high = setting["computation_range"]
    rate_high = RATE_CONTEXT_SPAN * a / deadline
    budget = np.full(M, float(setting["budget"]))

    rng = np.random.default_rng(seed)
    price = hfl_numpy_prices(rng, N)
    num_cubes = h * h
    count = np.zeros((N, M, num_cubes))
    wins = np.zeros((N, M, num_cubes))
    n_index, m_index = np.indices((N, M))

    out = {
        "selected": np.zeros((num_rounds, N, M), bool),
        "utility": np.zeros(num_rounds),
        "num_success": np.zeros(num_rounds, np.int64),
        "available": np.zeros((num_rounds, N, M), bool),
        "context": np.zeros((num_rounds, N, M, 2)),
        "cost": np.zeros((num_rounds, N)),
        "success": np.zeros((num_rounds, N, M), bool),
    }
    for t in range(1, num_rounds + 1):
        row = t - 1
        draws = hfl_numpy_draws(
            rng,
            N,
            M,
            bandwidth_range=setting["bandwidth_range"],
            computation_range=setting["computation_range"],
        )
        covered = draws.coverage
        rate = download_rate_numpy(draws, **CHANNEL)
        y_scaled = (draws.computation - y_low) / (y_high - y_low)
        context = np.stack(
            [np.clip(rate / rate_high, 0.0, 1.0), np.broadcast_to(y_scaled[:, None], (N, M))],
            axis=-1,
        )
        context = np.where(covered[..., None], np.clip(context, 0.0, 1.0), 0.0)
        cost = price * draws.computation

        cube = hypercube_index_numpy(context, h)
        c_here = count[n_index, m_index, cube]
        p_here = np.where(c_here > 0, wins[n_index, m_index, cube] / np.maximum(c_here, 1), 0.0)
        mask, _, _ = cocs_select_numpy(
            c_here,
            p_here,
            covered,
            cost,
            budget,
            exploration_threshold_numpy(t, z),
        )

        x = success_numpy(draws, a, q, deadline, **CHANNEL)
        count[n_index[mask], m_index[mask], cube[mask]] += 1
        wins[n_index[mask], m_index[mask], cube[mask]] += x[mask]
        num_success = int(np.sum(x & mask))

        out["selected"][row] = mask
        out["utility"][row] = num_success / M
        out["num_success"][row] = num_success
        out["available"][row] = covered
        out["context"][row] = context
        out["cost"][row] = cost
        out["success"][row] = x
    estimate = np.where(count > 0, wins / np.maximum(count, 1), 0.0)
    return CocsTrace(budget=budget, count=count, estimate=estimate, **out)
