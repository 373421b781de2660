"""Regret and performance-gap curves of a wireless sweep (Xia et al. §V-B, App. A and D).

Given a results dataset with a ``benchmark_reward`` (μ(S*) of eq. 13 or r* of LP 23, from
:mod:`jfl.experiments.regret`), the cumulative pseudo-regret t·r_bench − Σ_{s≤t} μ(S(s)), the
performance gap Θ = τ_max × regret and θ = Θ/t, their realised versions, the summary metrics
(docs/metrics.md#regret) and the ``<curve>_vs_round.png`` figures.

A sweep reduced on the device (``jfl.reduction``) computes the per-run regrets, rewards and
failures and the curves' bands there (:data:`REGRET_REDUCTIONS`, each run reading its seed's
benchmark from :func:`benchmark_parts`); the gaps are linear in the regrets, so the host
derives them from those (:func:`gap_metrics`, :func:`add_gap_bands`). :func:`regret_metrics`
and :func:`add_gap_curves` are the same quantities in float64 from every run's rounds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jfl import plots
from jfl.kernels.reduce import doubling_cumsum, pairwise_mean, pairwise_sum
from jfl.outputs import ROUND
from jfl.reduction import Curve, Reductions, RunMetric, RunView
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
    and cumulative failed clients, per run (from every run's rounds)."""
    gap = performance_gap(ds)
    return ds.assign(
        pseudo_regret_t=pseudo_regret_curve(ds),
        cumulative_gap_t=gap,
        average_gap_t=gap / ds["round"],
        realised_gap_t=performance_gap(ds, realised=True),
        failed_clients_t=ds["num_failed"].cumsum("round"),
    )


def _scaled_band(band: xr.DataArray, factor) -> xr.DataArray:
    """The band [.., stat, ..] of factor·X from X's: (factor·mean, factor²·var)."""
    import xarray as xr

    mean, var = band.sel(stat="mean"), band.sel(stat="var")
    scaled = xr.concat([mean * factor, var * factor**2], dim=band["stat"])
    return scaled.transpose(*band.dims)


def add_gap_bands(ds: xr.Dataset) -> xr.Dataset:
    """The bands over seeds of :func:`add_gap_curves`' curves, from a sweep reduced on the
    device: the pseudo-regret's, the realised regret's and the failed clients' were reduced
    there (:data:`REGRET_REDUCTIONS`), Θ(t), θ(t) = Θ(t)/t and the realised gap are multiples
    of the regrets'."""
    tau_max = float(ds.attrs["tau_max"])
    pseudo = ds["pseudo_regret_t_band"]
    return ds.assign(
        cumulative_gap_t_band=_scaled_band(pseudo, tau_max),
        average_gap_t_band=_scaled_band(pseudo, tau_max / ds["round"]),
        realised_gap_t_band=_scaled_band(ds["realised_regret_t_band"], tau_max),
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
    (``method``: their interval, ``--ci``): over every run's curves where ``ds`` holds every
    run's rounds, else the bands reduced on the device (Student-t)."""

    curves = add_gap_curves(ds) if plots.has_runs(ds, "mean_set_reward") else add_gap_bands(ds)
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
    and their realised versions (docs/metrics.md#regret), in float64 from every run's rounds.

    The host reference of :data:`REGRET_REDUCTIONS` and :func:`gap_metrics`, which name the mean
    set reward ``average_set_reward`` (a reduced dataset holds the per-run metrics beside the
    runs' per-round outputs, among which ``mean_set_reward`` is μ(S(t)))."""
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


def gap_metrics(ds: xr.Dataset) -> dict[str, xr.DataArray]:
    """Θ = τ_max·pseudo-regret, θ = Θ/T and the realised gap τ_max·realised regret per run
    (Xia et al. §V-B), in float64 from the regrets reduced on the device; none without them."""
    if "pseudo_regret" not in ds:
        return {}
    tau_max = float(ds.attrs["tau_max"])
    pseudo = ds["pseudo_regret"].astype(np.float64)
    return {
        "cumulative_gap": tau_max * pseudo,
        "average_gap": tau_max * pseudo / ds.sizes["round"],
        "realised_gap": tau_max * ds["realised_regret"].astype(np.float64),
    }


# The bounds of the metrics above that have any (the regrets and gaps can be negative), and of
# the curves the figures draw.
REGRET_BOUNDS = {
    "mean_set_reward": UNIT_INTERVAL,
    "failed_clients": NONNEGATIVE,
    "failed_clients_t": NONNEGATIVE,
}


# --------------------------------------------------------------------------- on the device

# The benchmark r_bench a run reads from its seed's hyperparameters (``Plan.per_seed``), as
# float32 parts whose sum is the float64 value to about 2⁻⁴⁸ of it (:func:`benchmark_parts`).
BENCHMARK_HI, BENCHMARK_LO = "benchmark_hi", "benchmark_lo"


def benchmark_parts(benchmark: np.ndarray) -> dict[str, np.ndarray]:
    """The float64 benchmark [C, S] as float32 ``hi + lo`` (``Plan.per_seed``): float32 alone
    would move T·r_bench by up to T·2⁻²⁴·r_bench, as much as a good policy's whole regret."""
    benchmark = np.asarray(benchmark, np.float64)
    hi = benchmark.astype(np.float32)
    return {BENCHMARK_HI: hi, BENCHMARK_LO: (benchmark - hi.astype(np.float64)).astype(np.float32)}


def _shortfalls(run: RunView, reward: str) -> jax.Array:
    """r_bench − reward(t) per round, with r_bench's float32 part: each difference rounded
    once (exact where the two are within a factor of 2), so that the sums lose float32 bits
    of the regret, not of T·r_bench."""
    return run.hparams[BENCHMARK_HI] - run.outputs[reward].astype(jnp.float32)


def _low_part(run: RunView, rounds: jax.Array) -> jax.Array:
    # Materialised: fused into the sum that follows, XLA:CPU contracts the product and the
    # addition into an FMA for some batch shapes only (see jfl.reduction._squares).
    return lax.optimization_barrier(rounds * run.hparams[BENCHMARK_LO])


def _regret(reward: str):
    """T·r_bench − Σ_t reward(t) of one run (App. A, D), as Σ_t (r_bench − reward(t))."""

    def regret(run: RunView) -> jax.Array:
        rounds = jnp.float32(run.num_rounds)
        return pairwise_sum(_shortfalls(run, reward)) + _low_part(run, rounds)

    return regret


def _regret_curve(reward: str):
    """t·r_bench − Σ_{s≤t} reward(s) of one run, for every round t."""

    def curve(run: RunView) -> jax.Array:
        rounds = jnp.arange(1, run.num_rounds + 1, dtype=jnp.float32)
        return doubling_cumsum(_shortfalls(run, reward)) + _low_part(run, rounds)

    return curve


def _failed(run: RunView) -> jax.Array:
    return run.outputs["num_failed"].astype(jnp.float32)  # exact below 2²⁴


# Per-run metrics of every wireless sweep, reduced on the device beside the library's: the set
# reward r(S(t)) averaged over rounds (``average_set_reward``: ``mean_set_reward`` is the runs'
# per-round μ(S(t))) and the failed clients (``regret_metrics``' without a benchmark).
WIRELESS_METRICS = {
    "average_set_reward": RunMetric(
        ("set_reward",), lambda r: pairwise_mean(r.outputs["set_reward"]), UNIT_INTERVAL
    ),
    "failed_clients": RunMetric(("num_failed",), lambda r: pairwise_sum(_failed(r)), NONNEGATIVE),
}
# With a benchmark, the pseudo- and realised regrets too, and the curves the figures draw
# (``GAP_CURVES``); the gaps are multiples of the regrets, derived on the host (gap_metrics,
# add_gap_bands).
REGRET_REDUCTIONS = Reductions(
    metrics={
        "average_set_reward": WIRELESS_METRICS["average_set_reward"],
        "pseudo_regret": RunMetric(("mean_set_reward",), _regret("mean_set_reward")),
        "realised_regret": RunMetric(("set_reward",), _regret("set_reward")),
        "failed_clients": WIRELESS_METRICS["failed_clients"],
    },
    curves={
        "pseudo_regret_t": Curve(
            (ROUND,), _regret_curve("mean_set_reward"), reads=("mean_set_reward",)
        ),
        "realised_regret_t": Curve((ROUND,), _regret_curve("set_reward"), reads=("set_reward",)),
        "failed_clients_t": Curve(
            (ROUND,), lambda r: doubling_cumsum(_failed(r)), NONNEGATIVE, ("num_failed",)
        ),
    },
)
