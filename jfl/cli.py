"""Command-line plumbing shared by the sweep scripts in ``sweeps/``.

Every script validates all of its flags before importing JAX or compiling anything, resolves the
chunk size, prepares (or resumes) its output directory, runs, and writes the same set of files:
``summary.csv``, ``results.nc``, ``metadata.json`` and ``figures/``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path


def add_seed_args(group, seeds: int, rounds: int) -> None:
    group.add_argument("--seeds", type=int, default=seeds, help="number of seeds per configuration")
    group.add_argument("--base-seed", type=int, default=0, help="root of the seed keys")
    group.add_argument("--rounds", type=int, default=rounds, help="rounds T")


def add_output_args(parser: argparse.ArgumentParser, default_out: str) -> None:
    run = parser.add_argument_group("execution and output")
    run.add_argument(
        "--chunk-size",
        default="auto",
        help="configurations per chunk, or 'auto' to fit --memory-budget",
    )
    run.add_argument("--memory-budget", type=float, default=1024, help="MiB per chunk (auto)")
    run.add_argument("--out", default=default_out, help=f"output directory ({default_out})")
    run.add_argument("--resume", action="store_true", help="continue a sweep in --out")
    run.add_argument("--overwrite", action="store_true", help="replace a sweep in --out")
    run.add_argument(
        "--trajectories", action="store_true", help="also store per-client per-round arrays"
    )
    run.add_argument("--ci", choices=("t", "bootstrap"), default="t", help="interval method")
    run.add_argument("--no-plots", action="store_true", help="skip the figures")
    run.add_argument("--quiet", action="store_true", help="no progress bar")


def at_least(name: str, value, low=1) -> None:
    if value < low:
        raise ValueError(f"--{name} must be an integer >= {low}, got {value}")


def check_common_args(args) -> None:
    """Seeds, rounds, output and execution flags (raises ValueError naming the flag)."""
    at_least("seeds", args.seeds)
    at_least("rounds", args.rounds)
    at_least("base-seed", args.base_seed, 0)
    if not args.memory_budget > 0:
        raise ValueError(f"--memory-budget must be > 0 MiB, got {args.memory_budget}")
    if args.resume and args.overwrite:
        raise ValueError("--resume and --overwrite exclude each other")
    if args.chunk_size != "auto":
        try:
            chunk = int(args.chunk_size)
        except ValueError:
            raise ValueError(
                f"--chunk-size must be a positive integer or 'auto', got {args.chunk_size!r}"
            ) from None
        at_least("chunk-size", chunk)


def check_hfl_scenario(args) -> tuple[list[float], list[float]]:
    """The hfl sweeps' ``--clients``/``--servers`` check and their ``--budget`` and ``--deadline``
    lists (the ``--preset``'s values when not given), each finite and > 0."""
    import math

    from jfl.envs.hfl import PRESETS
    from jfl.sweep import parse_values

    at_least("clients", args.clients)
    if not 1 <= args.servers <= args.clients:
        raise ValueError(f"--servers must be in [1, --clients={args.clients}], got {args.servers}")
    preset = PRESETS[args.preset]
    budget = parse_values(args.budget or str(preset["budget"]), "budget")
    deadline = parse_values(args.deadline or str(preset["deadline"]), "deadline")
    for name, values in (("budget", budget), ("deadline", deadline)):
        if any(not 0 < v < math.inf for v in values):
            raise ValueError(f"--{name} must be finite and > 0, got {values}")
    return budget, deadline


def common_settings(args) -> dict:
    """The settings of ``add_seed_args`` / ``add_output_args`` flags, for the manifest."""
    return {
        "seeds": args.seeds,
        "base_seed": args.base_seed,
        "rounds": args.rounds,
        "chunk_size": args.chunk_size,
        "memory_budget_mib": args.memory_budget,
        "trajectories": args.trajectories,
    }


def parse_policies(text: str, environment: str) -> list[str]:
    """Comma-separated registered policy names that can run on ``environment``."""
    from jfl.envs import ENVIRONMENTS
    from jfl.policies import REGISTRY

    policies = [p.strip() for p in text.split(",") if p.strip()]
    for name in policies:
        if name not in REGISTRY:
            raise ValueError(f"--policies: unknown policy {name!r}; choose from {sorted(REGISTRY)}")
        try:
            REGISTRY[name].check_environment(ENVIRONMENTS[environment])
        except ValueError as err:
            raise ValueError(f"--policies: {err}") from None
    return policies


def resolve_chunk_size(chunk_size: str, largest_group: int, seeds: int, per_run_bytes: int, mib):
    """``--chunk-size`` as an int: given, or the most configurations fitting ``mib`` MiB."""
    import jax

    from jfl import sweep

    if chunk_size == "auto":
        return sweep.auto_chunk_size(
            largest_group, seeds, per_run_bytes, int(mib * 2**20), jax.device_count()
        )
    return sweep._round_up(int(chunk_size), jax.device_count())


def prepare(parser, args, settings: dict, chunk_size: int) -> tuple[Path, dict]:
    """Write or check the manifest in ``--out`` (exits with status 2 on a clash)."""
    import jax

    from jfl import sweep

    # The resolved chunk size is part of the manifest: resuming with the same chunks is what makes
    # a resumed sweep bit-identical to an uninterrupted one.
    manifest = {**settings, "chunk_size": chunk_size, "devices": jax.device_count()}
    out = Path(args.out)
    try:
        sweep.prepare_out_dir(out, manifest, resume=args.resume, overwrite=args.overwrite)
    except ValueError as err:
        parser.error(str(err))
    return out, manifest


def write_outputs(
    ds,
    out: Path,
    metadata: dict,
    ci: str,
    figures: Callable | None = None,
):
    """results.nc, summary.csv, metadata.json and (unless ``figures`` is None) the figures."""
    from jfl import results

    results.write_dataset(ds, out / "results.nc", metadata)
    summary = results.summarize(ds, method=ci)
    summary.to_csv(out / "summary.csv", index=False)
    (out / "metadata.json").write_text(json.dumps(metadata, indent=2, default=str))
    if figures is not None:
        folder = out / "figures"
        folder.mkdir(parents=True, exist_ok=True)
        figures(ds, summary, folder)
    return summary


def format_table(summary, columns, max_rows: int = 20) -> str:
    columns = [c for c in columns if c in summary]
    return summary[columns].head(max_rows).to_string(index=False, float_format=lambda v: f"{v:.3g}")
