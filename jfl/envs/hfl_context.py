"""The COCS Oracle's context-aware success probability ``p(φ) = E[X | φ]`` of the ``hfl``
environment (Qu et al. §IV-A; docs/reproductions/cocs.md#the-environment).

``p(φ)`` integrates out everything the context is not computed from (``context_table``
derives it). Given the slack ``s = deadline − a/r − q/y`` it depends on the download rate r and
the upload rate ``w = a/s`` the pair needs only, so it is tabulated once per channel setting
(``ContextTable``, built by ``context_table`` and cached; independent of the deadline, which may
then be traced) and ``success_probability_context`` interpolates it: two logarithms, a sigmoid
and four table reads a pair.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jfl.envs import channel

# Tabulation of the context-aware probability p(φ) (``context_table``). The errors these sizes
# leave are measured against the quadrature of ``jfl.reference.numpy_hfl`` in the tests.
TABLE_TAIL_SIGMAS = 7.0  # shadowing kept to ±7σ
TABLE_GAIN_STEP_DB = 0.5  # D = 2: bins of the pair's gain G = S − PL(d)
TABLE_X_POINTS = 2048  # D = 2: points of the ln H(x) grid
TABLE_RATE_POINTS = 256  # D = 2: points per rate axis of the p table
TABLE_BANDWIDTH_NODES = 48  # D = 2: Gauss–Legendre nodes over the bandwidth
TABLE_SHADOWING_POINTS = 561  # D = 4: shadowing nodes over ±7σ
TABLE_Z_POINTS = 4096  # D = 4: points of the ln J(z) grid
_LN2, _LN10 = math.log(2.0), math.log(10.0)


@struct.dataclass
class ContextTable:
    """The context-aware success probability ``p(φ) = E[X | φ]`` tabulated by ``make_params``.

    ``context_dim = 2`` (``φ`` = download rate r, computation y): ``values`` f[n, n] holds
    ``logit p(r, w)``, where ``w = a / slack`` is the upload rate the pair needs, on the grid
    ``ζ_k = start + k·step`` of ``ζ(rate) = ln(2^{rate/rate_unit} − 1)`` for both r (rows) and w
    (columns); ``p`` is increasing along the rows and decreasing along the columns.

    ``context_dim = 4`` (also the bandwidth b and the distance d): ``values`` f[n] holds
    ``ln J(z)``, ``J(z) = E_S[ε e^{−z ε}]`` with ``ε = 10^{−S/10}``, on the grid
    ``ln z_k = start + k·step`` (``rate_unit`` unused).

    The table depends on the bandwidth and distance ranges and the channel (shadowing, power,
    noise, path loss) only: not on the model size, workload, computation, deadline or budget,
    which may be replaced or traced freely.
    """

    values: jax.Array
    start: float
    step: float
    rate_unit: float
    context_dim: int = struct.field(pytree_node=False, default=2)

    def __eq__(self, other):  # by value (the generated __eq__ would compare arrays)
        if not isinstance(other, ContextTable):
            return NotImplemented
        return (
            self.context_dim == other.context_dim
            and (self.start, self.step, self.rate_unit)
            == (other.start, other.step, other.rate_unit)
            and np.array_equal(np.asarray(self.values), np.asarray(other.values))
        )

    def __hash__(self):  # consistent with __eq__ (the grid determines the table's setting)
        return hash((self.context_dim, self.start, self.step, self.rate_unit))


def _special():
    import scipy.special  # imported where a scenario is drawn, not with jfl

    return scipy.special


def _log_expm1(x):
    """ln(e^x − 1) for x > 0, without overflow (NumPy or JAX arrays)."""
    xp = jnp if isinstance(x, jax.Array) else np
    return x + xp.log(-xp.expm1(-x))


def _shadowing_nodes(sigma: float, count: int):
    """Nodes (dB) and probability masses of S ~ N(0, σ²) over ±7σ (one node when σ = 0)."""
    if sigma == 0:
        return np.zeros(1), np.ones(1)
    edges = np.linspace(-TABLE_TAIL_SIGMAS, TABLE_TAIL_SIGMAS, count + 1)
    mass = np.diff(_special().ndtr(edges))
    return sigma * (edges[:-1] + edges[1:]) / 2, mass / mass.sum()


def _log_inverse_snr_nodes(distance_range, shadowing_std_db, channel_db, path_loss):
    """Nodes of ``ln μ``, ``μ = 1/(snr·b)`` (b in MHz), and their log probability masses, for
    d ~ U[d_lo, d_hi] and S ~ N(0, σ²): the gain ``G = S − PL(d)`` binned to 0.5 dB."""
    d_lo, d_hi = distance_range
    if d_hi > d_lo:  # 600 cells uniform in ln d: steps of < 0.2 dB of path loss
        edges = np.geomspace(d_lo, d_hi, 601)
        d, d_mass = np.sqrt(edges[:-1] * edges[1:]), np.diff(edges) / (d_hi - d_lo)
    else:
        d, d_mass = np.array([d_lo]), np.ones(1)
    s, s_mass = _shadowing_nodes(shadowing_std_db, 225)
    gain = (s[None, :] - (path_loss[0] + path_loss[1] * np.log10(d))[:, None]).ravel()
    mass = (d_mass[:, None] * s_mass[None, :]).ravel()
    bins = np.round((gain - gain.min()) / TABLE_GAIN_STEP_DB).astype(np.int64)
    mass = np.bincount(bins, mass)
    keep = mass > 0
    gain = gain.min() + TABLE_GAIN_STEP_DB * np.flatnonzero(keep)
    return -(channel_db + gain) * _LN10 / 10, np.log(mass[keep])


def _rate_table(bandwidth_range, distance_range, shadowing_std_db, channel_db, path_loss):
    """``(logit p, start, step, rate_unit)`` of ``ContextTable`` for ``context_dim = 2``."""
    log_mu, log_mass = _log_inverse_snr_nodes(
        distance_range, shadowing_std_db, channel_db, path_loss
    )
    # ln H(x), H(x) = E_G[μ e^{−μ x}]: the density of the download rate r, given b, is
    # ln 2 · 2^{r/b} · H(b (2^{r/b} − 1)) once the gain is integrated out.
    lx = np.linspace(-log_mu.max() - 10, -log_mu.min() + 10, TABLE_X_POINTS)
    log_h = _special().logsumexp(
        (log_mass + log_mu)[None, :] - np.exp(log_mu[None, :] + lx[:, None]), axis=1
    )
    mu_min = math.exp(log_mu.min())

    def interp_log_h(l):  # beyond the grid the smallest μ dominates: ln H falls as −μ_min x
        tail = log_h[-1] - mu_min * (np.exp(np.minimum(l, 600.0)) - math.exp(lx[-1]))
        return np.where(l > lx[-1], tail, np.interp(l, lx, log_h))

    b_lo, b_hi = bandwidth_range
    unit = b_hi
    # ζ = ln(2^{rate/b_hi} − 1) ≈ ln(snr · g) at b = b_hi: from the worst gain and a 1e-4 fade
    # to the best gain and a fade of 50.
    start = -log_mu.max() - math.log(unit) + math.log(1e-4)
    stop = -log_mu.min() - math.log(unit) + math.log(50.0)
    zeta = np.linspace(start, stop, TABLE_RATE_POINTS)
    rate = unit * np.logaddexp(0.0, zeta) / _LN2
    nodes, weights = np.polynomial.legendre.leggauss(TABLE_BANDWIDTH_NODES)
    b = (b_lo + b_hi) / 2 + (b_hi - b_lo) / 2 * nodes
    log_u = _log_expm1(rate[:, None] * _LN2 / b)  # ln(2^{rate/b} − 1), [rate, b]
    base = np.log(weights) + rate[:, None] * _LN2 / b  # [rate, b]
    log_den = _special().logsumexp(base + interp_log_h(np.log(b) + log_u), axis=1)
    log_p = np.empty((TABLE_RATE_POINTS, TABLE_RATE_POINTS))
    for i in range(TABLE_RATE_POINTS):  # row r: P(upload rate ≥ w | download rate r), all w
        log_x = np.log(b) + np.logaddexp(log_u[i], log_u)  # [w, b]
        log_num = _special().logsumexp(base[i] + interp_log_h(log_x), axis=1)
        log_p[i] = np.minimum(log_num - log_den[i], 0.0)
    with np.errstate(divide="ignore"):
        logit = np.clip(log_p - np.log(-np.expm1(log_p)), -30.0, 30.0)
    # Exactly monotone (quadrature noise is ~1e-8): decreasing in w, then increasing in r.
    logit = np.maximum.accumulate(np.minimum.accumulate(logit, axis=1), axis=0)
    return logit, float(zeta[0]), float(zeta[1] - zeta[0]), float(unit)


def _shadowing_table(shadowing_std_db):
    """``(ln J, start, step, 1)`` of ``ContextTable`` for ``context_dim = 4``."""
    s, s_mass = _shadowing_nodes(shadowing_std_db, TABLE_SHADOWING_POINTS)
    log_eps = -s * _LN10 / 10
    lz = np.linspace(-log_eps.max() - 12, -log_eps.min() + 6, TABLE_Z_POINTS)
    log_j = _special().logsumexp(
        (np.log(s_mass) + log_eps)[None, :] - np.exp(log_eps[None, :] + lz[:, None]), axis=1
    )
    return log_j, float(lz[0]), float(lz[1] - lz[0]), 1.0


def context_table(
    context_dim: int,
    bandwidth_range,
    distance_range,
    shadowing_std_db: float,
    tx_power_dbm: float,
    noise_psd_dbm_hz: float,
    path_loss,
    dtype=jnp.float32,
) -> ContextTable:
    """The ``ContextTable`` of p(φ) = E[X | φ] for these parameters (built once, cached).

    Derivation (``success_probability_context`` uses it). With ``μ = 1/(snr·b)`` (b in MHz, a
    function of the gain G = S − PL(d) only), given b and G the download fading is
    ``g_DT = b μ u``, ``u = 2^{r/b} − 1``, so the density of r is
    ``ln 2 · 2^{r/b} · μ e^{−b μ u}``; given also the slack ``s = deadline − a/r − q/y > 0``,
    ``P(X = 1) = e^{−b μ v}``, ``v = 2^{w/b} − 1``, ``w = a/s``. Integrating G:

        p = ∫ 2^{r/b} H(b(u + v)) db / ∫ 2^{r/b} H(b u) db,   H(x) = E_G[μ e^{−μ x}],

    a function of (r, w) only: the deadline and y enter through w. ``H`` is tabulated once
    (the gain binned to 0.5 dB), the b integral is a 48-node Gauss–Legendre rule, and p(r, w)
    is stored as a logit on a 256² grid (bilinear interpolation). With b and d in the context
    (D = 4) only the shadowing is integrated: ``p = J(z(u + v)) / J(z u)``, ``z = 1/snr₀``
    (``snr₀``: the SNR at S = 0), ``J(z) = E_S[ε e^{−z ε}]``, ``ε = 10^{−S/10}``.
    """
    if int(context_dim) == 4:  # the table depends on the shadowing only
        return _context_table(4, (), (), float(shadowing_std_db), 0.0, (), np.dtype(dtype).name)
    return _context_table(
        2,
        tuple(float(v) for v in bandwidth_range),
        tuple(float(v) for v in distance_range),
        float(shadowing_std_db),
        float(tx_power_dbm) - float(noise_psd_dbm_hz) - 60.0,  # P − N0 over 1 MHz, dB
        tuple(float(v) for v in path_loss),
        np.dtype(dtype).name,
    )


@functools.lru_cache(maxsize=16)
def _context_table(
    context_dim, bandwidth_range, distance_range, shadowing_std_db, channel_db, path_loss, dtype
) -> ContextTable:
    if context_dim == 4:
        values, start, step, unit = _shadowing_table(shadowing_std_db)
    else:
        values, start, step, unit = _rate_table(
            bandwidth_range, distance_range, shadowing_std_db, channel_db, path_loss
        )
    with jax.ensure_compile_time_eval():  # a concrete array even when called under a trace
        values = jnp.asarray(values, dtype)
    return ContextTable(
        values=values, start=start, step=step, rate_unit=unit, context_dim=context_dim
    )


def _grid_index(values, start, step, position):
    """``(i, t)``: ``position`` on the grid ``start + k·step`` of ``values``' first axis is
    ``i + t`` with ``0 ≤ t ≤ 1``, clamped to the grid."""
    n = values.shape[0]
    f = jnp.clip((position - start) / step, 0.0, n - 1.0)
    i = jnp.clip(jnp.floor(f), 0, n - 2).astype(jnp.int32)
    return i, f - i


def _log_ratio_from_table(values, start, step, position, shift):
    """``F(position + shift) − F(position)`` for the linear interpolation ``F`` of ``values`` on
    the grid ``start + k·step`` (flat below the grid, extrapolated above it), ``shift ≥ 0``.

    Both points are placed relative to the cell of ``position``, so the difference keeps the
    precision of the small increments instead of that of two large values of ``F``.
    """
    n = values.shape[0]
    f = (position - start) / step
    i = jnp.clip(jnp.floor(f), 0, n - 2)
    local = f - i  # < 0 below the grid, > 1 above it
    t = jnp.maximum(local, 0.0)
    t_shift = jnp.maximum(local + shift / step, 0.0)
    cells = jnp.clip(jnp.floor(t_shift), 0, n - 2 - i)
    i, j = i.astype(jnp.int32), (i + cells).astype(jnp.int32)
    t_shift = t_shift - cells
    within = (
        (values[j] - values[i])
        + t_shift * (values[j + 1] - values[j])
        - t * (values[i + 1] - values[i])
    )
    beyond = shift / step * (values[n - 1] - values[n - 2])  # both on the extrapolated line
    return jnp.where(local > 1, beyond, within)


def success_probability_context(rate, computation, bandwidth, distance, params):
    """The COCS Oracle's ``p(φ) = E[X | φ]`` (§IV-A), f[..., N, M] (coverage not applied).

    ``φ`` is what the context is computed from: the download rate ``rate = b c_DT`` (Mbit/s,
    unclipped) and the computation y (f[..., N]); with ``context_dim = 4`` also the bandwidth
    (f[..., N]) and the distance (f[..., N, M]), which are then conditioned on as well.
    Everything else is integrated out under the environment's distributions: the bandwidth and
    distance (D = 2), the shadowing, the download fading (through its posterior given the rate)
    and the uplink fading. ``p = 0`` when the slack ``deadline − a/rate − q/y ≤ 0``. Read from
    ``params.context_table`` (``params``: the environment's ``jfl.envs.hfl.HflParams``; see
    ``context_table``); the deadline may be traced.
    """
    table = params.context_table
    if table is None:
        raise ValueError("params.context_table is missing: build the parameters with make_params")
    if table.context_dim != params.context_dim:
        raise ValueError(
            f"params.context_table is for context_dim={table.context_dim}, the parameters have "
            f"context_dim={params.context_dim}: rebuild them with make_params (replace does not "
            "rebuild the table)"
        )
    dtype = params.dtype
    rate = jnp.asarray(rate, dtype)
    slack = params.deadline - params.model_size / rate - params.workload / computation[..., None]
    positive = slack > 0
    need = params.model_size / jnp.where(positive, slack, 1.0)  # w: the upload rate needed
    values = table.values.astype(dtype)
    if table.context_dim == 2:  # logit p(r, w), bilinear on the grid of ζ(r) × ζ(w)

        def zeta(x):
            return _log_expm1(x * (_LN2 / table.rate_unit))

        i, ti = _grid_index(values, table.start, table.step, zeta(rate))
        j, tj = _grid_index(values, table.start, table.step, zeta(need))
        low = values[i, j] + tj * (values[i, j + 1] - values[i, j])
        high = values[i + 1, j] + tj * (values[i + 1, j + 1] - values[i + 1, j])
        prob = jax.nn.sigmoid(low + ti * (high - low))
    else:  # p = J(z (u + v)) / J(z u): ln J read at ln(z u) and ln(z u) + ln((u + v)/u)
        b = bandwidth[..., None]
        path_loss = channel.path_loss_db(
            distance, params.path_loss_intercept, params.path_loss_slope
        )
        noise = channel.noise_dbm(params.noise_psd_dbm_hz, b * 1e6)
        log_snr0 = (params.tx_power_dbm - path_loss - noise) * (_LN10 / 10)  # z = 1/snr₀
        log_u = _log_expm1(rate * _LN2 / b)
        log_v = _log_expm1(need * _LN2 / b)
        shift = jnp.minimum(jnp.logaddexp(0.0, log_v - log_u), 1e30)  # ln((u + v)/u)
        log_ratio = _log_ratio_from_table(values, table.start, table.step, log_u - log_snr0, shift)
        prob = jnp.exp(jnp.minimum(log_ratio, 0.0))
    return jnp.where(positive, prob, 0.0).astype(dtype)
