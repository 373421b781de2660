"""CS-UCB-Q for several β against modified CS-UCB, non-ideal scenario (Xia et al. §V-C, Figs. 4–5).

The ``fairness`` preset: K = 3 clients at an equal 300 m, N = 2 channels, availability 0.9,
c = (0.6, 0.5, 0.4), and τ_max = 0.2 s instead of the paper's 5 s — with 5 s every reward is
≈ 0.96, CS-UCB-Q's truncated index is 1 for every client and no β changes anything (SPEC §9).
Regret is measured against r* of the linear program (23) over availability-only policies.

    python sweeps/cs_ucb_q_fairness.py                    # Figs. 4 and 5
    python sweeps/cs_ucb_q_fairness.py --beta 1e-5,1e-3,0.1,0.5 --seeds 128 --rounds 10000
    python sweeps/cs_ucb_q_fairness.py --fairness 0.5,0.5,0.5 --availability 0.95

Writes to --out: summary.csv, results.nc (xarray/netCDF), metadata.json and figures/*.png.
Per-round selections are always stored (K is small): they give the selection fractions of Fig. 5.
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
from jfl.wireless_sweep import add_scenario_args, check_scenario_args

DEFAULT_OUT = "runs/cs_ucb_q_fairness"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    grid = p.add_argument_group("grid (lists '1e-5,0.1' or inclusive ranges 'start:stop:count')")
    grid.add_argument("--beta", default="1e-5,1e-3,0.01,0.1", help="CS-UCB-Q weight β in [0, 1]")
    grid.add_argument(
        "--policies",
        default="cs_ucb_q,modified_cs_ucb",
        help="comma-separated registered policies (cs_ucb_q, modified_cs_ucb, random, …)",
    )
    add_scenario_args(p)
    add_seed_args(p.add_argument_group("seeds"), seeds=32, rounds=5000)
    add_output_args(p, DEFAULT_OUT)
    return p


def check_args(args) -> dict:
    """Validate every flag before anything is compiled; returns the resolved settings."""
    from jfl.sweep import parse_values

    check_common_args(args)
    return {
        "policies": parse_policies(args.policies, "wireless"),
        "grid": {"beta": parse_values(args.beta, "beta")},
        **check_scenario_args(args),
        **common_settings(args),
        "trajectories": True,  # K is small: per-round selections give Fig. 5
        "environment": "wireless",
        "benchmark": "lp",
    }


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = check_args(args)
        from jfl.sweep import config_table

        shared = {"N": [settings["N"]]}
        configs = config_table(settings["policies"], settings["grid"], shared=shared)
    except ValueError as err:
        parser.error(str(err))

    from jfl.wireless_sweep import run_from_cli, scenario_params

    return run_from_cli(
        parser,
        args,
        settings=settings,
        configs=configs,
        params=scenario_params(settings),
        fairness=settings["fairness"],
        benchmark="lp",
        figures=write_figures,
        columns=[
            "policy",
            "beta",
            "n_seeds",
            "cumulative_gap",
            "average_gap",
            "min_selection_rate",
            "max_rate_violation",
            "target_met",
            "rounds_to_target",
        ],
    )


def write_figures(ds, summary, folder) -> None:
    from jfl import plots
    from jfl.wireless_sweep import add_gap_curves

    curves = add_gap_curves(ds)
    for variable, ylabel, name in (
        ("cumulative_gap_t", "cumulative performance gap Θ (s)", "cumulative_gap"),
        ("average_gap_t", "average performance gap θ (s)", "average_gap"),
    ):
        plots.plot_over_rounds(
            curves,
            variable,
            ylabel,
            folder / f"{name}_vs_round.png",
            f"{ylabel} (Xia Fig. 4), τ_max = {ds.attrs['tau_max']:g} s",
        )
    plots.plot_selection_fraction(ds, folder / "selection_fraction.png")


if __name__ == "__main__":
    sys.exit(main())
