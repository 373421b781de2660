"""CS-UCB / CS-UCB-Q (Xia et al. §V) on the single-access-point ``wireless`` environment.

Experiments: ``CsUcbIdeal`` (Figs. 1 and 3), ``CsUcbQFairness`` (Figs. 4–5) and ``BetaRhoGrid``
(β × ρ with c_k = ρ s_k / Σ s). A wireless sweep crosses policies with the number of channels
``N`` (a shape: one compiled program per value), the fairness scale ``rho`` and, for CS-UCB-Q,
β. Per configuration it derives the fairness vector c and the availability vector (both
traced), checks that c is feasible before anything runs, and attaches to every (configuration,
seed) its regret benchmark: μ(S*) of eq. (13) or r* of the linear program (23), with μ_k
estimated by Monte Carlo on that seed's client layout.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, ClassVar

import numpy as np
import pandas as pd
import tyro

from jfl import checks
from jfl.cli import Floats, Names
from jfl.driver import Experiment, Plan
from jfl.experiments.common import check_hparams, check_policies, plot_point
from jfl.stats import NONNEGATIVE, UNIT_INTERVAL, Bounds
from jfl.trackers import QUEUE_RATE, fairness_queue

if TYPE_CHECKING:  # xarray is imported where a sweep's results are built
    import xarray as xr

BENCHMARKS = ("best_set", "lp")
BENCHMARK_NOTES = {
    "best_set": "mu(S*) of eq. (13): the N-th largest Monte Carlo mu_k of the seed's layout",
    "lp": "r* of the linear program (23) over availability-only policies",
}


# --------------------------------------------------------------------------- scenarios


def scenario_vectors(
    configs: pd.DataFrame,
    num_clients: int,
    *,
    availability,
    fairness=None,
    samples=None,
) -> tuple[np.ndarray, np.ndarray]:
    """Fairness c [C, K] and availability α [C, K] of every configuration.

    c comes from a ``rho`` column and the dataset sizes ``samples`` (``c_k = ρ s_k / Σ s``), else
    from ``fairness`` (a scalar or one value per client), else it is 0. α comes from an
    ``availability`` column, else from ``availability``.
    """
    count = len(configs)
    if "availability" in configs:
        alpha = np.repeat(configs["availability"].to_numpy(float)[:, None], num_clients, 1)
    else:
        alpha = np.broadcast_to(np.asarray(availability, float), (count, num_clients)).copy()
    if "rho" in configs:
        s = np.asarray(samples, float)
        if s.shape != (num_clients,) or np.any(s <= 0):
            raise ValueError(f"samples must be {num_clients} positive dataset sizes, got {s}")
        c = configs["rho"].to_numpy(float)[:, None] * (s / s.sum())[None, :]
    elif fairness is not None:
        c = np.broadcast_to(np.asarray(fairness, float), (count, num_clients)).copy()
    else:
        c = np.zeros((count, num_clients))
    return c, alpha


def check_scenarios(configs: pd.DataFrame, fairness, availability, sizes) -> None:
    """``regret.check_fairness`` for every distinct (c, α, N); the error names the configuration."""
    from jfl.experiments import regret

    seen = set()
    for row, (c, alpha, n) in enumerate(zip(fairness, availability, sizes, strict=True)):
        signature = (tuple(c), tuple(alpha), int(n))
        if signature in seen:
            continue
        seen.add(signature)
        try:
            regret.check_fairness(c, alpha, int(n))
        except ValueError as err:
            label = ", ".join(f"{k}={v}" for k, v in configs.iloc[row].items() if pd.notna(v))
            raise ValueError(f"configuration ({label}): {err}") from None


def seed_layouts(env, params, keys) -> np.ndarray:
    """Client distances [S, K] of the runs with these seed keys (as ``make_run`` resets them)."""
    import jax

    from jfl.runner import run_keys

    return np.asarray(jax.vmap(lambda k: env.layout(run_keys(k)[0], params))(keys))


def seed_benchmarks(
    env,
    params,
    keys,
    sizes: Sequence[int],
    fairness: np.ndarray,
    availability: np.ndarray,
    *,
    kind: str,
    num_samples: int,
    mc_seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Benchmark reward [C, S] and Monte Carlo μ [S, K] for every configuration and seed.

    ``kind="best_set"``: μ(S*), the N-th largest μ_k (eq. 13). ``kind="lp"``: r* of LP (23)
    under the configuration's availability and fairness vector. Layouts shared by several seeds
    (explicit distances) are estimated and solved once.
    """
    import jax

    from jfl.envs.wireless import reward_statistics
    from jfl.experiments import regret

    if kind not in BENCHMARKS:
        raise ValueError(f"benchmark must be one of {BENCHMARKS}, got {kind!r}")
    layouts = seed_layouts(env, params, keys)
    unique, inverse = np.unique(layouts, axis=0, return_inverse=True)
    inverse = np.asarray(inverse).reshape(-1)
    estimate = jax.jit(
        jax.vmap(lambda d: reward_statistics(jax.random.key(mc_seed), params, d, num_samples)[0])
    )
    mu_unique = np.asarray(estimate(unique), float)
    benchmark = np.empty((len(sizes), len(keys)))
    cache: dict = {}
    for row, (n, c, alpha) in enumerate(zip(sizes, fairness, availability, strict=True)):
        for seed, layout in enumerate(inverse):
            signature = (int(layout), int(n), tuple(c), tuple(alpha))
            if signature not in cache:
                mu = mu_unique[layout]
                if kind == "best_set":
                    cache[signature] = regret.best_fixed_set(mu, int(n))[1]
                else:
                    cache[signature] = regret.availability_lp(mu, alpha, c, int(n)).r_star
            benchmark[row, seed] = cache[signature]
    return benchmark, mu_unique[inverse]


def add_scenario_vectors(
    ds: xr.Dataset, *, fairness: np.ndarray, availability: np.ndarray, tau_max: float
) -> xr.Dataset:
    """c and α per configuration as variables of a results dataset, τ_max as an attribute."""
    ds["queue_rate"] = (("config", "client"), fairness)
    ds["availability_prob"] = (("config", "client"), availability)
    ds.attrs["tau_max"] = float(tau_max)
    return ds


def add_scenario(
    ds: xr.Dataset,
    *,
    fairness: np.ndarray,
    availability: np.ndarray,
    benchmark: np.ndarray,
    mu: np.ndarray,
    tau_max: float,
) -> xr.Dataset:
    """:func:`add_scenario_vectors`, then the benchmark reward, Monte Carlo μ and the per-round
    cumulative pseudo-regret (:func:`pseudo_regret_curve`)."""
    ds = add_scenario_vectors(ds, fairness=fairness, availability=availability, tau_max=tau_max)
    ds["benchmark_reward"] = (("config", "seed"), benchmark)
    ds["mean_reward"] = (("seed", "client"), mu)
    ds["pseudo_regret_t"] = pseudo_regret_curve(ds)
    ds["pseudo_regret_t"].attrs["description"] = (
        "t·r_bench − Σ_{s≤t} μ(S(s)): cumulative pseudo-regret after round t"
    )
    return ds


def to_dataset(outputs, configs: pd.DataFrame, seeds, **scenario) -> xr.Dataset:
    """The runner's outputs labelled (``jfl.results.to_dataset``) plus :func:`add_scenario`."""
    from jfl import results

    return add_scenario(results.to_dataset(outputs, configs, seeds), **scenario)


# --------------------------------------------------------------------------- metrics


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
    from jfl import plots

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


# --------------------------------------------------------------------------- experiments


def tau_max_note(tau_max: float) -> str:
    """What the metadata says about τ_max: the paper's 5 s or not, and why
    (docs/decisions.md#cs-ucb-tau-max)."""
    from jfl.envs.wireless import PAPER_TAU_MAX

    if tau_max == PAPER_TAU_MAX:
        return f"tau_max = {tau_max:g} s, the paper's (its rewards saturate: docs/decisions.md)"
    return (
        f"tau_max = {tau_max:g} s, not the paper's {PAPER_TAU_MAX:g} s: at {PAPER_TAU_MAX:g} s "
        "every mean reward is 0.93-0.98 and the UCB bonus dwarfs their differences "
        "(docs/decisions.md#cs-ucb-tau-max)"
    )


def check_channel_list(channels, clients: int) -> None:
    """``--N`` as a list: integers in [1, K] (one compiled program per value)."""
    for n in channels:
        if n != int(n) or not 1 <= n <= clients:
            raise ValueError(f"--N must be integers in [1, --clients={clients}], got {n}")
    checks.distinct("--N", channels)


@dataclasses.dataclass(frozen=True)
class WirelessScenario(Experiment):
    """A sweep of the ``wireless`` environment (the CS-UCB family's policies)."""

    policies: Names = ("cs_ucb", "random", "round_robin")
    """registered policies (cs_ucb, cs_ucb_q, modified_cs_ucb, random, round_robin)"""
    clients: int = 20
    """clients K"""
    tau_max: float = 0.5
    """round deadline τ_max (s) > 0; the paper's is 5 (its rewards saturate: docs/decisions.md)"""
    coherence_slots: int = 1
    """fades per link and round whose rates are averaged (§V line ~355), an integer ≥ 1"""

    environment: ClassVar[str] = "wireless"
    metric_bounds: ClassVar[Mapping[str, Bounds]] = REGRET_BOUNDS

    def check(self) -> None:
        super().check()
        checks.clients("--clients", self.clients)
        checks.positive("--tau-max", self.tau_max)
        checks.integer("--coherence-slots", self.coherence_slots)
        check_policies(self.policies, self.environment, self.trains)

    def wireless_params(self, **overrides):
        """``make_params`` with this sweep's K, τ_max and coherence slots, then ``overrides``."""
        from jfl.envs.wireless import make_params

        return make_params(
            self.clients,
            tau_max=self.tau_max,
            coherence_slots=self.coherence_slots,
            **overrides,
        )

    def scenario_plan(self, params, configs: pd.DataFrame, fairness, availability) -> Plan:
        """The plan of a wireless sweep whose configs have an ``N`` column: c [C, K] and α [C, K]
        per configuration, checked feasible first; every policy's fairness queue and rate
        violation are measured against c."""
        from jfl import sweep
        from jfl.envs.wireless import WirelessEnv

        sizes = configs["N"].to_numpy(int)
        check_scenarios(configs, fairness, availability, sizes)

        def finish(ds: xr.Dataset) -> xr.Dataset:
            return add_scenario_vectors(
                ds, fairness=fairness, availability=availability, tau_max=params.tau_max
            )

        return Plan(
            WirelessEnv(),
            params,
            configs,
            selection_size="N",
            per_run_bytes=sweep.bytes_per_run(
                self.rounds, params.num_clients, int(sizes.max()), self.trajectories
            ),
            per_config={"fairness": fairness, "availability": availability, QUEUE_RATE: fairness},
            env_hparams=("availability",),
            trackers=(fairness_queue(),),
            finish=finish,
            metadata={"tau_max": params.tau_max, "tau_max_note": tau_max_note(params.tau_max)},
        )

    def configs(self) -> pd.DataFrame:
        """The configuration table, with an ``N`` column."""
        raise NotImplementedError

    def fairness_vectors(self, configs: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """The fairness vector c [C, K] and availability α [C, K] of every configuration."""
        raise NotImplementedError

    def regret_plan(
        self, params, configs: pd.DataFrame, *, benchmark: str, mc_samples: int
    ) -> Plan:
        """``scenario_plan`` with a regret benchmark per seed: μ(S*) of the best fixed set
        (``benchmark="best_set"``) or r* of LP (23) (``"lp"``), from ``mc_samples`` Monte Carlo
        samples of μ_k per layout; every run also reports μ(S(t)) from its seed's μ_k."""
        from jfl.runner import seed_keys

        fairness, availability = self.fairness_vectors(configs)
        plan = self.scenario_plan(params, configs, fairness, availability)
        bench, mu = seed_benchmarks(
            plan.env,
            params,
            seed_keys(self.base_seed, np.arange(self.seeds)),
            configs["N"].to_numpy(int),
            fairness,
            availability,
            kind=benchmark,
            num_samples=mc_samples,
            mc_seed=self.base_seed + 1_000_003,
        )

        def finish(ds: xr.Dataset) -> xr.Dataset:
            return add_scenario(
                ds,
                fairness=fairness,
                availability=availability,
                benchmark=bench,
                mu=mu,
                tau_max=params.tau_max,
            )

        # Each run reports μ(S(t)) from its own seed's μ_k, the benchmark's.
        mean_reward = np.broadcast_to(mu.astype(np.float32), (len(configs), *mu.shape))
        return dataclasses.replace(
            plan,
            per_seed={"mean_reward": mean_reward},
            env_hparams=(*plan.env_hparams, "mean_reward"),
            finish=finish,
            metadata={"benchmark": BENCHMARK_NOTES[benchmark], **plan.metadata},
        )


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

    def metrics(self, ds) -> dict:
        return regret_metrics(ds)

    def configs(self) -> pd.DataFrame:
        from jfl.sweep import config_table

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
        from jfl import plots

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


@dataclasses.dataclass(frozen=True)
class FairnessPreset:
    """The wireless ``fairness`` preset's scenario (Xia et al. §V-C): clients at an equal 300 m,
    N = 2 channels, availability 0.9.

    τ_max = 0.5 s instead of the paper's 5 s: with 5 s every reward is ≈ 0.96, CS-UCB-Q's
    truncated index is 1 for every client and no β changes anything
    (docs/decisions.md#cs-ucb-tau-max). An experiment holds it as its field ``preset`` (of type
    :data:`Fairness`), whose flags are the experiment's own (``--N``, ``--distance``, …).
    """

    N: int = 2
    """channels N, 1 ≤ N ≤ K"""
    distance: Floats = (300.0,)
    """client distances (m) > 0: one value or one per client"""
    availability: float = 0.9
    """availability α in [0, 1]"""

    def check(self, clients: int) -> None:
        """``ValueError`` naming the flag of the first bad value, for ``clients`` clients."""
        checks.integer("--N", self.N, 1, clients, "--clients")
        checks.in_range("--availability", self.availability, 0.0, 1.0)
        checks.positive("--distance", checks.per_client("--distance", self.distance, clients))

    def params(self, scenario: WirelessScenario):
        """The wireless parameters of ``scenario`` with this preset's distances and α."""
        return scenario.wireless_params(
            distance=checks.per_client("--distance", self.distance, scenario.clients),
            availability=self.availability,
        )


# An experiment's field holding the preset; its flags carry no prefix.
Fairness = Annotated[FairnessPreset, tyro.conf.OmitArgPrefixes]
FAIRNESS_PRESET = FairnessPreset()


@dataclasses.dataclass(frozen=True)
class CsUcbQFairness(WirelessScenario):
    """CS-UCB-Q for several β against modified CS-UCB (Xia et al. §V-C, Figs. 4–5).

    Per-round selections are stored by default (K is small): they give Fig. 5's fractions.

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
    trajectories: bool = True
    out: str = "runs/cs_ucb_q_fairness"

    name: ClassVar[str] = "cs_ucb_q_fairness"
    summary_columns: ClassVar[tuple[str, ...]] = tuple(
        "policy beta n_seeds cumulative_gap average_gap min_selection_rate "
        "max_rate_violation target_met rounds_to_target".split()
    )

    def check(self) -> None:
        super().check()
        self.preset.check(self.clients)
        checks.integer("--mc-samples", self.mc_samples)
        fairness = checks.per_client("--fairness", self.fairness, self.clients)
        checks.in_range("--fairness values c_k", fairness, 0.0, 1.0, high_open=True)
        check_hparams(self.policies, {"beta": self.beta})

    def plan(self) -> Plan:
        params = self.preset.params(self)
        return self.regret_plan(params, self.configs(), benchmark="lp", mc_samples=self.mc_samples)

    def metrics(self, ds) -> dict:
        return regret_metrics(ds)

    def configs(self) -> pd.DataFrame:
        from jfl.sweep import config_table

        return config_table(self.policies, {"beta": list(self.beta)}, shared={"N": [self.preset.N]})

    def fairness_vectors(self, configs):
        fairness = checks.per_client("--fairness", self.fairness, self.clients)
        return scenario_vectors(
            configs, self.clients, availability=self.preset.availability, fairness=fairness
        )

    def figures(self, ds, summary, folder) -> None:
        from jfl import plots

        caption = f"Xia Fig. 4, τ_max = {ds.attrs['tau_max']:g} s"
        plot_gap_curves(ds, folder, ("cumulative_gap", "average_gap"), caption, method=self.ci)
        if "selected" in ds:
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
    summary_columns: ClassVar[tuple[str, ...]] = tuple(
        "policy rho beta n_seeds average_gap max_rate_violation target_met rounds_to_target".split()
    )

    def check(self) -> None:
        super().check()
        self.preset.check(self.clients)
        checks.integer("--mc-samples", self.mc_samples)
        checks.in_range("--rho", self.rho, 0.0)
        checks.distinct("--rho", self.rho)
        check_hparams(self.policies, {"beta": self.beta})
        checks.positive("--samples", checks.per_client("--samples", self.samples, self.clients))

    def plan(self) -> Plan:
        params = self.preset.params(self)
        return self.regret_plan(params, self.configs(), benchmark="lp", mc_samples=self.mc_samples)

    def metrics(self, ds) -> dict:
        return regret_metrics(ds)

    def configs(self) -> pd.DataFrame:
        from jfl.sweep import config_table

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
        from jfl import plots

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
    summary_columns: ClassVar[tuple[str, ...]] = tuple(
        "policy N rho beta n_seeds delay delay_lo delay_hi mean_round_time failed_clients "
        "max_rate_violation".split()
    )
    metric_bounds: ClassVar[Mapping[str, Bounds]] = {
        "delay": NONNEGATIVE,
        "failed_clients": NONNEGATIVE,
    }

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
        from jfl.policies import get
        from jfl.sweep import config_table

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
        return self.scenario_plan(params, configs, fairness, availability)

    def metrics(self, ds) -> dict:
        return {
            "delay": ds["round_time"].astype(np.float64).sum("round"),
            "failed_clients": ds["num_failed"].sum("round").astype(float),
        }

    def figures(self, ds, summary, folder) -> None:
        from jfl import plots

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
