"""NumPy (float64) reference of the ``wireless`` environment and of the CS-UCB family (Xia et al.).

Written independently of the JAX code, plainly rather than fast: it is the ground truth of the
test suite and the plain per-seed loop that a benchmark times against ``jfl``.

Environment (docs/reproductions/cs-ucb.md#the-environment, the paper's eqs. 4 and 32–36).
Client k at distance d (metres) has the
unit-gain SNR ``snr = 10^((p − σ² − PL)/10)`` with ``p = 23 dBm``, ``σ² = −107 dBm`` and
``PL = 128.1 + 37.6 log10(d / 1 km)`` (dB). Each round, with Rayleigh fading ``g ~ Exp(1)`` drawn
independently for the downlink and the uplink and a computing speed ``φ_k ~ U[φ_lo_k, φ_hi_k]``::

    τ_D = m_0 / (W log2(1 + snr g_D)),   τ_U = m_k / (W log2(1 + snr g_U)),   τ_LU = ϱ / φ_k
    τ_k = min(τ_D + τ_U + τ_LU, τ_max),   failed ⟺ τ_D + τ_U + τ_LU ≥ τ_max,   r_k = 1 − τ_k/τ_max

with W = 15 kHz, m_0 = m_k = 5·10³ bits, ϱ = 2 and ``φ_lo_k = (0.5k + 0.5)·20``,
``φ_hi_k = (0.5k + 1.5)·20`` for k = 1..K. Sending zero bits takes no time.

Closed form of one transfer: ``P(m/(W log2(1 + snr g)) ≤ x) = exp(−(2^{m/(W x)} − 1)/snr)``
(``transfer_time_cdf``); ``failure_probability_integral`` integrates it numerically against the
uniform speed.

Policies, each fed a full reward matrix ``r[T, K]`` (the reward every client *would* earn; only
the selected clients' entries are used) and availability ``a[T, K]`` (bool), returning the
selections ``bool[T, K]``. The round counter t of the paper is 1-based. Each round selects the
``min(N, |A(t)|)`` available clients with the largest score, ties to the lower ``priority`` (a
permutation of the clients: jfl's policies draw one at random per run, and a test passes the
policy's own; by default the client index):

* ``cs_ucb_numpy`` (Alg. 1): the first κ = ⌈K/N⌉ selections are given (they are random in jfl),
  then eq. (18): ``y_k + sqrt((N + 1) ln t / z_k)``.
* ``modified_cs_ucb_numpy``: eq. (18) from the first round, no initial rounds.
* ``cs_ucb_q_numpy`` (Alg. 2): ``(1 − β) ŷ_k + β D_k`` with ``ŷ_k = min(y_k + sqrt(2 ln t/z_k), 1)``
  (eq. 26), and ``D_k(t) = max(D_k(t−1) + c_k − b_k(t−1), 0)``, ``D(1) = 0`` (eq. 27).
* ``round_robin_numpy``: cycle positions ``tN … tN + N − 1 (mod K)`` of a fixed ``order``,
  unavailable clients skipped and replaced by the next ones in the cycle (no scores, no ties).

Here ``y_k`` is the sample mean of client k's observed rewards and ``z_k`` its play count (eqs.
16–17); a client never played has an infinite UCB index (``ŷ = 1`` in CS-UCB-Q). The UCB policies
accept ``played`` (bool[T, K]): when given, each round still computes and records its own
selection, but the state (y, z, D) is updated with ``played[t]`` instead (teacher forcing), so that
a comparison with an implementation in another precision can continue past a floating-point
near-tie. With ``return_scores=True`` they also return the scores they ranked (NaN in CS-UCB's
initial rounds).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy import integrate

PAPER = {
    "radius": 500.0,  # m
    "min_distance": 10.0,  # m
    "bandwidth": 15e3,  # Hz, W
    "tx_power_dbm": 23.0,
    "noise_dbm": -107.0,
    "path_loss_intercept": 128.1,  # dB at 1 km
    "path_loss_slope": 37.6,  # dB per decade
    "download_bits": 5e3,  # m_0
    "upload_bits": 5e3,  # m_k
    "samples_per_update": 2.0,  # ϱ
    "tau_max": 5.0,  # s
}


# --------------------------------------------------------------------------------------------
# Environment
# --------------------------------------------------------------------------------------------


def paper_speed_bounds(num_clients: int) -> tuple[np.ndarray, np.ndarray]:
    """(φ_lo, φ_hi) with φ_lo_k = (0.5k + 0.5)·20 and φ_hi_k = (0.5k + 1.5)·20, k = 1..K."""
    low = np.array([(0.5 * k + 0.5) * 20.0 for k in range(1, num_clients + 1)])
    high = np.array([(0.5 * k + 1.5) * 20.0 for k in range(1, num_clients + 1)])
    return low, high


def snr_numpy(
    distance,
    tx_power_dbm: float = PAPER["tx_power_dbm"],
    noise_dbm: float = PAPER["noise_dbm"],
    path_loss_intercept: float = PAPER["path_loss_intercept"],
    path_loss_slope: float = PAPER["path_loss_slope"],
) -> np.ndarray:
    """Unit-fading SNR p·10^(−PL/10)/σ² (linear) at ``distance`` metres."""
    distance_km = np.asarray(distance, float) / 1000.0
    path_loss_db = path_loss_intercept + path_loss_slope * np.log10(distance_km)
    return 10.0 ** ((tx_power_dbm - noise_dbm - path_loss_db) / 10.0)


def client_times_numpy(
    uniforms,
    distance,
    phi_low=None,
    phi_high=None,
    tau_max: float = PAPER["tau_max"],
    bandwidth: float = PAPER["bandwidth"],
    tx_power_dbm: float = PAPER["tx_power_dbm"],
    noise_dbm: float = PAPER["noise_dbm"],
    path_loss_intercept: float = PAPER["path_loss_intercept"],
    path_loss_slope: float = PAPER["path_loss_slope"],
    download_bits: float = PAPER["download_bits"],
    upload_bits: float = PAPER["upload_bits"],
    samples_per_update: float = PAPER["samples_per_update"],
    coherence_slots: int = 1,
):
    """τ_k (eq. 4) and the failure indicator from 1 + 2L rows of U[0, 1) draws.

    ``uniforms`` has shape [..., 1 + 2L, K] (L = ``coherence_slots``): rows downlink fading,
    uplink fading (``g = −ln(1 − u)``, so g ~ Exp(1)), computing speed
    (``φ = φ_lo + (φ_hi − φ_lo) u``), then the other L − 1 downlink and L − 1 uplink fades; each
    link's rate is the mean of log2(1 + snr g) over its L fades. ``phi_low``/``phi_high`` default
    to the paper's per-client bounds. Returns ``(time [..., K], failed [..., K])``.
    """
    uniforms = np.asarray(uniforms, float)
    num_clients = uniforms.shape[-1]
    default_low, default_high = paper_speed_bounds(num_clients)
    phi_low = default_low if phi_low is None else np.asarray(phi_low, float)
    phi_high = default_high if phi_high is None else np.asarray(phi_high, float)
    snr = snr_numpy(distance, tx_power_dbm, noise_dbm, path_loss_intercept, path_loss_slope)

    speed = phi_low + (phi_high - phi_low) * uniforms[..., 2, :]
    rows_down = [0] + [3 + slot for slot in range(coherence_slots - 1)]
    rows_up = [1] + [3 + coherence_slots - 1 + slot for slot in range(coherence_slots - 1)]

    def transfer(bits, rows):
        if bits == 0:
            return np.zeros(np.broadcast_shapes(np.shape(snr), uniforms[..., 0, :].shape))
        rates = [np.log2(1.0 + snr * -np.log1p(-uniforms[..., row, :])) for row in rows]
        with np.errstate(divide="ignore"):
            return bits / (bandwidth * (sum(rates) / len(rates)))

    download = transfer(download_bits, rows_down)
    upload = transfer(upload_bits, rows_up)
    local_update = samples_per_update / speed
    total = download + upload + local_update
    failed = total >= tau_max
    return np.minimum(total, tau_max), failed


def transfer_time_cdf(x, snr, bits: float, bandwidth: float = PAPER["bandwidth"]) -> np.ndarray:
    """P(bits/(W log2(1 + snr g)) ≤ x) = exp(−(2^{bits/(W x)} − 1)/snr), g ~ Exp(1), x > 0."""
    x = np.asarray(x, float)
    exponent = bits / (bandwidth * x)
    with np.errstate(over="ignore"):
        return np.exp(-np.expm1(exponent * math.log(2.0)) / snr)


def _transfer_time_pdf(y: float, snr: float, bits: float, bandwidth: float) -> float:
    """Density of one transfer time at y > 0 (derivative of ``transfer_time_cdf``)."""
    a = bits / bandwidth
    exponent = a / y * math.log(2.0)
    if exponent > 700.0:  # 2^{a/y} overflows; the density is exp(-huge) = 0 there
        return 0.0
    log_jacobian = math.log(math.log(2.0) * a / (y * y * snr))
    log_density = -math.expm1(exponent) / snr + exponent + log_jacobian
    return math.exp(log_density)


def failure_probability_integral(
    distance: float,
    phi_low: float,
    phi_high: float,
    tau_max: float,
    bandwidth: float = PAPER["bandwidth"],
    download_bits: float = PAPER["download_bits"],
    upload_bits: float = PAPER["upload_bits"],
    samples_per_update: float = PAPER["samples_per_update"],
    **channel,
) -> float:
    """P(τ_D + τ_U + ϱ/φ ≥ τ_max) for one client, by numerical integration (``scipy.integrate``).

    ``1 − E_φ[∫_0^s f_U(y) F_D(s − y) dy]`` with ``s = τ_max − ϱ/φ``, the transfer-time CDF
    ``F_D`` and density ``f_U`` in closed form, φ uniform on [φ_lo, φ_hi]. ``channel`` takes the
    keywords of ``snr_numpy``. Both transfers must carry bits.
    """
    snr = float(snr_numpy(distance, **channel))

    def success_given_speed(phi: float) -> float:
        slack = tau_max - samples_per_update / phi
        if slack <= 0:
            return 0.0

        def integrand(y):
            down = float(transfer_time_cdf(slack - y, snr, download_bits, bandwidth))
            return _transfer_time_pdf(y, snr, upload_bits, bandwidth) * down

        value, _ = integrate.quad(integrand, 0.0, slack, limit=200, epsabs=1e-12, epsrel=1e-10)
        return value

    if phi_high == phi_low:
        return 1.0 - success_given_speed(phi_low)
    mean_success, _ = integrate.quad(
        success_given_speed, phi_low, phi_high, limit=200, epsabs=1e-12, epsrel=1e-10
    )
    return 1.0 - mean_success / (phi_high - phi_low)


def draw_distance_numpy(
    rng: np.random.Generator,
    num_clients: int,
    radius: float = PAPER["radius"],
    min_distance: float = PAPER["min_distance"],
) -> np.ndarray:
    """Distances uniform over the area of the annulus [min_distance, radius]: d² ~ U[r0², R²]."""
    u = rng.random(num_clients)
    return np.sqrt(min_distance**2 + (radius**2 - min_distance**2) * u)


# --------------------------------------------------------------------------------------------
# Policies
# --------------------------------------------------------------------------------------------


def top_available(scores, available, count: int, priority=None) -> np.ndarray:
    """Mask of the ``count`` largest ``scores`` among ``available``; ties to the lower
    ``priority`` (a permutation of the clients; by default the client index)."""
    scores = np.asarray(scores, float)
    available = np.asarray(available, bool)
    index = np.flatnonzero(available)
    tie = index if priority is None else np.asarray(priority)[index]
    order = index[np.lexsort((tie, -scores[index]))]
    mask = np.zeros(scores.shape[0], bool)
    mask[order[:count]] = True
    return mask


def _ucb_index(reward_sum, count, t: int, scale: float) -> np.ndarray:
    """y_k + sqrt(scale · ln t / z_k), y_k = reward_sum/z_k; +inf where z_k = 0."""
    index = np.full(count.shape[0], np.inf)
    played = count > 0
    index[played] = reward_sum[played] / count[played] + np.sqrt(
        scale * math.log(t) / count[played]
    )
    return index


def _ucb_loop(rewards, available, N, played, return_scores, given, scale, priority):
    """Shared loop of CS-UCB and modified CS-UCB: ``given[t]`` (a mask or None) overrides."""
    rewards = np.asarray(rewards, float)
    available = np.asarray(available, bool)
    num_rounds, num_clients = rewards.shape
    reward_sum = np.zeros(num_clients)
    count = np.zeros(num_clients)
    selected = np.zeros((num_rounds, num_clients), bool)
    scores = np.full((num_rounds, num_clients), np.nan)
    for t in range(1, num_rounds + 1):
        row = t - 1
        fixed = given(row)
        if fixed is not None:
            choice = np.asarray(fixed, bool)
        else:
            scores[row] = _ucb_index(reward_sum, count, t, scale)
            k = min(N, int(available[row].sum()))
            choice = top_available(scores[row], available[row], k, priority)
        selected[row] = choice
        b = choice if played is None else np.asarray(played[row], bool)
        reward_sum[b] += rewards[row, b]
        count[b] += 1
    return (selected, scores) if return_scores else selected


def cs_ucb_numpy(
    rewards,
    available,
    N: int,
    init_selections,
    *,
    priority=None,
    played=None,
    return_scores=False,
):
    """CS-UCB (Alg. 1): the given initial selections for κ = ⌈K/N⌉ rounds, then eq. (18).

    ``init_selections`` holds (at least) the first ``min(κ, T)`` rounds' selections; ties after
    them go to the lower ``priority``.
    """
    num_clients = np.shape(rewards)[1]
    kappa = math.ceil(num_clients / N)
    init_selections = np.asarray(init_selections, bool)

    def given(row):
        return init_selections[row] if row < kappa else None

    return _ucb_loop(rewards, available, N, played, return_scores, given, N + 1.0, priority)


def modified_cs_ucb_numpy(
    rewards, available, N: int, *, priority=None, played=None, return_scores=False
):
    """CS-UCB over the available clients from round 1 (eq. 18), unplayed clients first (among
    them, and in every other tie, the lower ``priority``)."""
    return _ucb_loop(
        rewards, available, N, played, return_scores, lambda row: None, N + 1.0, priority
    )


def _cs_ucb_q_scores(reward_sum, count, queue, t: int, beta: float) -> np.ndarray:
    """(1 − β) ŷ + β D with ŷ = min(y + sqrt(2 ln t / z), 1), ŷ = 1 where z = 0 (eqs. 26, 28)."""
    y_hat = np.ones(count.shape[0])
    played = count > 0
    y_hat[played] = np.minimum(
        reward_sum[played] / count[played] + np.sqrt(2.0 * math.log(t) / count[played]), 1.0
    )
    return (1.0 - beta) * y_hat + beta * queue


def cs_ucb_q_numpy(
    rewards,
    available,
    N: int,
    c,
    beta: float,
    *,
    priority=None,
    played=None,
    return_scores=False,
):
    """CS-UCB-Q (Alg. 2), eqs. (26)–(28) literally; ``c`` a scalar or one rate per client; ties
    (all of the first rounds', where every ŷ is 1 and every D equal) to the lower ``priority``."""
    rewards = np.asarray(rewards, float)
    available = np.asarray(available, bool)
    num_rounds, num_clients = rewards.shape
    c = np.broadcast_to(np.asarray(c, float), (num_clients,))
    reward_sum = np.zeros(num_clients)
    count = np.zeros(num_clients)
    queue = np.zeros(num_clients)  # D(1) = 0
    selected = np.zeros((num_rounds, num_clients), bool)
    scores = np.zeros((num_rounds, num_clients))
    for t in range(1, num_rounds + 1):
        row = t - 1
        scores[row] = _cs_ucb_q_scores(reward_sum, count, queue, t, beta)
        k = min(N, int(available[row].sum()))
        selected[row] = top_available(scores[row], available[row], k, priority)
        b = selected[row] if played is None else np.asarray(played[row], bool)
        reward_sum[b] += rewards[row, b]
        count[b] += 1
        queue = np.maximum(queue + c - b, 0.0)  # D(t + 1)
    return (selected, scores) if return_scores else selected


def round_robin_numpy(available, N: int, order) -> np.ndarray:
    """Round-robin: round t (0-based) walks the cycle ``order`` from position tN (mod K) and takes
    the first ``min(N, |A(t)|)`` available clients it meets."""
    available = np.asarray(available, bool)
    order = np.asarray(order, int)
    num_rounds, num_clients = available.shape
    selected = np.zeros((num_rounds, num_clients), bool)
    for t in range(num_rounds):
        k = min(N, int(available[t].sum()))
        taken = 0
        position = (t * N) % num_clients
        while taken < k:
            client = order[position]
            if available[t, client]:
                selected[t, client] = True
                taken += 1
            position = (position + 1) % num_clients
    return selected


# --------------------------------------------------------------------------------------------
# Full simulation: CS-UCB-Q on the wireless environment
# --------------------------------------------------------------------------------------------


class WirelessTrace(NamedTuple):
    selected: np.ndarray  # bool[T, K]  b(t)
    available: np.ndarray  # bool[T, K]  a(t)
    queue: np.ndarray  # f[T, K]  D after round t's update (D(t + 1))
    reward: np.ndarray  # f[T, K]  r_k(t) of every client (revealed only where selected)
    set_reward: np.ndarray  # f[T]  min r_k over the selected clients, 0 if none
    round_time: np.ndarray  # f[T]  max τ_k over the selected clients, 0 if none
    num_failed: np.ndarray  # i[T]  selected clients with τ_k = τ_max
    distance: np.ndarray  # f[K]
    priority: np.ndarray  # i[K]  the order breaking ties (lower wins)


def wireless_numpy_loop(
    seed: int,
    num_rounds: int,
    K: int,
    N: int,
    beta: float,
    c,
    availability,
    tau_max: float,
    distance=None,
    priority=None,
) -> WirelessTrace:
    """One seed of CS-UCB-Q on the wireless environment, one round at a time.

    The plain per-seed loop a benchmark times against jfl: its own ``np.random.default_rng(seed)``,
    distances drawn over the annulus [10 m, 500 m] unless given, the order breaking ties (a
    random permutation of the clients unless given), then per round (vectorised over clients)
    availability ~ Bernoulli(α_k), the selection of eq. (28), every client's time from fresh
    fading and speed draws, and the updates of y, z (eqs. 16–17) and D (eq. 27).
    """
    rng = np.random.default_rng(seed)
    if distance is None:
        distance = draw_distance_numpy(rng, K)
    distance = np.broadcast_to(np.asarray(distance, float), (K,)).copy()
    if priority is None:
        priority = rng.permutation(K)
    c = np.broadcast_to(np.asarray(c, float), (K,))
    availability = np.broadcast_to(np.asarray(availability, float), (K,))
    phi_low, phi_high = paper_speed_bounds(K)

    reward_sum = np.zeros(K)
    count = np.zeros(K)
    queue = np.zeros(K)
    out_selected = np.zeros((num_rounds, K), bool)
    out_available = np.zeros((num_rounds, K), bool)
    out_queue = np.zeros((num_rounds, K))
    out_reward = np.zeros((num_rounds, K))
    out_set_reward = np.zeros(num_rounds)
    out_round_time = np.zeros(num_rounds)
    out_failed = np.zeros(num_rounds, int)

    for t in range(1, num_rounds + 1):
        row = t - 1
        draws = rng.random((4, K))
        available = draws[3] < availability
        scores = _cs_ucb_q_scores(reward_sum, count, queue, t, beta)
        b = top_available(scores, available, min(N, int(available.sum())), priority)

        time, failed = client_times_numpy(draws[:3], distance, phi_low, phi_high, tau_max)
        reward = 1.0 - time / tau_max
        reward_sum[b] += reward[b]
        count[b] += 1
        queue = np.maximum(queue + c - b, 0.0)

        out_selected[row] = b
        out_available[row] = available
        out_queue[row] = queue
        out_reward[row] = reward
        if b.any():
            out_set_reward[row] = reward[b].min()
            out_round_time[row] = time[b].max()
        out_failed[row] = int(np.sum(failed & b))

    return WirelessTrace(
        selected=out_selected,
        available=out_available,
        queue=out_queue,
        reward=out_reward,
        set_reward=out_set_reward,
        round_time=out_round_time,
        num_failed=out_failed,
        distance=distance,
        priority=np.asarray(priority),
    )
