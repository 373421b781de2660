"""CS-UCB against Random and Round-robin in the ideal scenario (Xia et al. §V-B, Figs. 1 and 3).

K = 20 always-available clients in a 500 m disc (a fresh layout per seed), N channels, τ_max = 5 s.
Regret is measured against μ(S*) of eq. (13), the best fixed set for the seed's layout, with μ_k
estimated by Monte Carlo; the performance gap is Θ = τ_max · regret and θ = Θ/T.

    python sweeps/cs_ucb_ideal.py                     # Fig. 1 (N = 5) and Fig. 3 (N = 1…10)
    python sweeps/cs_ucb_ideal.py --N 5 --rounds 20000 --seeds 256 --out runs/fig1
    python sweeps/cs_ucb_ideal.py --out runs/cs_ucb_ideal --resume

Writes to --out: summary.csv, results.nc (xarray/netCDF), metadata.json and figures/*.png.
"""

from __future__ import annotations

import argparse
import sys

from jfl.cli import (
    add_output_args,
    add_seed_args,
    at_least,
    check_common_args,
    common_settings,
    parse_policies,
)

DEFAULT_OUT = "runs/cs_ucb_ideal"
FIG1_N = 5


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    grid = p.add_argument_group("grid (lists '1,2,5' or inclusive ranges 'start:stop:count')")
    grid.add_argument("--N", default="1:10:10", help="channels N per round, 1 ≤ N ≤ K (Fig. 3)")
    grid.add_argument(
        "--policies",
        default="cs_ucb,random,round_robin",
        help="comma-separated registered policies (cs_ucb, random, round_robin, …)",
    )
    sim = p.add_argument_group("simulation")
    add_seed_args(sim, seeds=32, rounds=5000)
    sim.add_argument("--clients", type=int, default=20, help="clients K")
    sim.add_argument("--tau-max", type=float, default=5.0, help="round deadline τ_max (s) > 0")
    sim.add_argument(
        "--mc-samples", type=int, default=100_000, help="Monte Carlo samples per layout for μ_k"
    )
    add_output_args(p, DEFAULT_OUT)
    return p


def check_args(args) -> dict:
    """Validate every flag before anything is compiled; returns the resolved settings."""
    from jfl.sweep import parse_values

    check_common_args(args)
    at_least("clients", args.clients)
    at_least("mc-samples", args.mc_samples)
    if not args.tau_max > 0:
        raise ValueError(f"--tau-max must be > 0, got {args.tau_max}")
    sizes = parse_values(args.N, "N")
    for n in sizes:
        if n != int(n) or not 1 <= n <= args.clients:
            raise ValueError(f"--N must be integers in [1, --clients={args.clients}], got {n}")
    return {
        "policies": parse_policies(args.policies, "wireless"),
        "N": sorted({int(n) for n in sizes}),
        **common_settings(args),
        "clients": args.clients,
        "tau_max": args.tau_max,
        "availability": 1.0,
        "mc_samples": args.mc_samples,
        "environment": "wireless",
        "benchmark": "best_set",
    }


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = check_args(args)
        from jfl.sweep import config_table

        configs = config_table(settings["policies"], {}, shared={"N": settings["N"]})
        # One compiled program per (policy, N): group rows that way.
        configs = configs.sort_values(["N", "policy"], kind="stable").reset_index(drop=True)
    except ValueError as err:
        parser.error(str(err))

    from jfl.envs.wireless import make_params
    from jfl.wireless_sweep import run_from_cli

    params = make_params(settings["clients"], tau_max=settings["tau_max"], availability=1.0)
    return run_from_cli(
        parser,
        args,
        settings=settings,
        configs=configs,
        params=params,
        benchmark="best_set",
        figures=write_figures,
        columns=[
            "policy",
            "N",
            "n_seeds",
            "cumulative_gap",
            "cumulative_gap_lo",
            "cumulative_gap_hi",
            "average_gap",
            "failed_clients",
            "mean_round_time",
        ],
    )


def write_figures(ds, summary, folder) -> None:
    from jfl import plots
    from jfl.wireless_sweep import add_gap_curves

    sizes = ds["N"].to_numpy()
    shown_n = FIG1_N if FIG1_N in sizes else int(sizes.max())
    curves = add_gap_curves(ds.sel(config=ds["config"][sizes == shown_n]))
    configs = list(curves["config"].to_numpy())
    for variable, ylabel, name in (
        ("cumulative_gap_t", "cumulative performance gap Θ (s)", "cumulative_gap"),
        ("average_gap_t", "average performance gap θ (s)", "average_gap"),
        ("failed_clients_t", "cumulative failed clients", "failed_clients"),
    ):
        plots.plot_over_rounds(
            curves,
            variable,
            ylabel,
            folder / f"{name}_vs_round.png",
            f"{ylabel} (Xia Fig. 1), K={ds.sizes['client']}, N={shown_n}",
            configs=configs,
        )
    if summary["N"].nunique() > 1:
        plots.plot_metric_vs(
            summary,
            "cumulative_gap",
            "N",
            folder / "gap_vs_channels.png",
            "cumulative performance gap Θ (s)",
            f"Gap at T = {ds.sizes['round']} vs channels N (Xia Fig. 3)",
        )


if __name__ == "__main__":
    sys.exit(main())
