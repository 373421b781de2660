"""CS-UCB-Q over a β × ρ grid, fairness c_k = ρ s_k / Σ s, many seeds (Xia et al. §V-C, Fig. 7).

The ``fairness`` preset scenario (K = 3 at 300 m, N = 2, availability 0.9, τ_max = 0.2 s, see
``cs_ucb_q_fairness.py``) with dataset sizes s = (1500, 1000, 500): ρ scales how many rounds the
clients are guaranteed, β how much CS-UCB-Q weighs the guarantee against latency. Every (β, ρ)
pair is one traced configuration of one compiled program. Regret is measured against r* of the
linear program (23) for the configuration's c.

    python sweeps/beta_rho_grid.py
    python sweeps/beta_rho_grid.py --beta 1e-4,1e-3,1e-2,0.1,1 --rho 0.2:1.6:8 --seeds 512

Writes to --out: summary.csv, results.nc (xarray/netCDF), metadata.json and figures/*.png
(heatmaps of the average gap, the rate violation and the rounds needed to meet c).
"""

from __future__ import annotations

import argparse
import sys

from jfl.cli import (
    add_output_args,
    add_seed_args,
    check_common_args,
    common_settings,
    parse_policies,
)
from jfl.wireless_sweep import add_scenario_args, check_scenario_args, parse_floats

DEFAULT_OUT = "runs/beta_rho_grid"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    grid = p.add_argument_group("grid (lists '1e-3,0.1' or inclusive ranges 'start:stop:count')")
    grid.add_argument(
        "--beta", default="1e-5,1e-4,1e-3,1e-2,0.1,0.5", help="CS-UCB-Q weight β in [0, 1]"
    )
    grid.add_argument("--rho", default="0.25:1.75:7", help="fairness scale ρ ≥ 0")
    grid.add_argument(
        "--samples", default="1500,1000,500", help="dataset sizes s_k > 0, one per client"
    )
    grid.add_argument("--policies", default="cs_ucb_q", help="comma-separated registered policies")
    add_scenario_args(p, fairness=False)
    add_seed_args(p.add_argument_group("seeds"), seeds=128, rounds=5000)
    add_output_args(p, DEFAULT_OUT)
    return p


def check_args(args) -> dict:
    """Validate every flag before anything is compiled; returns the resolved settings."""
    from jfl.sweep import parse_values

    check_common_args(args)
    rho = parse_values(args.rho, "rho")
    if any(not r >= 0 for r in rho):
        raise ValueError(f"--rho must be >= 0, got {rho}")
    samples = parse_floats(args.samples, "samples", args.clients)
    if any(not s > 0 for s in samples):
        raise ValueError(f"--samples must be > 0, got {samples}")
    return {
        "policies": parse_policies(args.policies, "wireless"),
        "grid": {"beta": parse_values(args.beta, "beta")},
        "rho": rho,
        "samples": samples,
        **check_scenario_args(args),
        **common_settings(args),
        "environment": "wireless",
        "benchmark": "lp",
    }


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = check_args(args)
        from jfl.sweep import config_table

        configs = config_table(
            settings["policies"],
            settings["grid"],
            shared={"N": [settings["N"]], "rho": settings["rho"]},
        )
    except ValueError as err:
        parser.error(str(err))

    from jfl.wireless_sweep import run_from_cli, scenario_params

    return run_from_cli(
        parser,
        args,
        settings=settings,
        configs=configs,
        params=scenario_params(settings),
        samples=settings["samples"],
        benchmark="lp",
        figures=write_figures,
        columns=[
            "policy",
            "rho",
            "beta",
            "n_seeds",
            "average_gap",
            "max_rate_violation",
            "target_met",
            "rounds_to_target",
        ],
    )


def write_figures(ds, summary, folder) -> None:
    from jfl import plots

    for policy in summary["policy"].unique():
        grid = summary[summary["policy"] == policy]
        if grid["beta"].nunique() < 2 or grid["rho"].nunique() < 2:
            continue
        grid = grid.assign(log10_beta=grid["beta"].apply(_log10))
        for metric, title in (
            ("average_gap", "average performance gap θ (s)"),
            ("max_rate_violation", "largest shortfall max_k (c_k − rate_k)"),
            ("rounds_to_target", "rounds until every c_k is met"),
        ):
            plots.plot_heatmap(
                grid,
                metric,
                "rho",
                "log10_beta",
                folder / f"heatmap_{policy}_{metric}.png",
                f"{policy}: {title}",
            )


def _log10(value: float) -> float:
    import math

    return math.log10(value) if value > 0 else float("-inf")


if __name__ == "__main__":
    sys.exit(main())
