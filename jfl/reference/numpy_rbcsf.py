"""NumPy (float64) reference of the ``rbcsf`` environment and of RBCS-F (Huang et al., Alg. 1-2).

Written independently of the JAX code, for readability rather than speed: it is the ground truth
of the test suite and the plain per-seed loop that the benchmark times against ``jfl``.

Environment (docs/reproductions/rbcsf.md#the-environment), deterministic part: given
per-round draws of the CPU ratio μ, the
bandwidth B, the availability I and the noise u (all [T, N]), the context of client n in round t
is ``c = [1/μ, s, M/B]`` with the cold-start indicator ``s = 1 - x_{t-1}`` (1 for everyone in the
first round), the expected exchange time ``τ* = c·θ*`` and the realised one ``τ = τ*(1 + u)``.

Per-round problem P4 (eq. 21)::

    minimise  V · max_{n∈S} τ̄_n − Σ_{n∈S} Z_n   over S ⊆ {available}, |S| = k = min(m, #available)

(the objective of the empty set is 0). Three exact solvers are provided: ``p4_bruteforce``
(enumeration), ``p4_algorithm1`` (the paper's Algorithm 1, literally, O(N²)) and ``p4_prefix_heap``
(sort by τ̄ and scan prefixes with a heap of the k largest queues, O(N log N)).

Tie rule, shared by the three solvers (and, by construction, by ``jfl.kernels.divide_and_conquer``):
order the available clients by ascending τ̄, then ascending ``priority`` (a permutation of the
clients; by default the client index, while RBCS-F passes a random order drawn once per run), and
call a client's place in that order its *position*. Among the optimal sets, the solvers return
the one whose largest position is smallest and, among those, the one that takes queue ties at
the smaller positions; equivalently the optimal set whose positions, sorted in descending order, are
lexicographically smallest ("prefer the faster clients, then the lower index"). Objective
values are computed as ``V * max τ̄ - math.fsum(Z)`` (a correctly rounded sum, so that two sets
with the same queue values get bit-identical objectives). Floating-point near-ties (objectives
within a few ulps) may still be resolved differently from the JAX code; exact ties are not.
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import NamedTuple

import numpy as np

PAPER_TRAIN_TIME = (1.0, 2.0, 3.0, 4.0)  # τ_b (s) per class
PAPER_COLD_START_TIME = (1.0, 1.0, 1.0, 1.0)  # τ_s (s)
PAPER_SNR = (1000.0, 100.0, 10.0, 1.0)  # η = log₂(1 + SNR) (base e as an option)


# --------------------------------------------------------------------------------------------
# Environment
# --------------------------------------------------------------------------------------------


class RbcsfDraws(NamedTuple):
    """Per-round random draws of the rbcsf environment, each of shape [T, N]."""

    cpu_ratio: np.ndarray  # μ
    bandwidth: np.ndarray  # B (MHz)
    available: np.ndarray  # I (bool)
    noise: np.ndarray  # u, realised τ = τ*(1 + u)


def draw_rbcsf(
    rng: np.random.Generator,
    num_rounds: int,
    num_clients: int,
    p_available: float = 0.8,
    cpu_range=(0.5, 2.0),
    bandwidth_range=(2.0, 4.0),
    noise: float = 1.0,
) -> RbcsfDraws:
    """μ ~ U[0.5, 2], B ~ U[2, 4], I ~ Bernoulli(p_available), u ~ U(-noise, noise)."""
    shape = (num_rounds, num_clients)
    cpu_ratio = rng.uniform(cpu_range[0], cpu_range[1], shape)
    bandwidth = rng.uniform(bandwidth_range[0], bandwidth_range[1], shape)
    available = rng.random(shape) < p_available
    u = rng.uniform(-noise, noise, shape)
    return RbcsfDraws(cpu_ratio=cpu_ratio, bandwidth=bandwidth, available=available, noise=u)


def paper_theta(
    num_clients: int,
    train_time=PAPER_TRAIN_TIME,
    cold_start_time=PAPER_COLD_START_TIME,
    snr=PAPER_SNR,
    eta_base: float = 2.0,
) -> np.ndarray:
    """θ*_n = [τ_b, τ_s, 1/log_b(1 + SNR)] of client n's class floor(C·n/N), shape [N, 3]
    (b = ``eta_base``: 2 for η in bits, e for the natural-log reading)."""
    num_classes = len(train_time)
    theta = np.empty((num_clients, 3))
    for n in range(num_clients):
        c = (num_classes * n) // num_clients
        theta[n] = [train_time[c], cold_start_time[c], 1.0 / math.log(1.0 + snr[c], eta_base)]
    return theta


def make_contexts(cpu_ratio, bandwidth, cold_start, model_size: float = 20.0) -> np.ndarray:
    """c = [1/μ, s, M/B], stacked on a new last axis."""
    cpu_ratio = np.asarray(cpu_ratio, float)
    bandwidth = np.asarray(bandwidth, float)
    cold_start = np.broadcast_to(np.asarray(cold_start, float), cpu_ratio.shape)
    return np.stack([1.0 / cpu_ratio, cold_start, model_size / bandwidth], axis=-1)


def expected_times(context, theta) -> np.ndarray:
    """τ* = c·θ* over the last axis."""
    context = np.asarray(context, float)
    theta = np.asarray(theta, float)
    return (
        context[..., 0] * theta[..., 0]
        + context[..., 1] * theta[..., 1]
        + (context[..., 2] * theta[..., 2])
    )


def realised_times(expected, noise) -> np.ndarray:
    """τ = τ*(1 + u)."""
    return np.asarray(expected, float) * (1.0 + np.asarray(noise, float))


def round_time(selected, tau) -> float:
    """Max τ over the selected clients, 0 if none (eq. 1)."""
    selected = np.asarray(selected, bool)
    return float(np.max(np.asarray(tau)[selected])) if selected.any() else 0.0


class EnvironmentRollout(NamedTuple):
    context: np.ndarray  # [T, N, 3]
    expected_time: np.ndarray  # [T, N]  τ*
    time: np.ndarray  # [T, N]  realised τ (for every client; revealed only where selected)
    round_time: np.ndarray  # [T]


def rollout_environment(draws: RbcsfDraws, theta, selected, model_size: float = 20.0):
    """The environment's deterministic part for a given selection sequence ``selected`` [T, N]."""
    selected = np.asarray(selected, bool)
    num_rounds, num_clients = selected.shape
    cold_start = np.ones((num_rounds, num_clients))
    cold_start[1:] = 1.0 - selected[:-1]
    context = make_contexts(draws.cpu_ratio, draws.bandwidth, cold_start, model_size)
    expected = expected_times(context, theta)
    tau = realised_times(expected, draws.noise)
    rt = np.array([round_time(selected[t], tau[t]) for t in range(num_rounds)])
    return EnvironmentRollout(context=context, expected_time=expected, time=tau, round_time=rt)


# --------------------------------------------------------------------------------------------
# P4 solvers
# --------------------------------------------------------------------------------------------


def _as_inputs(tau_bar, queue, available):
    tau_bar = np.asarray(tau_bar, float)
    queue = np.asarray(queue, float)
    available = np.asarray(available, bool)
    return tau_bar, queue, available


def _prepare(tau_bar, queue, available, m, priority=None):
    """Inputs as float64/bool arrays, the available clients in position order, and k."""
    tau_bar, queue, available = _as_inputs(tau_bar, queue, available)
    order = _positions(tau_bar, available, priority)
    return tau_bar, queue, order, min(int(m), order.size)


def _positions(tau_bar, available, priority=None) -> np.ndarray:
    """Available client indices in the tie-rule order (ascending τ̄, then ascending priority,
    by default the index)."""
    index = np.flatnonzero(available)
    tie = index if priority is None else np.asarray(priority)[index]
    return index[np.lexsort((tie, tau_bar[index]))]


def p4_objective(selected, tau_bar, queue, V) -> float:
    """V · max_{n∈S} τ̄_n − Σ_{n∈S} Z_n (0 for the empty set)."""
    selected = np.asarray(selected, bool)
    if not selected.any():
        return 0.0
    max_tau = float(np.max(np.asarray(tau_bar, float)[selected]))
    return V * max_tau - math.fsum(np.asarray(queue, float)[selected].tolist())


def _mask(indices, num_clients) -> np.ndarray:
    mask = np.zeros(num_clients, bool)
    mask[list(indices)] = True
    return mask


def p4_bruteforce(tau_bar, queue, available, m: int, V: float, priority=None):
    """Exact P4 by enumerating every subset of size k = min(m, #available).

    Returns ``(objective, mask)``; ties follow the module's tie rule. Exponential: small N only.
    """
    tau_bar, queue, order, k = _prepare(tau_bar, queue, available, m, priority)
    n = tau_bar.shape[0]
    if k == 0:
        return 0.0, np.zeros(n, bool)
    best_value, best_key, best_set = math.inf, None, None
    for combo in itertools.combinations(range(order.size), k):  # combo holds positions
        clients = order[list(combo)]
        value = V * float(np.max(tau_bar[clients])) - math.fsum(queue[clients].tolist())
        key = tuple(sorted(combo, reverse=True))
        if value < best_value or (value == best_value and key < best_key):
            best_value, best_key, best_set = value, key, clients
    return best_value, _mask(best_set, n)


def p4_algorithm1(tau_bar, queue, available, m: int, V: float, priority=None):
    """The paper's Algorithm 1 ("divide and conquer"), written literally; O(N²).

    For every available candidate maximum ``n_max``, walk the available clients in descending
    order of Z and keep those with ``τ̄_n ≤ τ̄_{n_max}`` until k are found; evaluate P4 on that set;
    return the best set found. Unspecified orders in the paper are fixed by the module's tie rule:
    candidates ``n_max`` are tried by position (ascending τ̄, then priority), queue ties in the Z
    order go to the smaller position, and the first minimum wins.

    Returns ``(objective, mask)``.
    """
    tau_bar, queue, available = _as_inputs(tau_bar, queue, available)
    n = tau_bar.shape[0]
    candidates = list(_positions(tau_bar, available, priority))  # line 3: N+, by position
    position = {client: p for p, client in enumerate(candidates)}
    k = min(int(m), len(candidates))  # line 4
    if k == 0:  # nothing to choose: the empty set (objective 0)
        return 0.0, np.zeros(n, bool)
    # Lines 1-2: the available arms in descending order of Z.
    by_queue = sorted(candidates, key=lambda c: (-queue[c], position[c]))
    best_value, best_set = math.inf, None
    for n_max in candidates:  # line 5
        chosen = []  # line 6
        for client in by_queue:  # line 7
            if tau_bar[client] <= tau_bar[n_max]:  # line 8
                chosen.append(client)  # line 9
            if len(chosen) == k:  # line 11
                value = p4_objective(_mask(chosen, n), tau_bar, queue, V)  # line 12
                if value < best_value:  # line 17: the first minimum
                    best_value, best_set = value, chosen
                break  # line 13
    return best_value, _mask(best_set, n)


def p4_prefix_heap(tau_bar, queue, available, m: int, V: float, priority=None):
    """Exact P4 in O(N log N): the optimum is the minimum over prefixes of the τ̄ order.

    With the available clients sorted by position, the best set whose largest τ̄ is that of the
    client at position j is the k largest queues of the prefix 0..j (any set with a smaller
    maximum lies in a shorter prefix). A min-heap keeps the k largest queues of the running
    prefix and their running sum; a queue equal to the heap's minimum does not replace it (ties
    stay with the smaller position). The first best prefix wins; its set is recovered by sorting
    the prefix by (Z descending, position). The running sum may drift by a few ulps over long
    pools; the returned objective is recomputed exactly for the returned set.

    Returns ``(objective, mask)``.
    """
    tau_bar, queue, order, k = _prepare(tau_bar, queue, available, m, priority)
    n = tau_bar.shape[0]
    if k == 0:
        return 0.0, np.zeros(n, bool)
    tau_sorted = tau_bar[order].tolist()
    queue_sorted = queue[order].tolist()
    heap: list[float] = []
    total = 0.0
    best_value, best_prefix = math.inf, -1
    for j in range(order.size):
        z = queue_sorted[j]
        if len(heap) < k:
            heapq.heappush(heap, z)
            total += z
        elif z > heap[0]:
            total += z - heapq.heapreplace(heap, z)
        if len(heap) == k:
            value = V * tau_sorted[j] - total
            if value < best_value:
                best_value, best_prefix = value, j
    prefix = np.arange(best_prefix + 1)
    top = prefix[np.lexsort((prefix, -np.asarray(queue_sorted)[prefix]))][:k]
    mask = _mask(order[top], n)
    return p4_objective(mask, tau_bar, queue, V), mask


# --------------------------------------------------------------------------------------------
# RBCS-F (Algorithm 2)
# --------------------------------------------------------------------------------------------


class RbcsfTrace(NamedTuple):
    selected: np.ndarray  # bool[T, N]  x_t
    queue: np.ndarray  # f[T, N]  Z after round t's update
    round_time: np.ndarray  # f[T]  max τ over the selected clients (0 if none)
    tau_bar: np.ndarray  # f[T, N]  τ̄_t used for the selection
    context: np.ndarray  # f[T, N, 3]  c_t
    time: np.ndarray  # f[T, N]  realised τ_t of every client (revealed only where selected)


def simulate_rbcsf(
    draws: RbcsfDraws,
    theta,
    m: int,
    V: float,
    beta: float,
    alpha: float,
    lam: float,
    model_size: float = 20.0,
    solver=p4_algorithm1,
    priority=None,
) -> RbcsfTrace:
    """RBCS-F (Alg. 2) with a constant exploration α, one round at a time.

    Per client: H = λI, b = 0, Z = 0. Each round: θ̂ = H⁻¹b, τ̄ = max(c·θ̂ − α·sqrt(cᵀH⁻¹c), 0)
    (eq. 19, clamped at 0: docs/decisions.md#rbcsf-clamp), x = P4 solution
    (``solver``, default the paper's
    Algorithm 1, its ties by ``priority``: the run's random order of the clients), then
    Z ← max(Z + β − x, 0), H ← H + x·ccᵀ, b ← b + x·τ·c.
    """
    theta = np.asarray(theta, float)
    num_rounds, num_clients = draws.available.shape
    gram = np.broadcast_to(lam * np.eye(3), (num_clients, 3, 3)).copy()
    target = np.zeros((num_clients, 3))
    queue = np.zeros(num_clients)
    cold_start = np.ones(num_clients)

    out_selected = np.zeros((num_rounds, num_clients), bool)
    out_queue = np.zeros((num_rounds, num_clients))
    out_round_time = np.zeros(num_rounds)
    out_tau_bar = np.zeros((num_rounds, num_clients))
    out_context = np.zeros((num_rounds, num_clients, 3))
    out_time = np.zeros((num_rounds, num_clients))

    for t in range(num_rounds):
        c = make_contexts(draws.cpu_ratio[t], draws.bandwidth[t], cold_start, model_size)
        tau = realised_times(expected_times(c, theta), draws.noise[t])

        theta_hat = np.linalg.solve(gram, target[:, :, None])[:, :, 0]
        h_inv_c = np.linalg.solve(gram, c[:, :, None])[:, :, 0]
        tau_hat = np.sum(c * theta_hat, axis=1)
        width = np.sqrt(np.maximum(np.sum(c * h_inv_c, axis=1), 0.0))
        tau_bar = np.maximum(tau_hat - alpha * width, 0.0)

        _, x = solver(tau_bar, queue, draws.available[t], m, V, priority)
        xf = x.astype(float)

        queue = np.maximum(queue + beta - xf, 0.0)
        gram = gram + xf[:, None, None] * (c[:, :, None] * c[:, None, :])
        target = target + (xf * tau)[:, None] * c
        cold_start = 1.0 - xf

        out_selected[t] = x
        out_queue[t] = queue
        out_round_time[t] = round_time(x, tau)
        out_tau_bar[t] = tau_bar
        out_context[t] = c
        out_time[t] = tau

    return RbcsfTrace(
        selected=out_selected,
        queue=out_queue,
        round_time=out_round_time,
        tau_bar=out_tau_bar,
        context=out_context,
        time=out_time,
    )


def rbcsf_numpy_loop(
    seed: int,
    num_rounds: int,
    num_clients: int,
    m: int = 8,
    V: float = 10.0,
    beta: float = 0.15,
    alpha: float = 0.1,
    lam: float = 1.0,
    model_size: float = 20.0,
    p_available: float = 0.8,
) -> RbcsfTrace:
    """One seed of RBCS-F on the paper's rbcsf setting: draw, then simulate round by round.

    The plain per-seed loop the benchmark times against jfl: NumPy vectorised over clients
    within a round, a Python loop over rounds, and the O(N log N) ``p4_prefix_heap`` for P4, its
    ties by a random order of the clients drawn once.
    """
    rng = np.random.default_rng(seed)
    draws = draw_rbcsf(rng, num_rounds, num_clients, p_available)
    priority = rng.permutation(num_clients)
    theta = paper_theta(num_clients)
    return simulate_rbcsf(
        draws,
        theta,
        m,
        V,
        beta,
        alpha,
        lam,
        model_size=model_size,
        solver=p4_prefix_heap,
        priority=priority,
    )


# --------------------------------------------------------------------------------------------
# RBCS-F batched over runs (the NumPy program the benchmark's CPU ratio is measured against)
# --------------------------------------------------------------------------------------------


def p4_prefix_batched(tau_bar, queue, available, m: int, V, priority):
    """``p4_prefix_heap`` for R instances at once, arrays [R, N] (``V`` [R] or a scalar).

    The same minimum over prefixes of the position order, walked position by position for
    every instance together: the m largest queues of the running prefix are kept sorted in an
    [R, m] array (the heap's role), and a prefix's value uses its k = min(m, #available)
    largest. Returns the masks [R, N].
    """
    tau_bar, queue = np.asarray(tau_bar, float), np.asarray(queue, float)
    available = np.asarray(available, bool)
    runs, n = tau_bar.shape
    rows, every = np.arange(runs)[:, None], np.arange(runs)
    # Position order: the available clients by (τ̄, priority), the others after them.
    order = np.lexsort((priority, tau_bar, ~available), axis=-1)
    count = available.sum(1)
    k = np.minimum(m, count)
    tau_sorted, queue_sorted = tau_bar[rows, order], queue[rows, order]
    largest = np.full((runs, m), -np.inf)  # ascending
    top = np.empty((runs, n))  # the sum of the k largest queues of each prefix
    for j in range(n):
        largest[:, 0] = np.maximum(largest[:, 0], queue_sorted[:, j])
        largest.sort(axis=1)
        descending = largest[:, ::-1]
        sums = np.cumsum(np.where(np.isfinite(descending), descending, 0.0), axis=1)
        top[:, j] = sums[every, np.maximum(k - 1, 0)]
    value = np.asarray(V, float).reshape(-1, 1) * tau_sorted - top
    position = np.arange(n)[None, :]
    valid = (position >= k[:, None] - 1) & (position < count[:, None])
    best = np.argmin(np.where(valid, value, np.inf), axis=1)  # the first best prefix
    # The set: the k largest queues of the best prefix, ties to the smaller position.
    chosen = np.where(position <= best[:, None], -queue_sorted, np.inf)
    ranked = np.lexsort((np.broadcast_to(position, (runs, n)), chosen), axis=-1)
    mask = np.zeros((runs, n), bool)
    mask[rows, order[rows, ranked]] = position < k[:, None]
    return mask


def simulate_rbcsf_batched(
    draws: RbcsfDraws,
    theta,
    m: int,
    V,
    beta,
    alpha,
    lam,
    priority,
    model_size: float = 20.0,
):
    """:func:`simulate_rbcsf` for R runs at once: ``draws`` fields [R, T, N], ``priority`` [R,
    N], the hyperparameters scalars or [R]; P4 by :func:`p4_prefix_batched`, H⁻¹ updated by
    Sherman–Morrison rather than solved for. Returns the round times [R, T] and the final
    queues [R, N] (what the main job reduces)."""
    theta = np.asarray(theta, float)
    runs, num_rounds, num_clients = draws.available.shape

    def per_run(x):  # a scalar or [R] → [R, 1]
        return np.asarray(x, float).reshape(-1, 1)

    V, beta, alpha = per_run(V)[:, 0], per_run(beta), per_run(alpha)
    lam = np.asarray(lam, float).reshape(-1, 1, 1, 1)
    # H⁻¹ kept by Sherman–Morrison (H grows by rank one where a client is selected): the
    # batched 3 × 3 solves cost more than the rest of the round.
    inverse = np.broadcast_to(np.eye(3) / lam, (runs, num_clients, 3, 3)).copy()
    target = np.zeros((runs, num_clients, 3))
    queue = np.zeros((runs, num_clients))
    cold_start = np.ones((runs, num_clients))
    times = np.zeros((runs, num_rounds))
    for t in range(num_rounds):
        c = make_contexts(draws.cpu_ratio[:, t], draws.bandwidth[:, t], cold_start, model_size)
        tau = realised_times(expected_times(c, theta), draws.noise[:, t])
        h_inv_c = np.einsum("rnij,rnj->rni", inverse, c)
        tau_hat = np.einsum("rnj,rnij,rni->rn", target, inverse, c)
        quadratic = np.sum(c * h_inv_c, axis=-1)
        width = np.sqrt(np.maximum(quadratic, 0.0))
        tau_bar = np.maximum(tau_hat - alpha * width, 0.0)
        x = p4_prefix_batched(tau_bar, queue, draws.available[:, t], m, V, priority)
        xf = x.astype(float)
        queue = np.maximum(queue + beta - xf, 0.0)
        step = xf / (1.0 + quadratic)
        inverse -= step[..., None, None] * (h_inv_c[..., :, None] * h_inv_c[..., None, :])
        target += (xf * tau)[..., None] * c
        cold_start = 1.0 - xf
        times[:, t] = np.max(np.where(x, tau, 0.0), axis=1)
    return times, queue


def rbcsf_numpy_batched(
    seeds, num_rounds: int, num_clients: int, m: int = 8, V=10.0, beta=0.15, alpha=0.1, lam=1.0
):
    """R = len(seeds) runs of RBCS-F on the paper's rbcsf setting at once: each seed's draws as
    :func:`rbcsf_numpy_loop` draws them, then :func:`simulate_rbcsf_batched`."""
    draws, priorities = [], []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        draws.append(draw_rbcsf(rng, num_rounds, num_clients))
        priorities.append(rng.permutation(num_clients))
    stacked = RbcsfDraws(*(np.stack(field) for field in zip(*draws, strict=True)))
    theta = paper_theta(num_clients)
    return simulate_rbcsf_batched(stacked, theta, m, V, beta, alpha, lam, np.stack(priorities))
