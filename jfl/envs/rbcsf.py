"""Linear model-exchange-time environment of RBCS-F §6.1
(docs/reproductions/rbcsf.md#the-environment).

Each round every client reports a context ``c = [1/μ, s, M/B]`` and its availability; the
expected exchange time is ``τ* = c·θ*`` and the realised one ``τ = τ*(1 + u)``, ``u ~ U(-a, a)``
(paper: ``a = 1``), revealed only for selected clients. θ*_n = [τ_b, τ_s, 1/η] with
η = log₂(1 + SNR) by default (``eta_base``;
docs/decisions.md#rbcsf-eta). ``s = 1`` when the client was *not*
selected in the previous round (it pays the cold-start time τ_s; every client in round 1).

Gymnax-style: the environment object is stateless; ``params`` and ``state`` are pytrees.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jfl.checks import in_range
from jfl.envs.base import Environment, client_classes
from jfl.prng import uniform


@struct.dataclass
class RbcsfParams:
    theta: jax.Array  # f[N, 3]  θ*_n = [τ_b, τ_s, 1/η]
    bandwidth_low: float = 2.0  # MHz
    bandwidth_high: float = 4.0
    cpu_low: float = 0.5  # available CPU ratio μ
    cpu_high: float = 2.0
    p_available: float = 0.8
    model_size: float = 20.0  # Mb
    noise: float = 1.0  # half-width a of u ~ U(-a, a)
    # Base of the logarithm in η = log(1 + SNR) that built θ* (2: bits, e: nats;
    # docs/decisions.md#rbcsf-eta);
    # recorded here, θ* already holds it.
    eta_base: float = 2.0
    # The server waits at most this long (s): a selected client whose τ exceeds it is dropped,
    # its update lost (E3CS's success, docs/decisions.md#rbcsf-round-deadline); inf: none is.
    round_deadline: float = float("inf")

    @property
    def num_clients(self) -> int:
        return self.theta.shape[0]


@struct.dataclass
class RbcsfState:
    cpu_ratio: jax.Array  # f[N]  μ_t
    bandwidth: jax.Array  # f[N]  B_t
    available: jax.Array  # bool[N]  I_t
    cold_start: jax.Array  # f[N]  s_t
    t: jax.Array  # i[]  round index, 0-based


class Observation(NamedTuple):
    context: jax.Array  # f[N, 3]  c_t, seen by every policy
    available: jax.Array  # bool[N]  I_t
    expected_time: jax.Array  # f[N]  τ*_t = c·θ*: oracle information (FedCS only)


class Feedback(NamedTuple):
    time: jax.Array  # f[N]  realised τ_t for the selected clients, 0 elsewhere
    # f[]  max τ over the selected clients (0 if none), eq. 1; at most the round deadline
    round_time: jax.Array
    success: jax.Array  # bool[N]  selected clients with τ ≤ round deadline (update arrived)


class Conditions(NamedTuple):
    cpu_ratio: jax.Array  # f[N]
    bandwidth: jax.Array  # f[N]
    available: jax.Array  # bool[N]


PAPER_CLASSES = {
    "train_time": (1.0, 2.0, 3.0, 4.0),  # τ_b (s), Table I
    "cold_start_time": (1.0, 1.0, 1.0, 1.0),  # τ_s (s)
    "snr": (1000.0, 100.0, 10.0, 1.0),  # η = log(1 + SNR)
}
# The paper's η ≜ log(1 + SNR) "multiplying which with B_{t,n} yields the Shannon formula", with
# the model size M "measured by bit" (§4.4.2): a rate in bits needs log₂. Base e keeps the
# natural-log reading (FedCS(3) then selects 7.0 clients a round instead of ≈ 8.8).
ETA_BASES = {"2": 2.0, "e": float(np.e)}


def make_params(
    num_clients: int = 40,
    train_time=PAPER_CLASSES["train_time"],
    cold_start_time=PAPER_CLASSES["cold_start_time"],
    snr=PAPER_CLASSES["snr"],
    bandwidth_range=(2.0, 4.0),
    cpu_range=(0.5, 2.0),
    p_available: float = 0.8,
    model_size: float = 20.0,
    noise: float = 1.0,
    eta_base: float = 2.0,
    round_deadline: float = float("inf"),
    dtype=jnp.float32,
) -> RbcsfParams:
    """Build validated parameters; the per-class tables share one length (the number of classes).

    ``eta_base`` is the base of the logarithm in η = log(1 + SNR) (2 by default, e for the
    natural-log reading; ``ETA_BASES``). ``round_deadline`` (s, default ∞) drops the selected
    clients slower than it (``Feedback.success``). ``dtype`` sets the precision of everything the
    environment computes (float64 needs x64).
    """
    if not isinstance(num_clients, int | np.integer) or num_clients < 1:
        raise ValueError(f"num_clients must be an integer >= 1, got {num_clients!r}")
    train_time, cold_start_time, snr = (
        np.asarray(x, float) for x in (train_time, cold_start_time, snr)
    )
    if not (train_time.ndim == cold_start_time.ndim == snr.ndim == 1) or not (
        len(train_time) == len(cold_start_time) == len(snr) >= 1
    ):
        raise ValueError("train_time, cold_start_time and snr must be 1-D tables of one length")
    in_range("train_time", train_time, 0, np.inf, low_open=True)
    in_range("cold_start_time", cold_start_time, 0, np.inf)
    in_range("snr", snr, 0, np.inf, low_open=True)
    in_range("bandwidth_range[0]", bandwidth_range[0], 0, np.inf, low_open=True)
    in_range("bandwidth_range[1]", bandwidth_range[1], bandwidth_range[0], np.inf)
    in_range("cpu_range[0]", cpu_range[0], 0, np.inf, low_open=True)
    in_range("cpu_range[1]", cpu_range[1], cpu_range[0], np.inf)
    in_range("p_available", p_available, 0, 1)
    in_range("model_size", model_size, 0, np.inf, low_open=True)
    in_range("noise", noise, 0, 1)
    in_range("eta_base", eta_base, 1, np.inf, low_open=True)
    if not (round_deadline > 0):  # ∞ (no deadline) allowed, unlike in_range
        raise ValueError(f"round_deadline must be > 0 (s) or inf, got {round_deadline!r}")
    theta = theta_table(num_clients, train_time, cold_start_time, snr, eta_base)
    return RbcsfParams(
        theta=jnp.asarray(theta, dtype),
        bandwidth_low=float(bandwidth_range[0]),
        bandwidth_high=float(bandwidth_range[1]),
        cpu_low=float(cpu_range[0]),
        cpu_high=float(cpu_range[1]),
        p_available=float(p_available),
        model_size=float(model_size),
        noise=float(noise),
        eta_base=float(eta_base),
        round_deadline=float(round_deadline),
    )


def theta_table(num_clients, train_time, cold_start_time, snr, eta_base=2.0) -> np.ndarray:
    """θ*_n = [τ_b, τ_s, 1/log_b(1 + SNR)] of client n's class (f64[N, 3], NumPy)."""
    cls = client_classes(num_clients, len(train_time))
    eta = np.log1p(np.asarray(snr, float)[cls]) / np.log(eta_base)
    return np.stack(
        [np.asarray(train_time, float)[cls], np.asarray(cold_start_time, float)[cls], 1.0 / eta],
        axis=1,
    )


class BanditBounds(NamedTuple):
    """Constants of the linear bandit behind RBCS-F's Lemma 1 for one parameter set."""

    noise: float  # R: |ε| ≤ R, so ε is R-sub-Gaussian
    theta_norm: float  # S ≥ ‖θ*_n‖₂
    context_norm: float  # L ≥ ‖c_{t,n}‖₂


def bandit_bounds(params: RbcsfParams) -> BanditBounds:
    """R, S and L of Lemma 1 (RBCS-F eq. 15 and Appendix B) for the environment ``params``.

    Every context lies in the box c ≤ c_max = [1/μ_low, 1, M/B_low] and θ* ≥ 0, so
    ``L = ‖c_max‖`` and the largest expected time of client n is τ*_max,n = c_max·θ*_n. The
    noise ε = τ − τ* = τ*·u with |u| ≤ a is bounded, |ε| ≤ a·max_n τ*_max,n = R, and a zero-mean
    variable bounded by R is R-sub-Gaussian (Hoeffding's lemma), as eq. 15 requires. ``S`` is the
    largest ‖θ*_n‖; through 1/η both S and R depend on ``eta_base``. Paper setting, η in bits:
    R = 19, S = √18 ≈ 4.24, L = √105 ≈ 10.25 (natural log: R ≈ 23.4, S ≈ 4.37).
    """
    return box_bounds(
        np.asarray(params.theta, float),
        params.cpu_low,
        params.bandwidth_low,
        params.model_size,
        params.noise,
    )


def box_bounds(theta, cpu_low, bandwidth_low, model_size, noise) -> BanditBounds:
    """``bandit_bounds`` from plain numbers (NumPy only: no device array is created)."""
    theta = np.asarray(theta, float)
    c_max = np.array([1.0 / cpu_low, 1.0, model_size / bandwidth_low])
    return BanditBounds(
        noise=float(noise * np.max(theta @ c_max)),
        theta_norm=float(np.max(np.linalg.norm(theta, axis=1))),
        context_norm=float(np.linalg.norm(c_max)),
    )


def paper_bounds(eta_base: float = 2.0) -> BanditBounds:
    """``bandit_bounds`` of the paper's setting (Table I, §6.1), for ``eta_base``."""
    classes = len(PAPER_CLASSES["snr"])
    theta = theta_table(classes, *PAPER_CLASSES.values(), eta_base=eta_base)
    return box_bounds(theta, cpu_low=0.5, bandwidth_low=2.0, model_size=20.0, noise=1.0)


def _dot3(a, b):
    # Explicit adds rather than a reduction: XLA may order a reduction differently for different
    # batch shapes, and a configuration's result must not depend on its batch.
    return a[..., 0] * b[..., 0] + a[..., 1] * b[..., 1] + a[..., 2] * b[..., 2]


class RbcsfEnv(Environment):
    """Stateless environment; all randomness comes from the keys passed in.

    No per-round metrics besides the runner's own (round time, selections, queues).
    """

    name = "rbcsf"
    # Fields of Observation and Feedback, for policy compatibility checks.
    provides = ("context", "available", "expected_time", "time", "round_time", "success")

    def default_params(self, **overrides) -> RbcsfParams:
        return make_params(**overrides)

    def _conditions(self, uniforms, params: RbcsfParams) -> Conditions:
        """Round conditions from three rows of U[0, 1) draws."""
        cpu = params.cpu_low + (params.cpu_high - params.cpu_low) * uniforms[0]
        bw = params.bandwidth_low + (params.bandwidth_high - params.bandwidth_low) * uniforms[1]
        return Conditions(cpu_ratio=cpu, bandwidth=bw, available=uniforms[2] < params.p_available)

    def _uniforms(self, key, params: RbcsfParams, rows: int):
        # One PRNG call per round for everything: each call is a rolled threefry loop on CPU,
        # so fewer, larger calls are markedly faster than one call per quantity.
        return uniform(key, (rows, params.num_clients), params.theta.dtype)

    def draw_conditions(self, key, params: RbcsfParams) -> Conditions:
        """μ ~ U[cpu_low, cpu_high], B ~ U[bandwidth_low, bandwidth_high], I ~ Bernoulli(p)."""
        return self._conditions(self._uniforms(key, params, 3), params)

    def observation(self, state: RbcsfState, params: RbcsfParams) -> Observation:
        """What the policies see before selecting: availability and each client's context."""
        context = jnp.stack(
            [1.0 / state.cpu_ratio, state.cold_start, params.model_size / state.bandwidth], axis=-1
        )
        expected = _dot3(context, params.theta)
        return Observation(context=context, available=state.available, expected_time=expected)

    def _state(self, conditions: Conditions, cold_start, t) -> RbcsfState:
        return RbcsfState(
            cpu_ratio=conditions.cpu_ratio,
            bandwidth=conditions.bandwidth,
            available=conditions.available,
            cold_start=cold_start,
            t=t,
        )

    def reset(self, key, params: RbcsfParams) -> tuple[Observation, RbcsfState]:
        conditions = self.draw_conditions(key, params)
        cold = jnp.ones(params.num_clients, params.theta.dtype)
        state = self._state(conditions, cold, jnp.asarray(0, jnp.int32))
        return self.observation(state, params), state

    def step(self, key, state: RbcsfState, action, params: RbcsfParams):
        """Play ``action`` (bool[N]) in the current round; return the next round's observation."""
        uniforms = self._uniforms(key, params, 4)
        noise = params.noise * (2.0 * uniforms[3] - 1.0)  # u ~ U(-a, a)
        obs = self.observation(state, params)
        time = jnp.where(action, obs.expected_time * (1.0 + noise), 0.0)
        # With no deadline (∞) every selected client succeeds and the round lasts max τ.
        success = action & (time <= params.round_deadline)
        round_time = jnp.minimum(jnp.max(time, initial=0.0), params.round_deadline)
        feedback = Feedback(time=time, round_time=round_time, success=success)
        cold = 1.0 - jnp.asarray(action, params.theta.dtype)
        next_state = self._state(self._conditions(uniforms[:3], params), cold, state.t + 1)
        return self.observation(next_state, params), next_state, feedback

    def delivered(self, action, feedback: Feedback):
        """The selected clients that met the round deadline (all of them without one)."""
        del action
        return feedback.success
