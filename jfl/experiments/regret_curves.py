"""Regret and performance-gap curves of a wireless sweep (Xia et al. §V-B, App. A and D).

Given a results dataset with a ``benchmark_reward`` (μ(S*) of eq. 13 or r* of LP 23, from
:mod:`jfl.experiments.regret`), the cumulative pseudo-regret t·r_bench − Σ_{s≤t} μ(S(s)), the
performance gap Θ = τ_max × regret and θ = Θ/t, their realised versions, the summary metrics
(docs/metrics.md#regret) and the ``<curve>_vs_round.png`` figures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from jfl import plots
from jfl.stats import NONNEGATIVE, UNIT_INTERVAL

if TYPE_CHECKING:  # xarray is imported where a sweep's results are built
    import xarray as xr


def _cumulative_regret(ds: xr.Dataset, reward: str) -> xr.DataArray:
    # float64 sums: over thousands of rounds float32 loses seconds of Θ.
    import xarray as xr

    rounds = xr.DataArray(np.arange(1, ds.sizes["round"] + 1), dims="round")
    regret = rounds * ds["benchmark_reward"] - ds[reward].astype(np.float64).cumsum("round")
    return regret.transpose("config", "seed", "round")


def pseudo_regret_curve(ds: xr.Dataset) -> xr.DataArray:
    """t·r_bench − Σ_{s≤t} μ(S(s)) per (config, seed, round): the regret the paper's proofs
    bound (App. A: T·μ(S*) − Σ_t min_{k∈S(t)} μ_k; App. D with r* of LP (23)).

    ``r_bench`` is the ``benchmark_reward`` variable: μ(S*) of eq. (13) for CS-UCB, r* of the
    linear program (23) for CS-UCB-Q; μ(S(t)) is the environment's ``mean_set_reward``, from the
    same Monte Carlo μ_k as the benchmark.
    """
    return _cumulative_regret(ds, "mean_set_reward")


def performance_gap(ds: xr.Dataset, realised: bool = False) -> xr.DataArray:
    """Θ(t) = τ_max × the cumulative pseudo-regret after round t (Xia et al. §V-B).

    ``realised=True``: with the realised reward r(S(t)) = min_{k∈S(t)} r_k(t) in place of μ(S(t))
    (it adds the gap E[min_k r_k] < min_k μ_k that no policy can avoid).
    """
    regret = _cumulative_regret(ds, "set_reward") if realised else pseudo_regret_curve(ds)
    return float(ds.attrs["tau_max"]) * regret


def add_gap_curves(ds: xr.Dataset) -> xr.Dataset:
    """Per-round cumulative pseudo-regret, gap Θ(t), average gap θ(t) = Θ(t)/t, realised gap
    and cumulative failed clients."""
    gap = performance_gap(ds)
    return ds.assign(
        pseudo_regret_t=pseudo_regret_curve(ds),
        cumulative_gap_t=gap,
        average_gap_t=gap / ds["round"],
        realised_gap_t=performance_gap(ds, realised=True),
        failed_clients_t=ds["num_failed"].cumsum("round"),
    )


GAP_CURVES = {
    "pseudo_regret": ("pseudo_regret_t", "cumulative pseudo-regret T·r_bench − Σ μ(S(t))"),
    "cumulative_gap": ("cumulative_gap_t", "cumulative performance gap Θ (s)"),
    "average_gap": ("average_gap_t", "average performance gap θ (s)"),
    "realised_gap": ("realised_gap_t", "realised cumulative gap (s), min_k r_k(t) for μ(S(t))"),
    "failed_clients": ("failed_clients_t", "cumulative failed clients"),
}


def plot_gap_curves(
    ds: xr.Dataset, folder, names, caption: str, configs=None, method: str = "t"
) -> None:
    """``<name>_vs_round.png`` for each of ``names`` (keys of ``GAP_CURVES``), with bands
    (``method``: their interval, ``--ci``)."""

    curves = add_gap_curves(ds)
    for name in names:
        variable, ylabel = GAP_CURVES[name]
        path = folder / f"{name}_vs_round.png"
        title = f"{ylabel} ({caption})"
        plots.plot_over_rounds(
            curves, variable, ylabel, path, title, configs=configs, method=method,
            bounds=REGRET_BOUNDS.get(variable),
        )  # fmt: skip


def regret_metrics(ds: xr.Dataset) -> dict[str, xr.DataArray]:
    """Mean set reward and failed clients; with a benchmark, the pseudo-regret, the gaps Θ and θ
    and their realised versions (docs/metrics.md#regret)."""
    rounds = ds.sizes["round"]
    metrics = {
        "mean_set_reward": ds["set_reward"].mean("round"),
    }
    if "benchmark_reward" in ds:
        tau_max = float(ds.attrs["tau_max"])
        pseudo = pseudo_regret_curve(ds).isel(round=-1, drop=True)
        realised = _cumulative_regret(ds, "set_reward").isel(round=-1, drop=True)
        metrics["pseudo_regret"] = pseudo
        metrics["cumulative_gap"] = tau_max * pseudo
        metrics["average_gap"] = tau_max * pseudo / rounds
        metrics["realised_regret"] = realised
        metrics["realised_gap"] = tau_max * realised
    metrics["failed_clients"] = ds["num_failed"].sum("round").astype(float)
    return metrics


# The bounds of the metrics above that have any (the regrets and gaps can be negative), and of
# the curves the figures draw.
REGRET_BOUNDS = {
    "mean_set_reward": UNIT_INTERVAL,
    "failed_clients": NONNEGATIVE,
    "failed_clients_t": NONNEGATIVE,
}
