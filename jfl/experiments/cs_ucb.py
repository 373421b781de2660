"""CS-UCB / CS-UCB-Q (Xia et al. §V) on the single-access-point ``wireless`` environment.

Experiments: ``CsUcbIdeal`` (Figs. 1 and 3), ``CsUcbQFairness`` (Figs. 4–5), ``BetaRhoGrid``
(β × ρ with c_k = ρ s_k / Σ s) and ``CsUcbQDelay`` (Fig. 7), on the scenario of
:mod:`jfl.experiments.wireless`; regret and gaps come from :mod:`jfl.experiments.regret_curves`.
Each reduces its runs on the device: per-run metrics and bands over seeds of the figures' curves
(Fig. 5's running selection fractions among them) leave it, every run's rounds only with
``--per-run-rounds`` and ``--trajectories``.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from jfl import checks, plots
from jfl.cli import Floats, Names
from jfl.experiments.common import check_hparams, plot_point
from jfl.experiments.regret_curves import (
    GAP_CURVES,
    WIRELESS_METRICS,
    add_gap_curves,
    plot_gap_curves,
    regret_metrics,
)
from jfl.experiments.wireless import (
    FAIRNESS_PRESET,
    Fairness,
    WirelessScenario,
    scenario_vectors,
    seed_benchmarks,
    to_dataset,
)
from jfl.kernels.reduce import doubling_cumsum, pairwise_sum
from jfl.outputs import CLIENT, ROUND
from jfl.policies import get
from jfl.reduction import Curve, Reductions, RunMetric, RunView
from jfl.stats import NONNEGATIVE, UNIT_INTERVAL
from jfl.sweep import Plan, config_table

__all__ = [
    "BetaRhoGrid",
    "CsUcbIdeal",
    "CsUcbQDelay",
    "CsUcbQFairness",
    # Imported from here by notebooks and tests written before the scenario had its own module.
    "add_gap_curves",
    "regret_metrics",
    "scenario_vectors",
    "seed_benchmarks",
    "to_dataset",
]


def check_channel_list(channels, clients: int) -> None:
    """``--N`` as a list: integers in [1, K] (one compiled program per value)."""
    for n in channels:
        if n != int(n) or not 1 <= n <= clients:
            raise ValueError(f"--N must be integers in [1, --clients={clients}], got {n}")
    checks.distinct("--N", channels)


@dataclasses.dataclass(frozen=True)
class CsUcbIdeal(WirelessScenario):
    """CS-UCB against Random and Round-robin in the ideal scenario (Xia et al. §V-B, Figs. 1, 3).

    K = 20 always-available clients in a 500 m disc (a fresh layout per seed), N channels,
    τ_max = 0.5 s (the paper's 5 s with ``--tau-max 5``: its rewards saturate,
    docs/decisions.md#cs-ucb-tau-max). The
    pseudo-regret is T·μ(S*) − Σ_t μ(S(t)), against the best fixed set S* of eq. (13) for the
    seed's layout, with μ_k estimated by Monte Carlo; the gaps are Θ = τ_max · pseudo-regret and
    θ = Θ/T, and the realised versions use min_{k∈S(t)} r_k(t) for μ(S(t)).

        python sweeps/cs_ucb_ideal.py                     # Fig. 1 (N = 5) and Fig. 3 (N = 1…10)
        python sweeps/cs_ucb_ideal.py --N 5 --rounds 20000 --seeds 256 --out runs/fig1
        python sweeps/cs_ucb_ideal.py --tau-max 5 --out runs/cs_ucb_ideal_paper_tau
    """

    N: Floats = tuple(float(n) for n in range(1, 11))
    """channels N per round, integers 1 ≤ N ≤ K (Fig. 3)"""
    mc_samples: int = 100_000
    """Monte Carlo samples per layout for μ_k"""
    seeds: int = 32
    rounds: int = 5000
    out: str = "runs/cs_ucb_ideal"

    name: ClassVar[str] = "cs_ucb_ideal"
    reduces_on_device: ClassVar[bool] = True
    fig1_channels: ClassVar[int] = 5
    summary_columns: ClassVar[tuple[str, ...]] = tuple(
        "policy N n_seeds cumulative_gap cumulative_gap_lo cumulative_gap_hi average_gap "
        "failed_clients mean_round_time".split()
    )

    def check(self) -> None:
        super().check()
        check_channel_list(self.N, self.clients)
        checks.integer("--mc-samples", self.mc_samples)

    def plan(self) -> Plan:
        params = self.params()
        return self.regret_plan(
            params, self.configs(), benchmark="best_set", mc_samples=self.mc_samples
        )

    def configs(self) -> pd.DataFrame:
        sizes = sorted({int(n) for n in self.N})
        configs = config_table(self.policies, {}, shared={"N": sizes})
        # One compiled program per (policy, N): group rows that way.
        return configs.sort_values(["N", "policy"], kind="stable").reset_index(drop=True)

    def params(self):
        """The ideal scenario: every client always available."""
        return self.wireless_params(availability=1.0)

    def fairness_vectors(self, configs):
        return scenario_vectors(configs, self.clients, availability=1.0)

    def plot_axes(self) -> dict[str, list[float]]:
        """N: Fig. 1's curves are at one N (5 by default, else the largest)."""
        return {"N": sorted({float(int(n)) for n in self.N})}

    def figures(self, ds, summary, folder) -> None:
        sizes = ds["N"].to_numpy()
        shown_n = self.fig1_channels if self.fig1_channels in sizes else int(sizes.max())
        shown_n = int(plot_point(self).get("N", shown_n))
        tau_max = ds.attrs["tau_max"]
        caption = f"Xia Fig. 1, K={ds.sizes['client']}, N={shown_n}, τ_max = {tau_max:g} s"
        shown = ds.sel(config=ds["config"][sizes == shown_n])
        plot_gap_curves(shown, folder, GAP_CURVES, caption, method=self.ci)
        if summary["N"].nunique() > 1:
            plots.plot_metric_vs(
                summary,
                "cumulative_gap",
                "N",
                folder / "gap_vs_channels.png",
                "cumulative performance gap Θ (s)",
                f"Gap at T = {ds.sizes['round']} vs channels N (Xia Fig. 3)",
            )


def check_fairness_preset(experiment) -> None:
    """The checks CsUcbQFairness and BetaRhoGrid share: the ``fairness`` preset (Xia et al.
    §V-C) and the Monte Carlo samples of μ_k."""
    experiment.preset.check(experiment.clients)
    checks.integer("--mc-samples", experiment.mc_samples)


def fairness_plan(experiment) -> Plan:
    """CsUcbQFairness' and BetaRhoGrid's plan: CS-UCB-Q on the ``fairness`` preset, its regret
    measured against r* of LP (23) for each configuration's c (Xia et al. App. D)."""
    params = experiment.preset.params(experiment)
    configs = experiment.configs()
    return experiment.regret_plan(params, configs, benchmark="lp", mc_samples=experiment.mc_samples)


def running_fraction(run: RunView) -> jax.Array:
    """[round, client] each client's fraction of the rounds 1…t in which it was selected
    (Xia Fig. 5), from the run's ``selected`` trajectory; counts summed exactly."""
    counts = doubling_cumsum(run.outputs["selected"].astype(jnp.float32))
    rounds = jnp.arange(1, run.num_rounds + 1, dtype=jnp.float32)
    return counts / rounds[:, None]


# Fig. 5's curve, banded over seeds on the device (``plots.plot_selection_fraction`` draws it).
SELECTION_FRACTION = Curve((ROUND, CLIENT), running_fraction, UNIT_INTERVAL, ("selected",))


@dataclasses.dataclass(frozen=True)
class CsUcbQFairness(WirelessScenario):
    """CS-UCB-Q for several β against modified CS-UCB (Xia et al. §V-C, Figs. 4–5).

    The runs record their selections for Fig. 5's running fractions, banded over seeds on the
    device; ``--trajectories`` keeps every run's in ``results.nc`` too.

        python sweeps/cs_ucb_q_fairness.py
        python sweeps/cs_ucb_q_fairness.py --beta 1e-5,1e-3,0.1,0.5 --seeds 128 --rounds 10000
        python sweeps/cs_ucb_q_fairness.py --fairness 0.5,0.5,0.5 --availability 0.95
    """

    policies: Names = ("cs_ucb_q", "modified_cs_ucb")
    clients: int = 3
    preset: Fairness = FAIRNESS_PRESET
    """the fairness scenario: channels, distances, availability"""
    beta: Floats = (1e-5, 1e-3, 0.01, 0.1)
    """CS-UCB-Q weight β in [0, 1]"""
    fairness: Floats = (0.6, 0.5, 0.4)
    """fairness vector c, each in [0, 1): one value or one per client"""
    mc_samples: int = 200_000
    """Monte Carlo samples for μ_k"""
    seeds: int = 32
    rounds: int = 5000
    out: str = "runs/cs_ucb_q_fairness"

    name: ClassVar[str] = "cs_ucb_q_fairness"
    reduces_on_device: ClassVar[bool] = True
    summary_columns: ClassVar[tuple[str, ...]] = tuple(
        "policy beta n_seeds cumulative_gap average_gap min_selection_rate "
        "max_rate_violation target_met rounds_to_target".split()
    )

    def check(self) -> None:
        super().check()
        check_fairness_preset(self)
        fairness = checks.per_client("--fairness", self.fairness, self.clients)
        checks.in_range("--fairness values c_k", fairness, 0.0, 1.0, high_open=True)
        check_hparams(self.policies, {"beta": self.beta})

    def plan(self) -> Plan:
        plan = fairness_plan(self)
        reductions = plan.reductions
        curves = {**reductions.curves, "selection_fraction": SELECTION_FRACTION}
        sizes = plan.configs["N"].to_numpy(int)
        return dataclasses.replace(
            plan,
            reductions=reductions._replace(curves=curves),
            trajectories=True,
            per_run_bytes=self.per_run_bytes(plan.env_params, sizes, trajectories=True),
        )

    def configs(self) -> pd.DataFrame:
        return config_table(self.policies, {"beta": list(self.beta)}, shared={"N": [self.preset.N]})

    def fairness_vectors(self, configs):
        fairness = checks.per_client("--fairness", self.fairness, self.clients)
        return scenario_vectors(
            configs, self.clients, availability=self.preset.availability, fairness=fairness
        )

    def figures(self, ds, summary, folder) -> None:
        caption = f"Xia Fig. 4, τ_max = {ds.attrs['tau_max']:g} s"
        plot_gap_curves(ds, folder, ("cumulative_gap", "average_gap"), caption, method=self.ci)
        if "selected" in ds or "selection_fraction_band" in ds:
            plots.plot_selection_fraction(ds, folder / "selection_fraction.png", method=self.ci)


@dataclasses.dataclass(frozen=True)
class BetaRhoGrid(WirelessScenario):
    """CS-UCB-Q over a β × ρ grid with c_k = ρ s_k / Σ s, many seeds (an extension of §V-C).

    The ``fairness`` scenario with dataset sizes s = (1500, 1000, 500): ρ scales how many rounds
    the clients are guaranteed, β how much CS-UCB-Q weighs the guarantee against latency. Every
    (β, ρ) pair is one traced configuration of one compiled program; regret is measured against
    r* of LP (23) for the configuration's c.

        python sweeps/beta_rho_grid.py
        python sweeps/beta_rho_grid.py --beta 1e-4,1e-3,1e-2,0.1,1 --rho 0.2:1.6:8 --seeds 512
    """

    policies: Names = ("cs_ucb_q",)
    clients: int = 3
    preset: Fairness = FAIRNESS_PRESET
    """the fairness scenario: channels, distances, availability"""
    beta: Floats = (1e-5, 1e-4, 1e-3, 1e-2, 0.1, 0.5)
    """CS-UCB-Q weight β in [0, 1]"""
    rho: Floats = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75)
    """fairness scale ρ ≥ 0"""
    samples: Floats = (1500.0, 1000.0, 500.0)
    """dataset sizes s_k > 0, one per client"""
    mc_samples: int = 200_000
    """Monte Carlo samples for μ_k"""
    seeds: int = 128
    rounds: int = 5000
    out: str = "runs/beta_rho_grid"

    name: ClassVar[str] = "beta_rho_grid"
    reduces_on_device: ClassVar[bool] = True
    summary_columns: ClassVar[tuple[str, ...]] = tuple(
        "policy rho beta n_seeds average_gap max_rate_violation target_met rounds_to_target".split()
    )

    def check(self) -> None:
        super().check()
        check_fairness_preset(self)
        checks.in_range("--rho", self.rho, 0.0)
        checks.distinct("--rho", self.rho)
        check_hparams(self.policies, {"beta": self.beta})
        checks.positive("--samples", checks.per_client("--samples", self.samples, self.clients))

    def plan(self) -> Plan:
        return fairness_plan(self)

    def configs(self) -> pd.DataFrame:
        return config_table(
            self.policies,
            {"beta": list(self.beta)},
            shared={"N": [self.preset.N], "rho": list(self.rho)},
        )

    def fairness_vectors(self, configs):
        samples = checks.per_client("--samples", self.samples, self.clients)
        return scenario_vectors(
            configs, self.clients, availability=self.preset.availability, samples=samples
        )

    def figures(self, ds, summary, folder) -> None:
        for policy in summary["policy"].unique():
            grid = summary[summary["policy"] == policy]
            if grid["beta"].nunique() < 2 or grid["rho"].nunique() < 2:
                continue
            # β's cells are evenly spaced whatever its values; their ticks say the values.
            # rounds_to_target is censored: NaN where no run met every c_k.
            for metric, title, missing in (
                ("average_gap", "average performance gap θ (s)", "n/a"),
                ("max_rate_violation", "largest shortfall max_k (c_k − rate_k)", "n/a"),
                ("rounds_to_target", "rounds until every c_k is met", "never met"),
            ):
                plots.plot_heatmap(
                    grid,
                    metric,
                    "rho",
                    "beta",
                    folder / f"heatmap_{policy}_{metric}.png",
                    f"{policy}: {title}",
                    missing=missing,
                )


# Fig. 7's per-run metrics, reduced on the device: the delay Σ_t max_{k∈S(t)} τ_k(t) (s) and
# the failed clients.
DELAY_METRICS = {
    "delay": RunMetric((), lambda r: pairwise_sum(r.outputs["round_time"]), NONNEGATIVE),
    "failed_clients": WIRELESS_METRICS["failed_clients"],
}


@dataclasses.dataclass(frozen=True)
class CsUcbQDelay(WirelessScenario):
    """Delay against the number of channels N for several fairness scales ρ (Xia et al. Fig. 7).

    K = 20 clients in a 500 m disc (a fresh layout per seed), availability α = 0.9 (§V-C's
    "for simplicity, we set α_k = 0.9"), fairness c_k = ρ s_k / Σ s (line ~429) with equal
    dataset sizes s by default (the ideal scenario's "partitioned into the clients equally"; the
    paper does not give s or α for Fig. 7, ``--samples`` and ``--availability`` change them). The
    delay is the cumulative training time Σ_t max_{k∈S(t)} τ_k(t) (s). No regret benchmark: the
    figure compares delays, so the LP (23) is not solved. Every ρ must be feasible for the
    smallest N (Σ c = ρ ≤ E[min(N, |A|)]); an infeasible pair is refused before anything runs.
    Policies that do not read c (the baselines) run once per N, with ρ left empty and their
    fairness queues measured against c = 0.

        python sweeps/cs_ucb_q_delay.py                              # about 26 s on 2 cores
        python sweeps/cs_ucb_q_delay.py --N 1:10:10 --rounds 20000 --seeds 32   # paper's size
    """

    policies: Names = ("cs_ucb_q", "modified_cs_ucb", "random", "round_robin")
    N: Floats = (1.0, 2.0, 4.0, 6.0, 8.0, 10.0)
    """channels N per round, integers 1 ≤ N ≤ K (one compiled program per policy and N)"""
    rho: Floats = (0.2, 0.5, 0.8)
    """fairness scale ρ ≥ 0 (c_k = ρ s_k / Σ s)"""
    beta: Floats = (0.1,)
    """CS-UCB-Q weight β in [0, 1]"""
    samples: Floats = (1.0,)
    """dataset sizes s_k > 0: one value (equal sizes) or one per client"""
    availability: float = 0.9
    """availability α in [0, 1]"""
    seeds: int = 8
    rounds: int = 2000
    out: str = "runs/cs_ucb_q_delay"

    name: ClassVar[str] = "cs_ucb_q_delay"
    reduces_on_device: ClassVar[bool] = True
    summary_columns: ClassVar[tuple[str, ...]] = tuple(
        "policy N rho beta n_seeds delay delay_lo delay_hi mean_round_time failed_clients "
        "max_rate_violation".split()
    )

    def check(self) -> None:
        super().check()
        check_channel_list(self.N, self.clients)
        checks.in_range("--rho", self.rho, 0.0)
        checks.distinct("--rho", self.rho)
        checks.in_range("--availability", self.availability, 0.0, 1.0)
        checks.positive("--samples", checks.per_client("--samples", self.samples, self.clients))
        check_hparams(self.policies, {"beta": self.beta})

    def configs(self) -> pd.DataFrame:
        """The configuration table: every policy × β per channel count N (ρ for CS-UCB-Q)."""
        sizes = sorted({int(n) for n in self.N})
        fair = [p for p in self.policies if "fairness" in get(p).hparams]
        others = [p for p in self.policies if p not in fair]
        tables = []
        if fair:
            shared = {"N": sizes, "rho": list(self.rho)}
            tables.append(config_table(fair, {"beta": list(self.beta)}, shared=shared))
        if others:
            table = config_table(others, {"beta": list(self.beta)}, shared={"N": sizes})
            tables.append(table.assign(rho=np.nan))
        configs = pd.concat(tables, ignore_index=True)
        configs = configs[["policy", "N", "rho", "beta"]]
        # One compiled program per (policy, N): group rows that way.
        return configs.sort_values(["N", "policy"], kind="stable").reset_index(drop=True)

    def plan(self) -> Plan:
        configs = self.configs()
        samples = checks.per_client("--samples", self.samples, self.clients)
        fairness, availability = scenario_vectors(
            configs.fillna({"rho": 0.0}),
            self.clients,
            availability=self.availability,
            samples=samples,
        )
        params = self.wireless_params(availability=self.availability)
        plan = self.scenario_plan(params, configs, fairness, availability)
        return dataclasses.replace(plan, reductions=Reductions(metrics=DELAY_METRICS))

    def metrics(self, ds) -> dict:
        """``DELAY_METRICS`` in float64 from every run's rounds (the host's reference); none
        of a sweep reduced on the device, which computed them there."""
        if not plots.has_runs(ds, "round_time"):
            return {}
        return {
            "delay": ds["round_time"].astype(np.float64).sum("round"),
            "failed_clients": ds["num_failed"].sum("round").astype(float),
        }

    def figures(self, ds, summary, folder) -> None:
        if summary["N"].nunique() > 1:
            plots.plot_metric_vs(
                summary,
                "delay",
                "N",
                folder / "delay_vs_channels.png",
                "delay Σ_t round time (s)",
                f"Delay at T = {ds.sizes['round']} vs channels N, K = {ds.sizes['client']} "
                f"(Xia Fig. 7, τ_max = {ds.attrs['tau_max']:g} s)",
            )
