"""The pipeline shared by the wireless sweep scripts (CS-UCB / CS-UCB-Q, Xia et al. §V).

A wireless sweep crosses policies with scenario axes: the number of channels ``N`` (a shape, so
one compiled program per value), the fairness scale ``rho`` (``c_k = ρ s_k / Σ s``) and the
availability ``α``, and for CS-UCB-Q the weight β. Per configuration it derives the fairness
vector c and the availability vector (both traced), checks that c is feasible before anything
runs, runs the grid with :func:`jfl.sweep.run_policy_grid`, and attaches to every
(configuration, seed) its regret benchmark: μ(S*) of eq. (13) or r* of the linear program (23),
with μ_k estimated by Monte Carlo on that seed's client layout.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
import pandas as pd
import xarray as xr

from jfl import regret, results
from jfl.cli import at_least
from jfl.envs.wireless import WirelessEnv, WirelessParams, make_params, reward_statistics
from jfl.runner import run_keys

BENCHMARKS = ("best_set", "lp")


# --------------------------------------------------------------------------- command line


def add_scenario_args(p, fairness: bool = True) -> None:
    """Flags of the wireless ``fairness`` preset, shared with the β × ρ grid."""
    sim = p.add_argument_group("scenario (defaults: the paper's Figs. 4–5, τ_max = 0.2 s)")
    sim.add_argument("--clients", type=int, default=3, help="clients K")
    sim.add_argument("--N", type=int, default=2, help="channels N, 1 ≤ N ≤ K")
    sim.add_argument(
        "--distance", default="300", help="client distances (m): one value or one per client"
    )
    sim.add_argument("--availability", type=float, default=0.9, help="availability α in [0, 1]")
    sim.add_argument("--tau-max", type=float, default=0.2, help="round deadline τ_max (s) > 0")
    if fairness:
        sim.add_argument("--fairness", default="0.6,0.5,0.4", help="fairness vector c, [0, 1)")
    sim.add_argument(
        "--mc-samples", type=int, default=200_000, help="Monte Carlo samples per layout for μ_k"
    )


def check_scenario_args(args) -> dict:
    """Validate the scenario flags (ValueError naming the flag); returns their settings."""
    at_least("clients", args.clients)
    at_least("mc-samples", args.mc_samples)
    if not 1 <= args.N <= args.clients:
        raise ValueError(f"--N must be in [1, --clients={args.clients}], got {args.N}")
    if not 0 <= args.availability <= 1:
        raise ValueError(f"--availability must be in [0, 1], got {args.availability}")
    if not args.tau_max > 0:
        raise ValueError(f"--tau-max must be > 0, got {args.tau_max}")
    distance = parse_floats(args.distance, "distance", args.clients)
    if any(not d > 0 for d in distance):
        raise ValueError(f"--distance must be > 0 m, got {distance}")
    settings = {
        "clients": args.clients,
        "N": args.N,
        "distance": distance,
        "availability": args.availability,
        "tau_max": args.tau_max,
        "mc_samples": args.mc_samples,
    }
    if hasattr(args, "fairness"):
        fairness = parse_floats(args.fairness, "fairness", args.clients)
        if any(not 0 <= c < 1 for c in fairness):
            raise ValueError(f"--fairness values c_k must be in [0, 1), got {fairness}")
        settings["fairness"] = fairness
    return settings


def parse_floats(text: str, name: str, count: int) -> list[float]:
    """One number for every client, or ``count`` comma-separated numbers."""
    try:
        values = [float(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--{name}: expected comma-separated numbers, got {text!r}") from None
    if len(values) == 1:
        values = values * count
    if len(values) != count:
        raise ValueError(f"--{name}: expected 1 or --clients={count} values, got {len(values)}")
    return values


def scenario_params(settings) -> WirelessParams:
    """Environment parameters of ``check_scenario_args``' settings."""
    return make_params(
        settings["clients"],
        distance=settings["distance"],
        availability=settings["availability"],
        tau_max=settings["tau_max"],
    )


# --------------------------------------------------------------------------- scenarios


def scenario_vectors(
    configs: pd.DataFrame,
    num_clients: int,
    *,
    availability,
    fairness=None,
    samples=None,
) -> tuple[np.ndarray, np.ndarray]:
    """Fairness c [C, K] and availability α [C, K] of every configuration.

    c comes from a ``rho`` column and the dataset sizes ``samples`` (``c_k = ρ s_k / Σ s``), else
    from ``fairness`` (a scalar or one value per client), else it is 0. α comes from an
    ``availability`` column, else from ``availability``.
    """
    count = len(configs)
    if "availability" in configs:
        alpha = np.repeat(configs["availability"].to_numpy(float)[:, None], num_clients, 1)
    else:
        alpha = np.broadcast_to(np.asarray(availability, float), (count, num_clients)).copy()
    if "rho" in configs:
        s = np.asarray(samples, float)
        if s.shape != (num_clients,) or np.any(s <= 0):
            raise ValueError(f"samples must be {num_clients} positive dataset sizes, got {s}")
        c = configs["rho"].to_numpy(float)[:, None] * (s / s.sum())[None, :]
    elif fairness is not None:
        c = np.broadcast_to(np.asarray(fairness, float), (count, num_clients)).copy()
    else:
        c = np.zeros((count, num_clients))
    return c, alpha


def check_scenarios(configs: pd.DataFrame, fairness, availability, sizes) -> None:
    """``regret.check_fairness`` for every distinct (c, α, N); the error names the configuration."""
    seen = set()
    for row, (c, alpha, n) in enumerate(zip(fairness, availability, sizes, strict=True)):
        signature = (tuple(c), tuple(alpha), int(n))
        if signature in seen:
            continue
        seen.add(signature)
        try:
            regret.check_fairness(c, alpha, int(n))
        except ValueError as err:
            label = ", ".join(f"{k}={v}" for k, v in configs.iloc[row].items() if pd.notna(v))
            raise ValueError(f"configuration ({label}): {err}") from None


def seed_layouts(env: WirelessEnv, params: WirelessParams, keys) -> np.ndarray:
    """Client distances [S, K] of the runs with these seed keys (as ``make_run`` resets them)."""
    return np.asarray(jax.vmap(lambda k: env.layout(run_keys(k)[0], params))(keys))


def seed_benchmarks(
    env: WirelessEnv,
    params: WirelessParams,
    keys,
    sizes: Sequence[int],
    fairness: np.ndarray,
    availability: np.ndarray,
    *,
    kind: str,
    num_samples: int,
    mc_seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Benchmark reward [C, S] and Monte Carlo μ [S, K] for every configuration and seed.

    ``kind="best_set"``: μ(S*), the N-th largest μ_k (eq. 13). ``kind="lp"``: r* of LP (23)
    under the configuration's availability and fairness vector. Layouts shared by several seeds
    (explicit distances) are estimated and solved once.
    """
    if kind not in BENCHMARKS:
        raise ValueError(f"benchmark must be one of {BENCHMARKS}, got {kind!r}")
    layouts = seed_layouts(env, params, keys)
    unique, inverse = np.unique(layouts, axis=0, return_inverse=True)
    inverse = np.asarray(inverse).reshape(-1)
    estimate = jax.jit(
        jax.vmap(lambda d: reward_statistics(jax.random.key(mc_seed), params, d, num_samples)[0])
    )
    mu_unique = np.asarray(estimate(unique), float)
    benchmark = np.empty((len(sizes), len(keys)))
    cache: dict = {}
    for row, (n, c, alpha) in enumerate(zip(sizes, fairness, availability, strict=True)):
        for seed, layout in enumerate(inverse):
            signature = (int(layout), int(n), tuple(c), tuple(alpha))
            if signature not in cache:
                mu = mu_unique[layout]
                if kind == "best_set":
                    cache[signature] = regret.best_fixed_set(mu, int(n))[1]
                else:
                    cache[signature] = regret.availability_lp(mu, alpha, c, int(n)).r_star
            benchmark[row, seed] = cache[signature]
    return benchmark, mu_unique[inverse]


def to_dataset(
    outputs,
    configs: pd.DataFrame,
    seeds,
    *,
    fairness: np.ndarray,
    availability: np.ndarray,
    benchmark: np.ndarray,
    mu: np.ndarray,
    tau_max: float,
) -> xr.Dataset:
    """The runner's outputs plus c, α, the benchmark and μ, labelled (see ``jfl.results``)."""
    ds = results.to_dataset(outputs, configs, seeds)
    ds["rate_target"] = (("config", "client"), fairness)
    ds["availability_prob"] = (("config", "client"), availability)
    ds["benchmark_reward"] = (("config", "seed"), benchmark)
    ds["mean_reward"] = (("seed", "client"), mu)
    ds.attrs["tau_max"] = float(tau_max)
    return ds


def add_gap_curves(ds: xr.Dataset) -> xr.Dataset:
    """Per-round cumulative gap Θ(t), average gap θ(t) = Θ(t)/t and cumulative failed clients."""
    gap = results.performance_gap(ds)
    return ds.assign(
        cumulative_gap_t=gap,
        average_gap_t=gap / ds["round"],
        failed_clients_t=ds["num_failed"].cumsum("round"),
    )


def run_from_cli(
    parser,
    args,
    *,
    settings: dict,
    configs: pd.DataFrame,
    params: WirelessParams,
    benchmark: str,
    figures,
    columns: Sequence[str],
    fairness=None,
    samples=None,
) -> int:
    """Everything after flag validation: benchmarks, chunked run, dataset, outputs, figures.

    ``configs`` has a ``N`` column (the selection size of each row); c and α per configuration
    come from ``scenario_vectors`` (``settings["availability"]``, ``fairness``, ``samples``).
    The ``queue_rate`` column, if any, is replaced by c, so every policy's fairness queue and
    rate violation are measured against c.
    """
    import time

    from jfl import cli, sweep
    from jfl.runner import seed_keys

    env = WirelessEnv()
    configs = configs.drop(columns="queue_rate", errors="ignore")
    fairness, availability = scenario_vectors(
        configs,
        params.num_clients,
        availability=settings["availability"],
        fairness=fairness,
        samples=samples,
    )
    sizes = configs["N"].to_numpy(int)
    seeds = np.arange(settings["seeds"])
    keys = seed_keys(settings["base_seed"], seeds)
    try:
        check_scenarios(configs, fairness, availability, sizes)
        bench, mu = seed_benchmarks(
            env,
            params,
            keys,
            sizes,
            fairness,
            availability,
            kind=benchmark,
            num_samples=settings["mc_samples"],
            mc_seed=settings["base_seed"] + 1_000_003,
        )
    except ValueError as err:
        parser.error(str(err))
    per_run = sweep.bytes_per_run(
        settings["rounds"], params.num_clients, int(sizes.max()), settings["trajectories"]
    )
    largest = int(configs.groupby(["policy", "N"]).size().max())
    chunk_size = cli.resolve_chunk_size(
        settings["chunk_size"], largest, settings["seeds"], per_run, settings["memory_budget_mib"]
    )
    out, manifest = cli.prepare(parser, args, settings, chunk_size)

    start = time.perf_counter()
    try:
        outputs = sweep.run_policy_grid(
            env,
            params,
            configs,
            num_clients=params.num_clients,
            m="N",
            num_rounds=settings["rounds"],
            seeds=seeds,
            base_seed=settings["base_seed"],
            chunk_size=chunk_size,
            store=sweep.ChunkStore(out),
            trajectories=settings["trajectories"],
            show_progress=not args.quiet,
            per_config={"fairness": fairness, "availability": availability, "queue_rate": fairness},
            env_hparams=("availability",),
        )
    except ValueError as err:  # e.g. a corrupt chunk found while resuming
        parser.error(str(err))
    wall = time.perf_counter() - start

    ds = to_dataset(
        outputs,
        configs,
        seeds,
        fairness=fairness,
        availability=availability,
        benchmark=bench,
        mu=mu,
        tau_max=params.tau_max,
    )
    metadata = sweep.run_metadata(manifest, wall_seconds=wall)
    metadata["benchmark"] = {
        "best_set": "mu(S*) of eq. (13): the N-th largest Monte Carlo mu_k of the seed's layout",
        "lp": "r* of the linear program (23) over availability-only policies",
    }[benchmark]
    metadata["tau_max"] = params.tau_max
    summary = cli.write_outputs(ds, out, metadata, args.ci, None if args.no_plots else figures)
    print(
        f"{len(configs)} configurations × {settings['seeds']} seeds × {settings['rounds']} "
        f"rounds in {wall:.1f} s → {out}"
    )
    print(cli.format_table(summary, columns))
    return 0
