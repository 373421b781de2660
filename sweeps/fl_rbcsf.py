"""Federated training with RBCS-F, Random and FedCS(3) selecting the clients (Huang et al. §6.2).

The ``rbcsf`` latency environment (N = 40 clients, m = 8 a round) decides the round times; the
selected clients train the model with FedAvg, and the simulated wall-clock advances by each
round's time. Client data follow RBCS-F §6.2.1: each client draws its class mix from
Dir(γ₁·1) (``--gamma1``, ``iid`` for an IID split). Default: scikit-learn's digits with
multinomial logistic regression, a few minutes on a 2-core CPU; the paper's setting is
Fashion-MNIST with its CNN (``--dataset fashion_mnist --data-dir DIR --model fashion_cnn``).

    python sweeps/fl_rbcsf.py                                   # Fig. 6: accuracy vs round/time
    python sweeps/fl_rbcsf.py --policies dirichlet_random --gamma2 0.1,1,10 \\
        --out runs/fl_rbcsf_fairness                            # Fig. 5: the γ₂ experiment
    python sweeps/fl_rbcsf.py --dataset fashion_mnist --data-dir ~/data/fashion \\
        --model fashion_cnn --rounds 200 --out runs/fl_rbcsf_fmnist

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
    common_settings,
    parse_policies,
)
from jfl.fl.sweep import add_training_args, check_training_args

DEFAULT_OUT = "runs/fl_rbcsf"
SWEPT = ("V", "beta", "alpha", "deadline", "gamma2")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    grid = p.add_argument_group("grid (lists '1,10,20' or inclusive ranges 'start:stop:count')")
    grid.add_argument(
        "--policies",
        default="rbcsf,random,fedcs",
        help="comma-separated: rbcsf, random, fedcs, dirichlet_random",
    )
    grid.add_argument("--V", default="1,10,20,50", help="RBCS-F penalty factor V ≥ 0")
    grid.add_argument("--beta", default="0.15", help="RBCS-F guaranteed rate β in [0, 1]")
    grid.add_argument("--alpha", default="0.1", help="RBCS-F exploration α ≥ 0")
    grid.add_argument("--deadline", default="3", help="FedCS deadline (s) > 0")
    grid.add_argument("--gamma2", default="1", help="dirichlet_random concentration γ₂ > 0")
    grid.add_argument(
        "--gamma1", default="1,10,iid", help="data concentration γ₁ > 0, or 'iid' (a list)"
    )
    sim = p.add_argument_group("scenario")
    sim.add_argument("--clients", type=int, default=40, help="clients N (4 equal classes)")
    sim.add_argument("--m", type=int, default=8, help="clients selected per round, 1 ≤ m ≤ N")
    sim.add_argument("--p-available", type=float, default=0.8, help="availability in [0, 1]")
    sim.add_argument(
        "--samples-per-client", type=int, default=None, help="Dirichlet client size (n // N)"
    )
    add_seed_args(p.add_argument_group("seeds"), seeds=8, rounds=100)
    add_training_args(p, learning_rate="0.3", target_accuracy=0.8, eval_every=5)
    add_output_args(p, DEFAULT_OUT)
    return p


def parse_gamma1(text: str) -> list[float]:
    """``"1,10,iid"`` → [1.0, 10.0, inf] (IID is the γ₁ → ∞ limit)."""
    values = []
    for item in (v.strip() for v in text.split(",")):
        if not item:
            continue
        if item.lower() == "iid":
            values.append(math.inf)
            continue
        try:
            value = float(item)
        except ValueError:
            raise ValueError(f"--gamma1: expected numbers > 0 or 'iid', got {item!r}") from None
        if not 0 < value < math.inf:
            raise ValueError(f"--gamma1 must be > 0 (or 'iid'), got {value}")
        values.append(value)
    if not values:
        raise ValueError("--gamma1: no values given")
    if len(set(values)) != len(values):
        raise ValueError(f"--gamma1: duplicate values in {text!r}")
    return values


def check_args(args) -> dict:
    """Validate every flag before anything is loaded or compiled; returns the settings."""
    from jfl.sweep import parse_values

    check_common_args(args)
    at_least("clients", args.clients)
    if not 1 <= args.m <= args.clients:
        raise ValueError(f"--m must be in [1, --clients={args.clients}], got {args.m}")
    if not 0 <= args.p_available <= 1:
        raise ValueError(f"--p-available must be in [0, 1], got {args.p_available}")
    if args.samples_per_client is not None:
        at_least("samples-per-client", args.samples_per_client)
    grid = {name: parse_values(getattr(args, name), name) for name in SWEPT}
    # β is also the rate every other policy's fairness is measured against.
    if any(not 0 <= b <= 1 for b in grid["beta"]):
        raise ValueError(f"--beta must be in [0, 1], got {grid['beta']}")
    return {
        "policies": parse_policies(args.policies, "rbcsf"),
        "grid": grid,
        "gamma1": parse_gamma1(args.gamma1),
        "clients": args.clients,
        "m": args.m,
        "p_available": args.p_available,
        "samples_per_client": args.samples_per_client,
        **check_training_args(args),
        **common_settings(args),
        "environment": "rbcsf",
    }


def make_partitions(settings, labels):
    """One partition per γ₁ (IID for ∞), all from ``--partition-seed``."""
    from jfl.fl.partition import make_partition

    partitions = []
    for gamma1 in settings["gamma1"]:
        if math.isinf(gamma1):
            options = {}
            if settings["samples_per_client"] is not None:
                options["samples_per_client"] = settings["samples_per_client"]
            partitions.append(
                make_partition(
                    "iid", labels, settings["clients"], settings["partition_seed"], **options
                )
            )
        else:
            partitions.append(
                make_partition(
                    "dirichlet",
                    labels,
                    settings["clients"],
                    settings["partition_seed"],
                    concentration=gamma1,
                    samples_per_client=settings["samples_per_client"],
                )
            )
    return partitions


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = check_args(args)
        from jfl.fl.sweep import load_data
        from jfl.sweep import config_table

        gamma1 = settings["gamma1"]
        configs = config_table(
            settings["policies"],
            settings["grid"],
            fairness_target=settings["grid"]["beta"][0],
            shared={
                "partition": list(range(len(gamma1))),
                "learning_rate": settings["learning_rate"],
            },
        )
        configs.insert(1, "gamma1", [gamma1[int(i)] for i in configs["partition"]])
        dataset = load_data(settings)
        partitions = make_partitions(settings, dataset.y_train)
    except ValueError as err:
        parser.error(str(err))

    from jfl.envs import RbcsfEnv
    from jfl.fl.sweep import run_from_cli

    env = RbcsfEnv()
    env_params = env.default_params(
        num_clients=settings["clients"], p_available=settings["p_available"]
    )
    m = settings["m"]
    return run_from_cli(
        parser,
        args,
        settings=settings,
        configs=configs,
        env=env,
        env_params=env_params,
        dataset=dataset,
        partitions=partitions,
        num_clients=settings["clients"],
        m=m,
        # FedCS takes every client that meets its deadline, not m of them.
        slots=lambda policy, size: settings["clients"] if policy == "fedcs" else size,
        columns=["policy", "gamma1", "learning_rate", "V", "gamma2"],
        title="RBCS-F §6.2",
    )


if __name__ == "__main__":
    sys.exit(main())
