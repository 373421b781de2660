"""RBCS-F (Huang et al.): the numerical simulation of §6.1 over a V × β (× α) grid.

``VBetaGrid`` is the project's main job (``python sweeps/v_beta_grid.py``): 40 clients in 4
classes, m = 8, β = 0.15, λ = 1, α = 0.1, 500 rounds, V ∈ {1, 10, 20, 50}, next to Random and
FedCS(3 s), 64 seeds each. Its figures are the paper's Figs. 2–4 and, for V × β grids, heatmaps.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

import numpy as np

from jfl import checks, plots, sweep
from jfl.cli import Floats, Names
from jfl.driver import Experiment
from jfl.envs import RbcsfEnv
from jfl.envs.rbcsf import ETA_BASES, bandit_bounds
from jfl.experiments.common import (
    check_hparams,
    check_policies,
    check_read,
    figure_slice,
    list_defaults,
    plot_point,
    with_queue_rate,
)
from jfl.policies import REGISTRY
from jfl.sweep import Plan
from jfl.trackers import fairness_queue

SWEPT = ("V", "beta", "alpha", "deadline", "gamma2")


@dataclasses.dataclass(frozen=True)
class RbcsfScenario(Experiment):
    """The ``rbcsf`` environment (§6.1) and the RBCS-F family's grid."""

    policies: Names = ("rbcsf", "random", "fedcs")
    """policies: rbcsf, random, dirichlet_random, fedcs"""
    V: Floats = (1.0, 10.0, 20.0, 50.0)
    """RBCS-F penalty factor V ≥ 0"""
    beta: Floats = (0.15,)
    """RBCS-F guaranteed rate β in [0, 1]"""
    alpha: Floats = (0.1,)
    """RBCS-F's exploration α ≥ 0 (its UCB bonus; no data split)"""
    deadline: Floats = (3.0,)
    """FedCS deadline (s) > 0"""
    gamma2: Floats = (1.0,)
    """dirichlet_random concentration γ₂ > 0"""
    clients: int = 40
    """clients N (4 equal classes)"""
    m: int = 8
    """clients selected per round, 1 ≤ m ≤ N"""
    p_available: float = 0.8
    """availability in [0, 1]"""
    eta_base: Literal["2", "e"] = "2"
    """base of the log in η = log(1 + SNR): 2 (bits, docs/decisions.md) or e (natural log)"""

    environment: ClassVar[str] = "rbcsf"

    def check(self) -> None:
        super().check()
        checks.clients("--clients", self.clients)
        checks.integer("--m", self.m, 1, self.clients, "--clients")
        checks.in_range("--p-available", self.p_available, 0.0, 1.0)
        check_policies(self.policies, self.environment, self.trains)
        check_hparams(self.policies, self.grid())
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        check_read(self.policies, self.grid(), defaults, self.read_anyway)

    # Swept hyperparameters that the experiment reads whatever its policies (none here; the
    # federated experiments measure every policy's fairness queue at β).
    read_anyway: ClassVar[tuple[str, ...]] = ()

    def grid(self) -> dict[str, list[float]]:
        """The swept hyperparameters and their values (V, β, α, deadline, γ₂)."""
        return {name: list(getattr(self, name)) for name in SWEPT}

    def environment_params(self):
        """The ``rbcsf`` environment and its parameters for this sweep."""
        env = RbcsfEnv()
        return env, env.default_params(
            num_clients=self.clients,
            p_available=self.p_available,
            eta_base=ETA_BASES[self.eta_base],
        )

    def bandit_hparams(self, params) -> dict[str, float]:
        """RBCS-F's Lemma-1 R, S, L for ``params`` (used by its ``lemma1`` schedule)."""
        bounds = bandit_bounds(params)
        return {
            "noise_scale": bounds.noise,
            "theta_bound": bounds.theta_norm,
            "context_bound": bounds.context_norm,
        }


@dataclasses.dataclass(frozen=True)
class VBetaGrid(RbcsfScenario):
    """RBCS-F and its baselines over a V × β (× α) grid and many seeds (RBCS-F §6.1).

    Defaults reproduce the paper's numerical simulation: 40 clients in 4 classes, m = 8,
    β = 0.15, λ = 1, α = 0.1, 500 rounds, V ∈ {1, 10, 20, 50}, Random and FedCS(3 s), 64 seeds.

        python sweeps/v_beta_grid.py
        python sweeps/v_beta_grid.py --V 0:50:11 --beta 0:0.2:9 --seeds 256 --out runs/grid
    """

    lam: float = 1.0
    """ridge regulariser λ > 0"""
    fairness_target: float = 0.15
    """rate of the fairness queue measured for policies without β, in [0, 1]"""
    out: str = "runs/v_beta_grid"

    name: ClassVar[str] = "v_beta_grid"
    reduces_on_device: ClassVar[bool] = True
    summary_columns: ClassVar[tuple[str, ...]] = tuple(
        "policy V beta alpha deadline n_seeds mean_round_time final_queue_mean "
        "min_selection_rate jain_index selected_per_round".split()
    )

    def check(self) -> None:
        super().check()
        checks.in_range("--fairness-target", self.fairness_target, 0.0, 1.0)
        checks.positive("--lam", self.lam)

    def plan(self) -> Plan:
        env, params = self.environment_params()
        fixed = {"lam": self.lam, **self.bandit_hparams(params)}
        configs = sweep.config_table(self.policies, self.grid(), fixed=fixed)
        return Plan(
            env,
            params,
            with_queue_rate(configs, self.fairness_target),
            selection_size=self.m,
            per_run_bytes=sweep.bytes_per_run(self.rounds, self.clients, self.m, self.trajectories),
            fixed=fixed,
            trackers=(fairness_queue(),),
            metadata={"note": "queue_rate: β for RBCS-F, --fairness-target for policies without β"},
        )

    def plot_axes(self) -> dict[str, list[float]]:
        """RBCS-F's β and α: the figures draw a line per V at one (β, α)."""

        # Unknown policies are refused by check_policies, after the base checks that call this.
        specs = [REGISTRY[policy] for policy in self.policies if policy in REGISTRY]
        used = {name for spec in specs for name in spec.hparams}
        return {name: list(getattr(self, name)) for name in ("beta", "alpha") if name in used}

    def figures(self, ds, summary, folder) -> None:
        write_figures(
            ds, summary, folder, point=plot_point(self), defaults=list_defaults(self), ci=self.ci
        )


# The lines of the per-round figures: RBCS-F's V, FedCS's deadline, Dirichlet-random's γ₂.
LINES = ("V", "deadline", "gamma2")


def write_figures(ds, summary, folder, point=None, defaults=None, ci="t") -> None:
    """Figs. 2–4 of the paper and, for V × β grids, heatmaps of round time and fairness.

    Figs. 2–4 draw a line per V (and per FedCS deadline, Dirichlet γ₂) at one (β, α) of the
    grid: ``point``'s (``--plot-at``), else the ``defaults`` where the grid has them, else the
    middle of the grid, named under the title. The heatmaps average over α unless ``point``
    fixes it, and say which. ``ci``: the interval of the bands (``--ci``).
    """
    point = dict(point or {})
    defaults = dict(defaults or {})
    policy = ds["policy"].to_numpy()
    if (policy == "rbcsf").any():
        # Fig. 2: one line per V.
        queue = figure_slice(ds, point, defaults, along=LINES, policies=("rbcsf",))
        plots.plot_over_rounds(
            ds,
            "queue_mean",
            "mean queue backlog Z",
            folder / "queue_vs_round.png",
            "RBCS-F mean queue backlog (paper Fig. 2)",
            configs=queue.configs,
            method=ci,
            varying=queue.varying,
            subtitle=queue.subtitle,
        )
    shown = figure_slice(ds, point, defaults, along=LINES)
    # Reduced on the device the cumulative time has its own band; else it is summed here.
    reduced = "cumulative_time_band" in ds
    plots.plot_over_rounds(
        ds,
        "cumulative_time" if reduced else "round_time",
        "cumulative training time (s)",
        folder / "cumulative_time.png",
        "Training time (paper Fig. 3)",
        cumulative=not reduced,
        configs=shown.configs,
        method=ci,
        varying=shown.varying,
        subtitle=shown.subtitle,
    )
    plots.plot_pull_record(
        ds,
        folder / "pull_record.png",
        configs=shown.configs,
        method=ci,
        varying=shown.varying,
        subtitle=shown.subtitle,
    )
    grid = summary[summary["policy"] == "rbcsf"]
    fixed = []
    for name, value in point.items():
        if name in grid and name not in ("V", "beta"):
            grid = grid[np.isclose(grid[name], value, rtol=1e-9, atol=1e-12)]
            fixed.append(f"{plots.symbol(name)} = {value:g} (--plot-at)")
    if len(grid) and grid["V"].nunique() > 1 and grid["beta"].nunique() > 1:
        for metric, title in (
            ("mean_round_time", "RBCS-F mean round time (s)"),
            ("min_selection_rate", "RBCS-F minimum selection rate"),
        ):
            title = f"{title}\nat {', '.join(fixed)}" if fixed else title
            plots.plot_heatmap(grid, metric, "V", "beta", folder / f"heatmap_{metric}.png", title)
