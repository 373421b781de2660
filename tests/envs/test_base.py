"""The environment interface (jfl.envs.base) and the shared channel formulas (jfl.envs.channel)."""

from __future__ import annotations

import math
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfl.envs import ENVIRONMENTS, Environment, HflEnv, Metric, RbcsfEnv, WirelessEnv, channel
from jfl.envs import hfl as hfl_env
from jfl.envs import wireless as wireless_env


class _Minimal(Environment):
    name = "minimal"

    def default_params(self, **overrides):
        return None

    def reset(self, key, params):
        return None, None

    def step(self, key, state, action, params):
        return None, None, None


def test_every_environment_is_an_environment_with_declared_metrics():
    """The registry's environments subclass Environment; their round metrics are declared with
    dims starting with "round" and, by default, read from feedback fields they provide."""
    assert set(ENVIRONMENTS) == {"rbcsf", "wireless", "hfl", "volatile"}
    for name, env_type in ENVIRONMENTS.items():
        assert issubclass(env_type, Environment) and env_type.name == name
        for metric_name, metric in env_type.round_metrics.items():
            assert isinstance(metric, Metric) and metric.dims[0] == "round" and metric.doc
            assert metric_name in env_type.provides
    assert dict(RbcsfEnv.round_metrics) == {}
    assert list(WirelessEnv.round_metrics) == ["set_reward", "num_failed", "mean_set_reward"]
    assert list(HflEnv.round_metrics) == ["utility", "num_success"]


def test_environment_is_abstract():
    """reset, step and default_params are abstract: a subclass must define all three."""
    with pytest.raises(TypeError):
        Environment()

    class NoStep(Environment):
        name = "no_step"

        def default_params(self, **overrides):
            return None

        def reset(self, key, params):
            return None, None

    with pytest.raises(TypeError, match="step"):
        NoStep()
    _Minimal()


def test_round_metric_declarations_are_checked():
    """A declared metric must be a Metric whose dims start with "round"."""
    with pytest.raises(TypeError, match="bad"):

        class Bad(_Minimal):
            round_metrics: ClassVar[dict] = {"bad": Metric(("client",), "not per round")}

    with pytest.raises(TypeError, match="plain"):

        class Plain(_Minimal):
            round_metrics: ClassVar[dict] = {"plain": ("round",)}


def test_default_delivered_is_the_selected_clients():
    """Without an override every selected client delivers: the mask itself, or any over the
    servers of a bool[N, M] assignment."""
    env = _Minimal()
    action = jnp.array([True, False, True])
    np.testing.assert_array_equal(env.delivered(action, None), action)
    assignment = jnp.array([[False, True], [False, False], [True, False]])
    np.testing.assert_array_equal(env.delivered(assignment, None), [True, False, True])
    # The environments that lose updates override it (rbcsf: past its round deadline).
    for env_type in (WirelessEnv, HflEnv, RbcsfEnv):
        assert env_type.delivered is not Environment.delivered


def test_default_compute_round_metrics_reads_feedback_fields():
    class WithMetric(_Minimal):
        round_metrics: ClassVar[dict] = {"round_time": Metric(("round",), "the round time")}

    class Feedback:
        round_time = 1.5
        other = 2.0

    assert WithMetric().compute_round_metrics(Feedback()) == {"round_time": 1.5}
    assert _Minimal().compute_round_metrics(Feedback()) == {}


# --------------------------------------------------------------------------- channel


def test_path_loss_and_snr_values():
    """PL = 128.1 dB at 1 km and +37.6 dB per decade; 10^(dB/10); N = PSD + 10 log10(b)."""
    d = jnp.array([0.1, 1.0, 10.0], jnp.float32)
    np.testing.assert_allclose(channel.path_loss_db(d), [90.5, 128.1, 165.7], rtol=1e-6)
    np.testing.assert_allclose(channel.db_to_linear(jnp.array([0.0, 10.0, -20.0])), [1, 10, 0.01])
    np.testing.assert_allclose(channel.noise_dbm(-174.0, jnp.float32(1e6)), -114.0, rtol=1e-6)
    # 23 dBm, PL 128.1 dB, noise -107 dBm: 1.9 dB.
    snr = channel.unit_snr(23.0, jnp.float32(128.1), -107.0)
    np.testing.assert_allclose(snr, 10**0.19, rtol=1e-5)
    snr = channel.unit_snr(23.0, jnp.float32(128.1), -107.0, shadowing_db=jnp.float32(-1.9))
    np.testing.assert_allclose(snr, 1.0, rtol=1e-5)


def test_spectral_efficiency_forms_agree():
    """log1p(x)/ln 2 and log2(1 + x) agree to float32 rounding where 1 + x is representable."""
    snr = jnp.array([1e-3, 0.5, 1.0, 100.0, 1e4], jnp.float32)
    fading = jnp.array([1.0, 2.0, 0.5, 1.0, 3.0], jnp.float32)
    want = np.log2(1 + np.float64(snr) * np.float64(fading))
    np.testing.assert_allclose(channel.spectral_efficiency(snr, fading), want, rtol=1e-6)
    np.testing.assert_allclose(
        channel.spectral_efficiency(snr, fading, accurate=False), want, rtol=1e-4
    )
    tiny = jnp.float32(1e-9)
    assert float(channel.spectral_efficiency(tiny, 1.0)) == pytest.approx(1e-9 / math.log(2))
    assert float(channel.spectral_efficiency(tiny, 1.0, accurate=False)) == 0.0


@pytest.mark.parametrize("traced", [False, True])
def test_environments_channel_is_the_formula_they_had(traced):
    """Bit for bit, the SNRs and rates of both environments equal the expressions they were
    written with (float32, the same operation order), with constant or traced parameters."""
    rng = np.random.default_rng(0)
    distance_m = jnp.asarray(rng.uniform(10, 500, 64), jnp.float32)
    fading = jnp.asarray(rng.exponential(size=64), jnp.float32)
    wp = wireless_env.make_params(64)

    def wireless_old(d, g, p):
        pl = p.path_loss_intercept + p.path_loss_slope * jnp.log10(d / 1e3)
        snr = 10.0 ** ((p.tx_power_dbm - p.noise_dbm - pl) / 10.0)
        return snr, jnp.log2(1.0 + snr * g)

    def wireless_new(d, g, p):
        snr = wireless_env.mean_snr(d, p)
        return snr, channel.spectral_efficiency(snr, g, accurate=False)

    shape = (8, 3)
    hp = hfl_env.make_params(8, 3)
    d_km = jnp.asarray(rng.uniform(0.05, 2, shape), jnp.float32)
    shadow = jnp.asarray(rng.normal(0, 8, shape), jnp.float32)
    bandwidth = jnp.asarray(rng.uniform(0.3, 1, (8, 1)), jnp.float32)
    g = jnp.asarray(rng.exponential(size=shape), jnp.float32)

    def hfl_old(d, s, b, g, p):
        path_loss = p.path_loss_intercept + p.path_loss_slope * jnp.log10(d)
        noise = p.noise_psd_dbm_hz + 10.0 * jnp.log10(b * 1e6)
        snr = 10.0 ** ((p.tx_power_dbm + s - path_loss - noise) / 10.0)
        return snr, jnp.log1p(snr * g) / math.log(2.0)

    def hfl_new(d, s, b, g, p):
        snr = hfl_env.mean_snr(d, s, b, p)
        return snr, channel.spectral_efficiency(snr, g)

    def call(fn, *args):
        if traced:
            return jax.jit(fn)(*args)
        params = args[-1]
        return jax.jit(lambda *a: fn(*a, params))(*args[:-1])

    for old, new in zip(
        call(wireless_old, distance_m, fading, wp),
        call(wireless_new, distance_m, fading, wp),
        strict=True,
    ):
        np.testing.assert_array_equal(np.asarray(old), np.asarray(new))
    for old, new in zip(
        call(hfl_old, d_km, shadow, bandwidth, g, hp),
        call(hfl_new, d_km, shadow, bandwidth, g, hp),
        strict=True,
    ):
        np.testing.assert_array_equal(np.asarray(old), np.asarray(new))
