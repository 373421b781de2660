"""Hierarchical federated training with COCS and its baselines choosing the clients (Qu et al.
Table II and Fig. 4a).

N = 50 clients and M = 3 edge servers of the ``hfl`` environment (Table I's MNIST preset); each
client holds samples of two labels (COCS §VI-A). Each round every edge server averages the
updates of its clients that arrive before the deadline (eq. 3, uniform weights by default) and
every T_ES = 5 rounds the cloud averages the edge models (eq. 6). The summary gives, per
policy, the rounds (and simulated time) to the target accuracy and the final accuracy, as Table
II does. Default data: scikit-learn's digits with logistic regression, E = 2; the paper's MNIST
with ``--dataset mnist --data-dir DIR``.

    python sweeps/fl_cocs.py                                       # Table II / Fig. 4a
    python sweeps/fl_cocs.py --budget 3.5,5,10 --out runs/fl_cocs_budget   # Fig. 4c
    python sweeps/fl_cocs.py --deadline 2,3,4 --out runs/fl_cocs_deadline  # Fig. 4e

Writes to --out: summary.csv, results.nc (xarray/netCDF), metadata.json and figures/*.png.
"""

from __future__ import annotations

import argparse
import math
import sys

from jfl.cli import (
    add_output_args,
    add_seed_args,
    at_least,
    check_common_args,
    check_hfl_scenario,
    common_settings,
    parse_policies,
)
from jfl.fl.sweep import add_training_args, check_training_args

DEFAULT_OUT = "runs/fl_cocs"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    grid = p.add_argument_group("grid (lists '3.5,5,10' or inclusive ranges 'start:stop:count')")
    grid.add_argument(
        "--policies",
        default="oracle,cocs,linucb,cucb,random_budget",
        help="comma-separated: oracle, cocs, linucb, cucb, random_budget",
    )
    grid.add_argument("--budget", default=None, help="budget B per edge server > 0 (preset's)")
    grid.add_argument("--deadline", default=None, help="round deadline (s) > 0 (preset's)")
    sim = p.add_argument_group("scenario (Qu Table I)")
    sim.add_argument("--preset", choices=("mnist", "cifar"), default="mnist", help="Table I")
    sim.add_argument("--clients", type=int, default=50, help="clients N")
    sim.add_argument("--servers", type=int, default=3, help="edge servers M, 1 ≤ M ≤ N")
    sim.add_argument("--labels-per-client", type=int, default=2, help="labels each client holds")
    sim.add_argument(
        "--global-every", type=int, default=5, help="T_ES: rounds between global aggregations"
    )
    add_seed_args(p.add_argument_group("seeds"), seeds=8, rounds=200)
    add_training_args(
        p,
        epochs=2,
        learning_rate="0.1",
        target_accuracy=0.7,
        eval_every=10,
        aggregation="uniform",
    )
    add_output_args(p, DEFAULT_OUT)
    return p


def check_args(args) -> dict:
    """Validate every flag before anything is loaded or compiled; returns the settings."""
    check_common_args(args)
    budget, deadline = check_hfl_scenario(args)
    at_least("labels-per-client", args.labels_per_client)
    at_least("global-every", args.global_every)
    return {
        "policies": parse_policies(args.policies, "hfl"),
        "budget": budget,
        "deadline": deadline,
        "preset": args.preset,
        "clients": args.clients,
        "servers": args.servers,
        "labels_per_client": args.labels_per_client,
        "global_every": args.global_every,
        **check_training_args(args),
        **common_settings(args),
        "environment": "hfl",
    }


def max_selected(params, budget: float) -> int:
    """Most clients any policy can select in a round: each ES affords ⌊B / min cost⌋ of them."""
    cheapest = params.price_low * params.computation_low
    per_server = math.floor(budget / cheapest * (1 + 1e-6))
    return max(1, min(params.num_clients, per_server * params.num_servers))


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = check_args(args)
        from jfl.envs.hfl import preset_params
        from jfl.fl.partition import make_partition
        from jfl.fl.sweep import load_data
        from jfl.sweep import config_table

        configs = config_table(
            settings["policies"],
            {},
            fairness_target=0.0,
            shared={
                "budget": settings["budget"],
                "deadline": settings["deadline"],
                "partition": [0],
                "learning_rate": settings["learning_rate"],
            },
        )
        params = preset_params(
            settings["preset"], num_clients=settings["clients"], num_servers=settings["servers"]
        )
        dataset = load_data(settings)
        partition = make_partition(
            "two_labels",
            dataset.y_train,
            settings["clients"],
            settings["partition_seed"],
            labels_per_client=settings["labels_per_client"],
        )
    except ValueError as err:
        parser.error(str(err))

    from jfl.envs.hfl import HflEnv
    from jfl.fl.sweep import run_from_cli

    slots = max_selected(params, max(settings["budget"]))
    return run_from_cli(
        parser,
        args,
        settings=settings,
        configs=configs,
        env=HflEnv(),
        env_params=params,
        dataset=dataset,
        partitions=[partition],
        num_clients=settings["clients"],
        m=settings["servers"],
        slots=lambda policy, size: slots,
        columns=["policy", "budget", "deadline", "learning_rate", "success_per_round"],
        title="COCS (Qu Fig. 4a)",
        per_config={
            "budget": configs["budget"].to_numpy(),
            "deadline": configs["deadline"].to_numpy(),
        },
        env_hparams=("budget", "deadline"),
        num_servers=settings["servers"],
        global_every=settings["global_every"],
    )


if __name__ == "__main__":
    sys.exit(main())
