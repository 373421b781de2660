"""COCS (Qu et al. §VI) on the hierarchical ``hfl`` environment: clients → edge servers → cloud.

``CocsHfl`` runs COCS against the paper's benchmarks (§VI-B: Oracle, CUCB, LinUCB, Random)
under per-edge-server budgets (Figs. 3–4); budgets and deadlines are traced environment
parameters and COCS's h_T and z traced hyperparameters, so each grid is one compiled program per
policy. Regret is measured against an oracle (§VI-B's ``oracle`` unless ``--regret-against``
names another) run on the same seeds (common random numbers).

``CocsHfl`` reduces its runs on the device (``jfl.reduction``): each run's cumulative utility,
its square-root form and its successes per round (``UTILITY_REDUCTIONS``), and bands over seeds
of the running sums; the host pairs every configuration's totals with its oracle's by seed
(``oracle_regret``). Fig. 3b's running regret is paired on the device: the oracle's
configurations are the sweep's reference (``jfl.reduction.Reference``), and each run subtracts
its utility from its oracle's on the same seed, round by round (``REGRET_REDUCTIONS``), before
the band over seeds. ``attach_oracle`` and ``utility_metrics`` are the same metrics from every
run's rounds, in float64: the reference, and what a sweep that keeps every run's rounds uses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar, Literal

import jax.numpy as jnp
import numpy as np

from jfl import checks, plots, sweep
from jfl.cli import Floats, Names
from jfl.driver import Experiment
from jfl.envs.hfl import PRESETS, HflEnv, preset_params
from jfl.experiments.common import (
    check_hparams,
    check_policies,
    figure_slice,
    list_defaults,
    plot_point,
)
from jfl.kernels.reduce import doubling_cumsum, pairwise_mean, pairwise_sum
from jfl.outputs import ROUND
from jfl.plots.bands import has_runs
from jfl.policies import REGISTRY
from jfl.reduction import Curve, Reductions, Reference, RunMetric
from jfl.stats import NONNEGATIVE, UNBOUNDED, Bounds
from jfl.sweep import Plan

if TYPE_CHECKING:  # xarray is imported where a sweep's results are built
    import xarray as xr


# The scenario coordinates a configuration shares with the oracle it is measured against.
SCENARIO = ("budget", "deadline")


def oracle_rows(ds: xr.Dataset, scenario=SCENARIO, reference: str = "oracle") -> np.ndarray | None:
    """[config] The row of the ``reference`` configuration each configuration is paired with:
    the first that has the same values of the ``scenario`` coordinates (those present); None if
    no configuration runs ``reference``, ``ValueError`` if one has no such row."""
    names = [name for name in scenario if name in ds.coords]
    values = {name: ds[name].to_numpy() for name in names}
    return reference_rows(ds["policy"].to_numpy(), values, reference)


def reference_rows(
    policy: np.ndarray, scenario: Mapping[str, np.ndarray], reference: str = "oracle"
) -> np.ndarray | None:
    """[config] :func:`oracle_rows` from the configurations' ``policy`` and ``scenario``
    values ({name: [config]}): of a dataset's coordinates, or of a plan's table before it runs
    (``jfl.reduction.Reference``)."""
    if reference not in policy:
        return None
    values = np.stack(list(scenario.values()), axis=1) if scenario else None
    candidates = np.flatnonzero(policy == reference)
    match = []
    for config in range(len(policy)):
        if values is None:
            match.append(candidates[0])
            continue
        same = (values[candidates] == values[config]).all(axis=1)
        if not same.any():
            raise ValueError(f"no {reference} configuration shares the scenario of config {config}")
        match.append(candidates[np.flatnonzero(same)[0]])
    return np.asarray(match)


def attach_oracle(ds: xr.Dataset, scenario=SCENARIO, reference: str = "oracle") -> xr.Dataset:
    """Add ``oracle_utility`` [config, seed, round]: the ``reference`` policy's utility in the
    same scenario, from every run's rounds.

    Each configuration is paired with the ``reference`` configuration that has the same values
    of the ``scenario`` coordinates (those present; :func:`oracle_rows`), on the same seeds,
    which is what the regret metrics subtract from (COCS eq. 11). The dataset's
    ``regret_against`` attribute names the reference. Unchanged if no configuration runs it.
    """
    match = oracle_rows(ds, scenario, reference)
    if match is None:
        return ds
    oracle = ds["utility"].isel(config=match).assign_coords(config=ds["config"])
    ds = ds.assign(oracle_utility=oracle.drop_vars([c for c in oracle.coords if c != "config"]))
    return ds.assign_attrs(regret_against=reference)


def utility_metrics(ds: xr.Dataset) -> dict[str, xr.DataArray]:
    """Cumulative utility (eq. 8) and its square root (eq. 19), successful clients per round,
    and regret against the Oracle (eq. 11) when an ``oracle_utility`` variable is present: from
    every run's rounds, in float64 (the reference of ``UTILITY_REDUCTIONS`` and
    :func:`oracle_regret`)."""
    utility = ds["utility"].astype(np.float64)
    metrics = {
        "cumulative_utility": utility.sum("round"),
        "cumulative_utility_sqrt": np.sqrt(utility).sum("round"),
        "success_per_round": ds["num_success"].mean("round"),
    }
    if "oracle_utility" in ds:
        oracle = ds["oracle_utility"].astype(np.float64)
        metrics["regret_vs_oracle"] = (oracle - utility).sum("round")
        metrics["regret_vs_oracle_sqrt"] = (np.sqrt(oracle) - np.sqrt(utility)).sum("round")
    return metrics


# The bounds of the metrics above that have any (a regret can be negative: ``oracle_context``
# knows less than the realised outcome).
UTILITY_BOUNDS = {
    "cumulative_utility": NONNEGATIVE,
    "cumulative_utility_sqrt": NONNEGATIVE,
    "success_per_round": NONNEGATIVE,
}


def _utility(run) -> jnp.ndarray:
    return run.outputs["utility"]


def _utility_sqrt(run) -> jnp.ndarray:
    return jnp.sqrt(run.outputs["utility"])


# The metrics of ``utility_metrics`` without the oracle, as functions of one run reduced on the
# device (float32, pairwise sums), and the running sums that Figs. 3a and 7 band over seeds.
UTILITY_REDUCTIONS = Reductions(
    metrics={
        # Σ_t μ_t (eq. 8) and Σ_t √μ_t (eq. 19).
        "cumulative_utility": RunMetric(
            ("utility",), lambda r: pairwise_sum(_utility(r)), NONNEGATIVE
        ),
        "cumulative_utility_sqrt": RunMetric(
            ("utility",), lambda r: pairwise_sum(_utility_sqrt(r)), NONNEGATIVE
        ),
        "success_per_round": RunMetric(
            ("num_success",),
            lambda r: pairwise_mean(r.outputs["num_success"].astype(jnp.float32)),
            NONNEGATIVE,
        ),
    },
    curves={
        # Named apart from the per-run totals: the figures tell a band from every run's values
        # by name (``jfl.plots.bands.has_runs``).
        "utility_cumsum": Curve(
            (ROUND,), lambda r: doubling_cumsum(_utility(r)), NONNEGATIVE, ("utility",)
        ),
        "utility_sqrt_cumsum": Curve(
            (ROUND,), lambda r: doubling_cumsum(_utility_sqrt(r)), NONNEGATIVE, ("utility",)
        ),
    },
)

# The running regret against the oracle (eq. 11) of Fig. 3b, paired by seed on the device: the
# oracle's utility on the run's own seed (the plan's reference) minus the run's, round by round,
# summed (a band of its own, as the running utilities are).
REGRET_REDUCTIONS = Reductions(
    curves={
        "regret_cumsum": Curve(
            (ROUND,),
            lambda r: doubling_cumsum(r.reference["utility"] - _utility(r)),
            UNBOUNDED,
            ("utility",),
        ),
    },
)

# Each regret (eq. 11) is the oracle's total minus the configuration's, of these totals.
REGRETS = {
    "regret_vs_oracle": "cumulative_utility",
    "regret_vs_oracle_sqrt": "cumulative_utility_sqrt",
}


def oracle_regret(
    ds: xr.Dataset, scenario=SCENARIO, reference: str = "oracle"
) -> dict[str, xr.DataArray]:
    """``regret_vs_oracle`` and ``regret_vs_oracle_sqrt`` [config, seed] (eq. 11) from the
    per-run totals of a sweep reduced on the device (``UTILITY_REDUCTIONS``).

    A regret is a sum over rounds of differences, so it is the difference of the sums: the
    total of the configuration's oracle (:func:`oracle_rows`, as ``attach_oracle`` pairs them)
    on the same seed minus its own, in float64 (exact for float32 totals). It equals
    ``utility_metrics``'s per-round sum up to the float32 rounding of the two totals, whatever
    the chunks. Empty if no configuration runs ``reference``.
    """
    match = oracle_rows(ds, scenario, reference)
    if match is None:
        return {}
    regrets = {}
    for regret, total in REGRETS.items():
        values = ds[total].transpose("config", "seed")
        own = values.to_numpy().astype(np.float64)
        regrets[regret] = values.copy(data=own[match] - own)
    return regrets


@dataclasses.dataclass(frozen=True)
class HflScenario(Experiment):
    """The ``hfl`` environment with Table I's presets, budgets and deadlines."""

    policies: Names = ("cocs", "oracle", "linucb", "cucb", "random_budget")
    """policies: the paper's cocs, oracle (§VI-B), cucb, linucb, random_budget; also oracle_context
    (§IV-A), oracle_state, cucb_pairs, linucb_pairs and the diagnostic cocs_lookahead"""
    budget: Floats = ()
    """budget B per edge server > 0 (default: the preset's)"""
    deadline: Floats = ()
    """round deadline (s) > 0 (default: the preset's)"""
    preset: Literal["mnist", "cifar"] = "mnist"
    """Table I's setting"""
    clients: int = 50
    """clients N"""
    servers: int = 3
    """edge servers M, 1 ≤ M ≤ N"""

    environment: ClassVar[str] = "hfl"
    metric_bounds: ClassVar[Mapping[str, Bounds]] = UTILITY_BOUNDS

    def check(self) -> None:
        super().check()
        checks.clients("--clients", self.clients)
        checks.integer("--servers", self.servers, 1, self.clients, "--clients")
        for name, values in (("--budget", self.budget), ("--deadline", self.deadline)):
            if values is not None:
                checks.positive(name, values)
        check_policies(self.policies, self.environment, self.trains)

    def scenario(self) -> dict[str, list[float]]:
        """Budgets and deadlines (the preset's when not given)."""
        preset = PRESETS[self.preset]
        return {
            "budget": list(self.budget or [float(preset["budget"])]),
            "deadline": list(self.deadline or [float(preset["deadline"])]),
        }

    def environment_params(self, **overrides):
        """The ``hfl`` environment and its preset parameters for this sweep, then ``overrides``."""
        params = preset_params(
            self.preset, num_clients=self.clients, num_servers=self.servers, **overrides
        )
        return HflEnv(), params

    def metrics(self, ds) -> dict:
        # From every run's rounds on the host; reduced on the device, the utility metrics are
        # the runs' own (``UTILITY_REDUCTIONS``, in the plan's reductions).
        return utility_metrics(ds) if has_runs(ds, "utility") else {}


# What the command line prints of CocsHfl's summary.
SUMMARY_COLUMNS = (
    *"policy budget deadline h_T z n_seeds cumulative_utility cumulative_utility_sqrt".split(),
    *"regret_vs_oracle success_per_round".split(),
)


@dataclasses.dataclass(frozen=True)
class CocsHfl(HflScenario):
    """COCS against Oracle, LinUCB, CUCB and Random on hierarchical FL (Qu et al. §VI, Figs. 3–4).

    N = 50 clients, M = 3 edge servers, Table I's settings as presets (``mnist``: strongly
    convex utility, eq. 8; ``cifar``: the non-convex utility sqrt, eq. 19). The oracle that
    ``--regret-against`` names (§VI-B's ``oracle`` by default) must be among the policies for
    the regret metrics and figures.

        python sweeps/cocs_hfl.py                                   # Fig. 3 (MNIST), 1000 rounds
        python sweeps/cocs_hfl.py --preset cifar --out runs/cocs_cifar
        python sweeps/cocs_hfl.py --budget 3.5,5,10 --out runs/cocs_budget    # Fig. 4d
        python sweeps/cocs_hfl.py --deadline 2,3,4,5 --out runs/cocs_deadline # Fig. 4f
        python sweeps/cocs_hfl.py --policies cocs,oracle --h-T 1:10:10 --z 0.1:1:10 --seeds 128
        python sweeps/cocs_hfl.py --policies oracle,oracle_context,cocs,cocs_lookahead,linucb
    """

    h_T: Floats = (5.0,)
    """COCS hypercubes per dimension, integers 1..10"""
    z: Floats = (0.4,)
    """COCS exploration exponent z in (0, 1]"""
    p_cover: float = 1.0
    """coverage probability in [0, 1]"""
    regret_against: Literal["oracle", "oracle_context", "oracle_state"] = "oracle"
    """the oracle regret is measured against (regret needs it among --policies)"""
    seeds: int = 32
    rounds: int = 1000
    out: str = "runs/cocs_hfl"

    name: ClassVar[str] = "cocs_hfl"
    summary_columns: ClassVar[tuple[str, ...]] = SUMMARY_COLUMNS
    reduces_on_device: ClassVar[bool] = True

    def check(self) -> None:
        super().check()
        checks.in_range("--p-cover", self.p_cover, 0.0, 1.0)
        if any(not (1 <= v <= 10 and v == int(v)) for v in self.h_T):
            raise ValueError(f"--h-T must be integers in [1, 10], got {list(self.h_T)}")
        check_hparams(self.policies, {"h_T": self.h_T, "z": self.z})

    def plan(self) -> Plan:
        scenario = self.scenario()
        configs = sweep.config_table(
            self.policies, {"h_T": list(self.h_T), "z": list(self.z)}, shared=scenario
        )
        env, params = self.environment_params(p_cover=self.p_cover)
        reductions, reference = self._reductions(configs)
        return Plan(
            env,
            params,
            configs,
            selection_size=self.servers,
            per_run_bytes=sweep.bytes_per_run(
                self.rounds, self.clients * self.servers, 1, self.trajectories
            ),
            per_config={name: configs[name].to_numpy() for name in scenario},
            env_hparams=tuple(scenario),
            reductions=reductions,
            reference=reference,
            metadata={
                "utility": {"mnist": "eq. 8 (linear)", "cifar": "eq. 19 (square root)"}[self.preset]
            },
        )

    def _reductions(self, configs) -> tuple[Reductions, Reference | None]:
        """The plan's reductions and reference: the utilities', and with the oracle among the
        policies the running regret against it, each configuration paired with its scenario's
        oracle (:func:`reference_rows`) on every seed."""
        scenario = {name: configs[name].to_numpy() for name in SCENARIO}
        rows = reference_rows(configs["policy"].to_numpy(), scenario, self.regret_against)
        if rows is None:
            return UTILITY_REDUCTIONS, None
        curves = {**UTILITY_REDUCTIONS.curves, **REGRET_REDUCTIONS.curves}
        return Reductions(UTILITY_REDUCTIONS.metrics, curves), Reference(rows, ("utility",))

    def metrics(self, ds) -> dict:
        """The regrets against ``--regret-against``, paired by seed from the per-run totals."""
        return oracle_regret(ds, reference=self.regret_against)

    def plot_axes(self) -> dict[str, list[float]]:
        """Budget, deadline and COCS's h_T and z: the per-round figures draw every policy at
        one point of them."""
        axes = self.scenario()
        # Unknown policies are refused by check_policies, after the base checks that call this.
        specs = [REGISTRY[policy] for policy in self.policies if policy in REGISTRY]
        for name in ("h_T", "z"):
            if any(name in spec.hparams for spec in specs):
                axes[name] = list(getattr(self, name))
        return axes

    def figures(self, ds, summary, folder) -> None:
        # The defaults: the preset's budget and deadline, h_T and z's.
        preset = PRESETS[self.preset]
        defaults = {"budget": preset["budget"], "deadline": preset["deadline"]}
        defaults = {**list_defaults(self), **{k: float(v) for k, v in defaults.items()}}
        view = figure_slice(ds, plot_point(self), defaults)
        shown = view.configs
        line = {"method": self.ci, "varying": view.varying, "subtitle": view.subtitle}
        # The running sums are bands of their own (UTILITY_REDUCTIONS' curves).
        for variable, ylabel, name, title in (
            ("utility_cumsum", "cumulative utility (eq. 8)", "cumulative_utility",
             "Cumulative utility (Qu Fig. 3a)"),
            ("utility_sqrt_cumsum", "cumulative utility (eq. 19)", "cumulative_utility_sqrt",
             "Cumulative non-convex utility (Qu Fig. 7)"),
            ("num_success", "successful clients per round", "success_per_round",
             "Successful clients per round (Qu Fig. 4b)"),
        ):  # fmt: skip
            plots.plot_over_rounds(
                ds, variable, ylabel, folder / f"{name}.png", title, configs=shown,
                bounds=NONNEGATIVE, **line,
            )  # fmt: skip
        if "regret_cumsum_band" in ds:  # paired by seed on the device (REGRET_REDUCTIONS)
            policy = ds["policy"].to_numpy()
            plots.plot_over_rounds(
                ds, "regret_cumsum", "regret vs Oracle", folder / "regret.png",
                "Cumulative regret against the Oracle (Qu Fig. 3b)",
                configs=[c for c in shown if policy[c] != self.regret_against],
                bounds=UNBOUNDED, **line,
            )  # fmt: skip
        for axis, figure in (("budget", "4d"), ("deadline", "4f")):
            if summary[axis].nunique() > 1:
                plots.plot_metric_vs(
                    summary, "cumulative_utility", axis, folder / f"utility_vs_{axis}.png",
                    "cumulative utility", f"Cumulative utility vs {axis} (Qu Fig. {figure})",
                )  # fmt: skip
        grid = summary[summary["policy"] == "cocs"]
        fixed = []  # --plot-at's budget and deadline fix the heatmaps too; else they average
        for name, value in plot_point(self).items():
            if name in ("budget", "deadline"):
                grid = grid[np.isclose(grid[name], value, rtol=1e-9, atol=1e-12)]
                fixed.append(f"{name} = {value:g} (--plot-at)")
        if len(grid) and grid["h_T"].nunique() > 1 and grid["z"].nunique() > 1:
            for metric in ("cumulative_utility", "regret_vs_oracle"):
                if metric in grid:
                    title = f"COCS {metric.replace('_', ' ')}"
                    title = f"{title}\nat {', '.join(fixed)}" if fixed else title
                    plots.plot_heatmap(
                        grid, metric, "h_T", "z", folder / f"heatmap_cocs_{metric}.png", title
                    )
