"""Benchmark: jfl against plain NumPy per-seed loops (RBCS-F and CS-UCB-Q), measured side by side.

    python bench/bench_rbcsf.py            # full table (a few minutes on a 2-core CPU)
    python bench/bench_rbcsf.py --quick    # smaller batches, for a smoke run
    python bench/bench_rbcsf.py --memory   # also the peak memory of whole sweeps (minutes)
    python bench/bench_rbcsf.py --sections accelerator,p4   # on a GPU or TPU
    python bench/bench_rbcsf.py --sections cs_ucb_q   # only the CS-UCB-Q table

Prints, for the same machine and the same run:
  1. simulation throughput in config-rounds per second (one config-round = one configuration and
     seed advanced by one round) for the NumPy loop (``jfl.reference.rbcsf_numpy_loop``) and for
     jfl's jitted, vmapped runner at several batch sizes, and their ratio;
  2. the exact P4 kernel ``divide_and_conquer`` for N = 40 … 10^6 (m = 8) against the NumPy
     prefix-heap solver, with the growth factor per 10× N;
  3. the same grid run in chunks of several sizes (and sharded when several devices are visible);
  4. CS-UCB-Q on the wireless environment (K = 20, N = 5) against its NumPy loop
     (``jfl.reference.wireless_numpy_loop``), the same way as 1;
  5. COCS on the hfl environment (N = 50, M = 3) against its NumPy loop
     (``jfl.reference.numpy_cocs.cocs_numpy_loop``), the same way as 1;
  6. the budgeted assignment solver: time per round (one jitted instance) for N = 50 and 10^4
     clients, and its optimality ratio against the exact MILP on random paper-like instances;
  7. the sweep driver's marginal throughput (``sweeps/v_beta_grid.py``'s ``jfl.driver.run``: the
     difference of an 8192- and a 1024-run sweep, RBCS-F only, 64 seeds) beside the bare
     runner's best batch throughput, and their ratio;
  8. with --memory: peak resident memory and bytes written of docs/scale.md's "Bigger grids"
     command and of a 10^6-run sweep (16,384 configurations × 64 seeds × 500 rounds), as processes;
  9. ``divide_and_conquer``'s sequential and parallel schedules (section ``p4``) for
     N = 10^4 … 10^7 (m = 8), one jitted instance each, and their ratio;
 10. (``--sections moonshot``, not in the default run) the moonshot: the main job on a 64 × 64
     × 8 (V, β, α) grid × 300 seeds (9.8 × 10^6 runs × 500 rounds) as a process, with a cold
     and a warm compilation cache: wall time, peak host memory, bytes written; on a CPU at
     8 × 8 × 2 × 64 seeds.
Sections 1 and 7 also time RBCS-F in NumPy batched over runs (``jfl.reference.
rbcsf_numpy_batched``) and give the driver's ratio to it.
No number here is asserted anywhere; docs/benchmarks.md records a table from this script.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from jfl.envs import RbcsfEnv, WirelessEnv
from jfl.envs.wireless import preset_params
from jfl.kernels import divide_and_conquer
from jfl.policies import get
from jfl.prng import use_unrolled_threefry_on_cpu
from jfl.reference.numpy_rbcsf import p4_objective, p4_prefix_heap, rbcsf_numpy_loop
from jfl.reference.numpy_wireless import wireless_numpy_loop
from jfl.runner import make_batched_run, make_run, seed_keys
from jfl.trackers import fairness_queue

N, M, T = 40, 8, 500
K_WIRELESS, N_WIRELESS, FAIRNESS_WIRELESS = 20, 5, 0.2  # c_k = 0.2: Σc = 4 ≤ N
SECTIONS = ("rbcsf", "kernel", "chunks", "cs_ucb_q", "cocs", "assignment", "driver", "p4")
# Not in the default run: minutes of large batches, meant for an accelerator, and the moonshot
# (10^7 runs on an accelerator; a reduced size on a CPU).
OPTIONAL_SECTIONS = ("accelerator", "moonshot")
# The moonshot: a 64 × 64 × 8 (V, β, α) grid × 300 seeds = 9,830,400 runs of 500 rounds; on a
# CPU the same command at 8 × 8 × 2 × 64 = 8,192 runs (the driver, the reductions and the files
# are the same; only the sizes differ).
MOONSHOT = {"V": 64, "beta": 64, "alpha": 8, "seeds": 300}
MOONSHOT_CPU = {"V": 8, "beta": 8, "alpha": 2, "seeds": 64}
N_HFL, M_HFL = 50, 3


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, jax {jax.__version__}, devices {jax.devices()}"


def best_time(fn, repeats: int) -> float:
    """Best of ``repeats`` wall-clock timings of ``fn()`` (the fairest figure for either side)."""
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - start)
    return best


def timed_first_and_best(fn, repeats: int) -> tuple[float, float]:
    """(compile + first call seconds, best of ``repeats`` later calls)."""
    start = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - start, best_time(fn, repeats)


def numpy_loop_rate(one_seed, num_seeds: int, rounds: int, repeats: int) -> float:
    """config-rounds/s of a plain per-seed loop ``one_seed(seed, rounds)``, best of ``repeats``."""

    def loop():
        for seed in range(num_seeds):
            one_seed(seed, rounds)

    return num_seeds * rounds / best_time(loop, repeats)


def jfl_rate(env, params, policy, rounds, batch, hparams_for, seeds_per_config=64, repeats=2):
    """(config-rounds/s, compile+first-run seconds) of ``batch`` = configs × seeds runs.

    ``hparams_for(configs)`` gives the per-configuration hyperparameters and the name of the one
    holding the policy's own fairness rate, if it has one (the run keeps that fairness queue).
    """
    seeds = min(seeds_per_config, batch)
    configs = batch // seeds
    hparams, rate = hparams_for(configs)
    trackers = () if rate is None else (fairness_queue(rate),)
    run = make_batched_run(make_run(env, params, policy, rounds, trackers=trackers))
    keys = seed_keys(0, np.arange(seeds))
    first, best = timed_first_and_best(lambda: run(keys, hparams), repeats)
    return configs * seeds * rounds / best, first


def numpy_throughput(num_seeds: int, rounds: int, repeats: int = 3) -> float:
    def one_seed(seed, rounds):
        rbcsf_numpy_loop(seed, rounds, N, M, V=10.0, beta=0.15, alpha=0.1, lam=1.0)

    return numpy_loop_rate(one_seed, num_seeds, rounds, repeats)


def numpy_batched_throughput(num_runs: int, rounds: int, repeats: int = 2) -> float:
    """config-rounds/s of RBCS-F in NumPy batched over ``num_runs`` runs
    (``jfl.reference.rbcsf_numpy_batched``: each run's draws, then every round for all runs at
    once), best of ``repeats``."""
    from jfl.reference import rbcsf_numpy_batched

    def batched():
        rbcsf_numpy_batched(range(num_runs), rounds, N, M, V=10.0, beta=0.15, alpha=0.1)

    return num_runs * rounds / best_time(batched, repeats)


def jfl_throughput(batch: int, rounds: int):
    """RBCS-F over a V sweep (config-rounds/s, compile seconds)."""
    spec = get("rbcsf")

    def hparams_for(configs):
        hparams = {k: jnp.full(configs, v, jnp.float32) for k, v in spec.defaults().items()}
        hparams["V"] = jnp.linspace(0.0, 50.0, configs, dtype=jnp.float32)
        return hparams, "beta"

    env = RbcsfEnv()
    return jfl_rate(env, env.default_params(), spec.build(N, M), rounds, batch, hparams_for)


def numpy_wireless_throughput(num_seeds: int, rounds: int, repeats: int = 3) -> float:
    def one_seed(seed, rounds):
        tau_max = preset_params("ideal").tau_max  # the same setting as the jfl side
        wireless_numpy_loop(
            seed, rounds, K_WIRELESS, N_WIRELESS, 0.1, FAIRNESS_WIRELESS, 1.0, tau_max
        )

    return numpy_loop_rate(one_seed, num_seeds, rounds, repeats)


def jfl_wireless_throughput(batch: int, rounds: int):
    """CS-UCB-Q over a β sweep (config-rounds/s, compile seconds)."""

    def hparams_for(configs):
        fairness = jnp.full((configs, K_WIRELESS), FAIRNESS_WIRELESS, jnp.float32)
        beta = jnp.geomspace(1e-5, 1.0, configs, dtype=jnp.float32)
        return {"beta": beta, "fairness": fairness}, "fairness"

    params = preset_params("ideal", num_clients=K_WIRELESS)
    policy = get("cs_ucb_q").build(K_WIRELESS, N_WIRELESS)
    return jfl_rate(WirelessEnv(), params, policy, rounds, batch, hparams_for)


def numpy_cocs_throughput(num_seeds: int, rounds: int, repeats: int = 2) -> float:
    from jfl.reference.numpy_cocs import cocs_numpy_loop

    def one_seed(seed, rounds):
        cocs_numpy_loop(seed, rounds, N_HFL, M_HFL)

    return numpy_loop_rate(one_seed, num_seeds, rounds, repeats)


def jfl_cocs_throughput(batch: int, rounds: int):
    """COCS over a z sweep (config-rounds/s, compile seconds)."""
    from jfl.envs import HflEnv
    from jfl.envs.hfl import preset_params as hfl_params

    def hparams_for(configs):
        hparams = {
            "h_T": jnp.full(configs, 5.0, jnp.float32),
            "z": jnp.linspace(0.1, 1.0, configs, dtype=jnp.float32),
        }
        return hparams, None

    policy = get("cocs").build(N_HFL, M_HFL)
    return jfl_rate(HflEnv(), hfl_params("mnist"), policy, rounds, batch, hparams_for)


def assignment_times(sizes, repeats: int = 5):
    """Seconds of one jitted ``budgeted_assignment`` (M = 3, paper-like weights and costs)."""
    from jfl.kernels import budgeted_assignment

    rng = np.random.default_rng(0)
    solve = jax.jit(budgeted_assignment)
    rows = []
    for n in sizes:
        args = (
            jnp.asarray(rng.uniform(0, 1, (n, M_HFL)), jnp.float32),
            jnp.asarray(rng.uniform(0.5, 2, n) * rng.uniform(2, 4, n), jnp.float32),
            jnp.ones((n, M_HFL), bool),
            jnp.full(M_HFL, 3.5 * n / N_HFL, jnp.float32),  # budget grows with the pool
        )
        jax.block_until_ready(solve(*args))
        rows.append((n, best_time(lambda args=args: solve(*args), repeats)))
    return rows


def chunked_throughput(num_configs: int, chunk_configs: int, rounds: int, seeds: int = 64):
    """config-rounds/s of a grid run through ``run_chunked`` (sharded when several devices)."""
    from jfl.sweep import run_chunked

    env = RbcsfEnv()
    spec = get("rbcsf")
    queue = (fairness_queue("beta"),)
    policy = spec.build(N, M)
    run = make_batched_run(make_run(env, env.default_params(), policy, rounds, trackers=queue))
    hparams = {k: np.full(num_configs, v, np.float32) for k, v in spec.defaults().items()}
    hparams["V"] = np.linspace(0.0, 50.0, num_configs, dtype=np.float32)
    keys = seed_keys(0, np.arange(seeds))
    run_chunked(run, keys, hparams, chunk_configs)  # compile
    start = time.perf_counter()
    run_chunked(run, keys, hparams, chunk_configs)
    return num_configs * seeds * rounds / (time.perf_counter() - start)


def throughput_table(title: str, numpy_rate: float, batches, jfl_rate_of) -> None:
    """One table: the NumPy loop, then jfl at each batch size (``jfl_rate_of(batch)`` gives
    config-rounds/s and compile seconds), with the ratio to the loop."""
    print(f"\n{title} (config-rounds per second)")
    print(
        f"{'implementation':<28}{'batch':>8}{'config-rounds/s':>18}{'× NumPy':>10}{'compile s':>11}"
    )
    print(f"{'NumPy per-seed loop':<28}{1:>8}{numpy_rate:>18,.0f}{1:>10.1f}{'-':>11}")
    for batch in batches:
        rate, first = jfl_rate_of(batch)
        ratio = rate / numpy_rate
        print(f"{'jfl (jit+vmap)':<28}{batch:>8}{rate:>18,.0f}{ratio:>10.1f}{first:>11.1f}")


def driver_seconds(num_runs: int, rounds: int, seeds: int = 64) -> float:
    """Wall-clock seconds of ``jfl.driver.run`` on a v_beta_grid sweep of ``num_runs`` runs
    (RBCS-F over a V grid, ``seeds`` seeds), from checks to files written."""
    import tempfile

    from jfl import driver
    from jfl.experiments import VBetaGrid

    configs = num_runs // seeds
    with tempfile.TemporaryDirectory() as out:
        config = VBetaGrid(
            policies=("rbcsf",),
            V=tuple(np.linspace(0.0, 50.0, configs).tolist()),
            seeds=seeds,
            rounds=rounds,
            out=out,
            plots=False,
            quiet=True,
        )
        start = time.perf_counter()
        driver.run(config)
        return time.perf_counter() - start


def kernel_times(sizes, repeats: int = 5):
    rng = np.random.default_rng(0)
    rows = []
    for n in sizes:
        tau = rng.uniform(0, 20, n).astype(np.float32)
        queue = rng.uniform(0, 30, n).astype(np.float32)
        available = rng.random(n) < 0.8
        solve = jax.jit(divide_and_conquer, static_argnums=3)
        args = (jnp.asarray(tau), jnp.asarray(queue), jnp.asarray(available))
        start = time.perf_counter()
        mask = np.asarray(solve(*args, M, 10.0))
        compile_s = time.perf_counter() - start
        best = np.inf
        for _ in range(repeats):
            start = time.perf_counter()
            jax.block_until_ready(solve(*args, M, 10.0))
            best = min(best, time.perf_counter() - start)
        start = time.perf_counter()
        ref_value, _ = p4_prefix_heap(tau, queue, available, M, 10.0)
        numpy_s = time.perf_counter() - start
        gap = p4_objective(mask, tau, queue, 10.0) - ref_value
        rows.append((n, best, compile_s, numpy_s, gap))
    return rows


def p4_schedules(sizes, m: int = M, repeats: int = 3):
    """``divide_and_conquer``'s two schedules on one instance per N (jitted, compile excluded):
    prints N, sequential ms, parallel ms and their ratio; the masks must agree."""
    rng = np.random.default_rng(0)
    solve = jax.jit(divide_and_conquer, static_argnames=("m", "schedule"))
    print(f"{'N':>12}{'sequential ms':>15}{'parallel ms':>13}{'seq / par':>11}")
    for n in sizes:
        args = (
            jnp.asarray(rng.uniform(0, 20, n), jnp.float32),
            jnp.asarray(rng.uniform(0, 30, n), jnp.float32),
            jnp.asarray(rng.random(n) < 0.8),
        )
        ms, masks = {"sequential": np.nan}, {}
        # Past 10^6 the sequential scan takes a minute a call on a GPU: timed up to 10^6 only.
        schedules = ("sequential", "parallel") if n <= 10**6 else ("parallel",)
        for schedule in schedules:
            run = functools.partial(solve, *args, m=m, V=10.0, schedule=schedule)
            masks[schedule] = np.asarray(run())  # compile
            ms[schedule] = best_time(run, repeats) * 1e3
        if len(masks) == 2 and not np.array_equal(masks["sequential"], masks["parallel"]):
            raise AssertionError(f"N={n}: the schedules selected different clients")
        ratio = ms["sequential"] / ms["parallel"]
        print(f"{n:>12,}{ms['sequential']:>15.3f}{ms['parallel']:>13.3f}{ratio:>11.2f}")


# Runs a script and prints its own peak resident memory at exit: VmHWM belongs to the process's
# memory after exec, where a child's ru_maxrss also counts its parent's size at the fork.
PEAK_WRAPPER = """
import atexit, runpy, sys
def peak():
    with open("/proc/self/status") as f:
        kb = [line.split()[1] for line in f if line.startswith("VmHWM:")]
    print("peak_rss_kb", *kb, file=sys.stderr)
atexit.register(peak)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def sweep_process(flags, out: str) -> dict:
    """``sweeps/v_beta_grid.py`` with ``flags`` as its own process: wall seconds of the process
    and of its driver phase (``metadata.json``), peak resident memory (Linux), bytes written."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sweeps")
    argv = [sys.executable, "-c", PEAK_WRAPPER, os.path.join(script, "v_beta_grid.py")]
    argv += [*flags, "--out", out, "--no-plots", "--quiet", "--overwrite"]
    start = time.perf_counter()
    done = subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - start
    lines = done.stderr.decode().splitlines()
    peaks = [line.split()[1:] for line in lines if line.startswith("peak_rss_kb")]
    peak = int(peaks[-1][0]) if peaks and peaks[-1] else None
    with open(os.path.join(out, "metadata.json")) as f:
        metadata = json.load(f)
    written = sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(out)
        for name in names
    )
    return {
        "process_s": wall,
        "driver_s": metadata["wall_seconds"],
        "peak_rss_bytes": peak * 1024 if peak else None,
        "written_bytes": written,
        "cache_hits": metadata.get("compilation_cache", {}).get("hits"),
    }


def grid_flags(num_runs: int, seeds: int = 64) -> list[str]:
    """RBCS-F over a square V × β grid of ``num_runs / seeds`` configurations."""
    side = math.isqrt(num_runs // seeds)
    return ["--V", f"0:50:{side}", "--beta", f"0:0.3:{side}", "--seeds", str(seeds)]


def main_job_rows(sizes, rounds: int) -> list[tuple[int, dict]]:
    """The main job end to end (as a process) at each number of runs, each twice: with a cold
    compilation cache, then warm (its programs loaded from the first run's cache)."""
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory() as cache:
        os.environ["JFL_CACHE_DIR"] = cache
        for runs in sizes:
            for _ in ("cold", "warm"):
                with tempfile.TemporaryDirectory() as out:
                    flags = [*grid_flags(runs), "--policies", "rbcsf", "--rounds", str(rounds)]
                    rows.append((runs, sweep_process(flags, out)))
    return rows


def print_main_job_rows(rows, rounds: int, bare: float | None) -> None:

    columns = ("runs", "cache", "process s", "driver s", "process rate", "driver rate")
    columns += ("driver/bare", "process/bare", "peak GiB", "written MB")
    widths = (10, 6, 11, 10, 15, 14, 13, 14, 10, 12)
    print("".join(f"{h:>{w}}" for h, w in zip(columns, widths, strict=True)))
    for runs, r in rows:
        process_rate = runs * rounds / r["process_s"]
        driver_rate = runs * rounds / r["driver_s"]
        share = f"{driver_rate / bare:.2f}" if bare else "-"
        whole = f"{process_rate / bare:.2f}" if bare else "-"
        peak = f"{r['peak_rss_bytes'] / 2**30:.2f}" if r["peak_rss_bytes"] else "-"
        cache = "warm" if r["cache_hits"] else "cold"
        print(
            f"{runs:>10,}{cache:>6}{r['process_s']:>11.1f}{r['driver_s']:>10.1f}"
            f"{process_rate:>15,.0f}{driver_rate:>14,.0f}{share:>13}{whole:>14}{peak:>10}"
            f"{r['written_bytes'] / 1e6:>12.1f}"
        )


def accelerator_section(quick: bool, numpy_seeds: int) -> None:
    """The issue-25 figures for an accelerator: the bare runner at large batches, the main job
    end to end and its share of the bare runner, and plain NumPy on the same host."""
    batches = (8_192,) if quick else (8_192, 65_536, 262_144)
    sizes = (65_536,) if quick else (65_536, 262_144, 1_048_576)
    # The sweeps first, while this process holds no device memory (they are processes of their
    # own, and each takes what its device has free).
    rows = main_job_rows(sizes, T)
    print(f"\n10. accelerator: RBCS-F, N={N}, m={M}, T={T}, on {jax.devices()[0].device_kind}")
    numpy_rate = numpy_throughput(numpy_seeds, T)
    print(f"{'NumPy per-seed loop (host)':<32}{numpy_rate:>18,.0f} config-rounds/s")
    rates = {}
    for batch in batches:
        rates[batch], compile_s = jfl_throughput(batch, T)
        print(
            f"{f'bare runner, batch {batch:,}':<32}{rates[batch]:>18,.0f} config-rounds/s"
            f"   (× NumPy {rates[batch] / numpy_rate:,.0f}, compile {compile_s:.1f} s)"
        )
    bare = max(rates.values())
    print("main job end to end (sweeps/v_beta_grid.py, RBCS-F, 64 seeds):")
    print_main_job_rows(rows, T, bare)


def moonshot_flags(size: dict) -> list[str]:
    """The main job's flags for a (V, β, α) grid of ``size`` × its seeds, RBCS-F only."""
    return [
        "--V", f"0:50:{size['V']}", "--beta", f"0:0.3:{size['beta']}",
        "--alpha", f"0.05:0.2:{size['alpha']}", "--seeds", str(size["seeds"]),
        "--policies", "rbcsf", "--rounds", str(T),
    ]  # fmt: skip


def moonshot_section(quick: bool) -> None:
    """The moonshot end to end: ``sweeps/v_beta_grid.py`` on 10^7 runs × 500 rounds as a
    process (on an accelerator; a CPU runs the reduced ``MOONSHOT_CPU``), twice (the second
    with the compiled programs in the cache): wall time, driver time, peak host memory (the
    process's VmHWM), bytes written."""
    import tempfile

    on_cpu = jax.default_backend() == "cpu"
    size = MOONSHOT_CPU if on_cpu or quick else MOONSHOT
    if quick:
        size = {**size, "V": 4, "beta": 4, "seeds": 16}
    runs = size["V"] * size["beta"] * size["alpha"] * size["seeds"]
    where = "reduced size on a CPU" if size is not MOONSHOT else jax.devices()[0].device_kind
    print(
        f"\nmoonshot: {size['V']} × {size['beta']} × {size['alpha']} (V, β, α) × "
        f"{size['seeds']} seeds = {runs:,} runs × {T} rounds ({where})"
    )
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        os.environ["JFL_CACHE_DIR"] = cache
        for _ in ("cold", "warm"):
            with tempfile.TemporaryDirectory() as out:
                rows.append((runs, sweep_process(moonshot_flags(size), out)))
    print_main_job_rows(rows, T, None)


def memory_section(quick: bool) -> None:
    """Peak resident memory and bytes written of docs/scale.md's "Bigger grids" command and of
    a 10^6-run sweep, each in a fresh process."""
    import tempfile

    bigger = ["--V", "0:50:11", "--beta", "0:0.3:7", "--alpha", "0.05,0.1,0.2", "--seeds", "256"]
    million = [*grid_flags(1_048_576), "--policies", "rbcsf"]
    runs = {"the bigger grid of docs/scale.md (231 configs × 256 seeds)": bigger}
    if not quick:
        runs["10^6 runs (16,384 configs × 64 seeds), RBCS-F"] = million
    print(f"\n8. memory: whole sweeps as processes, T={T}")
    for title, flags in runs.items():
        with tempfile.TemporaryDirectory() as out:
            r = sweep_process(flags, out)
        peak = f"{r['peak_rss_bytes'] / 2**30:.2f} GiB" if r["peak_rss_bytes"] else "-"
        print(
            f"{title}: process {r['process_s']:.0f} s (driver {r['driver_s']:.0f} s), "
            f"peak RSS {peak}, written {r['written_bytes'] / 1e6:.1f} MB"
        )


def bench_parser(doc: str, quick: str) -> argparse.ArgumentParser:
    """A benchmark's command line: described by its docstring ``doc``'s first line, with the
    ``--quick`` flag (``quick``: what it makes smaller)."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=quick)
    return parser


def main(argv=None) -> int:
    parser = bench_parser(__doc__, "small batches and sizes")
    parser.add_argument("--memory", action="store_true", help="peak memory of whole sweeps")
    parser.add_argument("--numpy-seeds", type=int, default=4, help="seeds timed for NumPy")
    parser.add_argument(
        "--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {SECTIONS}"
    )
    args = parser.parse_args(argv)
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = sorted(set(sections) - set(SECTIONS) - set(OPTIONAL_SECTIONS))
    if unknown:
        parser.error(f"--sections: unknown {unknown}; choose from {SECTIONS + OPTIONAL_SECTIONS}")

    if "accelerator" in sections:
        # This process allocates as it goes, leaving the device's memory to the sweeps it starts.
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    # What every sweep does (jfl.driver): the same random bits, without JAX's rolled CPU loop.
    use_unrolled_threefry_on_cpu()
    print(f"machine: {machine()}")
    rounds = 100 if args.quick else T
    batches = (64, 256) if args.quick else (64, 1024, 8192)
    if "rbcsf" in sections or "chunks" in sections:
        numpy_rate = numpy_throughput(args.numpy_seeds, rounds)
    if "rbcsf" in sections:
        throughput_table(
            f"1. RBCS-F simulation, N={N}, m={M}, T={rounds}",
            numpy_rate,
            batches,
            lambda batch: jfl_throughput(batch, rounds),
        )
        for runs in (256,) if args.quick else (256, 1024):
            rate = numpy_batched_throughput(runs, rounds)
            ratio = rate / numpy_rate
            print(f"{'NumPy batched over runs':<28}{runs:>8}{rate:>18,.0f}{ratio:>10.1f}")

    if "kernel" in sections:
        sizes = (40, 1_000, 10_000) if args.quick else (40, 1_000, 10_000, 100_000, 1_000_000)
        print(f"\n2. divide_and_conquer (exact P4), m={M}, one instance, jitted")
        columns = ("N", "jfl s", "growth/10×N", "NumPy heap s", "× NumPy", "obj gap")
        widths = (10, 12, 13, 14, 9, 10)
        print("".join(f"{h:>{w}}" for h, w in zip(columns, widths, strict=True)))
        previous = None
        for n, seconds, _, numpy_s, gap in kernel_times(sizes):
            growth = "" if previous is None else f"{seconds / previous:.1f}"
            speedup = numpy_s / seconds
            print(
                f"{n:>10,}{seconds:>12.2e}{growth:>13}{numpy_s:>14.2e}{speedup:>9.1f}{gap:>10.1e}"
            )
            previous = seconds

    if "chunks" in sections:
        num_configs = 16 if args.quick else 128
        chunks = (4, 16) if args.quick else (4, 32, 128)
        devices = jax.device_count()
        print(f"\n3. chunked grid: {num_configs} configurations × 64 seeds, {devices} device(s)")
        print(f"{'configs per chunk':>18}{'config-rounds/s':>18}{'× NumPy':>10}")
        for chunk in chunks:
            rate = chunked_throughput(num_configs, chunk * devices, rounds)
            print(f"{chunk * devices:>18}{rate:>18,.0f}{rate / numpy_rate:>10.1f}")

    if "cs_ucb_q" in sections:
        wireless_rounds = 500 if args.quick else 2000
        wireless_numpy = numpy_wireless_throughput(args.numpy_seeds, wireless_rounds)
        throughput_table(
            f"4. CS-UCB-Q on the wireless environment, K={K_WIRELESS}, N={N_WIRELESS}, "
            f"T={wireless_rounds}",
            wireless_numpy,
            batches,
            lambda batch: jfl_wireless_throughput(batch, wireless_rounds),
        )

    if "cocs" in sections:
        cocs_rounds = 100 if args.quick else 300
        cocs_batches = (64, 256) if args.quick else (64, 1024)
        cocs_numpy = numpy_cocs_throughput(max(1, args.numpy_seeds // 2), cocs_rounds)
        throughput_table(
            f"5. COCS on the hfl environment, N={N_HFL}, M={M_HFL}, T={cocs_rounds}",
            cocs_numpy,
            cocs_batches,
            lambda batch: jfl_cocs_throughput(batch, cocs_rounds),
        )

    if "driver" in sections:
        small, large = (256, 1024) if args.quick else (1024, 8192)
        print(f"\n7. sweep driver (v_beta_grid, RBCS-F, 64 seeds, T={rounds}) vs the bare runner")
        bare = max(jfl_throughput(batch, rounds)[0] for batch in (256, 1024, 2048, 8192))
        seconds = {runs: driver_seconds(runs, rounds) for runs in (small, large)}
        marginal = (large - small) * rounds / (seconds[large] - seconds[small])
        print(f"{'bare runner, best batch':<40}{bare:>18,.0f}")
        print(
            f"{f'driver, {large} − {small} runs':<40}{marginal:>18,.0f}"
            f"   ({seconds[small]:.1f} s and {seconds[large]:.1f} s)"
        )
        print(f"{'driver / bare runner':<40}{marginal / bare:>18.2f}")
        batched = max(numpy_batched_throughput(runs, rounds) for runs in (256, 1024))
        print(f"{'NumPy batched over runs, best of 256, 1024':<40}{batched:>18,.0f}")
        print(f"{'driver / NumPy batched':<40}{marginal / batched:>18.1f}")

    if "assignment" in sections:
        from jfl.reference.milp_assignment import optimality_ratios

        print(f"\n6. budgeted_assignment (greedy + fix), M={M_HFL}, one jitted instance")
        for n, seconds in assignment_times((N_HFL, 10_000)):
            print(f"N={n:>6,}: {seconds * 1e3:8.3f} ms per round")
        instances = 100 if args.quick else 500
        for n in (8, N_HFL):
            ratios = optimality_ratios(instances, n, M_HFL, seed=0)
            print(
                f"optimality ratio vs MILP, N={n}, {instances} instances: mean "
                f"{ratios.mean():.3f}, worst {ratios.min():.3f}, optimal in "
                f"{np.mean(ratios >= 1 - 1e-6):.0%}"
            )

    if "p4" in sections:
        sizes = (10**4, 10**5) if args.quick else (10**4, 10**5, 10**6, 10**7)
        print(f"\n9. divide_and_conquer schedules (exact P4), m={M}, one instance, jitted")
        p4_schedules(sizes)

    if "accelerator" in sections:
        accelerator_section(args.quick, args.numpy_seeds)

    if "moonshot" in sections:
        moonshot_section(args.quick)

    if args.memory:
        memory_section(args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
