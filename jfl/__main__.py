"""``python -m jfl``: the experiments by name, with the same flags as their scripts.

python -m jfl                         # list the experiments
python -m jfl v_beta_grid --seeds 8   # the same as python sweeps/v_beta_grid.py --seeds 8
python -m jfl v_beta_grid --help      # its flags
"""

from __future__ import annotations

import sys


def _listing(experiments) -> str:
    width = max(len(name) for name in experiments)
    lines = ["usage: python -m jfl EXPERIMENT [FLAGS …]", "", "experiments:"]
    for name, config in experiments.items():
        summary = " ".join((config.__doc__ or "").strip().split("\n\n")[0].split())
        lines.append(f"  {name:<{width}}  {summary}")
    lines += [
        "",
        "Each takes the flags of its script sweeps/EXPERIMENT.py (python -m jfl NAME --help).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """List the experiments, or run the one ``argv[0]`` names with the flags that follow."""
    from jfl.cli import fail
    from jfl.cli import main as run_experiment
    from jfl.experiments import EXPERIMENTS

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(_listing(EXPERIMENTS))
        return 0
    name, flags = argv[0], argv[1:]
    try:
        experiment = EXPERIMENTS.lookup(name)
    except ValueError as err:
        fail("python -m jfl", str(err))
    return run_experiment(experiment, flags, prog=f"python -m jfl {name}")


if __name__ == "__main__":
    sys.exit(main())
