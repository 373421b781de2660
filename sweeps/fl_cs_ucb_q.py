"""Federated training with CS-UCB-Q and its baselines choosing the clients (Xia et al. Fig. 6).

K = 10 clients on N = 4 channels of the ``wireless`` environment; two clients hold samples of
five digits and the other eight of one digit each (Xia §V-B), and the guaranteed rates follow
the data sizes, c_k = (N/2)·s_k / Σ s. The model is multinomial logistic regression. Clients
that exceed τ_max fail and their updates are lost. As in the other fairness sweeps τ_max is
0.2 s at an equal 300 m (the paper's 5 s would make every reward ≈ 1, so that β could not
matter; SPEC §9). Default data: scikit-learn's digits; ``--dataset mnist --data-dir DIR`` for
the paper's MNIST.

    python sweeps/fl_cs_ucb_q.py                                  # Fig. 6
    python sweeps/fl_cs_ucb_q.py --beta 1e-5,0.01,0.1 --out runs/fl_cs_ucb_q_beta
    python sweeps/fl_cs_ucb_q.py --dataset mnist --data-dir ~/data/mnist --rounds 500

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
from jfl.fl.sweep import add_training_args, check_training_args

DEFAULT_OUT = "runs/fl_cs_ucb_q"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    grid = p.add_argument_group("grid (lists '1e-5,0.1' or inclusive ranges 'start:stop:count')")
    grid.add_argument(
        "--policies",
        default="cs_ucb_q,modified_cs_ucb,random,round_robin",
        help="comma-separated: cs_ucb_q, modified_cs_ucb, cs_ucb, random, round_robin",
    )
    grid.add_argument("--beta", default="0.1", help="CS-UCB-Q weight β in [0, 1]")
    sim = p.add_argument_group("scenario (Xia §V-B)")
    sim.add_argument("--clients", type=int, default=10, help="clients K")
    sim.add_argument("--N", type=int, default=4, help="channels N, 1 ≤ N ≤ K")
    sim.add_argument("--rich-clients", type=int, default=2, help="clients with several digits")
    sim.add_argument("--labels-per-rich", type=int, default=5, help="digits of each rich client")
    sim.add_argument("--distance", type=float, default=300.0, help="client distance (m) > 0")
    sim.add_argument("--availability", type=float, default=0.9, help="availability α in [0, 1]")
    sim.add_argument("--tau-max", type=float, default=0.2, help="round deadline τ_max (s) > 0")
    add_seed_args(p.add_argument_group("seeds"), seeds=8, rounds=100)
    add_training_args(p, learning_rate="0.1", target_accuracy=0.8, eval_every=5)
    add_output_args(p, DEFAULT_OUT)
    return p


def check_args(args) -> dict:
    """Validate every flag before anything is loaded or compiled; returns the settings."""
    from jfl.sweep import parse_values

    check_common_args(args)
    at_least("clients", args.clients)
    at_least("rich-clients", args.rich_clients, 0)
    at_least("labels-per-rich", args.labels_per_rich)
    if not 1 <= args.N <= args.clients:
        raise ValueError(f"--N must be in [1, --clients={args.clients}], got {args.N}")
    if args.rich_clients > args.clients:
        raise ValueError(
            f"--rich-clients must be in [0, --clients={args.clients}], got {args.rich_clients}"
        )
    if not 0 <= args.availability <= 1:
        raise ValueError(f"--availability must be in [0, 1], got {args.availability}")
    if not args.tau_max > 0:
        raise ValueError(f"--tau-max must be > 0, got {args.tau_max}")
    if not args.distance > 0:
        raise ValueError(f"--distance must be > 0 m, got {args.distance}")
    return {
        "policies": parse_policies(args.policies, "wireless"),
        "grid": {"beta": parse_values(args.beta, "beta")},
        "clients": args.clients,
        "N": args.N,
        "rich_clients": args.rich_clients,
        "labels_per_rich": args.labels_per_rich,
        "distance": args.distance,
        "availability": args.availability,
        "tau_max": args.tau_max,
        **check_training_args(args),
        **common_settings(args),
        "environment": "wireless",
    }


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = check_args(args)
        import numpy as np

        from jfl.fl.partition import make_partition
        from jfl.fl.sweep import load_data
        from jfl.regret import check_fairness
        from jfl.sweep import config_table

        configs = config_table(
            settings["policies"],
            settings["grid"],
            shared={"partition": [0], "learning_rate": settings["learning_rate"]},
        )
        dataset = load_data(settings)
        partition = make_partition(
            "heterogeneous",
            dataset.y_train,
            settings["clients"],
            settings["partition_seed"],
            rich_clients=settings["rich_clients"],
            labels_per_rich=settings["labels_per_rich"],
        )
        sizes = partition.count.astype(float)
        fairness = settings["N"] / 2 * sizes / sizes.sum()
        availability = np.full(settings["clients"], settings["availability"])
        # c must be achievable with N channels and this availability before anything runs.
        check_fairness(fairness, availability, settings["N"])
    except ValueError as err:
        parser.error(str(err))

    from jfl.envs.wireless import WirelessEnv, make_params
    from jfl.fl.sweep import run_from_cli

    env_params = make_params(
        num_clients=settings["clients"],
        distance=np.full(settings["clients"], settings["distance"]),
        tau_max=settings["tau_max"],
        availability=settings["availability"],
    )
    rows = len(configs)
    return run_from_cli(
        parser,
        args,
        settings=settings,
        configs=configs,
        env=WirelessEnv(),
        env_params=env_params,
        dataset=dataset,
        partitions=[partition],
        num_clients=settings["clients"],
        m=settings["N"],
        slots=lambda policy, size: size,
        columns=["policy", "beta", "learning_rate", "min_selection_rate", "max_rate_violation"],
        title="CS-UCB-Q (Xia Fig. 6)",
        per_config={
            "fairness": np.tile(fairness, (rows, 1)),
            "availability": np.tile(availability, (rows, 1)),
            "queue_rate": np.tile(fairness, (rows, 1)),
        },
        env_hparams=("availability",),
    )


if __name__ == "__main__":
    sys.exit(main())
