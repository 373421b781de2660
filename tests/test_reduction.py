"""Reductions on the device (``jfl.reduction``) against plain NumPy, and the sweeps built on them.

The per-run metrics and the bands over seeds that a reduced sweep stores are recomputed here in
float64 NumPy from every run's values (``--per-run-rounds``) and must agree to float32 rounding;
a sweep with and without ``--per-run-rounds`` writes the same summary byte for byte; a
configuration's reductions do not depend on its chunk; an interrupted ``--per-run-rounds`` sweep
resumes to the same file; the compilation cache is used by a second run and not after a code
change.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from jfl import compilation_cache, driver, provenance, reduction, sweep
from jfl.cli import parse
from jfl.experiments import VBetaGrid
from jfl.outputs import output_dims
from jfl.results import load_dataset
from jfl.runner import make_batched_run, make_run, seed_keys
from jfl.trackers import fairness_queue

ROOT = Path(__file__).resolve().parents[1]
# The end-to-end grid of tests/experiments/test_rbcsf.py (same shapes, same programs).
TINY = [
    "--V", "0,50", "--beta", "0,0.2", "--alpha", "0.1", "--seeds", "3", "--rounds", "20",
    "--clients", "12", "--m", "3", "--chunk-size", "3", "--policies", "rbcsf,random", "--quiet",
    "--no-plots",
]  # fmt: skip
RTOL = 4 * float(np.finfo(np.float32).eps)  # float32 sums of ≤ 20 terms against float64


# --------------------------------------------------------------------------- NumPy references


def numpy_metrics(outputs: dict, target: np.ndarray, num_rounds: int) -> dict:
    """The per-run metrics (docs/metrics.md) in float64, one run at a time, from its recorded
    values."""
    rate = np.asarray(outputs["selection_count"], float) / num_rounds
    target = np.broadcast_to(np.asarray(target, float), rate.shape)
    squares = (rate**2).sum()
    # Met at the end: every client's count reaches T·rate (with the tracker's float32 slack).
    met = np.all(np.asarray(outputs["selection_count"]) >= target * num_rounds * (1 - 1e-6))
    return {
        "mean_round_time": np.mean(np.asarray(outputs["round_time"], float)),
        "total_time": np.sum(np.asarray(outputs["round_time"], float)),
        "final_queue_mean": np.mean(np.asarray(outputs["final_queue"], float)),
        "final_queue_max": np.max(outputs["final_queue"]),
        "min_selection_rate": rate.min(),
        "max_rate_violation": max(0.0, np.max(target - rate)),
        "jain_index": rate.sum() ** 2 / (len(rate) * squares) if squares > 0 else 1.0,
        "selected_per_round": np.mean(outputs["num_selected"]),
        "target_met": float(met),
        "rounds_to_target": float(outputs["last_unmet_round"] + 1) if met else np.nan,
    }


def assert_band(band: np.ndarray, samples: np.ndarray, err_msg: str) -> None:
    """band [stat, ...] against the mean and ddof-1 variance of samples [seed, ...]."""
    samples = np.asarray(samples, float)
    scale = np.abs(samples).max() + 1e-30
    np.testing.assert_allclose(
        band[0], samples.mean(0), rtol=RTOL, atol=RTOL * scale, err_msg=err_msg
    )
    variance = samples.var(0, ddof=1)
    np.testing.assert_allclose(
        band[1], variance, rtol=8 * RTOL, atol=8 * RTOL * scale**2, err_msg=err_msg
    )


# --------------------------------------------------------------------------- the reducer


@pytest.fixture(scope="module")
def rbcsf_runs():
    """RBCS-F on 12 clients, 4 configurations × 5 seeds × 20 rounds: every run's outputs, and
    the same runs reduced on the device in chunks of 1 and 3 (balanced: two of 2).

    Every run's outputs come from the runs' program of the chunks of 3 (the reduction is a
    program of its own, ``make_batched_run``), so the fixture compiles the runs at two chunk
    sizes, not three."""
    from jfl.envs import RbcsfEnv
    from jfl.policies import get

    env = RbcsfEnv()
    params = env.default_params(num_clients=12)
    policy = get("rbcsf").build(12, 3)
    queue = (fairness_queue("beta"),)  # RBCS-F's own queue
    run = make_run(env, params, policy, 20, trackers=queue)
    dims = output_dims(env, trackers=queue)
    hparams = {k: np.full(4, v, np.float32) for k, v in get("rbcsf").complete({}).items()}
    hparams["V"] = np.array([0.0, 1.0, 10.0, 50.0], np.float32)
    hparams["beta"] = np.array([0.0, 0.1, 0.2, 0.3], np.float32)
    keys = seed_keys(0, np.arange(5))
    full = sweep.run_chunked(make_batched_run(run), keys, hparams, 3)
    batched = make_batched_run(run, reduce=reduction.make_reducer(dims, 20, rate="beta"))
    chunked = {size: sweep.run_chunked(batched, keys, hparams, size) for size in (1, 3)}
    return full, chunked, hparams["beta"], dims


def test_an_experiments_own_reductions_read_each_runs_seed(rbcsf_runs):
    """``Reductions``: a metric and a curve of the experiment's, reading a per-seed
    hyperparameter (each run its own seed's row), equal NumPy's and do not depend on how many
    configurations are reduced together; ``reduced_dims`` lists them, and a curve reading an
    output the runs do not record is left out. (The fixture's every-run outputs, reduced by
    the reduction's own program: no runs' program compiled here.)"""
    full, _, beta, dims = rbcsf_runs
    extra = reduction.Reductions(
        metrics={
            "time_over": reduction.RunMetric(
                (), lambda r: jnp.sum(r.outputs["round_time"] - r.hparams["offset"])
            )
        },
        curves={
            "shifted_time": reduction.Curve(
                ("round",), lambda r: r.outputs["round_time"] + r.hparams["offset"]
            ),
            "never": reduction.Curve(("round",), lambda r: r.outputs["nope"], reads=("nope",)),
        },
    )
    offset = np.random.default_rng(3).uniform(0, 1, (4, 5)).astype(np.float32)
    reduce = jax.jit(
        jax.vmap(reduction.make_reducer(dims, 20, rate="beta", extra=extra), (0, 0, 0, None))
    )

    def reduced(rows):
        outputs = {name: value[rows] for name, value in full.items()}
        return reduce(outputs, {"beta": beta[rows]}, {"offset": offset[rows]}, {})

    together = reduced(slice(0, 4))
    assert set(together) == set(reduction.reduced_dims(dims, extra=extra))
    assert "never_band" not in together and "shifted_time_band" in together
    times = np.asarray(full["round_time"], float)
    want = (times - offset[..., None]).sum(-1)
    np.testing.assert_allclose(together["time_over"], want, rtol=RTOL, atol=RTOL * 20)
    for c in range(4):
        assert_band(together["shifted_time_band"][c], times[c] + offset[c][:, None], "shifted")
    for c in range(4):  # one configuration alone: the same bits
        alone = reduced(slice(c, c + 1))
        for name in together:
            np.testing.assert_array_equal(alone[name][0], together[name][c], err_msg=name)


def test_device_metrics_and_bands_equal_numpy(rbcsf_runs):
    full, chunked, beta, dims = rbcsf_runs
    reduced = chunked[3]
    assert set(reduced) == set(reduction.reduced_dims(dims))
    for c in range(4):
        for s in range(5):
            run = {name: value[c, s] for name, value in full.items()}
            for name, want in numpy_metrics(run, beta[c], 20).items():
                np.testing.assert_allclose(
                    reduced[name][c, s], want, rtol=RTOL, atol=RTOL, err_msg=f"{name} {c} {s}"
                )
        for name in ("round_time", "queue_mean", "queue_max", "num_selected", "final_queue"):
            assert_band(reduced[f"{name}_band"][c], full[name][c], name)
        assert_band(reduced["cumulative_time_band"][c], np.cumsum(full["round_time"][c], 1), "cum")
        pull = np.sort(full["selection_count"][c], axis=1)
        assert_band(reduced["pull_record_band"][c], pull, "pull_record")
        np.testing.assert_array_equal(reduced["last_unmet_round"][c], full["last_unmet_round"][c])


def test_reductions_do_not_depend_on_the_chunk(rbcsf_runs):
    _, chunked, _, _ = rbcsf_runs
    for name in chunked[1]:
        np.testing.assert_array_equal(chunked[1][name], chunked[3][name], err_msg=name)


def test_seed_band_of_one_seed_has_no_variance():
    mean, variance = reduction.seed_band(jnp.ones((1, 4)))
    np.testing.assert_array_equal(mean, 1.0)
    assert np.isnan(np.asarray(variance)).all()


def test_band_interval_is_the_t_interval_of_the_samples():
    from jfl.stats import mean_ci, stats_ci

    samples = np.random.default_rng(0).normal(size=(7, 5))
    mean, variance = samples.mean(0), samples.var(0, ddof=1)
    for got, want in zip(stats_ci(mean, variance, 7), mean_ci(samples), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    half = sps.t.ppf(0.975, 6) * np.sqrt(variance / 7)
    np.testing.assert_allclose(stats_ci(mean, variance, 7)[2], mean + half)


def test_keep_names_only_recorded_outputs():
    with pytest.raises(ValueError, match="cannot keep \\['nope'\\]"):
        reduction.make_reducer({"round_time": ("round",)}, 5, keep=("nope",))


def test_the_fairness_queue_metrics_need_the_fairness_queue():
    """Without the tracker a run has the selection metrics only, in the summary's order."""
    from jfl.envs import RbcsfEnv

    plain = reduction.run_metric_names(output_dims(RbcsfEnv()))
    assert plain == [
        "mean_round_time",
        "total_time",
        "min_selection_rate",
        "jain_index",
        "selected_per_round",
    ]
    queued = reduction.run_metric_names(output_dims(RbcsfEnv(), trackers=(fairness_queue(),)))
    assert queued == list(reduction.RUN_METRICS)
    assert set(reduction.reduced_dims(output_dims(RbcsfEnv()))) >= set(plain)


# --------------------------------------------------------------------------- sweeps


def _run(out: Path, *flags: str) -> driver.Result:
    return driver.run(parse(VBetaGrid, [*TINY, *flags, "--out", str(out)]))


@pytest.fixture(scope="module")
def per_run_rounds(tmp_path_factory):
    out = tmp_path_factory.mktemp("per_run_rounds") / "out"
    return _run(out, "--per-run-rounds")


def test_per_run_rounds_hold_every_run_and_match_the_reductions(per_run_rounds):
    out = per_run_rounds.out
    ds = load_dataset(out / "results.nc")
    assert ds["round_time"].dims == ("config", "seed", "round")
    assert ds["selection_count"].dims == ("config", "seed", "client")
    assert ds["round_time_band"].dims == ("config", "stat", "round")
    assert not (out / "chunks").exists()  # one copy on disk: in results.nc
    queue_rate = ds["queue_rate"].to_numpy()
    for c in range(ds.sizes["config"]):
        for s in range(ds.sizes["seed"]):
            per_run = [name for name in ds.data_vars if ds[name].dims[:2] == ("config", "seed")]
            run = {name: ds[name].to_numpy()[c, s] for name in per_run}
            for name, want in numpy_metrics(run, queue_rate[c], 20).items():
                got = ds[name].to_numpy()[c, s]
                np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL, err_msg=name)
        assert_band(ds["queue_mean_band"].to_numpy()[c], ds["queue_mean"].to_numpy()[c], "queue")


def test_default_and_per_run_rounds_write_the_same_summary(per_run_rounds, tmp_path):
    default = _run(tmp_path / "default")
    assert (default.out / "summary.csv").read_bytes() == (
        per_run_rounds.out / "summary.csv"
    ).read_bytes()
    reduced = load_dataset(default.out / "results.nc")
    assert "round_time" not in reduced
    full = load_dataset(per_run_rounds.out / "results.nc")
    for name in reduced.data_vars:
        np.testing.assert_array_equal(reduced[name], full[name], err_msg=name)
    assert (default.out / "results.nc").stat().st_size < (
        per_run_rounds.out / "results.nc"
    ).stat().st_size


def test_interrupted_per_run_rounds_sweep_resumes_to_the_same_file(
    per_run_rounds, tmp_path, monkeypatch, die_after_first_chunk
):
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        _run(out, "--per-run-rounds")
    monkeypatch.undo()
    assert len(list((out / "chunks").rglob("per_run_*"))) >= 1  # kept for the resume
    mtime = sweep.ChunkStore(out).path("rbcsf", 0).stat().st_mtime_ns
    _run(out, "--per-run-rounds", "--resume", "--keep-chunks")
    assert sweep.ChunkStore(out).path("rbcsf", 0).stat().st_mtime_ns == mtime  # not recomputed
    assert not list((out / "chunks").rglob("per_run_*"))  # in results.nc: not kept twice
    a, b = load_dataset(out / "results.nc"), load_dataset(per_run_rounds.out / "results.nc")
    assert set(a.data_vars) == set(b.data_vars)
    for name in a.data_vars:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_trajectories_are_kept_per_run_on_top_of_the_reductions(tmp_path):
    """--trajectories stores every run's selections and queues (and no other per-round values
    without --per-run-rounds), streamed into results.nc like them."""
    flags = ["--policies", "random", "--trajectories", "--seeds", "2", "--rounds", "6"]
    result = driver.run(parse(VBetaGrid, [*flags, "--quiet", "--no-plots", "--out", str(tmp_path)]))
    ds = load_dataset(tmp_path / "results.nc")
    assert ds["selected"].dims == ("config", "seed", "round", "client")
    assert ds["selected"].shape == (1, 2, 6, 40) and "round_time" not in ds
    counts = ds["selected"].sum("round").transpose("config", "seed", "client").to_numpy()
    pull = np.sort(counts, axis=-1).astype(float)
    np.testing.assert_allclose(ds["pull_record_band"].sel(stat="mean")[0], pull[0].mean(0))
    assert json.loads((tmp_path / "metadata.json").read_text())["per_run_outputs"] == [
        "selected",
        "queue",
    ]
    assert result.summary["n_seeds"].tolist() == [2]


def test_memory_budget_counts_the_chunks_in_flight():
    config = parse(VBetaGrid, [*TINY[:-4], "--memory-budget", "0.2", "--chunk-size", "auto"])
    plan = config.plan()
    per_config = config.seeds * plan.per_run_bytes * sweep.IN_FLIGHT

    def chunk_size(config, stored=None):
        return sweep.chunk_size(
            config.chunk_size, plan, config.seeds, config.memory_budget, stored=stored
        )

    assert chunk_size(config) == int(0.2 * 2**20) // per_config == 2
    # A resumed sweep keeps the chunks it was started with, whatever the budget now.
    assert chunk_size(config, stored=3) == 3
    assert chunk_size(dataclasses.replace(config, chunk_size="1"), stored=3) == 1


# --------------------------------------------------------------------------- compilation cache


CACHE_RUN = """
import json, sys
from jfl import driver
from jfl.cli import parse
from jfl.experiments import VBetaGrid
from jfl.kernels.reduce import doubling_cumsum, pairwise_sum
argv = ["--policies", "random", "--seeds", "2", "--rounds", "5", "--clients", "4", "--m", "2",
        "--quiet", "--no-plots", "--overwrite", "--out", sys.argv[1]]
result = driver.run(parse(VBetaGrid, argv))
print(json.dumps(json.loads((result.out / "metadata.json").read_text())["compilation_cache"]))
"""


def _cached_run(package_root: Path, cache: Path, out: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env.update(JFL_CACHE_DIR=str(cache), PYTHONPATH=str(package_root), JAX_PLATFORMS="cpu")
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    done = subprocess.run(
        [sys.executable, "-c", CACHE_RUN, str(out)],
        env=env,
        cwd=out.parent,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.processes
def test_compilation_cache_is_used_again_and_not_after_a_code_change(tmp_path):
    """A second run loads its programs from the cache; a copy of jfl with one line changed is
    given a directory of its own, which nothing has filled."""
    package = tmp_path / "src"
    shutil.copytree(ROOT / "jfl", package / "jfl", ignore=shutil.ignore_patterns("__pycache__"))
    cache, out = tmp_path / "cache", tmp_path / "out"
    first = _cached_run(package, cache, out)
    assert Path(first["dir"]).parent == cache and first["hits"] == 0
    assert Path(first["dir"]).name.endswith(provenance.package_source(package / "jfl"))
    assert any(Path(first["dir"]).iterdir())  # the programs it compiled
    second = _cached_run(package, cache, out)
    assert second["dir"] == first["dir"] and second["hits"] > 0

    edited = package / "jfl" / "reduction.py"
    edited.write_text(edited.read_text() + "\n# a change\n")
    changed = compilation_cache.cache_dir(cache, provenance.package_source(package / "jfl"))
    assert changed != Path(first["dir"]) and not changed.exists()


def test_no_compilation_cache_flag_is_not_a_setting():
    assert VBetaGrid(compilation_cache=False).settings() == VBetaGrid().settings()
    assert parse(VBetaGrid, ["--no-compilation-cache"]).compilation_cache is False
    assert jax.config.jax_compilation_cache_dir  # the suite's own cache (tests/conftest.py)


def test_settings_of_a_per_run_rounds_sweep_are_the_same():
    """--per-run-rounds adds values to the results, not other numbers: same manifest."""
    assert VBetaGrid(per_run_rounds=True).settings() == VBetaGrid().settings()
    config = pd.Series(VBetaGrid().settings())
    assert "per_run_rounds" not in config and "memory_budget" not in config
