"""COCS's per-round assignment solvers (problem P2): optimality against the MILP, and time.

    python bench/bench_assignment.py                  # 500 rounds per family, both timings
    python bench/bench_assignment.py --instances 100 --sections ratios

1. Ratio table: value / MILP optimum (``scipy.optimize.milp``) on rounds of the ``hfl``
   environment (``jfl.reference.milp_assignment.hfl_instances``): the MNIST and CIFAR presets
   (N = 50, M = 3) with unit weights (the max-cardinality step, eq. 14) and with the oracle's
   success probabilities (probability-like weights, eqs. 17-18). Side by side: the earlier greedy
   (``greedy_assignment`` below), ``budgeted_assignment`` and, for unit weights,
   ``cardinality_assignment`` (each one branch and bound); mean, worst, share optimal, share
   certified.
2. Time per round: each solver jitted and vmapped over a batch of paper-like instances
   (``random_paper_instances``: weights U[0, 1], costs U[0.5, 2]·U[2, 4], budget 3.5 per ES),
   N = 50 (batch 1024, the CPU sweep's batch) and N = 10^4 (batch 16), M = 3; best of several
   runs after compilation.
3. Compile time (``--sections compile``, not in the default run): each solver, jitted and
   vmapped, lowered and compiled at N = 8 (the tests' size) and N = 50, M = 3, batch 64, with the
   persistent compilation cache off; and COCS's runner from ``bench/bench_rbcsf.py --sections
   cocs`` (hfl MNIST preset, N = 50, M = 3, T = 300, batch 64): its first call (compile and run)
   and the best later one (run), the compile time being about their difference.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jfl.kernels.assignment import (
    BUDGET_RTOL,
    AssignmentResult,
    budgeted_assignment,
    cardinality_assignment,
)
from jfl.kernels.order import counting_order, materialise, sort_order
from jfl.kernels.reduce import pairwise_sum
from jfl.reference.milp_assignment import (
    FAMILIES,
    hfl_instances,
    random_paper_instances,
    ratio_table,
)

# --------------------------------------------------------------------------------------------
# the earlier greedy
# --------------------------------------------------------------------------------------------

# Up to this many pairs N·M the greedy's pair order comes from O((NM)^2) comparison counting
# (measured on a 2-core CPU, batch 1024: 0.5 vs 4.8 ms at 24 pairs, 3 vs 10 ms at 60, but 26 vs
# 15 ms at 96); above it, one stable sort.
SMALL_PAIRS_MAX = 64


def greedy_assignment(weight, cost, available, budget, tiebreak=None) -> AssignmentResult:
    """The earlier solver of P2, kept here as the baseline of the ratio table.

    Greedy by value density over the covered pairs with ``weight > 0`` (ties: ``tiebreak``, then
    the lower client, then the lower ES), a pair taken when its client is free and its ES can
    still pay; then a modified-greedy fix per ES (one heavier free client alone replaces what
    the ES took). ``certified``: every client on an ES of largest weight. Measured on the hfl
    presets it reaches 0.91-0.95 of the MILP optimum on average, 0.67-0.83 at worst.
    """
    weight = jnp.asarray(weight)
    dtype = jnp.result_type(weight, cost, budget, jnp.float32)
    weight = weight.astype(dtype)
    cost = jnp.asarray(cost, dtype)
    available = jnp.asarray(available, bool)
    n_clients, n_servers = weight.shape
    budget = jnp.broadcast_to(jnp.asarray(budget, dtype), (n_servers,))
    capacity = budget * (1 + BUDGET_RTOL)

    # Cost < 0 or NaN is outside the documented range; excluding it keeps NaN out of the keys.
    eligible = available & (weight > 0) & (cost[:, None] >= 0)
    # Sort key -density ≤ 0 (clipped to be finite: an infinite weight or a zero cost would give
    # -inf); ineligible pairs get +1 and go last. Pair p = n·M + m (row-major), so an order that
    # is stable in p breaks ties by client, then by ES.
    density = jnp.minimum(weight / cost[:, None], jnp.finfo(dtype).max)
    key = jnp.where(eligible, -density, 1).reshape(-1)
    if tiebreak is not None:
        tb = jnp.asarray(tiebreak, dtype).reshape(-1)
        _, _, order = lax.sort((key, tb, jnp.arange(key.shape[0])), num_keys=2, is_stable=True)
    elif key.shape[0] <= SMALL_PAIRS_MAX:
        # materialised: the key's producer is evaluated once, not once per compared operand
        order = counting_order(materialise(key))
    else:
        order = sort_order(key)
    client_sorted = order // n_servers
    server_sorted = order % n_servers
    xs = (client_sorted, server_sorted, cost[client_sorted], eligible.reshape(-1)[order])

    def step(carry, x):
        client_taken, budget_left = carry
        n, m, c, ok = x
        take = ok & ~client_taken[n] & (c <= budget_left[m])
        client_taken = client_taken.at[n].set(client_taken[n] | take)
        budget_left = budget_left.at[m].set(jnp.where(take, budget_left[m] - c, budget_left[m]))
        return (client_taken, budget_left), take

    init = (jnp.zeros(n_clients, bool), capacity)
    _, take_sorted = lax.scan(step, init, xs)
    mask = jnp.zeros(n_clients * n_servers, bool).at[order].set(take_sorted, unique_indices=True)
    mask = mask.reshape(n_clients, n_servers)

    # Modified-greedy fix, one ES after the other (a swap frees clients for the later ESs). M is
    # static and small in HFL; the loop unrolls into M O(N) steps.
    affordable = eligible & (cost[:, None] <= capacity[None, :])
    free = ~jnp.any(mask, axis=1)
    for m in range(n_servers):
        column = mask[:, m]
        candidate = jnp.where(free & affordable[:, m], weight[:, m], -jnp.inf)
        best = jnp.argmax(candidate)  # ties to the lower client index
        swap = candidate[best] > pairwise_sum(jnp.where(column, weight[:, m], 0))
        new_column = jnp.where(swap, jnp.arange(n_clients) == best, column)
        free = (free | column) & ~new_column
        mask = mask.at[:, m].set(new_column)

    best_weight = jnp.max(jnp.where(eligible, weight, 0), axis=1)
    chosen_weight = jnp.max(jnp.where(mask, weight, 0), axis=1)
    certified = jnp.all(chosen_weight == best_weight)
    return AssignmentResult(mask=mask, certified=certified)


def _budgeted(weight, cost, available, budget):
    return budgeted_assignment(weight, cost, available, budget)


def _cardinality(weight, cost, available, budget):
    del weight
    return cardinality_assignment(cost, available, budget)


def _greedy(weight, cost, available, budget):
    return greedy_assignment(weight, cost, available, budget)


# The solvers side by side: the earlier greedy and the two branch and bounds.
KERNELS = {
    "old greedy": _greedy,
    "budgeted": _budgeted,
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


def compile_seconds(kernel, instances):
    """(lowering, compilation) seconds of ``jit(vmap(kernel))`` on ``instances``."""
    start = time.perf_counter()
    lowered = batched(kernel).lower(*instances)
    middle = time.perf_counter()
    lowered.compile()
    return middle - start, time.perf_counter() - middle


def compile_times():
    print("\n3. compile time, jit(vmap(solver)), M = 3, batch 64, persistent cache off")
    jax.config.update("jax_enable_compilation_cache", False)
    print(f"{'solver':<16}" + "".join(f"{f'N = {n}: lower, compile (s)':>30}" for n in (8, 50)))
    for name, kernel in KERNELS.items():
        cells = []
        for n in (8, 50):
            instances = random_paper_instances(np.random.default_rng(0), 64, n, 3)
            lower, compile_ = compile_seconds(kernel, instances)
            cells.append(f"{lower:>20.2f}{compile_:>10.2f}")
        print(f"{name:<16}" + "".join(cells))
    # COCS's runner, as section 5 of bench_rbcsf.py times it (this script's directory is on the
    # path when it runs as a script).
    from bench_rbcsf import jfl_cocs_throughput

    batch, rounds = 64, 300
    rate, first = jfl_cocs_throughput(batch, rounds)
    run = batch * rounds / rate
    print(
        f"COCS runner (hfl MNIST, N = 50, M = 3, T = {rounds}, batch {batch}): first call "
        f"{first:.1f} s, a later one {run:.1f} s, compile ≈ {first - run:.1f} s"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--instances", type=int, default=500, help="rounds per family")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--sections", default="ratios,timings", help="comma-separated: ratios, timings, compile"
    )
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
    if "compile" in sections:
        compile_times()


if __name__ == "__main__":
    main()
