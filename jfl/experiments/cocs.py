"""COCS (Qu et al. §VI) on the hierarchical ``hfl`` environment: clients → edge servers → cloud.

``CocsHfl`` runs COCS against the paper's benchmarks (§VI-B: Oracle, CUCB, LinUCB, Random)
under per-edge-server budgets (Figs. 3–4); budgets and deadlines are traced environment
parameters and COCS's h_T and z traced hyperparameters, so each grid is one compiled program per
policy. Regret is measured against an oracle (§VI-B's ``oracle`` unless ``--regret-against``
names another) run on the same seeds (common random numbers).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar, Literal

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
from jfl.policies import REGISTRY
from jfl.stats import NONNEGATIVE, Bounds
from jfl.sweep import Plan

if TYPE_CHECKING:  # xarray is imported where a sweep's results are built
    import xarray as xr


def attach_oracle(
    ds: xr.Dataset, scenario=("budget", "deadline"), reference: str = "oracle"
) -> xr.Dataset:
    """Add ``oracle_utility`` [config, seed, round]: the ``reference`` policy's utility in the
    same scenario.

    Each configuration is paired with the ``reference`` configuration that has the same values
    of the ``scenario`` coordinates (those present), on the same seeds, which is what the regret
    metrics subtract from (COCS eq. 11). The dataset's ``regret_against`` attribute names the
    reference. Unchanged if no configuration runs it.
    """
    policy = ds["policy"].to_numpy()
    if reference not in policy:
        return ds
    names = [name for name in scenario if name in ds.coords]
    values = np.stack([ds[name].to_numpy() for name in names], axis=1) if names else None
    oracle_rows = np.flatnonzero(policy == reference)
    match = []
    for config in range(ds.sizes["config"]):
        if values is None:
            match.append(oracle_rows[0])
            continue
        same = (values[oracle_rows] == values[config]).all(axis=1)
        if not same.any():
            raise ValueError(f"no {reference} configuration shares the scenario of config {config}")
        match.append(oracle_rows[np.flatnonzero(same)[0]])
    oracle = ds["utility"].isel(config=match).assign_coords(config=ds["config"])
    ds = ds.assign(oracle_utility=oracle.drop_vars([c for c in oracle.coords if c != "config"]))
    return ds.assign_attrs(regret_against=reference)


def utility_metrics(ds: xr.Dataset) -> dict[str, xr.DataArray]:
    """Cumulative utility (eq. 8) and its square root (eq. 19), successful clients per round,
    and regret against the Oracle when an ``oracle_utility`` variable is present."""
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
        return utility_metrics(ds)


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

        def finish(ds):
            return attach_oracle(ds, reference=self.regret_against)

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
            finish=finish,
            metadata={
                "utility": {"mnist": "eq. 8 (linear)", "cifar": "eq. 19 (square root)"}[self.preset]
            },
        )

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
        curves = ds.assign(
            utility_sqrt=np.sqrt(ds["utility"]), success=ds["num_success"].astype(float)
        )
        for variable, ylabel, name, title, cumulative in (
            ("utility", "cumulative utility (eq. 8)", "cumulative_utility",
             "Cumulative utility (Qu Fig. 3a)", True),
            ("utility_sqrt", "cumulative utility (eq. 19)", "cumulative_utility_sqrt",
             "Cumulative non-convex utility (Qu Fig. 7)", True),
            ("success", "successful clients per round", "success_per_round",
             "Successful clients per round (Qu Fig. 4b)", False),
        ):  # fmt: skip
            plots.plot_over_rounds(
                curves, variable, ylabel, folder / f"{name}.png", title,
                cumulative=cumulative, configs=shown, bounds=NONNEGATIVE, **line,
            )  # fmt: skip
        if "oracle_utility" in ds:
            curves = curves.assign(regret=ds["oracle_utility"] - ds["utility"])
            plots.plot_over_rounds(
                curves, "regret", "regret vs Oracle", folder / "regret.png",
                "Cumulative regret against the Oracle (Qu Fig. 3b)", cumulative=True,
                configs=[
                    c for c in shown if ds["policy"].to_numpy()[c] != ds.attrs["regret_against"]
                ],
                **line,
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
