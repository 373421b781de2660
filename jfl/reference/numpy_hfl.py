"""NumPy (float64) reference of the ``hfl`` environment (COCS, Qu et al., §III and §VI;
docs/reproductions/cocs.md#the-environment).

Written from the paper and the spec, independently of the JAX code, plainly rather than fast.

Client n and edge server m at distance d (km) with shadowing S (dB, added to the channel gain) and
client bandwidth b (MHz) have the unit-fading SNR

    snr = 10^((P + S − PL − N0)/10),  PL = 128.1 + 37.6 log10(d),  N0 = −174 + 10 log10(b · 10⁶)

(P = 23 dBm, N0 in dBm). With Rayleigh fading g ~ Exp(1), independent for the download (DT) and
the upload (UT), the pair's time is (eq. 5)

    τ = a/(b log2(1 + snr g_DT)) + q/y + a/(b log2(1 + snr g_UT))

and the pair succeeds (X = 1) when it is in coverage and τ ≤ deadline. Given everything but
g_UT, ``X = 1 ⟺ g_UT ≥ (2^{a/(b·slack)} − 1)/snr`` with ``slack = deadline − a/(b c_DT) − q/y``,
so ``P(X = 1) = exp(−(2^{a/(b·slack)} − 1)/snr)`` for ``slack > 0`` and 0 otherwise.

The context-aware probability of COCS §IV-A, ``p(φ) = E[X | φ]`` for the context φ = (download
rate r = b·c_DT, y) (or (r, y, b, d)), is ``context_success_probability_numpy``: a likelihood-
weighted mean of that probability over dense grids of the unobserved variables.

Presets (Table I): MNIST b ~ U[0.3, 1] MHz, y ~ U[2, 4], a = 0.18 Mbit, q = 2.41, deadline 3 s,
budget 3.5; CIFAR-10 b ~ U[2, 4], y ~ U[8, 15], a = 18.7, q = 28.3, deadline 20 s, budget 40.
Both: N = 50, M = 3, prices U[0.5, 2], d ~ U[0.05, 2] km, shadowing 8 dB.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

CHANNEL = {
    "tx_power_dbm": 23.0,
    "noise_psd_dbm_hz": -174.0,
    "path_loss_intercept": 128.1,
    "path_loss_slope": 37.6,
}

PAPER_PRESETS = {
    "mnist": {
        "bandwidth_range": (0.3, 1.0),
        "computation_range": (2.0, 4.0),
        "model_size": 0.18,
        "workload": 2.41,
        "deadline": 3.0,
        "budget": 3.5,
    },
    "cifar": {
        "bandwidth_range": (2.0, 4.0),
        "computation_range": (8.0, 15.0),
        "model_size": 18.7,
        "workload": 28.3,
        "deadline": 20.0,
        "budget": 40.0,
    },
}


class HflDraws(NamedTuple):
    coverage: np.ndarray  # bool[N, M]
    distance: np.ndarray  # f[N, M] km
    shadowing_db: np.ndarray  # f[N, M]
    fading_down: np.ndarray  # f[N, M]
    fading_up: np.ndarray  # f[N, M]
    bandwidth: np.ndarray  # f[N] MHz
    computation: np.ndarray  # f[N]


def snr_numpy(
    distance,
    shadowing_db,
    bandwidth,
    tx_power_dbm=23.0,
    noise_psd_dbm_hz=-174.0,
    path_loss_intercept=128.1,
    path_loss_slope=37.6,
):
    """Unit-fading SNR (linear); ``bandwidth`` in MHz must broadcast against ``distance``."""
    path_loss_db = path_loss_intercept + path_loss_slope * np.log10(np.asarray(distance, float))
    noise_dbm = noise_psd_dbm_hz + 10.0 * np.log10(np.asarray(bandwidth, float) * 1e6)
    return 10.0 ** (
        (tx_power_dbm + np.asarray(shadowing_db, float) - path_loss_db - noise_dbm) / 10
    )


def pair_times_numpy(
    distance,
    shadowing_db,
    fading_down,
    fading_up,
    bandwidth,
    computation,
    model_size,
    workload,
    **channel,
):
    """τ [..., N, M] of every pair (coverage ignored); ``bandwidth``, ``computation`` [..., N]."""
    b = np.asarray(bandwidth, float)[..., None]
    y = np.asarray(computation, float)[..., None]
    snr = snr_numpy(distance, shadowing_db, b, **channel)
    download = model_size / (b * np.log2(1.0 + snr * np.asarray(fading_down, float)))
    upload = model_size / (b * np.log2(1.0 + snr * np.asarray(fading_up, float)))
    return download + workload / y + upload


def success_numpy(draws: HflDraws, model_size, workload, deadline, **channel):
    """X [N, M]: in coverage and τ ≤ deadline."""
    times = pair_times_numpy(*draws[1:], model_size, workload, **channel)
    return draws.coverage & (times <= deadline)


def success_probability_numpy(draws: HflDraws, model_size, workload, deadline, **channel):
    """P(X = 1 | draws except ``fading_up``) [N, M], closed form (0 out of coverage)."""
    b = np.asarray(draws.bandwidth, float)[..., None]
    y = np.asarray(draws.computation, float)[..., None]
    snr = snr_numpy(draws.distance, draws.shadowing_db, b, **channel)
    download = model_size / (b * np.log2(1.0 + snr * draws.fading_down))
    slack = deadline - download - workload / y
    prob = np.zeros(np.shape(slack))
    ok = (slack > 0) & draws.coverage
    needed = model_size / (b * np.where(ok, slack, 1.0))  # c_UT needed, bits/s/Hz
    with np.errstate(over="ignore"):
        prob[ok] = np.exp(-(2.0 ** needed[ok] - 1.0) / snr[ok])
    return prob


def download_rate_numpy(draws: HflDraws, **channel):
    """b · log2(1 + snr g_DT) in Mbit/s, [N, M]."""
    b = np.asarray(draws.bandwidth, float)[..., None]
    snr = snr_numpy(draws.distance, draws.shadowing_db, b, **channel)
    return b * np.log2(1.0 + snr * draws.fading_down)


def hfl_numpy_draws(
    rng: np.random.Generator,
    num_clients: int,
    num_servers: int,
    *,
    p_cover: float = 1.0,
    distance_range=(0.05, 2.0),
    shadowing_std_db: float = 8.0,
    bandwidth_range=(0.3, 1.0),
    computation_range=(2.0, 4.0),
    num_rounds: int | None = None,
) -> HflDraws:
    """One round's conditions sampled with NumPy's own generators (with ``num_rounds``, that many
    independent rounds along a leading axis)."""
    lead = () if num_rounds is None else (num_rounds,)
    shape = (*lead, num_clients, num_servers)
    return HflDraws(
        coverage=rng.random(shape) < p_cover,
        distance=rng.uniform(*distance_range, shape),
        shadowing_db=rng.normal(0.0, shadowing_std_db, shape),
        fading_down=rng.exponential(1.0, shape),
        fading_up=rng.exponential(1.0, shape),
        bandwidth=rng.uniform(*bandwidth_range, (*lead, num_clients)),
        computation=rng.uniform(*computation_range, (*lead, num_clients)),
    )


def hfl_numpy_prices(rng: np.random.Generator, num_clients: int, price_range=(0.5, 2.0)):
    """Per-client prices p_n ~ U[p_lo, p_hi], drawn once per run; cost c_n = p_n · y_n."""
    return rng.uniform(*price_range, num_clients)


def round_feedback_numpy(action, times, coverage, deadline):
    """Feedback of one round for ``action`` bool[N, M] (at most one ES per client).

    Returns a dict: ``success`` (X of the selected pairs), ``time`` [N] (τ on the selected ES, 0
    if unselected, +inf for a pair out of coverage), ``round_time`` (max of min(τ, deadline) over
    the selected pairs, 0 if none), ``utility`` ((1/M) Σ X) and ``num_success``.
    """
    action = np.asarray(action, bool)
    times = np.where(coverage, np.asarray(times, float), np.inf)
    success = action & (times <= deadline)
    num_servers = action.shape[1]
    time = np.zeros(action.shape[0])
    round_time = 0.0
    for n in range(action.shape[0]):
        for m in range(num_servers):
            if action[n, m]:
                time[n] = max(time[n], times[n, m])
                round_time = max(round_time, min(times[n, m], deadline))
    return {
        "success": success,
        "time": time,
        "round_time": round_time,
        "utility": success.sum() / num_servers,
        "num_success": int(success.sum()),
    }


def _log_gain_density_numpy(gain_db, distance_range, shadowing_std_db, path_loss):
    """ln of the density of the pair's gain ``G = S − PL(d)`` (dB), d ~ U[d_lo, d_hi] km,
    S ~ N(0, σ²): the trapezoid rule over ln d (4001 points) of ``φ_σ(G + PL(d)) / (d_hi − d_lo)``
    (the Jacobian ``dd = d · d ln d`` included)."""
    d_lo, d_hi = distance_range
    log_d = np.linspace(np.log(d_lo), np.log(d_hi), 4001)
    d = np.exp(log_d)
    pl = path_loss[0] + path_loss[1] * np.log10(d)
    z = (np.asarray(gain_db, float)[:, None] + pl[None, :]) / shadowing_std_db
    density = np.exp(-0.5 * z**2) / (shadowing_std_db * np.sqrt(2 * np.pi)) * d / (d_hi - d_lo)
    with np.errstate(divide="ignore"):
        return np.log(np.trapezoid(density, log_d, axis=1))


def context_success_probability_numpy(
    rate,
    computation,
    model_size,
    workload,
    deadline,
    *,
    bandwidth_range,
    distance_range,
    shadowing_std_db,
    bandwidth=None,
    distance=None,
    tx_power_dbm=23.0,
    noise_psd_dbm_hz=-174.0,
    path_loss_intercept=128.1,
    path_loss_slope=37.6,
):
    """``p(φ) = E[X | φ]`` (COCS §IV-A) of each context, by quadrature on dense grids.

    ``rate`` (download rate b·c_DT, Mbit/s) and ``computation`` (y) are 1-D arrays of contexts.
    Without ``bandwidth`` and ``distance`` (context dimension 2) the bandwidth b ~ U[b_lo, b_hi],
    the distance d and the shadowing S are unobserved; with them (dimension 4) only S is.

    Given b and the unit-fading SNR ``snr`` (a function of b, d, S), the download fading is
    ``g_DT = (2^{r/b} − 1)/snr`` with Exp(1) density, so the likelihood of r is
    ``exp(−g_DT) · (ln 2 / b) · 2^{r/b} / snr``; the uplink succeeds with probability
    ``exp(−(2^{a/(b·s)} − 1)/snr)`` for the slack ``s = deadline − a/r − q/y > 0`` (0 otherwise).
    p is the likelihood-weighted mean of that probability over the prior of the unobserved
    variables: on a 301-point bandwidth grid × a 0.1 dB grid of the gain ``G = S − PL(d)`` (its
    density from ``_log_gain_density_numpy``) for dimension 2, on a 0.02σ grid of S for 4.
    """
    rate = np.asarray(rate, float)
    computation = np.asarray(computation, float)
    slack = deadline - model_size / rate - workload / computation
    out = np.zeros(rate.shape)
    channel_db = tx_power_dbm - noise_psd_dbm_hz - 60.0  # snr = 10^((channel_db + G)/10) / b
    if bandwidth is None:
        b_lo, b_hi = bandwidth_range
        b = np.linspace(b_lo, b_hi, 301)[:, None]
        log_trapezoid = np.log(np.r_[0.5, np.ones(299), 0.5])[:, None]  # weights over b
        pl_lo = path_loss_intercept + path_loss_slope * np.log10(distance_range[0])
        pl_hi = path_loss_intercept + path_loss_slope * np.log10(distance_range[1])
        spread = 8.0 * shadowing_std_db
        gain = np.arange(-max(pl_lo, pl_hi) - spread, -min(pl_lo, pl_hi) + spread, 0.1)
        log_prior = (
            _log_gain_density_numpy(
                gain, distance_range, shadowing_std_db, (path_loss_intercept, path_loss_slope)
            )[None, :]
            + log_trapezoid
        )
        inverse_snr = b * 10.0 ** (-(channel_db + gain[None, :]) / 10)
    for k in np.flatnonzero(slack > 0):
        if bandwidth is not None:
            b = np.asarray(bandwidth, float)[k]
            pl = path_loss_intercept + path_loss_slope * np.log10(distance[k])
            s = np.linspace(-8.0, 8.0, 801) * shadowing_std_db
            log_prior = -0.5 * (s / shadowing_std_db) ** 2
            inverse_snr = b * 10.0 ** (-(channel_db + s - pl) / 10)
        with np.errstate(over="ignore"):
            g_down = np.expm1(rate[k] * np.log(2) / b) * inverse_snr
            need = np.expm1(model_size / (b * slack[k]) * np.log(2)) * inverse_snr
        # ln of prior × likelihood (the constant ln ln 2 dropped)
        log_weight = log_prior - g_down + rate[k] * np.log(2) / b - np.log(b) + np.log(inverse_snr)
        weight = np.exp(log_weight - log_weight.max())
        out[k] = np.sum(weight * np.exp(-need)) / np.sum(weight)
    return out
