"""COCS's per-round assignment solvers (problem P2): optimality against the MILP, and time.

    python bench/bench_assignment.py                  # 500 rounds per family, both timings
    python bench/bench_assignment.py --instances 100 --sections ratios

1. Ratio table: value / MILP optimum (``scipy.optimize.milp``) on rounds of the ``hfl``
   environment (``jfl.reference.milp_assignment.hfl_instances``): the MNIST and CIFAR presets
   (N = 50, M = 3) with unit weights (the max-cardinality step, eq. 14) and with the oracle's
   success probabilities (probability-like weights, eqs. 17-18). Side by side: the earlier greedy
   (``jfl.kernels.assignment._greedy_assignment``), ``budgeted_assignment`` and, for unit
   weights, ``cardinality_assignment``, each also without its last stage ("b&b": the branch and
   bound alone, without the beam search or the packing check); mean, worst, share optimal,
   share certified.
2. Time per round: each solver jitted and vmapped over a batch of paper-like instances
   (``random_paper_instances``: weights U[0, 1], costs U[0.5, 2]·U[2, 4], budget 3.5 per ES),
   N = 50 (batch 1024, the CPU sweep's batch) and N = 10^4 (batch 16), M = 3; best of several
   runs after compilation.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import jax
import numpy as np

from jfl.kernels.assignment import (
    _greedy_assignment,
    budgeted_assignment,
    cardinality_assignment,
)
from jfl.reference.milp_assignment import (
    FAMILIES,
    hfl_instances,
    random_paper_instances,
    ratio_table,
)


def _budgeted(weight, cost, available, budget):
    return budgeted_assignment(weight, cost, available, budget)


def _cardinality(weight, cost, available, budget):
    del weight
    return cardinality_assignment(cost, available, budget)


def _budgeted_search_only(weight, cost, available, budget):
    return budgeted_assignment(weight, cost, available, budget, beam_width=0)


def _cardinality_search_only(weight, cost, available, budget):
    del weight
    return cardinality_assignment(cost, available, budget, packing_steps=0)


def _greedy(weight, cost, available, budget):
    return _greedy_assignment(weight, cost, available, budget)


# The solvers side by side: the earlier greedy, each solver's branch and bound alone (without
# the beam stage, or the packing check), and each solver as it is.
KERNELS = {
    "old greedy": _greedy,
    "budgeted b&b": _budgeted_search_only,
    "budgeted": _budgeted,
    "card. b&b": _cardinality_search_only,
    "cardinality": _cardinality,
}


def batched(kernel):
    return jax.jit(jax.vmap(kernel))


def ratios(num_instances, seed):
    runs = {name: batched(kernel) for name, kernel in KERNELS.items()}
    solvers = {name: (lambda *x, run=run: run(*x).mask) for name, run in runs.items()}
    certified = {}
    print(f"\n1. value / MILP optimum on {num_instances} hfl rounds per family (seed {seed})")
    start = time.perf_counter()
    table = ratio_table(solvers, num_instances, seed)
    for family in FAMILIES:
        instances = hfl_instances(family, num_instances, seed)
        certified[family] = {
            name: float(np.mean(np.asarray(run(*instances).certified)))
            for name, run in runs.items()
        }
    print(f"   ({time.perf_counter() - start:.0f} s with the MILPs)")
    header = f"{'family':<12}{'solver':<14}{'mean':>8}{'worst':>8}{'optimal':>9}{'certified':>11}"
    print(header)
    for family in FAMILIES:
        for name, r in table[family].items():
            if name.startswith("card") and not family.endswith("unit"):
                continue
            print(
                f"{family:<12}{name:<14}{r.mean():>8.4f}{r.min():>8.4f}"
                f"{np.mean(r >= 1 - 1e-6):>9.1%}{certified[family][name]:>11.1%}"
            )
    return table


def seconds_per_batch(kernel, instances, repeats):
    run = batched(kernel)
    jax.block_until_ready(run(*instances))
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(run(*instances))
        best = min(best, time.perf_counter() - start)
    return best


def timings(quick):
    print("\n2. time per round, jit(vmap(solver)), M = 3, paper-like instances, best of runs")
    print(f"{'N':>7}{'batch':>7}  {'solver':<14}{'ms per batch':>14}{'µs per instance':>17}")
    for n, batch, repeats in (
        (50, 1024, 7 if not quick else 3),
        (10_000, 16, 3 if not quick else 1),
    ):
        rng = np.random.default_rng(0)
        instances = random_paper_instances(rng, batch, n, 3)
        for name, kernel in KERNELS.items():
            seconds = seconds_per_batch(kernel, instances, repeats)
            print(
                f"{n:>7,}{batch:>7}  {name:<14}{seconds * 1e3:>14.2f}{seconds / batch * 1e6:>17.1f}"
            )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--instances", type=int, default=500, help="rounds per family")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sections", default="ratios,timings")
    parser.add_argument("--quick", action="store_true", help="fewer timing repeats")
    args = parser.parse_args()
    print(
        f"jax {jax.__version__}, backend {jax.default_backend()}, {os.cpu_count()} CPU cores, "
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}"
    )
    sections = args.sections.split(",")
    if "ratios" in sections:
        ratios(args.instances, args.seed)
    if "timings" in sections:
        timings(args.quick)


if __name__ == "__main__":
    main()
