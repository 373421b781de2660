"""Radio-channel formulas shared by the ``wireless`` and ``hfl`` environments
(docs/reproductions/cs-ucb.md, docs/reproductions/cocs.md).

    PL[dB] = 128.1 + 37.6 log10(d / 1 km)          (3GPP macro-cell path loss)
    snr    = 10^((P + S − PL − N) / 10)             (unit fading gain; P, N in dBm, S shadowing dB)
    c      = log2(1 + snr · |h|²)                   (bit/s/Hz)

Each function keeps the float operation order its callers were written with, so that the
environments' results do not change by a bit.
"""

from __future__ import annotations

import math

import jax.numpy as jnp

PATH_LOSS_INTERCEPT_DB = 128.1  # at 1 km
PATH_LOSS_SLOPE_DB = 37.6  # per decade of distance


def path_loss_db(
    distance_km, intercept: float = PATH_LOSS_INTERCEPT_DB, slope: float = PATH_LOSS_SLOPE_DB
):
    """PL[dB] = intercept + slope · log10(d / 1 km)."""
    return intercept + slope * jnp.log10(distance_km)


def db_to_linear(db):
    """10^(x / 10): a power ratio in dB (or a power in dBm, giving mW) as a linear value."""
    return 10.0 ** (db / 10.0)


def noise_dbm(psd_dbm_hz, bandwidth_hz):
    """Thermal noise power over a bandwidth: N[dBm] = PSD[dBm/Hz] + 10 log10(b[Hz])."""
    return psd_dbm_hz + 10.0 * jnp.log10(bandwidth_hz)


def unit_snr(tx_power_dbm, path_loss, noise=0.0, shadowing_db=0.0):
    """Linear SNR at unit fading gain: 10^((P + S − PL − N)/10), summed in that order.

    ``path_loss`` and ``noise`` in dB(m). Passing ``P − N`` as the power (and no ``noise``)
    computes ``(P − N) − PL``: one rounding fewer when ``P`` and ``N`` are constants.
    """
    return db_to_linear(tx_power_dbm + shadowing_db - path_loss - noise)


def spectral_efficiency(snr, fading, *, accurate: bool = True):
    """log2(1 + snr · |h|²) in bit/s/Hz.

    ``accurate``: computed as ``log1p(x) / ln 2``, exact to float precision even when
    ``snr · |h|²`` is tiny (cell edge, deep fades); otherwise as ``log2(1 + x)`` (the ``wireless``
    environment's form, kept so that its results stay bit-identical).
    """
    if accurate:
        return jnp.log1p(snr * fading) / math.log(2.0)
    return jnp.log2(1.0 + snr * fading)
