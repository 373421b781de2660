"""Single access point with N orthogonal channels: the environment of CS-UCB §V
(docs/reproductions/cs-ucb.md#the-environment).

K clients sit in a disc around the access point (AP). Each round, client k's time is

    τ_k = min(τ_D + τ_U + τ_LU, τ_max),   τ_D = m_0 / (W R_D),  τ_U = m_k / (W R_U),  τ_LU = ϱ/φ_k

(eqs. 4, 32–36), with average rates ``R = log2(1 + p |h|² 10^(-PL/10) / σ²)``, Rayleigh fading
``|h|² ~ Exp(1)`` drawn independently for the downlink and the uplink (with ``coherence_slots``
L > 1, R is the mean of L independently faded rates: a transfer that spans L coherence slots,
§V line ~355), path loss
``PL[dB] = 128.1 + 37.6 log10(d / 1 km)`` and computing speed ``φ_k ~ U[φ_lo_k, φ_hi_k]``. A client
with ``τ_k = τ_max`` is a *failed* client. The normalised reward is ``r_k = 1 - τ_k / τ_max`` and a
selected set earns ``r(S) = min_{k∈S} r_k`` (§III-B); a round where nobody is selected earns 0.
Availability ``a_k ~ Bernoulli(α_k)`` is revealed at the start of the round; times and rewards
only for the selected clients, after it.

Distances are drawn once per run, uniformly over the area of the annulus
``[min_distance, radius]`` (the disc of the paper, keeping clients off the AP), unless explicit
``distance`` values are given. Gymnax style: the environment object is stateless.
"""

from __future__ import annotations

import math
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jfl.checks import in_range
from jfl.envs import channel
from jfl.envs.base import Environment
from jfl.outputs import Metric
from jfl.prng import uniform
from jfl.stats import NONNEGATIVE, UNIT_INTERVAL

# The paper's round deadline (§V-A: "the maximal interval τ_max = 5 seconds"). With its other
# numbers a client's τ is 0.10–0.26 s, so at 5 s every μ_k = E[1 − τ_k/τ_max] is 0.93–0.98:
# CS-UCB's confidence bonus dwarfs the differences and CS-UCB-Q's truncated index is 1 for every
# client. jfl's default, 0.5 s, spreads the rewards with about 1% of selections failing (0.2 s
# spreads them too but fails 11–24% of selections at 300 m); see
# docs/decisions.md#cs-ucb-tau-max.
PAPER_TAU_MAX = 5.0
DEFAULT_TAU_MAX = 0.5

PRESETS = {
    # Fig. 1 and 3 of the paper: always available, K = 20 clients, N = 5 channels.
    "ideal": {"num_clients": 20, "tau_max": DEFAULT_TAU_MAX, "availability": 1.0},
    # Figs. 4–5: K = 3 at an equal 300 m, N = 2, availability 0.9, c = (0.6, 0.5, 0.4).
    "fairness": {
        "num_clients": 3,
        "distance": (300.0, 300.0, 300.0),
        "tau_max": DEFAULT_TAU_MAX,
        "availability": 0.9,
    },
}


@struct.dataclass
class WirelessParams:
    phi_low: jax.Array  # f[K]  lower bound of the computing speed φ_k (samples/s)
    phi_high: jax.Array  # f[K]  upper bound of φ_k
    availability: jax.Array  # f[K]  α_k = P(a_k = 1)
    distance: jax.Array | None = None  # f[K] metres; None: drawn once per run
    radius: float = 500.0  # m, disc around the AP
    min_distance: float = 10.0  # m
    bandwidth: float = 15e3  # Hz, W of one channel
    tx_power_dbm: float = 23.0  # both ways
    noise_dbm: float = -107.0  # σ²
    path_loss_intercept: float = 128.1  # dB at 1 km
    path_loss_slope: float = 37.6  # dB per decade of distance
    download_bits: float = 5e3  # m_0
    upload_bits: float = 5e3  # m_k
    samples_per_update: float = 2.0  # ϱ (the SGD mini-batch)
    tau_max: float = DEFAULT_TAU_MAX  # s (the paper's is PAPER_TAU_MAX)
    # L: independent fading draws per link and round whose rates are averaged (a transfer spans
    # several coherence slots, §V line ~355); 1 is one draw per round. A shape: static.
    coherence_slots: int = struct.field(pytree_node=False, default=1)
    # f[K] μ_k = E[r_k] of the run's layout, when known (e.g. estimated by Monte Carlo before
    # the run): the environment then reports the pseudo-reward μ(S(t)) of each round.
    mean_reward: jax.Array | None = None

    @property
    def num_clients(self) -> int:
        return self.phi_low.shape[0]


@struct.dataclass
class WirelessState:
    distance: jax.Array  # f[K]  metres, fixed for the run
    snr: jax.Array  # f[K]  mean_snr(distance), computed once per run rather than every round
    available: jax.Array  # bool[K]  a_k(t)
    t: jax.Array  # i[]  round index, 0-based


class Observation(NamedTuple):
    available: jax.Array  # bool[K]  A(t), revealed before the selection


class Feedback(NamedTuple):
    time: jax.Array  # f[K]  τ_k(t) for the selected clients, 0 elsewhere
    reward: jax.Array  # f[K]  r_k(t) = 1 - τ_k/τ_max for the selected clients, 0 elsewhere
    round_time: jax.Array  # f[]  max τ over the selected clients (eq. 7), 0 if none
    set_reward: jax.Array  # f[]  r(S(t)) = min r_k over the selected clients, 0 if none
    num_failed: jax.Array  # i[]  selected clients with τ_k = τ_max
    failed: jax.Array | None = None  # bool[K]  selected clients that hit τ_max (update lost)
    # f[]  μ(S(t)) = min_{k∈S(t)} μ_k, 0 if none selected, NaN without params.mean_reward
    mean_set_reward: jax.Array | None = None
    success: jax.Array | None = None  # bool[K]  selected & ~failed: the updates that arrived


def paper_computing_speed(num_clients: int) -> tuple[np.ndarray, np.ndarray]:
    """φ_k ~ U[(0.5k + 0.5)·20, (0.5k + 1.5)·20] for k = 1..K (§V-A): client 1 is the slowest."""
    k = np.arange(1, num_clients + 1, dtype=float)
    return (0.5 * k + 0.5) * 20.0, (0.5 * k + 1.5) * 20.0


def _per_client(name, value, num_clients):
    array = np.asarray(value, float)
    if array.ndim == 0:
        return np.full(num_clients, float(array))
    if array.shape != (num_clients,):
        raise ValueError(f"{name} must be a scalar or of shape ({num_clients},), got {array.shape}")
    return array


def make_params(
    num_clients: int = 20,
    *,
    distance=None,
    availability=1.0,
    tau_max: float = DEFAULT_TAU_MAX,
    phi_low=None,
    phi_high=None,
    radius: float = 500.0,
    min_distance: float = 10.0,
    bandwidth: float = 15e3,
    tx_power_dbm: float = 23.0,
    noise_dbm: float = -107.0,
    path_loss=(128.1, 37.6),
    download_bits: float = 5e3,
    upload_bits: float = 5e3,
    samples_per_update: float = 2.0,
    coherence_slots: int = 1,
    mean_reward=None,
    dtype=jnp.float32,
) -> WirelessParams:
    """Validated parameters; defaults are the paper's §V-A (the ``ideal`` preset), except
    ``tau_max``: 0.5 s instead of the paper's 5 s (``PAPER_TAU_MAX``, see above).

    ``availability``, ``phi_low``/``phi_high`` and ``distance`` take a scalar or one value per
    client; ``phi_low``/``phi_high`` default to the paper's per-client formula.
    ``coherence_slots`` L averages each link's rate over L independent fades. ``mean_reward``
    (one μ_k in [0, 1] per client, e.g. from :func:`reward_statistics`) makes every round report
    its pseudo-reward μ(S(t)).
    """
    if not isinstance(num_clients, int | np.integer) or num_clients < 1:
        raise ValueError(f"num_clients must be an integer >= 1, got {num_clients!r}")
    default_low, default_high = paper_computing_speed(num_clients)
    phi_low = _per_client("phi_low", default_low if phi_low is None else phi_low, num_clients)
    phi_high = _per_client("phi_high", default_high if phi_high is None else phi_high, num_clients)
    availability = _per_client("availability", availability, num_clients)
    in_range("availability", availability, 0, 1)
    in_range("phi_low", phi_low, 0, np.inf, low_open=True)
    if np.any(phi_high < phi_low) or not np.all(np.isfinite(phi_high)):
        raise ValueError(f"phi_high must be finite and >= phi_low, got {phi_high}")
    in_range("tau_max", tau_max, 0, np.inf, low_open=True)
    in_range("min_distance", min_distance, 0, np.inf, low_open=True)
    in_range("radius", radius, min_distance, np.inf)
    in_range("bandwidth", bandwidth, 0, np.inf, low_open=True)
    in_range("tx_power_dbm", tx_power_dbm, -np.inf, np.inf, low_open=True, high_open=True)
    in_range("noise_dbm", noise_dbm, -np.inf, np.inf, low_open=True, high_open=True)
    in_range(
        "path_loss", np.asarray(path_loss, float), -np.inf, np.inf, low_open=True, high_open=True
    )
    in_range("download_bits", download_bits, 0, np.inf)
    in_range("upload_bits", upload_bits, 0, np.inf)
    in_range("samples_per_update", samples_per_update, 0, np.inf)
    if isinstance(coherence_slots, bool) or not isinstance(coherence_slots, int | np.integer):
        raise ValueError(f"coherence_slots must be an integer >= 1, got {coherence_slots!r}")
    if coherence_slots < 1:
        raise ValueError(f"coherence_slots must be an integer >= 1, got {coherence_slots!r}")
    if distance is not None:
        distance = _per_client("distance", distance, num_clients)
        in_range("distance", distance, 0, np.inf, low_open=True)
        distance = jnp.asarray(distance, dtype)
    if mean_reward is not None:
        mean_reward = _per_client("mean_reward", mean_reward, num_clients)
        in_range("mean_reward", mean_reward, 0, 1)
        mean_reward = jnp.asarray(mean_reward, dtype)
    return WirelessParams(
        phi_low=jnp.asarray(phi_low, dtype),
        phi_high=jnp.asarray(phi_high, dtype),
        availability=jnp.asarray(availability, dtype),
        distance=distance,
        coherence_slots=int(coherence_slots),
        mean_reward=mean_reward,
        # The static scalars, as Python floats (pytree metadata, not traced arrays).
        **{
            name: float(value)
            for name, value in (
                ("radius", radius),
                ("min_distance", min_distance),
                ("bandwidth", bandwidth),
                ("tx_power_dbm", tx_power_dbm),
                ("noise_dbm", noise_dbm),
                ("path_loss_intercept", path_loss[0]),
                ("path_loss_slope", path_loss[1]),
                ("download_bits", download_bits),
                ("upload_bits", upload_bits),
                ("samples_per_update", samples_per_update),
                ("tau_max", tau_max),
            )
        },
    )


def preset_params(name: str, **overrides) -> WirelessParams:
    """``make_params`` with a preset's values (``ideal`` or ``fairness``), then ``overrides``."""
    if name not in PRESETS:
        raise ValueError(f"unknown wireless preset {name!r}; choose from {sorted(PRESETS)}")
    return make_params(**{**PRESETS[name], **overrides})


def mean_snr(distance, params: WirelessParams):
    """p · 10^(-PL/10) / σ²: the SNR for unit fading gain at ``distance`` metres."""
    path_loss = channel.path_loss_db(
        distance / 1e3, params.path_loss_intercept, params.path_loss_slope
    )
    # (p − σ²) − PL in dB: σ² folded into the power, one rounding as the paper's numbers need.
    return channel.unit_snr(params.tx_power_dbm - params.noise_dbm, path_loss)


def _transfer_time(bits, snr, uniforms, bandwidth):
    """bits / (W R̄) with R̄ the mean of log2(1 + snr |h_l|²) over the rows of ``uniforms``."""
    fading = -jnp.log1p(-uniforms)  # |h|² ~ Exp(1)
    rate = channel.spectral_efficiency(snr, fading, accurate=False)
    if rate.shape[0] > 1:
        rate = jnp.mean(rate, axis=0)
    else:
        rate = rate[0]  # one slot: the paper's single draw, bit for bit
    # bits = 0 (nothing to send) takes no time even through a zero-gain fade (0/0 otherwise).
    return jnp.where(bits > 0, bits / (bandwidth * rate), 0.0)


def num_draws(params: WirelessParams) -> int:
    """Rows of U[0, 1) draws one round's client times read (see :func:`client_times`)."""
    return 1 + 2 * params.coherence_slots


def client_times(uniforms, distance, params: WirelessParams):
    """τ_k (eq. 4) and the failure indicator from ``num_draws(params)`` rows of U[0, 1) draws.

    Rows: downlink fading, uplink fading (|h|² = -log(1 - u) ~ Exp(1)), computing speed, then
    with L = ``coherence_slots`` > 1 the other L − 1 downlink and L − 1 uplink fades (each
    link's rate is the mean over its L slots). Returns ``(time f[K], failed bool[K])``.
    """
    return _times_given_snr(uniforms, mean_snr(distance, params), params)


def _times_given_snr(uniforms, snr, params: WirelessParams):
    extra = params.coherence_slots - 1
    down = jnp.concatenate([uniforms[0:1], uniforms[3 : 3 + extra]])
    up = jnp.concatenate([uniforms[1:2], uniforms[3 + extra : 3 + 2 * extra]])
    phi = params.phi_low + (params.phi_high - params.phi_low) * uniforms[2]
    total = (
        _transfer_time(params.download_bits, snr, down, params.bandwidth)
        + _transfer_time(params.upload_bits, snr, up, params.bandwidth)
        + params.samples_per_update / phi
    )
    failed = total >= params.tau_max
    return jnp.minimum(total, params.tau_max), failed


def draw_distance(key, params: WirelessParams):
    """Distances uniform over the area of the annulus [min_distance, radius] (one per client)."""
    u = jax.random.uniform(key, (params.num_clients,), params.phi_low.dtype)
    inner2, outer2 = params.min_distance**2, params.radius**2
    return jnp.sqrt(inner2 + (outer2 - inner2) * u)


class WirelessEnv(Environment):
    """Stateless environment; all randomness comes from the keys passed in."""

    name = "wireless"
    # Fields of Observation and Feedback, for policy compatibility checks.
    provides = tuple(
        "available time reward round_time set_reward num_failed mean_set_reward success".split()
    )
    # Recorded every round (the Feedback fields of the same names).
    round_metrics: ClassVar[dict[str, Metric]] = {
        "set_reward": Metric(
            ("round",), "r(S(t)) = min_{k in S(t)} r_k(t), 0 if none selected", UNIT_INTERVAL
        ),
        "num_failed": Metric(
            ("round",), "selected clients that hit tau_max (update lost)", NONNEGATIVE
        ),
        "mean_set_reward": Metric(
            ("round",),
            "pseudo-reward mu(S(t)) = min_{k in S(t)} mu_k, 0 if none selected (NaN when the "
            "run's mean rewards mu_k are not given)",
            UNIT_INTERVAL,
            missing=True,
        ),
    }

    def default_params(self, preset: str = "ideal", **overrides) -> WirelessParams:
        return preset_params(preset, **overrides)

    def layout(self, key, params: WirelessParams):
        """The run's client distances: explicit ones, or drawn from ``key`` (the reset key)."""
        if params.distance is not None:
            return params.distance
        k_layout, _ = jax.random.split(key)
        return draw_distance(k_layout, params)

    def _available(self, u, params: WirelessParams):
        return u < params.availability

    def reset(self, key, params: WirelessParams) -> tuple[Observation, WirelessState]:
        _, k_available = jax.random.split(key)
        u = jax.random.uniform(k_available, (params.num_clients,), params.phi_low.dtype)
        distance = self.layout(key, params)
        state = WirelessState(
            distance=distance,
            snr=mean_snr(distance, params),
            available=self._available(u, params),
            t=jnp.asarray(0, jnp.int32),
        )
        return Observation(available=state.available), state

    def step(self, key, state: WirelessState, action, params: WirelessParams):
        """Play ``action`` (bool[K]); return the next observation and this round's feedback."""
        # One PRNG call per round: fading both ways, computing speed, next round's availability
        # (a second one for the other coherence slots' fades, so that L = 1 keeps its bits).
        uniforms = uniform(key, (4, params.num_clients), params.phi_low.dtype)
        draws = uniforms[:3]
        if params.coherence_slots > 1:
            shape = (num_draws(params) - 3, params.num_clients)
            more = uniform(jax.random.fold_in(key, 1), shape, params.phi_low.dtype)
            draws = jnp.concatenate([draws, more])
        time, failed = _times_given_snr(draws, state.snr, params)
        action = jnp.asarray(action, bool)
        reward = (params.tau_max - time) / params.tau_max  # exactly 0 for a failed client
        any_selected = jnp.any(action)
        feedback = Feedback(
            time=jnp.where(action, time, 0.0),
            reward=jnp.where(action, reward, 0.0),
            round_time=jnp.max(jnp.where(action, time, 0.0)),
            set_reward=jnp.where(any_selected, jnp.min(jnp.where(action, reward, 1.0)), 0.0),
            num_failed=jnp.sum(action & failed, dtype=jnp.int32),
            failed=action & failed,
            mean_set_reward=self._mean_set_reward(action, any_selected, params),
            success=action & ~failed,
        )
        next_state = state.replace(available=self._available(uniforms[3], params), t=state.t + 1)
        return Observation(available=next_state.available), next_state, feedback

    @staticmethod
    def _mean_set_reward(action, any_selected, params: WirelessParams):
        """μ(S) = min_{k∈S} μ_k (the paper's proofs, App. A and D), 0 for S = ∅."""
        if params.mean_reward is None:
            return jnp.asarray(jnp.nan, params.phi_low.dtype)
        lowest = jnp.min(jnp.where(action, params.mean_reward, jnp.inf))
        return jnp.where(any_selected, lowest, 0.0).astype(params.phi_low.dtype)

    def delivered(self, action, feedback: Feedback):
        """Selected clients whose model update arrived: a client that hits τ_max has failed."""
        return action & ~feedback.failed


def reward_statistics(key, params: WirelessParams, distance, num_samples: int = 100_000):
    """Monte Carlo μ_k = E[r_k] and P(client k fails), on device, vectorised over samples.

    ``distance`` f[K] (e.g. ``WirelessEnv().layout(reset_key, params)``). The standard error of
    each estimate is at most 0.5/sqrt(num_samples).
    """
    if not isinstance(num_samples, int | np.integer) or num_samples < 1:
        raise ValueError(f"num_samples must be an integer >= 1, got {num_samples!r}")
    batch = min(int(num_samples), 8192)
    num_batches = math.ceil(num_samples / batch)
    keys = jax.random.split(key, num_batches)

    def one_batch(k):
        shape = (batch, num_draws(params), params.num_clients)
        u = uniform(k, shape, params.phi_low.dtype)
        time, failed = jax.vmap(client_times, in_axes=(0, None, None))(u, distance, params)
        return jnp.sum(1.0 - time / params.tau_max, axis=0), jnp.sum(failed, axis=0)

    reward_sums, fail_counts = jax.lax.map(one_batch, keys)
    total = num_batches * batch
    return reward_sums.sum(0) / total, fail_counts.sum(0) / total
