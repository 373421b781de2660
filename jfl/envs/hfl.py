"""Hierarchical FL with edge servers: the environment of COCS §III and §VI
(docs/reproductions/cocs.md#the-environment).

N clients, M edge servers (ES). Each round, client–ES pair (n, m) is in coverage with probability
``p_cover`` at a distance ``d ~ U[d_lo, d_hi]`` km (redrawn every round: mobility). Its channel has
path loss ``PL[dB] = 128.1 + 37.6 log10(d / 1 km)``, log-normal shadowing ``S ~ N(0, σ_S² dB²)``
(added to the gain in dB and shared by both directions of the pair) and Rayleigh fading
``|h|² ~ Exp(1)`` drawn independently for the download (DT) and the upload (UT). With transmit power
``P`` (dBm) and the noise over the client's bandwidth ``b`` (MHz),
``N0[dBm] = −174 + 10 log10(b · 10⁶)``, the unit-fading SNR and the spectral efficiencies are

    snr = 10^((P + S − PL − N0)/10),   c_DT = log2(1 + snr g_DT),   c_UT = log2(1 + snr g_UT)

and the time of the pair is (eq. 5, model size ``a`` Mbit both ways, workload ``q``, computation
``y``)

    τ = a/(b c_DT) + q/y + a/(b c_UT)   seconds,   X = 1[τ ≤ deadline]  (eq. 6).

Each round, per client: ``b ~ U[b_lo, b_hi]`` MHz and ``y ~ U[y_lo, y_hi]``. Per run, per client:
price ``p ~ U[p_lo, p_hi]``; the cost of client n is ``c_n = p_n y_n`` (§III-B) and every ES has the
budget B (9b). Selecting a set ``s`` (at most one ES per client, pairs in coverage) earns the
strongly convex utility ``μ = (1/M) Σ_m Σ_{n∈s_m} X_{n,m}`` (eq. 8); X is revealed only for the
selected pairs.

Observation (before the selection): coverage, the context ``φ`` of each pair
(docs/decisions.md#cocs-context: download
rate ``b c_DT`` and ``y``, min-max scaled to [0, 1] with fixed bounds, see ``make_params``;
``context_dim = 4`` adds the bandwidth and the distance), the costs, the budgets and three
fields of oracle information, which a learning policy must not read:

* ``success_prob = P(X = 1 | everything but the uplink fading)`` in closed form:
  ``τ ≤ deadline ⟺ c_UT ≥ a/(b·slack)``, ``slack = deadline − a/(b c_DT) − q/y``, so
  ``P = exp(−(2^{a/(b·slack)} − 1)/snr)`` when ``slack > 0`` and 0 otherwise (the state-aware
  oracle);
* ``success_now``: this round's realised X of every pair, the uplink fading included, False out
  of coverage: what the step reports for a selected pair. §VI-B's Oracle "knows precisely
  whether one client can be received by the corresponding ES before the deadline";
* ``success_prob_context = p(φ) = E[X | φ]``, the probability the Oracle of §IV-A knows: given
  only what the context is computed from (the unclipped download rate r and y; with
  ``context_dim = 4`` also b and d, conditioned on as well), with the bandwidth, distance,
  shadowing and both fadings integrated out, the download fading through its posterior given r.
  Given the slack ``s = deadline − a/r − q/y`` it depends on (r, w = a/s) only, so
  ``make_params`` tabulates it once per channel setting (``context_table``: a 256² logit table
  over the two rates, independent of the deadline, which may then be traced per configuration)
  and the observation interpolates it (two logarithms, a sigmoid and four table reads a pair).

Every field is computed in ``observation``, but what no policy reads is dead code that XLA
drops from a compiled run (the runner's scan carries the observation, and JAX prunes the carry
elements nobody uses): a run pays only for the oracle fields its policy reads.

Gymnax style: the environment object is stateless; ``params`` and ``state`` are pytrees. The state
holds the current round's conditions, the uplink fading included (unobserved by policies).
"""

from __future__ import annotations

import functools
import math
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jfl.checks import in_range
from jfl.envs import channel
from jfl.envs.base import Environment, Metric
from jfl.stats import NONNEGATIVE

# Table I and §VI-A of the paper (MNIST: logistic regression, strongly convex utility; CIFAR-10:
# CNN, non-convex utility). Notes on the paper's text:
# * Table I gives the workload q in "Mbytes" and §VI-A the computation y in "MHz"; the units do
#   not make q/y seconds. We use the numbers as given
#   (docs/decisions.md#cocs-units): q/y is the computation time
#   in seconds (0.6–1.2 s for MNIST, 1.9–3.5 s for CIFAR-10).
# * Table I's pricing "U[0.5, 2] per MHz" is the per-client price p_n of one unit of y.
# * §VI-A draws the distance from U[0, 2] km; we start at 0.05 km
#   (docs/decisions.md#cocs-distance) since the path-loss
#   model diverges at d = 0.
# * Table I says D = 4; §IV uses the 2-D context (download rate, y). D = 2 by default
#   (docs/decisions.md#cocs-context),
#   D = 4 (adding bandwidth and distance) as an option.
# * The shadowing (8 dB) and the noise PSD (−174 dBm/Hz) are not in the paper;
#   docs/decisions.md#cocs-channel.
PRESETS = {
    "mnist": {
        "num_clients": 50,
        "num_servers": 3,
        "bandwidth_range": (0.3, 1.0),  # MHz
        "computation_range": (2.0, 4.0),
        "model_size": 0.18,  # Mbit
        "workload": 2.41,
        "deadline": 3.0,  # s
        "budget": 3.5,
    },
    "cifar": {
        "num_clients": 50,
        "num_servers": 3,
        "bandwidth_range": (2.0, 4.0),
        "computation_range": (8.0, 15.0),
        "model_size": 18.7,
        "workload": 28.3,
        "deadline": 20.0,
        "budget": 40.0,
    },
}

# The download-rate context is scaled over [0, RATE_CONTEXT_SPAN · a / deadline] (see
# ``default_rate_range``).
RATE_CONTEXT_SPAN = 20.0

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


@struct.dataclass
class HflParams:
    num_clients: int = struct.field(pytree_node=False, default=50)  # N
    num_servers: int = struct.field(pytree_node=False, default=3)  # M
    context_dim: int = struct.field(pytree_node=False, default=2)  # D ∈ {2, 4}
    dtype: str = struct.field(pytree_node=False, default="float32")
    price_low: float = 0.5  # p_n ~ U[price_low, price_high], per unit of y, drawn once per run
    price_high: float = 2.0
    p_cover: float = 1.0  # P(pair in coverage), per pair and round
    distance_low: float = 0.05  # km
    distance_high: float = 2.0
    shadowing_std_db: float = 8.0
    tx_power_dbm: float = 23.0
    noise_psd_dbm_hz: float = -174.0
    path_loss_intercept: float = 128.1  # dB at 1 km
    path_loss_slope: float = 37.6  # dB per decade of distance
    bandwidth_low: float = 0.3  # MHz
    bandwidth_high: float = 1.0
    computation_low: float = 2.0  # y
    computation_high: float = 4.0
    model_size: float = 0.18  # a, Mbit, both ways
    workload: float = 2.41  # q
    deadline: float = 3.0  # s
    budget: float | jax.Array = 3.5  # B per ES: a scalar or f[M]
    rate_low: float = 0.0  # Mbit/s: download rate scaled to 0 in the context
    rate_high: float = 30.0  # Mbit/s: scaled to 1 (make_params derives both)
    # p(φ) of ``success_probability_context``, tabulated by make_params (None: not built).
    context_table: ContextTable | None = None


@struct.dataclass
class HflState:
    price: jax.Array  # f[N]  p_n, fixed for the run
    coverage: jax.Array  # bool[N, M]  pair in coverage this round
    distance: jax.Array  # f[N, M]  km
    shadowing_db: jax.Array  # f[N, M]  S, shared by the two directions
    fading_down: jax.Array  # f[N, M]  g_DT ~ Exp(1)
    fading_up: jax.Array  # f[N, M]  g_UT ~ Exp(1), unobserved
    bandwidth: jax.Array  # f[N]  b, MHz
    computation: jax.Array  # f[N]  y
    t: jax.Array  # i[]  round index, 0-based


class Observation(NamedTuple):
    available: jax.Array  # bool[N, M]  pair in coverage
    context: jax.Array  # f[N, M, D]  φ in [0, 1]^D (0 for pairs out of coverage)
    cost: jax.Array  # f[N]  c_n = p_n · y_n
    budget: jax.Array  # f[M]  B per ES
    success_prob: jax.Array  # f[N, M]  oracle P(X = 1 | observed, shadowing); 0 out of coverage
    # The two oracles of COCS (defaults only for observations built by hand):
    success_now: jax.Array | None = None  # bool[N, M]  this round's X of every pair (§VI-B)
    success_prob_context: jax.Array | None = None  # f[N, M]  p(φ) = E[X | φ] (§IV-A)


class Feedback(NamedTuple):
    success: jax.Array  # bool[N, M]  X for the selected pairs, False elsewhere
    time: jax.Array  # f[N]  τ on the client's selected ES, 0 if unselected
    round_time: jax.Array  # f[]  max over the selected pairs of min(τ, deadline), 0 if none
    utility: jax.Array  # f[]  (1/M) Σ_selected X (eq. 8)
    num_success: jax.Array  # i[]  Σ_selected X


class Conditions(NamedTuple):
    coverage: jax.Array  # bool[N, M]
    distance: jax.Array  # f[N, M]
    shadowing_db: jax.Array  # f[N, M]
    fading_down: jax.Array  # f[N, M]
    fading_up: jax.Array  # f[N, M]
    bandwidth: jax.Array  # f[N]
    computation: jax.Array  # f[N]


def _range(name, value):
    low, high = (float(v) for v in value)
    in_range(f"{name}[0]", low, 0, np.inf, low_open=True, high_open=True)
    in_range(f"{name}[1]", high, low, np.inf, high_open=True)
    return low, high


def default_rate_range(model_size: float, deadline: float) -> tuple[float, float]:
    """Scaling bounds (Mbit/s) of the download-rate context: [0, 20·a / deadline].

    The whole range of the rate b·log2(1 + snr·g) spans several decades (≈ 0 to 30 Mbit/s in the
    MNIST setting) while success is decided in its lowest part: a pair whose download takes
    under 1/20 of the deadline almost always succeeds. Min-max scaling over the whole range
    would put ~85% of the pairs, and all the variation in success, into the lowest of h_T = 5
    cubes; scaling over [0, 20·a/deadline] (1.2 Mbit/s for MNIST, 18.7 for CIFAR-10) spreads the
    informative rates over the cubes and clips the fast pairs into the top one.
    """
    return 0.0, RATE_CONTEXT_SPAN * model_size / deadline


def make_params(
    num_clients: int = 50,
    num_servers: int = 3,
    *,
    price_range=(0.5, 2.0),
    p_cover: float = 1.0,
    distance_range=(0.05, 2.0),
    shadowing_std_db: float = 8.0,
    tx_power_dbm: float = 23.0,
    noise_psd_dbm_hz: float = -174.0,
    path_loss=(128.1, 37.6),
    bandwidth_range=(0.3, 1.0),
    computation_range=(2.0, 4.0),
    model_size: float = 0.18,
    workload: float = 2.41,
    deadline: float = 3.0,
    budget=3.5,
    context_dim: int = 2,
    rate_range=None,
    dtype=jnp.float32,
) -> HflParams:
    """Validated parameters; defaults are the paper's MNIST setting (the ``mnist`` preset).

    ``budget`` takes a scalar or one value per ES. ``rate_range`` (Mbit/s) sets the bounds of the
    download-rate context explicitly; by default ``default_rate_range`` derives them from the
    model size and the deadline. Two things derived here are stored in the parameters and do not
    follow a later ``replace`` of what they derive from (rebuild with ``make_params`` instead):
    those bounds, and the ``context_table`` of p(φ), built from the bandwidth and distance
    ranges, the shadowing and the channel (``context_table``; cached, well under a second). The
    deadline, budget, model size, workload, prices and ``p_cover`` may be replaced or traced
    freely. ``dtype`` sets the precision of everything the environment computes (float64 needs
    x64).
    """
    if not isinstance(num_clients, int | np.integer) or num_clients < 1:
        raise ValueError(f"num_clients must be an integer >= 1, got {num_clients!r}")
    if not isinstance(num_servers, int | np.integer) or not 1 <= num_servers <= num_clients:
        raise ValueError(f"num_servers must be in [1, N] = [1, {num_clients}], got {num_servers!r}")
    if context_dim not in (2, 4):
        raise ValueError(f"context_dim must be 2 or 4, got {context_dim!r}")
    price_range = _range("price_range", price_range)
    in_range("p_cover", p_cover, 0, 1)
    distance_range = _range("distance_range", distance_range)
    in_range("shadowing_std_db", shadowing_std_db, 0, np.inf, high_open=True)
    in_range("tx_power_dbm", tx_power_dbm, -np.inf, np.inf, low_open=True, high_open=True)
    in_range("noise_psd_dbm_hz", noise_psd_dbm_hz, -np.inf, np.inf, low_open=True, high_open=True)
    in_range(
        "path_loss", np.asarray(path_loss, float), -np.inf, np.inf, low_open=True, high_open=True
    )
    bandwidth_range = _range("bandwidth_range", bandwidth_range)
    computation_range = _range("computation_range", computation_range)
    in_range("model_size", model_size, 0, np.inf, low_open=True, high_open=True)
    in_range("workload", workload, 0, np.inf, high_open=True)
    in_range("deadline", deadline, 0, np.inf, low_open=True, high_open=True)
    budget_array = np.asarray(budget, float)
    if budget_array.ndim > 1 or (budget_array.ndim == 1 and budget_array.shape != (num_servers,)):
        raise ValueError(
            f"budget must be a scalar or of shape ({num_servers},), got {budget_array.shape}"
        )
    in_range("budget", budget_array, 0, np.inf, low_open=True, high_open=True)
    dtype = np.dtype(dtype).name
    budget = float(budget_array) if budget_array.ndim == 0 else jnp.asarray(budget_array, dtype)
    if rate_range is None:
        rate_range = default_rate_range(model_size, deadline)
    else:
        low, high = (float(v) for v in rate_range)
        in_range("rate_range[0]", low, 0, np.inf, high_open=True)
        in_range("rate_range[1]", high, low, np.inf, low_open=True, high_open=True)
        rate_range = (low, high)
    return HflParams(
        num_clients=int(num_clients),
        num_servers=int(num_servers),
        context_dim=int(context_dim),
        dtype=dtype,
        price_low=price_range[0],
        price_high=price_range[1],
        p_cover=float(p_cover),
        distance_low=distance_range[0],
        distance_high=distance_range[1],
        shadowing_std_db=float(shadowing_std_db),
        tx_power_dbm=float(tx_power_dbm),
        noise_psd_dbm_hz=float(noise_psd_dbm_hz),
        path_loss_intercept=float(path_loss[0]),
        path_loss_slope=float(path_loss[1]),
        bandwidth_low=bandwidth_range[0],
        bandwidth_high=bandwidth_range[1],
        computation_low=computation_range[0],
        computation_high=computation_range[1],
        model_size=float(model_size),
        workload=float(workload),
        deadline=float(deadline),
        budget=budget,
        rate_low=float(rate_range[0]),
        rate_high=float(rate_range[1]),
        context_table=context_table(
            context_dim,
            bandwidth_range,
            distance_range,
            shadowing_std_db,
            tx_power_dbm,
            noise_psd_dbm_hz,
            path_loss,
            dtype,
        ),
    )


def preset_params(name: str, **overrides) -> HflParams:
    """``make_params`` with a preset's values (``mnist`` or ``cifar``), then ``overrides``."""
    if name not in PRESETS:
        raise ValueError(f"unknown hfl preset {name!r}; choose from {sorted(PRESETS)}")
    return make_params(**{**PRESETS[name], **overrides})


def mean_snr(distance, shadowing_db, bandwidth, params: HflParams):
    """Unit-fading SNR (linear) of pairs at ``distance`` km, shadowing dB, bandwidth MHz."""
    path_loss = channel.path_loss_db(distance, params.path_loss_intercept, params.path_loss_slope)
    noise = channel.noise_dbm(params.noise_psd_dbm_hz, bandwidth * 1e6)
    return channel.unit_snr(params.tx_power_dbm, path_loss, noise, shadowing_db)


def download_rate(distance, shadowing_db, fading_down, bandwidth, params: HflParams):
    """``b c_DT`` in Mbit/s, f[..., N, M] (``bandwidth`` f[..., N])."""
    b = bandwidth[..., None]
    return b * channel.spectral_efficiency(mean_snr(distance, shadowing_db, b, params), fading_down)


def pair_times(
    distance, shadowing_db, fading_down, fading_up, bandwidth, computation, params: HflParams
):
    """τ = a/(b c_DT) + q/y + a/(b c_UT) (eq. 5) of every pair, f[..., N, M].

    Per-pair inputs f[..., N, M]; ``bandwidth`` (MHz) and ``computation`` f[..., N]. Coverage is
    not applied here (see ``HflEnv.step``).
    """
    b, y = bandwidth[..., None], computation[..., None]
    snr = mean_snr(distance, shadowing_db, b, params)
    a = params.model_size
    down = a / (b * channel.spectral_efficiency(snr, fading_down))
    up = a / (b * channel.spectral_efficiency(snr, fading_up))
    return down + params.workload / y + up


def success_probability(state: HflState, params: HflParams):
    """Oracle ``P(X = 1)`` of every pair given the state but the uplink fading, f[N, M].

    ``P = exp(−(2^{a/(b·slack)} − 1)/snr)`` with ``slack = deadline − a/(b c_DT) − q/y``; 0 when
    ``slack ≤ 0`` or the pair is out of coverage.
    """
    b, y = state.bandwidth[..., None], state.computation[..., None]
    snr = mean_snr(state.distance, state.shadowing_db, b, params)
    a = params.model_size
    down = a / (b * channel.spectral_efficiency(snr, state.fading_down))
    slack = params.deadline - down - params.workload / y
    positive = slack > 0
    threshold = a / (b * jnp.where(positive, slack, 1.0))  # c_UT needed
    prob = jnp.exp(-jnp.expm1(threshold * math.log(2.0)) / snr)
    return jnp.where(positive & state.coverage, prob, 0.0).astype(params.dtype)


def round_times(state: HflState, params: HflParams):
    """τ of every pair this round (eq. 5), f[N, M]; +inf out of coverage (never arrives)."""
    tau = pair_times(
        state.distance,
        state.shadowing_db,
        state.fading_down,
        state.fading_up,
        state.bandwidth,
        state.computation,
        params,
    )
    return jnp.where(state.coverage, tau, jnp.inf)


def success_now(state: HflState, params: HflParams):
    """This round's realised ``X`` of every pair, bool[N, M]: in coverage and ``τ ≤ deadline``,
    the uplink fading included; what ``step`` reports as ``success`` for a selected pair."""
    return round_times(state, params) <= params.deadline


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


def success_probability_context(rate, computation, bandwidth, distance, params: HflParams):
    """The COCS Oracle's ``p(φ) = E[X | φ]`` (§IV-A), f[..., N, M] (coverage not applied).

    ``φ`` is what the context is computed from: the download rate ``rate = b c_DT`` (Mbit/s,
    unclipped) and the computation y (f[..., N]); with ``context_dim = 4`` also the bandwidth
    (f[..., N]) and the distance (f[..., N, M]), which are then conditioned on as well.
    Everything else is integrated out under the environment's distributions: the bandwidth and
    distance (D = 2), the shadowing, the download fading (through its posterior given the rate)
    and the uplink fading. ``p = 0`` when the slack ``deadline − a/rate − q/y ≤ 0``. Read from
    ``params.context_table`` (see ``context_table``); the deadline may be traced.
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


def scale_context(rate, computation, bandwidth, distance, params: HflParams):
    """Min-max scaled context f[..., N, M, D], clipped to [0, 1].

    Columns: download rate (``rate_low``..``rate_high``), computation y (its range); with
    ``context_dim = 4`` also the bandwidth (its range) and the distance (its range).
    """

    def scaled(x, low, high):
        return jnp.clip((x - low) / (high - low), 0.0, 1.0)

    shape = rate.shape
    columns = [
        scaled(rate, params.rate_low, params.rate_high),
        jnp.broadcast_to(
            scaled(computation, params.computation_low, params.computation_high)[..., None], shape
        ),
    ]
    if params.context_dim == 4:
        columns.append(
            jnp.broadcast_to(
                scaled(bandwidth, params.bandwidth_low, params.bandwidth_high)[..., None], shape
            )
        )
        columns.append(scaled(distance, params.distance_low, params.distance_high))
    return jnp.stack(columns, axis=-1).astype(params.dtype)


def _num_uniform_columns(params: HflParams) -> int:
    # coverage, distance, shadowing, fading DT, fading UT per pair; bandwidth, y per client
    return 5 * params.num_servers + 2


class HflEnv(Environment):
    """Stateless environment; all randomness comes from the keys passed in."""

    name = "hfl"
    # What policies may read, for compatibility checks: Observation and Feedback fields, except
    # that `available` is per (client, ES) pair here, which client-level policies cannot use.
    provides = (
        "available_pairs",
        "context",
        "cost",
        "budget",
        "success_prob",
        "success_now",
        "success_prob_context",
        "success",
        "time",
        "round_time",
        "utility",
        "num_success",
    )
    # Recorded every round (the Feedback fields of the same names).
    round_metrics: ClassVar[dict[str, Metric]] = {
        "utility": Metric(
            ("round",), "(1/M) sum of X over the selected pairs (COCS eq. 8)", NONNEGATIVE
        ),
        "num_success": Metric(
            ("round",), "selected clients received before the deadline", NONNEGATIVE
        ),
    }

    def default_params(self, preset: str = "mnist", **overrides) -> HflParams:
        return preset_params(preset, **overrides)

    def _uniforms(self, key, params: HflParams, columns: int):
        # One PRNG call per round for everything (a rolled threefry loop per call on CPU). The
        # draws are moved to the cell midpoints (k + 1/2)·ε of JAX's uniform grid, strictly inside
        # (0, 1): the Gaussian quantile and the exponential draw stay finite.
        u = jax.random.uniform(key, (params.num_clients, columns), params.dtype)
        return u + 0.5 * jnp.finfo(params.dtype).eps

    def _conditions(self, u, params: HflParams) -> Conditions:
        """Round conditions from the first ``5M + 2`` columns of U(0, 1) draws, u f[N, ≥5M+2]."""
        m = params.num_servers

        def block(i):
            return u[:, i * m : (i + 1) * m]

        def between(x, low, high):
            return low + (high - low) * x

        return Conditions(
            coverage=block(0) < params.p_cover,
            distance=between(block(1), params.distance_low, params.distance_high),
            shadowing_db=params.shadowing_std_db * jax.scipy.special.ndtri(block(2)),
            fading_down=-jnp.log1p(-block(3)),
            fading_up=-jnp.log1p(-block(4)),
            bandwidth=between(u[:, 5 * m], params.bandwidth_low, params.bandwidth_high),
            computation=between(u[:, 5 * m + 1], params.computation_low, params.computation_high),
        )

    def draw_conditions(self, key, params: HflParams) -> Conditions:
        """One round's conditions: coverage, distance, shadowing, fading both ways, b and y."""
        return self._conditions(self._uniforms(key, params, _num_uniform_columns(params)), params)

    def observation(self, state: HflState, params: HflParams) -> Observation:
        """What the policies see before selecting: availability (coverage), prices, contexts."""
        rate = download_rate(
            state.distance, state.shadowing_db, state.fading_down, state.bandwidth, params
        )
        context = scale_context(rate, state.computation, state.bandwidth, state.distance, params)
        budget = jnp.broadcast_to(jnp.asarray(params.budget, params.dtype), (params.num_servers,))
        prob_context = success_probability_context(
            rate, state.computation, state.bandwidth, state.distance, params
        )
        return Observation(
            available=state.coverage,
            context=jnp.where(state.coverage[..., None], context, 0.0),
            cost=state.price * state.computation,
            budget=budget,
            success_prob=success_probability(state, params),
            success_now=success_now(state, params),
            success_prob_context=jnp.where(state.coverage, prob_context, 0.0),
        )

    def reset(self, key, params: HflParams) -> tuple[Observation, HflState]:
        columns = _num_uniform_columns(params)
        u = self._uniforms(key, params, columns + 1)
        price = params.price_low + (params.price_high - params.price_low) * u[:, columns]
        state = HflState(
            price=price, **self._conditions(u, params)._asdict(), t=jnp.asarray(0, jnp.int32)
        )
        return self.observation(state, params), state

    def step(self, key, state: HflState, action, params: HflParams):
        """Play ``action`` (bool[N, M], at most one ES per client); return the next observation,
        the next state and this round's feedback.

        Selecting a pair out of coverage is a policy error: its update never arrives (X = 0,
        τ = +inf, counted as the deadline in ``round_time``). A client selected on several ESs
        (also an error) reports the largest of its times.
        """
        action = jnp.asarray(action, bool)
        tau = round_times(state, params)
        success = action & (tau <= params.deadline)
        num_success = jnp.sum(success, dtype=jnp.int32)
        capped = jnp.minimum(tau, params.deadline)
        feedback = Feedback(
            success=success,
            time=jnp.max(jnp.where(action, tau, 0.0), axis=-1),
            round_time=jnp.max(jnp.where(action, capped, 0.0)),
            utility=num_success.astype(params.dtype) / params.num_servers,
            num_success=num_success,
        )
        conditions = self.draw_conditions(key, params)
        next_state = state.replace(**conditions._asdict(), t=state.t + 1)
        return self.observation(next_state, params), next_state, feedback

    def delivered(self, action, feedback: Feedback):
        """bool[N]: the client's update reached its ES before the deadline (COCS eq. 7's X)."""
        del action
        return jnp.any(feedback.success, axis=-1)
