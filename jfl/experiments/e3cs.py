"""E3CS (Huang, Lin, Shen, Li and Zomaya, IEEE IoT-J 2022, §VI) on the ``volatile``
environment: selection only, no training.

``E3csClasses`` runs E3CS-0, -0.5, -0.8 and -inc (the fairness floor σ as a share of k/N, and
σ = 0 for the first quarter of the rounds then k/N) next to Random and the FedCS-like
``most_reliable`` on the paper's success classes (K = 100 clients in four equal classes with
success rates 0.1, 0.3, 0.6 and 0.9, k = 20). It reports the cumulative effective participation
(Σ_t the selected clients whose update arrived) and each class's selection fraction (the mean,
over the class's clients, of the share of rounds they were selected in), which E3CS keeps at or
above its σ for every class.

The sweep reduces its runs on the device (``class_reductions``: the per-run metrics, and the
running effective participation that the figure bands over seeds); ``class_metrics`` is the same
from every run's rounds, in float64, the host reference.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import ClassVar

import jax.numpy as jnp
import numpy as np
import pandas as pd

from jfl import checks, plots, sweep
from jfl.cli import Floats, Names
from jfl.driver import Experiment
from jfl.envs import VolatileEnv
from jfl.envs.base import client_classes
from jfl.experiments.common import check_hparams, check_policies
from jfl.kernels.reduce import doubling_cumsum, pairwise_sum
from jfl.outputs import ROUND
from jfl.reduction import Curve, Reductions, RunMetric
from jfl.stats import NONNEGATIVE, UNIT_INTERVAL, Bounds
from jfl.sweep import Plan


def e3cs_configs(policies, sigma, eta, inc_switch: int | None) -> pd.DataFrame:
    """One row per configuration: every policy, E3CS once per σ share and, with
    ``inc_switch``, once more as E3CS-inc (``switch`` = that round, σ then ignored)."""
    configs = sweep.config_table(policies, {"sigma": list(sigma), "eta": list(eta)})
    configs["switch"] = np.where(configs["policy"] == "e3cs", 0.0, np.nan)
    if inc_switch is not None and "e3cs" in policies:
        inc = configs[configs["policy"] == "e3cs"].drop_duplicates("eta").copy()
        inc["sigma"] = 1.0  # σ = k/N once the schedule switches
        inc["switch"] = float(inc_switch)
        at = int(np.flatnonzero(configs["policy"] == "e3cs")[-1]) + 1
        configs = pd.concat([configs.iloc[:at], inc, configs.iloc[at:]], ignore_index=True)
    return configs


def class_metrics(ds, num_classes: int, selection_size: int) -> dict:
    """Per (config, seed): the cumulative effective participation, the share of selections
    that arrived, each class's selection fraction, the smallest of them, and E3CS's fairness
    floor σ averaged over the rounds (σ = sigma·k/N, 0 before the inc schedule's switch; 0 for
    the other policies, which promise none), all with every client available; from every run's
    rounds in float64 (the reference of :func:`class_reductions`)."""
    import xarray as xr

    rounds = ds.sizes["round"]
    num_clients = ds.sizes["client"]
    success = ds["num_success"].astype(np.float64)
    selected = ds["num_selected"].astype(np.float64).sum("round")
    metrics = {
        "effective_participation": success.sum("round"),
        "success_share": success.sum("round") / selected.where(selected > 0),
    }
    classes = client_classes(num_clients, num_classes)
    rate = ds["selection_count"].astype(np.float64) / rounds
    fractions = []
    for c in range(num_classes):
        fraction = rate.isel(client=np.flatnonzero(classes == c)).mean("client")
        metrics[f"class_{c}_fraction"] = fraction
        fractions.append(fraction)
    metrics["min_class_fraction"] = xr.concat(fractions, "class").min("class")
    metrics.update(fairness_floor(ds, selection_size))
    return metrics


def fairness_floor(ds, selection_size: int) -> dict:
    """E3CS's fairness floor σ averaged over the rounds, per (config, seed): sigma·k/N, 0 before
    the inc schedule's switch, 0 for the other policies (a configuration's, from its
    coordinates)."""
    import xarray as xr

    rounds = ds.sizes["round"]
    num_clients = ds.sizes["client"]
    policy = ds["policy"].to_numpy()
    share = np.zeros(ds.sizes["config"])
    if "sigma" in ds.coords:
        sigma = np.nan_to_num(ds["sigma"].to_numpy().astype(float))
        switch = np.zeros_like(sigma)
        if "switch" in ds.coords:
            switch = np.nan_to_num(ds["switch"].to_numpy().astype(float))
        share = np.where(switch > 0, 1.0 - np.minimum(switch, rounds) / rounds, sigma)
    floor = np.where(policy == "e3cs", share * selection_size / num_clients, 0.0)
    floor = np.broadcast_to(floor[:, None], (ds.sizes["config"], ds.sizes["seed"]))
    coords = {"config": ds["config"], "seed": ds["seed"]}
    return {"fairness_floor": xr.DataArray(floor, dims=("config", "seed"), coords=coords)}


def _success(run) -> jnp.ndarray:
    return run.outputs["num_success"].astype(jnp.float32)


def _class_fraction(members: np.ndarray):
    """A run's selection fraction of the class of clients ``members``: their selections over
    ``len(members)·T`` (the mean of their shares of the rounds; integer counts summed exactly)."""

    def fraction(run):
        counts = run.outputs["selection_count"][members].astype(jnp.float32)
        return pairwise_sum(counts) / (len(members) * run.num_rounds)

    return fraction


def _success_share(run) -> jnp.ndarray:
    selected = pairwise_sum(run.outputs["num_selected"].astype(jnp.float32))
    share = pairwise_sum(_success(run)) / jnp.where(selected > 0, selected, 1.0)
    return jnp.where(selected > 0, share, jnp.nan)


def class_reductions(num_clients: int, num_classes: int) -> Reductions:
    """:func:`class_metrics` but the fairness floor (its configuration's), as functions of one
    run reduced on the device (float32, pairwise sums), for ``num_clients`` clients in
    ``num_classes`` classes (``client_classes``: a map fixed by the experiment); and the running
    effective participation, which the figure bands over seeds."""
    classes = client_classes(num_clients, num_classes)
    fractions = {
        f"class_{c}_fraction": _class_fraction(np.flatnonzero(classes == c))
        for c in range(num_classes)
    }
    counts = ("selection_count",)
    metrics = {
        "effective_participation": RunMetric(
            ("num_success",), lambda r: pairwise_sum(_success(r)), NONNEGATIVE
        ),
        "success_share": RunMetric(("num_success",), _success_share, UNIT_INTERVAL),
        **{name: RunMetric(counts, fn, UNIT_INTERVAL) for name, fn in fractions.items()},
        "min_class_fraction": RunMetric(
            counts,
            lambda r: jnp.min(jnp.stack([fn(r) for fn in fractions.values()])),
            UNIT_INTERVAL,
        ),
    }
    # Σ_{s≤t} of the arrived updates (Huang et al. 2022, §VI's cumulative participation).
    running = Curve((ROUND,), lambda r: doubling_cumsum(_success(r)), NONNEGATIVE, ("num_success",))
    return Reductions(metrics, {"cumulative_success": running})


# The most classes of clients a sweep takes (each class's fraction is a metric with bounds).
MAX_CLASSES = 32

METRIC_BOUNDS = {
    "effective_participation": NONNEGATIVE,
    "success_share": UNIT_INTERVAL,
    "min_class_fraction": UNIT_INTERVAL,
    "fairness_floor": UNIT_INTERVAL,
    **{f"class_{c}_fraction": UNIT_INTERVAL for c in range(MAX_CLASSES)},
}


@dataclasses.dataclass(frozen=True)
class E3csClasses(Experiment):
    """E3CS-0/0.5/0.8/inc against Random and FedCS-like selection on volatile clients
    (Huang et al. 2022, §VI): effective participation and selection fraction per class.

    The paper's setting by default: 100 clients in four equal classes with success rates
    0.1/0.3/0.6/0.9, k = 20 a round, 2500 rounds, η = 0.5; E3CS-inc switches σ from 0 to k/N
    after a quarter of the rounds.

        python sweeps/e3cs_classes.py
        python sweeps/e3cs_classes.py --sigma 0:1:11 --no-inc --policies e3cs --seeds 64
    """

    policies: Names = ("e3cs", "random", "most_reliable")
    """policies: e3cs, random, most_reliable (FedCS-like), or any other that runs on volatile"""
    sigma: Floats = (0.0, 0.5, 0.8)
    """E3CS fairness floor σ as a share of k/N, in [0, 1] (E3CS-0, -0.5, -0.8)"""
    eta: Floats = (0.5,)
    """E3CS learning rate η ≥ 0"""
    inc: bool = True
    """also run E3CS-inc: σ = 0 for the first quarter of the rounds, then k/N"""
    success_rates: Floats = (0.1, 0.3, 0.6, 0.9)
    """success probability of each class of clients, in [0, 1] (equal classes)"""
    clients: int = 100
    """clients K"""
    m: int = 20
    """clients selected per round k, 1 ≤ k ≤ K"""
    availability: float = 1.0
    """probability that a client is available in a round, in (0, 1] (the paper's: 1)"""
    seeds: int = 32
    rounds: int = 2500
    out: str = "runs/e3cs_classes"

    name: ClassVar[str] = "e3cs_classes"
    environment: ClassVar[str] = "volatile"
    reduces_on_device: ClassVar[bool] = True
    metric_bounds: ClassVar[Mapping[str, Bounds]] = METRIC_BOUNDS
    summary_columns: ClassVar[tuple[str, ...]] = (
        *"policy sigma switch n_seeds effective_participation success_share".split(),
        *"min_class_fraction fairness_floor".split(),
    )

    def check(self) -> None:
        super().check()
        checks.clients("--clients", self.clients)
        checks.integer("--m", self.m, 1, self.clients, "--clients")
        # At 0 nobody can be selected: no success share, no class fraction to report.
        checks.in_range("--availability", self.availability, 0.0, 1.0, low_open=True)
        checks.in_range("--success-rates", list(self.success_rates), 0.0, 1.0)
        most = min(self.clients, MAX_CLASSES)
        if not 1 <= len(self.success_rates) <= most:
            raise ValueError(
                f"--success-rates: give 1 to {most} rates (at most --clients={self.clients} "
                f"and {MAX_CLASSES}), got {len(self.success_rates)}"
            )
        check_policies(self.policies, self.environment, self.trains)
        check_hparams(self.policies, {"sigma": self.sigma, "eta": self.eta})

    def inc_switch(self) -> int | None:
        """E3CS-inc's switch round (a quarter of the rounds, at least 1), or None without it."""
        return max(1, self.rounds // 4) if self.inc else None

    def plan(self) -> Plan:
        env = VolatileEnv()
        params = env.default_params(
            num_clients=self.clients,
            success_rates=self.success_rates,
            availability=self.availability,
        )
        configs = e3cs_configs(self.policies, self.sigma, self.eta, self.inc_switch())
        return Plan(
            env,
            params,
            configs,
            selection_size=self.m,
            per_run_bytes=sweep.bytes_per_run(self.rounds, self.clients, self.m, self.trajectories),
            reductions=class_reductions(self.clients, len(self.success_rates)),
            metadata={
                "classes": {f"class_{c}": rate for c, rate in enumerate(self.success_rates)},
                "note": "sigma is a share of k/N; switch > 0 is E3CS-inc (sigma then k/N)",
            },
        )

    def metrics(self, ds) -> dict:
        """From every run's rounds, :func:`class_metrics`; reduced on the device, E3CS's
        fairness floor (its configuration's: the rest was reduced there,
        :func:`class_reductions`)."""
        if plots.has_runs(ds, "selection_count"):
            return class_metrics(ds, len(self.success_rates), self.m)
        return fairness_floor(ds, self.m)

    def figures(self, ds, summary, folder) -> None:
        columns = [name for name in ("policy", "sigma", "eta", "switch") if name in ds.coords]
        configs = ds.coords.to_dataset()[columns].to_dataframe()
        labels = dict(zip(ds["config"].to_numpy(), method_labels(configs), strict=True))
        # Reduced on the device the running participation has its own band; else it is
        # summed here.
        runs = plots.has_runs(ds, "num_success")
        curves = ds.assign(success=ds["num_success"].astype(float)) if runs else ds
        plots.plot_over_rounds(
            curves,
            "success" if runs else "cumulative_success",
            "cumulative effective participation",
            folder / "effective_participation.png",
            "Cumulative effective participation (Huang et al. 2022, §VI)",
            cumulative=runs,
            method=self.ci,
            bounds=NONNEGATIVE,
            labels=labels,
        )
        plots.plot_pull_record(ds, folder / "pull_record.png", method=self.ci, labels=labels)
        write_class_fractions(summary, self.success_rates, folder / "class_fractions.png")


def method_labels(configs: pd.DataFrame) -> list[str]:
    """The name of each configuration (a row of ``configs``: the configuration table or the
    summary) as Huang et al. name E3CS's variants (IEEE IoT-J 2022, §VI: E3CS-0, E3CS-0.5 and
    E3CS-0.8 for σ as a share of k/N, E3CS-inc for the schedule that switches from 0 to k/N),
    the other policies by their registered names; with η where several are swept. Every figure
    of the experiment names its lines so."""
    etas = configs["eta"].dropna().unique() if "eta" in configs else ()
    labels = []
    for _, config in configs.iterrows():
        label = str(config["policy"])
        if label == "e3cs":
            inc = config.get("switch", 0.0) > 0
            label = "E3CS-inc" if inc else f"E3CS-{config['sigma']:g}"
            label += f" η={config['eta']:g}" if len(etas) > 1 else ""
        labels.append(label)
    return labels


def write_class_fractions(summary: pd.DataFrame, success_rates: Sequence[float], path) -> None:
    """Each configuration's selection fraction per class (mean and interval over seeds), with
    E3CS's fairness floor as a tick where it has one; the classes named with their success
    rates ρ (``success_rates``, one per class), the methods by :func:`method_labels`."""
    num_classes = len(success_rates)

    labels = method_labels(summary)
    # A method's colour as in the figures drawn from the dataset (the same policies).
    styles = plots.bar_styles(summary["policy"], plots.policy_colors(summary["policy"]))
    fig, ((ax,),) = plots.line_figure([labels], "", width=7.0)
    width = 0.8 / max(len(summary), 1)
    x = np.arange(num_classes)
    for row, (_, config) in enumerate(summary.iterrows()):
        mean = np.array([config[f"class_{c}_fraction"] for c in range(num_classes)])
        lo = np.array([config[f"class_{c}_fraction_lo"] for c in range(num_classes)])
        hi = np.array([config[f"class_{c}_fraction_hi"] for c in range(num_classes)])
        label = labels[row]
        offset = x - 0.4 + (row + 0.5) * width
        err = np.nan_to_num(np.stack([mean - lo, hi - mean]))
        ax.bar(offset, mean, width, yerr=err, label=label, capsize=2, **styles[row])
        floor = config.get("fairness_floor", 0.0)
        if floor > 0:
            floors = np.full(num_classes, floor)
            ax.hlines(floors, offset - width / 2, offset + width / 2, colors="k", linewidth=1)
    names = [f"class {c} (ρ = {rate:g})" for c, rate in enumerate(success_rates)]
    many = num_classes > 6  # side by side they would run into each other
    ax.set_xticks(x, names, rotation=30 if many else 0, ha="right" if many else "center")
    ax.set_ylabel("selection fraction (share of rounds)")
    ax.set_title("Selection fraction per class (black ticks: E3CS's σ)")
    ax.grid(alpha=0.3, axis="y")
    plots.outside_legend(ax, "")
    plots.save(fig, path)
