"""RBCS-F and its baselines over a V × β (× α) grid and many seeds (RBCS-F §6.1).

Defaults reproduce the paper's numerical simulation: 40 clients in 4 classes, m = 8, β = 0.15,
λ = 1, α = 0.1, 500 rounds, V ∈ {1, 10, 20, 50}, Random and FedCS(3 s), 64 seeds each.

    python sweeps/v_beta_grid.py                       # paper setting, about a minute on 2 cores
    python sweeps/v_beta_grid.py --V 0:50:11 --beta 0:0.2:9 --seeds 256 --out runs/grid
    python sweeps/v_beta_grid.py --out runs/grid --resume   # continue an interrupted sweep

Writes to --out: summary.csv, results.nc (xarray/netCDF), metadata.json and figures/*.png.
"""

from __future__ import annotations

import argparse
import sys
import time

from jfl.cli import (
    add_output_args,
    add_seed_args,
    at_least,
    check_common_args,
    common_settings,
    format_table,
    parse_policies,
    prepare,
    resolve_chunk_size,
    write_outputs,
)

DEFAULT_OUT = "runs/v_beta_grid"
SWEPT = ("V", "beta", "alpha", "deadline", "gamma2")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    grid = p.add_argument_group("grid (lists '1,10,20' or inclusive ranges 'start:stop:count')")
    grid.add_argument("--V", default="1,10,20,50", help="RBCS-F penalty factor V ≥ 0")
    grid.add_argument("--beta", default="0.15", help="RBCS-F guaranteed rate β in [0, 1]")
    grid.add_argument("--alpha", default="0.1", help="RBCS-F exploration α ≥ 0")
    grid.add_argument("--deadline", default="3", help="FedCS deadline (s) > 0")
    grid.add_argument("--gamma2", default="1", help="dirichlet_random concentration γ₂ > 0")
    grid.add_argument("--lam", type=float, default=1.0, help="ridge regulariser λ > 0")
    grid.add_argument(
        "--policies",
        default="rbcsf,random,fedcs",
        help="comma-separated: rbcsf, random, dirichlet_random, fedcs",
    )
    sim = p.add_argument_group("simulation")
    add_seed_args(sim, seeds=64, rounds=500)
    sim.add_argument("--clients", type=int, default=40, help="clients N (4 equal classes)")
    sim.add_argument("--m", type=int, default=8, help="clients selected per round, 1 ≤ m ≤ N")
    sim.add_argument("--p-available", type=float, default=0.8, help="availability in [0, 1]")
    sim.add_argument(
        "--fairness-target",
        type=float,
        default=0.15,
        help="rate of the fairness queue measured for policies without β (in [0, 1])",
    )
    add_output_args(p, DEFAULT_OUT)
    return p


def check_args(args) -> dict:
    """Validate every flag before anything is compiled; returns the resolved settings."""
    from jfl.sweep import parse_values

    check_common_args(args)
    at_least("clients", args.clients)
    if not 1 <= args.m <= args.clients:
        raise ValueError(f"--m must be in [1, --clients={args.clients}], got {args.m}")
    if not 0 <= args.p_available <= 1:
        raise ValueError(f"--p-available must be in [0, 1], got {args.p_available}")
    if not 0 <= args.fairness_target <= 1:
        raise ValueError(f"--fairness-target must be in [0, 1], got {args.fairness_target}")
    policies = parse_policies(args.policies, "rbcsf")
    swept = {name: parse_values(getattr(args, name), name) for name in SWEPT}
    if not args.lam > 0:
        raise ValueError(f"--lam must be > 0, got {args.lam}")
    return {
        "policies": policies,
        "grid": swept,
        "lam": args.lam,
        **common_settings(args),
        "clients": args.clients,
        "m": args.m,
        "p_available": args.p_available,
        "fairness_target": args.fairness_target,
        "environment": "rbcsf",
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
            fixed={"lam": settings["lam"]},
            fairness_target=settings["fairness_target"],
        )
    except ValueError as err:
        parser.error(str(err))

    # Heavy imports after validation, so a bad flag fails in a fraction of a second.
    import numpy as np

    from jfl import results, sweep
    from jfl.envs import RbcsfEnv

    env = RbcsfEnv()
    env_params = env.default_params(
        num_clients=settings["clients"], p_available=settings["p_available"]
    )
    per_run = sweep.bytes_per_run(
        settings["rounds"], settings["clients"], settings["m"], settings["trajectories"]
    )
    rbcsf_configs = int((configs["policy"] == "rbcsf").sum()) or len(configs)
    chunk_size = resolve_chunk_size(
        settings["chunk_size"],
        rbcsf_configs,
        settings["seeds"],
        per_run,
        settings["memory_budget_mib"],
    )
    out, manifest = prepare(parser, args, settings, chunk_size)

    start = time.perf_counter()
    try:
        outputs = sweep.run_policy_grid(
            env,
            env_params,
            configs,
            num_clients=settings["clients"],
            m=settings["m"],
            num_rounds=settings["rounds"],
            seeds=np.arange(settings["seeds"]),
            base_seed=settings["base_seed"],
            chunk_size=chunk_size,
            fixed={"lam": settings["lam"]},
            store=sweep.ChunkStore(out),
            trajectories=settings["trajectories"],
            show_progress=not args.quiet,
        )
    except ValueError as err:  # e.g. a corrupt chunk found while resuming
        parser.error(str(err))
    wall = time.perf_counter() - start

    ds = results.to_dataset(outputs, configs, np.arange(settings["seeds"]))
    metadata = sweep.run_metadata(manifest, wall_seconds=wall)
    metadata["note"] = "queue_rate: β for RBCS-F, --fairness-target for policies without β"
    summary = write_outputs(ds, out, metadata, args.ci, None if args.no_plots else write_figures)
    print(
        f"{len(configs)} configurations × {settings['seeds']} seeds × {settings['rounds']} "
        f"rounds in {wall:.1f} s → {out}"
    )
    print(summary_table(summary))
    return 0


def write_figures(ds, summary, folder) -> None:
    import numpy as np

    from jfl import plots

    policy = ds["policy"].to_numpy()
    rbcsf = ds["config"].to_numpy()[policy == "rbcsf"]
    if len(rbcsf):
        # Fig. 2: one line per V at the first (β, α) of the grid.
        first = ds.sel(config=rbcsf)
        same = np.ones(len(rbcsf), bool)
        for name in ("beta", "alpha"):
            same &= first[name].to_numpy() == first[name].to_numpy()[0]
        plots.plot_over_rounds(
            ds,
            "queue_mean",
            "mean queue backlog Z",
            folder / "queue_vs_round.png",
            "RBCS-F mean queue backlog (paper Fig. 2)",
            configs=list(rbcsf[same][:12]),
        )
    others = list(ds["config"].to_numpy()[policy != "rbcsf"])
    shown = list(rbcsf[:8]) + others[:6]
    plots.plot_over_rounds(
        ds,
        "round_time",
        "cumulative training time (s)",
        folder / "cumulative_time.png",
        "Training time (paper Fig. 3)",
        cumulative=True,
        configs=shown,
    )
    plots.plot_pull_record(ds, folder / "pull_record.png", configs=shown)
    grid = summary[summary["policy"] == "rbcsf"]
    if len(grid) and grid["V"].nunique() > 1 and grid["beta"].nunique() > 1:
        plots.plot_heatmap(
            grid,
            "mean_round_time",
            "V",
            "beta",
            folder / "heatmap_mean_round_time.png",
            "RBCS-F mean round time (s)",
        )
        plots.plot_heatmap(
            grid,
            "min_selection_rate",
            "V",
            "beta",
            folder / "heatmap_min_selection_rate.png",
            "RBCS-F minimum selection rate",
        )


def summary_table(summary) -> str:
    return format_table(
        summary,
        [
            "policy",
            "V",
            "beta",
            "alpha",
            "deadline",
            "n_seeds",
            "mean_round_time",
            "final_queue_mean",
            "min_selection_rate",
            "jain_index",
            "selected_per_round",
        ],
    )


if __name__ == "__main__":
    sys.exit(main())
