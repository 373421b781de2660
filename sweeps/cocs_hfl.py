"""COCS against Oracle, LinUCB, CUCB and Random on hierarchical FL (Qu et al. §VI, Figs. 3–4).

N = 50 clients, M = 3 edge servers, the paper's Table I settings as presets (``mnist``: strongly
convex utility, eq. 8; ``cifar``: the non-convex utility sqrt, eq. 19). Regret is measured
against the Oracle run on the same seeds (common random numbers: every policy sees the same
clients, channels and coverage), so the Oracle must be among the policies for regret figures.

    python sweeps/cocs_hfl.py                                   # Fig. 3 (MNIST), 1000 rounds
    python sweeps/cocs_hfl.py --preset cifar --out runs/cocs_cifar        # non-convex utility
    python sweeps/cocs_hfl.py --budget 3.5,5,10 --out runs/cocs_budget    # Fig. 4d
    python sweeps/cocs_hfl.py --deadline 2,3,4,5 --out runs/cocs_deadline # Fig. 4f
    python sweeps/cocs_hfl.py --policies cocs,oracle --h-T 1:10:10 --z 0.1:1:10 --seeds 128 \\
        --out runs/cocs_sensitivity                             # COCS's own parameters

Writes to --out: summary.csv, results.nc (xarray/netCDF), metadata.json and figures/*.png.
"""

from __future__ import annotations

import argparse
import math
import sys

from jfl.cli import (
    add_output_args,
    add_seed_args,
    check_common_args,
    check_hfl_scenario,
    common_settings,
    format_table,
    parse_policies,
    prepare,
    resolve_chunk_size,
    write_outputs,
)

DEFAULT_OUT = "runs/cocs_hfl"
SWEPT = ("h_T", "z")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    grid = p.add_argument_group("grid (lists '3.5,5,10' or inclusive ranges 'start:stop:count')")
    grid.add_argument(
        "--policies",
        default="cocs,oracle,linucb,cucb,random_budget",
        help="comma-separated: cocs, oracle, linucb, cucb, random_budget",
    )
    grid.add_argument("--budget", default=None, help="budget B per edge server > 0 (preset's)")
    grid.add_argument("--deadline", default=None, help="round deadline (s) > 0 (preset's)")
    grid.add_argument("--h-T", dest="h_T", default="5", help="COCS hypercubes per dimension, 1..10")
    grid.add_argument("--z", default="0.4", help="COCS exploration exponent z in (0, 1]")
    sim = p.add_argument_group("scenario")
    sim.add_argument("--preset", choices=("mnist", "cifar"), default="mnist", help="Table I")
    sim.add_argument("--clients", type=int, default=50, help="clients N")
    sim.add_argument("--servers", type=int, default=3, help="edge servers M, 1 ≤ M ≤ N")
    sim.add_argument("--p-cover", type=float, default=1.0, help="coverage probability in [0, 1]")
    add_seed_args(p.add_argument_group("seeds"), seeds=32, rounds=1000)
    add_output_args(p, DEFAULT_OUT)
    return p


def check_args(args) -> dict:
    """Validate every flag before anything is compiled; returns the resolved settings."""
    from jfl.sweep import parse_values

    check_common_args(args)
    budget, deadline = check_hfl_scenario(args)
    if not 0 <= args.p_cover <= 1:
        raise ValueError(f"--p-cover must be in [0, 1], got {args.p_cover}")
    h_t = parse_values(args.h_T, "h-T")
    if any(not (1 <= v <= 10 and v == math.floor(v)) for v in h_t):
        raise ValueError(f"--h-T must be integers in [1, 10], got {h_t}")
    return {
        "policies": parse_policies(args.policies, "hfl"),
        "grid": {"h_T": h_t, "z": parse_values(args.z, "z")},
        "budget": budget,
        "deadline": deadline,
        "preset": args.preset,
        "clients": args.clients,
        "servers": args.servers,
        "p_cover": args.p_cover,
        **common_settings(args),
        "environment": "hfl",
    }


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = check_args(args)
        from jfl.sweep import config_table

        shared = {"budget": settings["budget"], "deadline": settings["deadline"]}
        configs = config_table(
            settings["policies"], settings["grid"], fairness_target=0.0, shared=shared
        )
    except ValueError as err:
        parser.error(str(err))

    import time

    import numpy as np

    from jfl import results, sweep
    from jfl.envs.hfl import HflEnv, preset_params

    env = HflEnv()
    params = preset_params(
        settings["preset"],
        num_clients=settings["clients"],
        num_servers=settings["servers"],
        p_cover=settings["p_cover"],
    )
    per_run = sweep.bytes_per_run(
        settings["rounds"], settings["clients"] * settings["servers"], 1, settings["trajectories"]
    )
    chunk_size = resolve_chunk_size(
        settings["chunk_size"],
        int(configs.groupby("policy").size().max()),
        settings["seeds"],
        per_run,
        settings["memory_budget_mib"],
    )
    out, manifest = prepare(parser, args, settings, chunk_size)

    start = time.perf_counter()
    try:
        outputs = sweep.run_policy_grid(
            env,
            params,
            configs,
            num_clients=settings["clients"],
            m=settings["servers"],
            num_rounds=settings["rounds"],
            seeds=np.arange(settings["seeds"]),
            base_seed=settings["base_seed"],
            chunk_size=chunk_size,
            store=sweep.ChunkStore(out),
            trajectories=settings["trajectories"],
            show_progress=not args.quiet,
            per_config={
                "budget": configs["budget"].to_numpy(),
                "deadline": configs["deadline"].to_numpy(),
            },
            env_hparams=("budget", "deadline"),
        )
    except ValueError as err:  # e.g. a corrupt chunk found while resuming
        parser.error(str(err))
    wall = time.perf_counter() - start

    ds = results.to_dataset(
        outputs, configs.drop(columns="queue_rate"), np.arange(settings["seeds"])
    )
    ds = results.attach_oracle(ds)
    metadata = sweep.run_metadata(manifest, wall_seconds=wall)
    metadata["utility"] = {"mnist": "eq. 8 (linear)", "cifar": "eq. 19 (square root)"}[
        settings["preset"]
    ]
    summary = write_outputs(ds, out, metadata, args.ci, None if args.no_plots else write_figures)
    print(
        f"{len(configs)} configurations × {settings['seeds']} seeds × {settings['rounds']} "
        f"rounds in {wall:.1f} s → {out}"
    )
    print(
        format_table(
            summary,
            [
                "policy",
                "budget",
                "deadline",
                "h_T",
                "z",
                "n_seeds",
                "cumulative_utility",
                "cumulative_utility_sqrt",
                "regret_vs_oracle",
                "success_per_round",
            ],
        )
    )
    return 0


def write_figures(ds, summary, folder) -> None:
    import numpy as np

    from jfl import plots

    first = np.ones(ds.sizes["config"], bool)
    for name in ("budget", "deadline", "h_T", "z"):
        values = ds[name].to_numpy()
        finite = values[np.isfinite(values)]
        if len(finite):
            first &= ~np.isfinite(values) | (values == finite[0])
    shown = list(ds["config"].to_numpy()[first])
    curves = ds.assign(
        utility_sqrt=np.sqrt(ds["utility"]),
        success=ds["num_success"].astype(float),
    )
    plots.plot_over_rounds(
        curves, "utility", "cumulative utility (eq. 8)", folder / "cumulative_utility.png",
        "Cumulative utility (Qu Fig. 3a)", cumulative=True, configs=shown,
    )  # fmt: skip
    plots.plot_over_rounds(
        curves, "utility_sqrt", "cumulative utility (eq. 19)",
        folder / "cumulative_utility_sqrt.png", "Cumulative non-convex utility (Qu Fig. 7)",
        cumulative=True, configs=shown,
    )  # fmt: skip
    plots.plot_over_rounds(
        curves, "success", "successful clients per round", folder / "success_per_round.png",
        "Successful clients per round (Qu Fig. 4b)", configs=shown,
    )  # fmt: skip
    if "oracle_utility" in ds:
        curves = curves.assign(regret=ds["oracle_utility"] - ds["utility"])
        plots.plot_over_rounds(
            curves, "regret", "regret vs Oracle", folder / "regret.png",
            "Cumulative regret against the Oracle (Qu Fig. 3b)", cumulative=True,
            configs=[c for c in shown if ds["policy"].to_numpy()[c] != "oracle"],
        )  # fmt: skip
    for axis, figure in (("budget", "4d"), ("deadline", "4f")):
        if summary[axis].nunique() > 1:
            plots.plot_metric_vs(
                summary, "cumulative_utility", axis, folder / f"utility_vs_{axis}.png",
                "cumulative utility", f"Cumulative utility vs {axis} (Qu Fig. {figure})",
            )  # fmt: skip
    grid = summary[summary["policy"] == "cocs"]
    if len(grid) and grid["h_T"].nunique() > 1 and grid["z"].nunique() > 1:
        for metric in ("cumulative_utility", "regret_vs_oracle"):
            if metric in grid:
                plots.plot_heatmap(
                    grid, metric, "h_T", "z", folder / f"heatmap_cocs_{metric}.png",
                    f"COCS {metric.replace('_', ' ')}",
                )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
