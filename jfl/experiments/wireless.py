"""The single-access-point ``wireless`` scenario (Xia et al. §V) that the CS-UCB experiments
(:mod:`jfl.experiments.cs_ucb`) and the federated ones (:mod:`jfl.experiments.fl`) share.

A wireless sweep crosses policies with the number of channels ``N`` (a shape: one compiled
program per value), the fairness scale ``rho`` and, for CS-UCB-Q, β. Per configuration it
derives the fairness vector c and the availability vector (both traced), checks that c is
feasible before anything runs, and can attach to every (configuration, seed) its regret
benchmark: μ(S*) of eq. (13) or r* of the linear program (23), with μ_k estimated by Monte Carlo
on that seed's client layout. Its runs' regrets, rewards and failures are reduced on the device
(:data:`jfl.experiments.regret_curves.REGRET_REDUCTIONS`), each run reading its seed's benchmark.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, ClassVar

import numpy as np
import pandas as pd
import tyro

from jfl import checks, results, sweep
from jfl.cli import Floats, Names
from jfl.driver import Experiment
from jfl.envs.wireless import PAPER_TAU_MAX, WirelessEnv, make_params, reward_statistics
from jfl.experiments import regret
from jfl.experiments.common import check_policies
from jfl.experiments.regret_curves import (
    REGRET_BOUNDS,
    REGRET_REDUCTIONS,
    benchmark_parts,
    gap_metrics,
    pseudo_regret_curve,
    regret_metrics,
)
from jfl.plots import has_runs
from jfl.runner import run_keys, seed_keys
from jfl.stats import Bounds
from jfl.sweep import Plan
from jfl.trackers import QUEUE_RATE, fairness_queue

if TYPE_CHECKING:  # xarray is imported where a sweep's results are built
    import xarray as xr

BENCHMARKS = ("best_set", "lp")
BENCHMARK_NOTES = {
    "best_set": "mu(S*) of eq. (13): the N-th largest Monte Carlo mu_k of the seed's layout",
    "lp": "r* of the linear program (23) over availability-only policies",
}


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
    """:func:`add_scenario_vectors`, then the benchmark reward and Monte Carlo μ; where ``ds``
    holds every run's rounds, the per-round cumulative pseudo-regret of every run
    (:func:`pseudo_regret_curve`; a sweep reduced on the device has its band instead)."""
    ds = add_scenario_vectors(ds, fairness=fairness, availability=availability, tau_max=tau_max)
    ds["benchmark_reward"] = (("config", "seed"), benchmark)
    ds["mean_reward"] = (("seed", "client"), mu)
    if not has_runs(ds, "mean_set_reward"):
        return ds
    ds["pseudo_regret_t"] = pseudo_regret_curve(ds)
    ds["pseudo_regret_t"].attrs["description"] = (
        "t·r_bench − Σ_{s≤t} μ(S(s)): cumulative pseudo-regret after round t"
    )
    return ds


def to_dataset(outputs, configs: pd.DataFrame, seeds, **scenario) -> xr.Dataset:
    """The runner's outputs labelled (``jfl.results.to_dataset``) plus :func:`add_scenario`."""

    return add_scenario(results.to_dataset(outputs, configs, seeds), **scenario)


def tau_max_note(tau_max: float) -> str:
    """What the metadata says about τ_max: the paper's 5 s or not, and why
    (docs/decisions.md#cs-ucb-tau-max)."""

    if tau_max == PAPER_TAU_MAX:
        return f"tau_max = {tau_max:g} s, the paper's (its rewards saturate: docs/decisions.md)"
    return (
        f"tau_max = {tau_max:g} s, not the paper's {PAPER_TAU_MAX:g} s: at {PAPER_TAU_MAX:g} s "
        "every mean reward is 0.93-0.98 and the UCB bonus dwarfs their differences "
        "(docs/decisions.md#cs-ucb-tau-max)"
    )


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

    def metrics(self, ds) -> dict:
        """From every run's rounds, :func:`regret_metrics`; reduced on the device, the gaps
        (:func:`gap_metrics`: the rest was reduced there)."""
        return regret_metrics(ds) if has_runs(ds, "set_reward") else gap_metrics(ds)

    def wireless_params(self, **overrides):
        """``make_params`` with this sweep's K, τ_max and coherence slots, then ``overrides``."""

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
            per_run_bytes=self.per_run_bytes(params, sizes),
            per_config={"fairness": fairness, "availability": availability, QUEUE_RATE: fairness},
            env_hparams=("availability",),
            trackers=(fairness_queue(),),
            finish=finish,
            metadata={"tau_max": params.tau_max, "tau_max_note": tau_max_note(params.tau_max)},
        )

    def per_run_bytes(self, params, sizes, trajectories: bool = False) -> int:
        """One run's memory at the largest N of ``sizes``, recording the trajectories where
        asked (``--trajectories``) or ``trajectories`` (for a reduction that reads them)."""
        trajectories = trajectories or self.trajectories
        return sweep.bytes_per_run(self.rounds, params.num_clients, int(sizes.max()), trajectories)

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
        samples of μ_k per layout; every run also reports μ(S(t)) from its seed's μ_k, and its
        regrets against its seed's benchmark are reduced on the device (``REGRET_REDUCTIONS``)."""

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

        # Each run reports μ(S(t)) from its own seed's μ_k, the benchmark's, and reads its own
        # seed's benchmark.
        mean_reward = np.broadcast_to(mu.astype(np.float32), (len(configs), *mu.shape))
        return dataclasses.replace(
            plan,
            per_seed={"mean_reward": mean_reward, **benchmark_parts(bench)},
            env_hparams=(*plan.env_hparams, "mean_reward"),
            finish=finish,
            reductions=REGRET_REDUCTIONS,
            metadata={"benchmark": BENCHMARK_NOTES[benchmark], **plan.metadata},
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
