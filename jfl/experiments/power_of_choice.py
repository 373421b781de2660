"""Power-of-Choice's synthetic quadratic experiment (Y. J. Cho, J. Wang and G. Joshi, "Towards
understanding biased client selection in federated learning", AISTATS 2022, §5 and Fig. 2).

K = 30 clients with objectives F_k(w) = ½h_k‖w‖² − e_kᵀw + ½‖e_k‖²/h_k in dimension 5, h_k ~
U(1, 20), e_k = 100·U(0, 1)⁵, data shares p_k from a power law (a = 3), w₀ = 100·N(0, I); m = 3
clients a round (C = 0.1) each take τ = 2 full-gradient steps at η = 2·10⁻⁵; 15,000 rounds. The
learner is ``jfl.fl.quadratic``; it reports the optimality gap F(w) − F(w*) in closed form. The
instance is one fixed draw (``--instance-seed``), the run's seed drives the selection only. The
settings follow the paper's §5 and the ReScience reproduction peng-ju/Power-of-Choice
(``quadratic_optimization/quadratic_sim.py``, whose instance is ``--instance-seed 2 --h-low 0
--h-high 9``: its code draws h_k = 9·U(0, 1), not the paper's U(1, 20)).

Methods (``--methods``): rand (m draws ∝ p_k with replacement, each weighing 1/m: the registered
``proportional``), pow-d for each ``--d`` (``pow_d``, the plain average of the m selected),
cpow-d and rpow-d for each ``--variant-d`` (``cpow_d``, ``rpow_d``) and adapow-d (``pow_d`` with
d = K before ``--switch``, m from it; by default half the rounds). Every client is always
available and never fails: the ``rbcsf`` environment with ``p_available = 1``, whose round times
play no part here.

The sweep reduces its runs on the device: the gap's band over seeds for the figure, and each
run's gap at ``--early-round`` and at the end (``gap_reductions``; ``gap_metrics`` is their host
reference from every run's evaluations).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import numpy as np

from jfl import checks, plots, sweep
from jfl.cli import Floats, Names
from jfl.driver import Experiment
from jfl.envs import RbcsfEnv
from jfl.fl.quadratic import gap, make_instance, make_quadratic_learner, optimum
from jfl.reduction import Reductions, RunMetric
from jfl.stats import NONNEGATIVE, Bounds
from jfl.sweep import Plan

METHODS = ("rand", "pow_d", "cpow_d", "rpow_d", "adapow_d")
# The registered policy that runs each method.
POLICIES = {
    "rand": "proportional",
    "pow_d": "pow_d",
    "adapow_d": "pow_d",
    "cpow_d": "cpow_d",
    "rpow_d": "rpow_d",
}
# The instance's fixed scales (the paper's and the reproduction's): e_k = 100·U(0, 1)^D,
# w₀ = 100·N(0, I).
E_SCALE = 100.0
W0_SCALE = 100.0


def gap_reductions(early_eval: int) -> Reductions:
    """Each run's optimality gap at evaluation ``early_eval`` (``--early-round`` over
    ``--eval-every``) and at the last one, reduced on the device."""

    def at(index: int):
        return RunMetric(("gap",), lambda run: run.outputs["gap"][index], NONNEGATIVE)

    return Reductions({"early_gap": at(early_eval), "final_gap": at(-1)})


def gap_metrics(ds, early_round: int) -> dict:
    """The gap at round ``early_round`` and at the last round, per run, from every run's
    evaluations: the host reference of :func:`gap_reductions`."""
    gap = ds["gap"]
    return {
        "early_gap": gap.sel(eval=early_round).drop_vars("eval"),
        "final_gap": gap.isel(eval=-1).drop_vars("eval"),
    }


@dataclasses.dataclass(frozen=True)
class PowDQuadratic(Experiment):
    """Power-of-Choice on a federated quadratic: rand, pow-d, cpow-d, rpow-d, adapow-d (Cho Fig. 2).

    Defaults: the paper's setting (K = 30, m = 3, τ = 2, η = 2·10⁻⁵, 15,000 rounds, h_k ~
    U(1, 20)) with 32 seeds, about 21 s on 2 CPU cores. The gap is evaluated every
    ``--eval-every`` rounds; the summary gives it at ``--early-round`` (the early descent) and
    at the end (the error floor).

        python sweeps/pow_d_quadratic.py                                  # Fig. 2, 32 seeds
        python sweeps/pow_d_quadratic.py --seeds 128                      # more seeds
        python sweeps/pow_d_quadratic.py --h-low 0 --h-high 9 --out runs/pow_d_quadratic_9
                                                          # the reproduction's h_k = 9·U(0, 1)
    """

    methods: Names = METHODS
    """rand, pow_d, cpow_d, rpow_d, adapow_d"""
    d: Floats = (6.0, 9.0, 15.0, 30.0)
    """pow-d's candidate counts d, integers in [m, K]"""
    variant_d: Floats = (9.0,)
    """cpow-d's and rpow-d's candidate counts d, integers in [m, K]"""
    switch: int = 0
    """adapow-d: d = K before this round, m from it; 0: half the rounds"""
    clients: int = 30
    """clients K"""
    m: int = 3
    """clients selected per round (C·K), 1 ≤ m ≤ K"""
    dim: int = 5
    """dimension of w"""
    local_steps: int = 2
    """full-gradient steps τ ≥ 1 per participant and round"""
    lr: Floats = (2e-5,)
    """learning rate(s) η > 0; a list is a swept axis"""
    h_low: float = 1.0
    """h_k ~ U(h_low, h_high) (the paper's U(1, 20); the reproduction's code: 0 and 9)"""
    h_high: float = 20.0
    """upper end of h_k's range"""
    size_power: float = 3.0
    """data shares p_k ∝ draws of the power law a·x^(a−1) on [0, 1], a > 0"""
    instance_seed: int = 2
    """seed of the instance (h, e, p, w₀), NumPy's RandomState; the run seeds drive selection"""
    eval_every: int = 50
    """rounds between evaluations of the gap; divides --rounds"""
    early_round: int = 2500
    """round of the summary's early gap, a multiple of --eval-every"""
    seeds: int = 32
    rounds: int = 15000
    out: str = "runs/pow_d_quadratic"

    name: ClassVar[str] = "pow_d_quadratic"
    trains: ClassVar[bool] = True
    reduces_on_device: ClassVar[bool] = True
    title: ClassVar[str] = "Power-of-Choice on a quadratic (Cho Fig. 2)"
    summary_columns: ClassVar[tuple[str, ...]] = tuple(
        "policy d switch learning_rate n_seeds early_gap early_gap_lo early_gap_hi final_gap "
        "final_gap_lo final_gap_hi".split()
    )
    metric_bounds: ClassVar = {"early_gap": NONNEGATIVE, "final_gap": NONNEGATIVE}

    def check(self) -> None:
        super().check()
        checks.clients("--clients", self.clients)
        checks.integer("--m", self.m, 1, self.clients, "--clients")
        checks.integer("--dim", self.dim)
        checks.integer("--local-steps", self.local_steps)
        checks.integer("--instance-seed", self.instance_seed, 0, 2**32 - 1)
        if not self.methods:
            raise ValueError("--methods: give at least one method")
        for method in self.methods:
            checks.choice("--methods", method, METHODS)
        checks.distinct("--methods", self.methods)
        for flag, values in (("--d", self.d), ("--variant-d", self.variant_d)):
            for value in values:
                if value != int(value):
                    raise ValueError(f"{flag} takes integers, got {value:g}")
                checks.integer(flag, int(value), self.m, self.clients, "--clients")
            checks.distinct(flag, values)
        checks.integer("--switch", self.switch, 0, self.rounds, "--rounds")
        checks.positive("--lr", self.lr)
        checks.distinct("--lr", self.lr)
        checks.in_range("--h-low", self.h_low, 0.0, math.inf)
        checks.in_range("--h-high", self.h_high, max(self.h_low, 0.0), math.inf, low_open=True)
        checks.positive("--size-power", self.size_power)
        checks.integer("--eval-every", self.eval_every, 1, self.rounds, "--rounds")
        if self.rounds % self.eval_every:
            raise ValueError(
                f"--eval-every must divide --rounds={self.rounds}, got {self.eval_every}"
            )
        checks.integer("--early-round", self.early_round, 0, self.rounds, "--rounds")
        if self.early_round % self.eval_every:
            raise ValueError(
                f"--early-round must be a multiple of --eval-every={self.eval_every}, got "
                f"{self.early_round}"
            )

    def switch_round(self) -> int:
        """adapow-d's switch: ``--switch``, or half the rounds."""
        return self.switch or self.rounds // 2

    def configs(self):
        """One row per (method, d, learning rate): ``policy``, ``d``, ``switch`` (NaN where the
        policy has none) and ``learning_rate``; each policy's rows contiguous."""
        import pandas as pd

        rows = []
        # adapow-d runs on pow_d: its rows follow pow-d's, so that the policy's rows are adjacent.
        order = ("rand", "pow_d", "adapow_d", "cpow_d", "rpow_d")
        for method in (m for m in order if m in self.methods):
            if method == "rand":
                candidates, switch = [math.nan], math.nan
            elif method == "adapow_d":
                # d is not read while switch > 0; K is the d it starts from.
                candidates, switch = [float(self.clients)], float(self.switch_round())
            else:
                candidates = self.d if method == "pow_d" else self.variant_d
                switch = 0.0
            for lr in self.lr:
                for d in candidates:
                    rows.append(
                        {"policy": POLICIES[method], "d": float(d), "switch": switch,
                         "learning_rate": float(lr)}
                    )  # fmt: skip
        return pd.DataFrame(rows, columns=["policy", "d", "switch", "learning_rate"])

    def instance(self):
        """The fixed instance (``jfl.fl.quadratic.QuadraticData``, float32)."""
        return make_instance(
            self.instance_seed,
            self.clients,
            self.dim,
            h_range=(self.h_low, self.h_high),
            e_scale=E_SCALE,
            w0_scale=W0_SCALE,
            size_power=self.size_power,
        )

    def plan(self) -> Plan:
        configs = self.configs()
        data = self.instance()
        env = RbcsfEnv()
        params = env.default_params(num_clients=self.clients, p_available=1.0)
        evaluations = self.rounds // self.eval_every + 1
        per_run = sweep.bytes_per_run(self.rounds, self.clients, self.m, self.trajectories)
        w_star, curvature = (np.asarray(a, float) for a in optimum(data))

        def learner(policy: str, size: int):
            del policy, size
            return make_quadratic_learner(self.clients, local_steps=self.local_steps)

        def finish(ds):
            ds["h"] = ("client", np.asarray(data.h, float))
            ds["p"] = ("client", np.asarray(data.p, float))
            ds.attrs["initial_gap"] = float(gap(data, data.w0))
            return ds

        return Plan(
            env,
            params,
            configs,
            selection_size=self.m,
            per_run_bytes=per_run + 8 * evaluations,
            per_config={"learning_rate": configs["learning_rate"].to_numpy()},
            learner=learner,
            data=data,
            eval_every=self.eval_every,
            finish=finish,
            reductions=gap_reductions(self.early_round // self.eval_every),
            metadata={
                "instance": {
                    "seed": self.instance_seed,
                    "h_range": [self.h_low, self.h_high],
                    "mean_curvature": float(curvature),
                    "w_star": w_star.tolist(),
                    "initial_gap": float(gap(data, data.w0)),
                },
                "environment": "rbcsf with p_available = 1 (every client available, none fails)",
            },
        )

    def metrics(self, ds) -> dict:
        """From every run's evaluations, :func:`gap_metrics`; reduced on the device, none (the
        gaps were reduced there, :func:`gap_reductions`)."""
        return gap_metrics(ds, self.early_round) if plots.has_runs(ds, "gap") else {}

    def figures(self, ds, summary, folder) -> None:
        write_figures(ds, folder, self.title, method=self.ci)


def method_label(policy: str, d: float, switch: float) -> str:
    """'rand', 'pow-d d=6', 'adapow-d', … for a configuration's policy and hyperparameters."""
    if policy == "proportional":
        return "rand"
    if policy == "pow_d" and switch > 0:
        return "adapow-d"
    return f"{policy.replace('_', '-')} d={d:g}"


def write_figures(ds, folder, title: str, method: str = "t") -> None:
    """``gap_vs_round.png``: the gap F(w) − F(w*) against the round with its band over seeds,
    one line per configuration, on a linear and on a log scale (the paper's Fig. 2 and the
    reproduction's two panels)."""
    from matplotlib import colormaps

    policy = ds["policy"].to_numpy()
    d, switch = ds["d"].to_numpy(), ds["switch"].to_numpy()
    rates = ds["learning_rate"].to_numpy()
    several = len(np.unique(rates)) > 1
    plain = np.flatnonzero((policy == "pow_d") & ~(switch > 0))
    shades = colormaps["viridis"](np.linspace(0.0, 0.85, max(len(plain), 1)))
    styles = {"cpow_d": ":", "rpow_d": "-."}
    labels = [
        method_label(policy[i], d[i], switch[i]) + (f" η={rates[i]:g}" if several else "")
        for i in range(len(policy))
    ]
    legend_title = plots.band_title(ds, "gap", method)
    fig, (axes,) = plots.line_figure(
        [labels], legend_title, width=11, columns=2, fontsize=7, sharey=False
    )
    for ax, scale in zip(axes, ("linear", "log"), strict=True):
        for i, config in enumerate(ds["config"].to_numpy()):
            if policy[i] == "proportional":
                style = {"color": "black"}
            elif policy[i] == "pow_d" and switch[i] > 0:
                style = {"color": "tab:red", "linestyle": "--"}
            elif policy[i] == "pow_d":
                style = {"color": shades[list(plain).index(i)]}
            else:
                style = {"color": "tab:orange" if policy[i] == "cpow_d" else "tab:brown",
                         "linestyle": styles.get(policy[i], "-")}  # fmt: skip
            plots.seed_band(
                ax, ds, "gap", config, "eval", label=labels[i], method=method,
                bounds=Bounds(0.0, math.inf), **style,
            )  # fmt: skip
        ax.set_yscale(scale)
        ax.set_xlabel("round")
        ax.set_ylabel("F(w) − F(w*)")
        ax.grid(alpha=0.3)
        ax.set_title(f"{title} ({scale})", fontsize=9)
    plots.outside_legend(axes[1], legend_title, fontsize=7)
    plots.save(fig, folder / "gap_vs_round.png")
