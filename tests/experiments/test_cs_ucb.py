"""CS-UCB / CS-UCB-Q (``jfl.experiments.cs_ucb``): scenario vectors, benchmarks, the three
experiments' command lines (``jfl.cli.main``) and their outputs.

Bad input is refused before anything compiles. Each experiment runs end to end once on a tiny
grid (module-scoped fixtures shared by the output checks); their golden runs (``tests/golden.py``,
the same scenarios with every policy) pin the numbers, the other tests what the numbers mean: the
benchmark per seed, c per configuration, and the regrets, gaps, failures and selection fractions
that the sweeps reduce on the device against the host's float64 functions and a plain loop over
every run's records (the same plans run again keeping every run's outputs).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from jfl import cli, results
from jfl.envs import RbcsfEnv, WirelessEnv
from jfl.envs.wireless import make_params
from jfl.experiments import regret, regret_curves
from jfl.experiments.cs_ucb import BetaRhoGrid, CsUcbIdeal, CsUcbQDelay, CsUcbQFairness
from jfl.experiments.regret_curves import (
    add_gap_bands,
    add_gap_curves,
    gap_metrics,
    performance_gap,
    regret_metrics,
)
from jfl.experiments.wireless import (
    FairnessPreset,
    check_scenarios,
    scenario_vectors,
    seed_benchmarks,
    seed_layouts,
)
from jfl.policies import get
from jfl.results import load_dataset, run_metrics, running_selection_fraction
from jfl.runner import seed_keys
from jfl.sweep import run_policy_grid
from tests.golden import check_golden
from tests.helpers import check_saved_figures, cli_fails, record_figures

EXPERIMENTS = {
    "ideal": CsUcbIdeal,
    "fairness": CsUcbQFairness,
    "grid": BetaRhoGrid,
    "delay": CsUcbQDelay,
}
C_DEFAULT = np.array([0.6, 0.5, 0.4])
SAMPLES = np.array([1500.0, 1000.0, 500.0])
ROUNDS = 20


# --------------------------------------------------------------------------- scenario vectors


def test_scenario_vectors_rho_column_scales_the_dataset_sizes():
    """A ``rho`` column gives c = ρ s/Σs per row (taking precedence over ``fairness``)."""
    configs = pd.DataFrame({"policy": ["cs_ucb_q"] * 3, "rho": [0.0, 0.5, 1.2]})
    c, alpha = scenario_vectors(
        configs, 3, availability=0.9, fairness=[0.1, 0.1, 0.1], samples=SAMPLES
    )
    np.testing.assert_allclose(c, np.array([0.0, 0.5, 1.2])[:, None] * SAMPLES / SAMPLES.sum())
    np.testing.assert_allclose(c.sum(axis=1), [0.0, 0.5, 1.2])
    np.testing.assert_array_equal(alpha, np.full((3, 3), 0.9))


def test_scenario_vectors_fairness_broadcast_and_default_zero():
    """Explicit fairness (vector or scalar) is repeated per row; without one c is 0."""
    configs = pd.DataFrame({"policy": ["cs_ucb_q", "modified_cs_ucb"]})
    c, _ = scenario_vectors(configs, 3, availability=1.0, fairness=C_DEFAULT)
    np.testing.assert_array_equal(c, np.stack([C_DEFAULT, C_DEFAULT]))
    c[0, 0] = 0.0  # a writable copy, not a view of one shared row
    assert c[1, 0] == 0.6
    c, _ = scenario_vectors(configs, 3, availability=1.0, fairness=0.2)
    np.testing.assert_array_equal(c, np.full((2, 3), 0.2))
    c, _ = scenario_vectors(configs, 4, availability=1.0)
    np.testing.assert_array_equal(c, np.zeros((2, 4)))


def test_scenario_vectors_availability_column_or_value():
    """An ``availability`` column gives α per row; otherwise the scalar or per-client value."""
    configs = pd.DataFrame({"policy": ["random"] * 3, "availability": [0.2, 0.5, 1.0]})
    _, alpha = scenario_vectors(configs, 4, availability=0.9)
    np.testing.assert_array_equal(alpha, np.repeat([[0.2], [0.5], [1.0]], 4, axis=1))
    plain = configs.drop(columns="availability")
    _, alpha = scenario_vectors(plain, 4, availability=0.7)
    np.testing.assert_array_equal(alpha, np.full((3, 4), 0.7))
    _, alpha = scenario_vectors(plain, 4, availability=[0.1, 0.2, 0.3, 0.4])
    np.testing.assert_array_equal(alpha, np.tile([0.1, 0.2, 0.3, 0.4], (3, 1)))


@pytest.mark.parametrize("samples", [[1500.0, 1000.0], [1500.0, 1000.0, 0.0], None])
def test_scenario_vectors_rejects_bad_samples(samples):
    """With a ``rho`` column the dataset sizes must be K positive numbers."""
    configs = pd.DataFrame({"policy": ["cs_ucb_q"], "rho": [1.0]})
    with pytest.raises(ValueError, match=r"samples must be 3 positive dataset sizes"):
        scenario_vectors(configs, 3, availability=0.9, samples=samples)


def test_check_scenarios_names_the_configuration():
    """An infeasible c is reported with the configuration's labels (NaN labels left out)."""
    configs = pd.DataFrame(
        {"policy": ["cs_ucb_q", "modified_cs_ucb"], "N": [2, 2], "beta": [0.1, np.nan]}
    )
    c = np.stack([C_DEFAULT, C_DEFAULT])
    alpha = np.full((2, 3), 0.9)
    check_scenarios(configs, c, alpha, [2, 2])  # the paper's c is feasible
    with pytest.raises(ValueError, match=r"configuration \(policy=cs_ucb_q, N=2, beta=0.1\)"):
        check_scenarios(configs, c, np.full((2, 3), 0.55), [2, 2])  # c_1 = 0.6 > α
    bad = np.stack([C_DEFAULT, [0.9, 0.9, 0.5]])
    with pytest.raises(ValueError, match=r"policy=modified_cs_ucb, N=2\).*infeasible") as exc:
        check_scenarios(configs, bad, alpha, [2, 2])
    assert "beta" not in str(exc.value)


def test_per_client_scenario_values_repeat_one_value():
    """``--distance``/``--fairness``/``--samples``: one value for all clients or one each."""
    config = CsUcbQFairness(preset=FairnessPreset(distance=(300.0,)))
    params = config.preset.params(config)
    assert params.coherence_slots == 1
    config = CsUcbQFairness(coherence_slots=4)
    assert config.preset.params(config).coherence_slots == 4
    assert CsUcbIdeal(coherence_slots=3).params().coherence_slots == 3
    np.testing.assert_array_equal(params.distance, [300.0, 300.0, 300.0])
    flags = ["--distance", "100,200,300", "--availability", "0.5"]
    config = cli.parse(CsUcbQFairness, flags)
    assert config.preset == FairnessPreset(distance=(100.0, 200.0, 300.0), availability=0.5)
    params = config.preset.params(config)
    np.testing.assert_array_equal(params.distance, [100.0, 200.0, 300.0])
    np.testing.assert_allclose(params.availability, 0.5)
    assert params.tau_max == pytest.approx(0.5)
    config = CsUcbQFairness(fairness=(0.3,))
    c, alpha = config.fairness_vectors(config.configs())
    np.testing.assert_allclose(c, 0.3) and np.testing.assert_allclose(alpha, 0.9)
    config = BetaRhoGrid(samples=(1.0,), rho=(0.9,), beta=(0.1,))
    c, _ = config.fairness_vectors(config.configs())
    np.testing.assert_allclose(c, [[0.3, 0.3, 0.3]])


def test_configs_group_rows_by_channels():
    """One compiled program per (policy, N): the ideal table lists each group contiguously."""
    configs = CsUcbIdeal(N=(3.0, 1.0, 3.0), policies=("random", "cs_ucb")).configs()
    assert list(zip(configs["N"], configs["policy"], strict=True)) == [
        (1, "cs_ucb"), (1, "random"), (3, "cs_ucb"), (3, "random"),
    ]  # fmt: skip
    table = BetaRhoGrid(beta=(0.1, 0.2), rho=(0.5, 1.0)).configs()
    assert list(table.columns) == ["policy", "N", "rho", "beta"]
    assert len(table) == 4 and (table["N"] == 2).all()


# --------------------------------------------------------------------------- policies vs envs


@pytest.mark.parametrize(("policy", "missing"), [("rbcsf", "context"), ("fedcs", "expected_time")])
def test_rbcsf_policies_refuse_the_wireless_environment(policy, missing):
    """rbcsf and fedcs read fields the wireless environment does not provide."""
    with pytest.raises(ValueError, match=rf"{policy}.*{missing}.*'wireless'"):
        get(policy).check_environment(WirelessEnv())
    get(policy).check_environment(RbcsfEnv())


@pytest.mark.parametrize("policy", ["cs_ucb", "cs_ucb_q", "modified_cs_ucb"])
def test_reward_policies_refuse_the_rbcsf_environment(policy):
    """The CS-UCB family needs the per-client ``reward`` that rbcsf does not provide."""
    with pytest.raises(ValueError, match=rf"{policy}.*reward.*'rbcsf'"):
        get(policy).check_environment(RbcsfEnv())
    get(policy).check_environment(WirelessEnv())


@pytest.mark.parametrize("policy", ["random", "round_robin"])
def test_environment_agnostic_policies_run_anywhere(policy):
    """random and round_robin only read availability."""
    assert get(policy).requires == ("available",)
    get(policy).check_environment(WirelessEnv())
    get(policy).check_environment(RbcsfEnv())
    get(policy).check_environment(object())  # no ``provides``: not checked


def test_queue_rate_names_the_policys_own_rate():
    """PolicySpec.queue_rate: β for rbcsf, c for cs_ucb_q, none for the baselines."""
    assert get("rbcsf").queue_rate == "beta"
    assert get("cs_ucb_q").queue_rate == "fairness"
    assert get("random").queue_rate is None


# --------------------------------------------------------------------------- benchmarks


def test_seed_layouts_and_benchmarks_share_explicit_distances():
    """Explicit distances: every seed has that layout and the same μ and benchmark."""
    env = WirelessEnv()
    params = make_params(3, distance=[300.0, 300.0, 300.0], tau_max=0.2, availability=0.9)
    keys = seed_keys(0, np.arange(3))
    np.testing.assert_array_equal(seed_layouts(env, params, keys), np.full((3, 3), 300.0))
    bench, mu = seed_benchmarks(
        env, params, keys, [2], C_DEFAULT[None], np.full((1, 3), 0.9),
        kind="lp", num_samples=2000, mc_seed=1,
    )  # fmt: skip
    assert bench.shape == (1, 3) and mu.shape == (3, 3)
    assert (mu == mu[0]).all() and (bench == bench[0, 0]).all()
    expected = regret.availability_lp(mu[0], np.full(3, 0.9), C_DEFAULT, 2).r_star
    assert bench[0, 0] == pytest.approx(expected, abs=1e-12)
    # Client 1 is the slowest (φ_k grows with k): the smallest μ at equal distances.
    assert mu[0, 0] < mu[0, 1] < mu[0, 2]


def test_seed_benchmarks_do_not_depend_on_the_seed_count():
    """A seed's Monte Carlo μ and benchmark (which its runs read as ``mean_reward``) are the same
    bits whether 2, 3 or 7 seeds are estimated together (the layouts are vmapped)."""
    env = WirelessEnv()
    params = make_params(6, tau_max=0.5)
    zeros, ones = np.zeros((1, 6)), np.ones((1, 6))
    common = dict(kind="best_set", num_samples=2000, mc_seed=1)
    small = seed_benchmarks(env, params, seed_keys(0, np.arange(2)), [3], zeros, ones, **common)
    for count in (3, 7):
        keys = seed_keys(0, np.arange(count))
        bench, mu = seed_benchmarks(env, params, keys, [3], zeros, ones, **common)
        np.testing.assert_array_equal(mu[:2], small[1])
        np.testing.assert_array_equal(bench[:, :2], small[0])


def test_lp_benchmark_without_constraints_is_the_best_fixed_set():
    """r* of LP (23) with α = 1 and c = 0 equals μ(S*) of eq. (13) for every N and seed."""
    env = WirelessEnv()
    num_clients = 5
    params = make_params(num_clients, tau_max=0.5)
    keys = seed_keys(4, np.arange(3))
    sizes = [1, 2, 3, 5]
    c = np.zeros((len(sizes), num_clients))
    alpha = np.ones((len(sizes), num_clients))
    common = dict(num_samples=2000, mc_seed=9)
    best, mu = seed_benchmarks(env, params, keys, sizes, c, alpha, kind="best_set", **common)
    lp, mu_lp = seed_benchmarks(env, params, keys, sizes, c, alpha, kind="lp", **common)
    np.testing.assert_array_equal(mu, mu_lp)
    np.testing.assert_allclose(lp, best, atol=1e-9, rtol=0)
    for row, n in enumerate(sizes):
        np.testing.assert_array_equal(best[row], -np.sort(-mu, axis=1)[:, n - 1])
    assert len(np.unique(mu, axis=0)) == 3  # drawn layouts differ across seeds
    with pytest.raises(ValueError, match="benchmark must be one of"):
        seed_benchmarks(env, params, keys, sizes, c, alpha, kind="oracle", **common)


# --------------------------------------------------------------------------- bad input

TINY_WITHOUT_BENCHMARK = ["--seeds", "2", "--rounds", "10", "--quiet", "--no-plots"]
TINY = [*TINY_WITHOUT_BENCHMARK, "--mc-samples", "100"]
POLICY_FOR_WIRELESS = "policy 'rbcsf' reads ['context'], which environment 'wireless' does not"


@pytest.mark.parametrize(
    ("experiment", "argv", "expected"),
    [
        ("ideal", ["--N", "0"], "--N must be integers in [1, --clients=20], got 0.0"),
        ("ideal", ["--N", "21"], "--N must be integers in [1, --clients=20], got 21.0"),
        ("ideal", ["--N", "2,2.5"], "--N must be integers in [1, --clients=20], got 2.5"),
        ("ideal", ["--N", "2,2"], "--N: duplicate values in [2.0, 2.0]"),
        ("ideal", ["--clients", "4", "--N", "5"], "--N must be integers in [1, --clients=4]"),
        ("ideal", ["--N", "x"], "--N"),
        ("ideal", ["--tau-max", "0"], "--tau-max must be in (0, inf), got 0.0"),
        ("ideal", ["--seeds", "0"], "--seeds must be an integer >= 1, got 0"),
        ("ideal", ["--rounds", "0"], "--rounds must be an integer >= 1, got 0"),
        ("ideal", ["--clients", "0"], "--clients must be an integer in [1, 10000000], got 0"),
        ("ideal", ["--mc-samples", "0"], "--mc-samples must be an integer >= 1, got 0"),
        ("ideal", ["--policies", "cs_ucb,magic"], "--policies: unknown policy 'magic'"),
        ("ideal", ["--policies", "rbcsf"], f"--policies: {POLICY_FOR_WIRELESS}"),
        ("ideal", ["--policies", "random,fedcs"], "policy 'fedcs' reads ['expected_time']"),
        ("ideal", ["--policies", "cs_ucb,rbcsf"], POLICY_FOR_WIRELESS),
        ("ideal", ["--rho", "1"], "--rho"),  # a flag of another experiment
        ("ideal", ["--resume", "--overwrite"], "exclude each other"),
        ("fairness", ["--N", "0"], "--N must be an integer in [1, --clients=3], got 0"),
        ("fairness", ["--N", "4"], "--N must be an integer in [1, --clients=3], got 4"),
        ("fairness", ["--N", "2.5"], "--N"),
        ("fairness", ["--tau-max", "0"], "--tau-max must be in (0, inf), got 0.0"),
        ("fairness", ["--tau-max", "-1"], "--tau-max must be in (0, inf), got -1.0"),
        ("fairness", ["--seeds", "0"], "--seeds must be an integer >= 1, got 0"),
        ("fairness", ["--policies", "nope"], "--policies: unknown policy 'nope'"),
        ("fairness", ["--beta", "1.5"], "beta must be in [0, 1], got [1.5]"),
        ("fairness", ["--beta", "-0.1"], "beta must be in [0, 1], got [-0.1]"),
        ("fairness", ["--fairness", "0.6,0.5"], "--fairness: expected 1 or --clients=3 values"),
        ("fairness", ["--fairness", "1.0,0.5,0.4"], "--fairness values c_k must be in [0, 1)"),
        ("fairness", ["--fairness", "0.9,0.9,0.5"], "fairness is infeasible: sum c = 2.3 > N = 2"),
        ("fairness", ["--fairness", "0.95,0.5,0.4"], "c_k > availability_k for client(s) {1}"),
        ("fairness", ["--availability", "1.2"], "--availability must be in [0, 1], got 1.2"),
        ("fairness", ["--availability", "-0.1"], "--availability must be in [0, 1], got -0.1"),
        (
            "fairness",
            ["--distance", "-5"],
            "--distance must be in (0, inf), got [-5.0, -5.0, -5.0]",
        ),
        (
            "fairness",
            ["--distance", "300,0,300"],
            "--distance must be in (0, inf), got [0.0",
        ),
        ("fairness", ["--distance", "300,300"], "--distance: expected 1 or --clients=3 values"),
        ("fairness", ["--mc-samples", "0"], "--mc-samples must be an integer >= 1, got 0"),
        ("fairness", ["--resume", "--overwrite"], "exclude each other"),
        ("grid", ["--rho", "-1"], "--rho must be in [0, inf), got [-1.0]"),
        ("grid", ["--rho", "3"], "rho=3.0"),
        ("grid", ["--rho", "3"], "fairness c_k must be in [0, 1), got [1.5, 1.0, 0.5]"),
        ("grid", ["--rho", "0.5,1.9"], "rho=1.9"),
        ("grid", ["--rho", "0.5,0.5"], "--rho: duplicate values"),
        ("grid", ["--rho", "1.9"], "infeasible: c_k > availability_k for client(s) {1}"),
        ("grid", ["--rho", "1.5", "--availability", "0.7"], "infeasible"),
        ("grid", ["--beta", "1.5"], "beta must be in [0, 1], got [1.5]"),
        ("grid", ["--samples", "1,2"], "--samples: expected 1 or --clients=3 values, got 2"),
        ("grid", ["--samples", "0"], "--samples must be in (0, inf), got [0.0, 0.0, 0.0]"),
        ("grid", ["--N", "0"], "--N must be an integer in [1, --clients=3], got 0"),
        ("grid", ["--availability", "1.2"], "--availability must be in [0, 1], got 1.2"),
        ("grid", ["--distance", "-5"], "--distance must be in (0, inf)"),
        ("grid", ["--tau-max", "0"], "--tau-max must be in (0, inf), got 0.0"),
        ("grid", ["--mc-samples", "0"], "--mc-samples must be an integer >= 1, got 0"),
        ("grid", ["--seeds", "0"], "--seeds must be an integer >= 1, got 0"),
        ("grid", ["--resume", "--overwrite"], "exclude each other"),
        ("delay", ["--N", "0"], "--N must be integers in [1, --clients=20], got 0.0"),
        ("delay", ["--N", "1.5"], "--N must be integers in [1, --clients=20], got 1.5"),
        ("delay", ["--rho", "-0.1"], "--rho must be in [0, inf), got [-0.1]"),
        ("delay", ["--rho", "1.5"], "N=1, rho=1.5, beta=0.1): fairness is infeasible: sum c = 1.5"),
        ("delay", ["--beta", "2"], "beta must be in [0, 1], got [2.0]"),
        ("delay", ["--samples", "1,2"], "--samples: expected 1 or --clients=20 values, got 2"),
        ("delay", ["--samples", "-1"], "--samples must be in (0, inf)"),
        ("delay", ["--availability", "1.5"], "--availability must be in [0, 1], got 1.5"),
        ("delay", ["--tau-max", "0"], "--tau-max must be in (0, inf), got 0.0"),
        ("delay", ["--policies", "cs_ucb_q,magic"], "--policies: unknown policy 'magic'"),
        ("ideal", ["--coherence-slots", "0"], "--coherence-slots must be an integer >= 1, got 0"),
        (
            "ideal",
            ["--policies", "cs_ucb,local_accuracy"],
            "--policies: policy 'local_accuracy' reads ['local_accuracy'], which only a federated",
        ),
        ("fairness", ["--coherence-slots", "1.5"], "--coherence-slots"),
        ("delay", ["--coherence-slots", "-2"], "--coherence-slots must be an integer >= 1"),
    ],
)
def test_bad_input_fails_early_with_one_line(experiment, argv, expected, capsys, tmp_path):
    """Each bad flag exits with status 2 and one line naming it; --out is not created."""
    out = tmp_path / "out"
    tiny = TINY_WITHOUT_BENCHMARK if experiment == "delay" else TINY
    line = cli_fails(EXPERIMENTS[experiment], [*tiny, *argv, "--out", str(out)], capsys)
    assert expected in line
    assert not out.exists()


# --------------------------------------------------------------------------- end to end

REGRET_COLUMNS = [
    "policy",
    "n_seeds",
    "cumulative_gap",
    "cumulative_gap_lo",
    "cumulative_gap_hi",
    "average_gap",
    "failed_clients",
    "target_met",
    "rounds_to_target",
    "average_set_reward",
    "pseudo_regret",
    "realised_regret",
    "realised_gap",
]


def _run(config_type, argv, out):
    argv = [*argv, "--rounds", str(ROUNDS), "--seeds", "2", "--mc-samples", "2000", "--quiet"]
    argv += ["--out", str(out)]
    with record_figures() as figures:
        assert cli.main(config_type, argv, prog="prog") == 0
    return {
        "out": out,
        "argv": argv,
        "figures": figures,
        "summary": pd.read_csv(out / "summary.csv"),
        "ds": load_dataset(out / "results.nc"),
        "metadata": json.loads((out / "metadata.json").read_text()),
    }


@pytest.fixture(scope="module")
def ideal_run(tmp_path_factory):
    # One policy (the golden run adds the others at N = 3, sharing this one's programs).
    argv = ["--clients", "6", "--N", "3,2", "--policies", "cs_ucb"]
    return _run(CsUcbIdeal, argv, tmp_path_factory.mktemp("ideal") / "out")


@pytest.fixture(scope="module")
def fairness_run(tmp_path_factory):
    return _run(CsUcbQFairness, ["--beta", "1e-3,0.1"], tmp_path_factory.mktemp("fair") / "out")


@pytest.fixture(scope="module")
def grid_run(tmp_path_factory):
    # CS-UCB-Q's programs are the golden run's.
    argv = ["--beta", "1e-3,0.1", "--rho", "0.5,1.2"]
    return _run(BetaRhoGrid, argv, tmp_path_factory.mktemp("grid") / "out")


def _check_common_outputs(run, figures, tau_max, benchmark_word):
    out = run["out"]
    for name in ("summary.csv", "results.nc", "metadata.json"):
        assert (out / name).stat().st_size > 0, name
    check_saved_figures(out / "figures", run["figures"], figures)
    metadata = run["metadata"]
    assert {"benchmark", "tau_max", "config", "versions", "git_commit"} <= set(metadata)
    assert metadata["tau_max"] == pytest.approx(tau_max)
    assert "not the paper's 5 s" in metadata["tau_max_note"]
    assert benchmark_word in metadata["benchmark"]
    summary = run["summary"]
    assert set(REGRET_COLUMNS) <= set(summary.columns)
    assert (summary["n_seeds"] == 2).all()
    ds = run["ds"]
    assert ds.attrs["tau_max"] == pytest.approx(tau_max)
    assert ds["benchmark_reward"].dims == ("config", "seed")
    assert ds["queue_rate"].dims == ("config", "client")
    assert ds["mean_reward"].dims == ("seed", "client")
    assert list(ds["policy"].to_numpy()) == list(summary["policy"])


def test_ideal_end_to_end(ideal_run):
    """N = 2, 3: files, figures, rows sorted by N and μ(S*) of each N as the benchmark."""
    caption = "Xia Fig. 1, K=6, N=3, τ_max = 0.5 s"  # the curves of the largest N
    curves = {
        f"{name}_vs_round": {
            "title": f"{ylabel} ({caption})",
            "xlabel": "round",
            "ylabel": ylabel,
            "policies": ["cs_ucb"],
        }
        for name, (_, ylabel) in regret_curves.GAP_CURVES.items()
    }
    gap = {
        "title": f"Gap at T = {ROUNDS} vs channels N (Xia Fig. 3)",
        "xlabel": "N",
        "ylabel": "cumulative performance gap Θ (s)",
        "legend": ["cs_ucb"],
    }
    _check_common_outputs(
        ideal_run, {**curves, "gap_vs_channels": gap}, tau_max=0.5, benchmark_word="mu(S*)"
    )  # fmt: skip
    (points,) = ideal_run["figures"]["gap_vs_channels.png"].axes[0].containers
    by_n = ideal_run["summary"].sort_values("N")
    np.testing.assert_allclose(points.lines[0].get_ydata(), by_n["cumulative_gap"], rtol=1e-6)
    summary, ds = ideal_run["summary"], ideal_run["ds"]
    assert ideal_run["metadata"]["config"]["experiment"] == "cs_ucb_ideal"
    assert list(zip(summary["policy"], summary["N"], strict=True)) == [("cs_ucb", 2), ("cs_ucb", 3)]
    assert dict(ds.sizes) == {"config": 2, "seed": 2, "round": ROUNDS, "client": 6, "stat": 2}
    np.testing.assert_array_equal(ds["queue_rate"], 0.0)
    np.testing.assert_array_equal(ds["availability_prob"], 1.0)
    mu = ds["mean_reward"].to_numpy()
    assert len(np.unique(mu, axis=0)) == 2  # a fresh layout per seed
    for config in range(2):
        n = int(ds["N"][config])
        selected = ds["num_selected_band"][config]  # N every round of every run
        np.testing.assert_array_equal(selected.sel(stat="mean"), n)
        np.testing.assert_array_equal(selected.sel(stat="var"), 0)
        nth_largest = -np.sort(-mu, axis=1)[:, n - 1]
        np.testing.assert_array_equal(ds["benchmark_reward"][config], nth_largest)
    # Always available and c = 0: every target is met from the first round.
    assert (summary["target_met"] == 1).all() and (summary["rounds_to_target"] == 1).all()


def test_fairness_end_to_end(fairness_run):
    """The Fig. 4–5 sweep: c per config, r* of the LP, the selection fractions' band."""
    caption = "Xia Fig. 4, τ_max = 0.5 s"
    policies = ["cs_ucb_q", "cs_ucb_q", "modified_cs_ucb"]
    figures = {
        f"{name}_vs_round": {
            "title": f"{regret_curves.GAP_CURVES[name][1]} ({caption})",
            "xlabel": "round",
            "ylabel": regret_curves.GAP_CURVES[name][1],
            "lines": 3,
            "policies": policies,
        }
        for name in ("cumulative_gap", "average_gap")
    }
    figures["selection_fraction"] = {"panels": ["client 1", "client 2", "client 3"]}
    _check_common_outputs(fairness_run, figures, tau_max=0.5, benchmark_word="linear program (23)")
    summary, ds = fairness_run["summary"], fairness_run["ds"]
    assert {"beta", "N"} <= set(summary.columns)
    assert list(summary["policy"]) == ["cs_ucb_q", "cs_ucb_q", "modified_cs_ucb"]
    np.testing.assert_allclose(summary["beta"][:2], [1e-3, 0.1])
    assert np.isnan(summary["beta"][2])
    assert dict(ds.sizes) == {"config": 3, "seed": 2, "round": ROUNDS, "client": 3, "stat": 2}
    np.testing.assert_array_equal(ds["queue_rate"], np.tile(C_DEFAULT, (3, 1)))
    np.testing.assert_array_equal(ds["availability_prob"], 0.9)
    mu = ds["mean_reward"].to_numpy()
    assert (mu == mu[0]).all()  # explicit equal distances: one layout for every seed
    r_star = regret.availability_lp(mu[0], np.full(3, 0.9), C_DEFAULT, 2).r_star
    np.testing.assert_allclose(ds["benchmark_reward"], r_star, rtol=0, atol=1e-12)
    # Fig. 5's running fractions, banded over seeds: at T, the selection counts' over T.
    fraction = ds["selection_fraction_band"]
    assert fraction.dims == ("config", "stat", "round", "client")
    counts = ds["selection_count_band"].sel(stat="mean") / ROUNDS
    np.testing.assert_allclose(fraction.sel(stat="mean").isel(round=-1), counts, rtol=1e-6)
    assert ((fraction.sel(stat="mean") >= 0) & (fraction.sel(stat="mean") <= 1)).all()


def test_the_default_run_keeps_no_per_run_rounds(fairness_run):
    """CsUcbQFairness on its defaults (no --per-run-rounds, no --trajectories): results.nc holds
    per-run metrics [config, seed] and bands, no run's rounds or selections, although its runs
    record the selections for Fig. 5's band."""
    ds = fairness_run["ds"]
    per_run = [name for name, v in ds.data_vars.items() if {"seed", "round"} <= set(v.dims)]
    assert per_run == []
    assert "selected" not in ds and "set_reward" not in ds and "pseudo_regret_t" not in ds
    assert {"pseudo_regret_t_band", "failed_clients_t_band", "selection_fraction_band"} <= set(ds)
    assert ds["pseudo_regret"].dims == ("config", "seed")
    assert fairness_run["metadata"]["outputs"] == "reduced on the device"
    assert "per_run_outputs" not in fairness_run["metadata"]


def test_beta_rho_grid_end_to_end(grid_run):
    """β × ρ grid: c = ρ s/Σs per configuration, heatmaps, rho and beta columns."""
    titles = {
        "average_gap": "average performance gap θ (s)",
        "max_rate_violation": "largest shortfall max_k (c_k − rate_k)",
        "rounds_to_target": "rounds until every c_k is met",
    }
    heatmaps = {
        f"heatmap_cs_ucb_q_{metric}": {
            "title": f"cs_ucb_q: {title}", "xlabel": "ρ", "ylabel": "β"
        }
        for metric, title in titles.items()
    }  # fmt: skip
    _check_common_outputs(grid_run, heatmaps, tau_max=0.5, benchmark_word="linear program (23)")
    rows = grid_run["summary"][grid_run["summary"]["policy"] == "cs_ucb_q"]
    for metric in titles:  # each heatmap's cells are the summary's, ticked with the β values
        (image,) = grid_run["figures"][f"heatmap_cs_ucb_q_{metric}.png"].axes[0].get_images()
        table = rows.pivot_table(index="beta", columns="rho", values=metric)
        np.testing.assert_allclose(image.get_array(), table.to_numpy(), rtol=1e-6)
    summary, ds = grid_run["summary"], grid_run["ds"]
    assert {"rho", "beta"} <= set(summary.columns)
    assert sorted(zip(summary["rho"], summary["beta"], strict=True)) == [
        (0.5, 1e-3), (0.5, 0.1), (1.2, 1e-3), (1.2, 0.1),
    ]  # fmt: skip
    rho = ds["rho"].to_numpy()
    np.testing.assert_allclose(ds["queue_rate"], rho[:, None] * SAMPLES / SAMPLES.sum())
    mu = ds["mean_reward"].to_numpy()[0]
    for config in range(4):
        c = ds["queue_rate"][config].to_numpy()
        r_star = regret.availability_lp(mu, np.full(3, 0.9), c, 2).r_star
        np.testing.assert_allclose(ds["benchmark_reward"][config], r_star, atol=1e-12)
    # A tighter fairness constraint cannot raise the optimum of the LP.
    low, high = ds["benchmark_reward"].to_numpy()[rho == 0.5], ds["benchmark_reward"][rho == 1.2]
    assert low.min() >= float(high.max()) - 1e-12


@pytest.mark.parametrize("name", ["cs_ucb_ideal", "cs_ucb_q_fairness", "beta_rho_grid"])
def test_reproduces_its_golden_run(name, tmp_path):
    """Every policy on an end-to-end scenario reproduces the summary stored before the refactor
    (tests/golden.py); the policies of the runs above reuse their compiled programs."""
    check_golden(name, tmp_path / "golden")


def _pseudo_regret_numpy(selected, mu, bench):
    """t·r_bench − Σ_{s≤t} min_{k∈S(s)} μ_k (0 for S = ∅), by a plain loop over the records."""
    configs, seeds, rounds, _ = selected.shape
    regret = np.zeros((configs, seeds, rounds))
    for c in range(configs):
        for s in range(seeds):
            total = 0.0
            for t in range(rounds):
                chosen = selected[c, s, t]
                total += float(mu[s][chosen].min()) if chosen.any() else 0.0
                regret[c, s, t] = (t + 1) * bench[c, s] - total
    return regret


EPS = float(np.finfo(np.float32).eps)


def _every_run(run, experiment) -> xr.Dataset:
    """Every run's outputs of a fixture's sweep: its plan run again on the host's side of the
    reductions (the same runs' program at the same chunk size: the compilation cache has it),
    labelled, with the plan's ``finish`` (benchmark, μ, every run's pseudo-regret curve)."""
    config = cli.parse(experiment, run["argv"])
    plan = config.plan()
    seeds = np.arange(config.seeds)
    outputs = run_policy_grid(
        plan,
        rounds=config.rounds,
        seeds=seeds,
        chunk_size=run["metadata"]["config"]["chunk_configs"],
        trajectories=config.trajectories,
        show_progress=False,
    )
    return plan.finish(results.to_dataset(outputs, plan.configs, seeds))


def _assert_band(band: xr.DataArray, samples: xr.DataArray, tolerance: float, name: str):
    """``band`` [config, stat, ...] against the mean and ddof-1 variance over seeds of
    ``samples`` [config, seed, ...] in float64, to ``tolerance`` of their largest magnitude."""
    samples = samples.astype(float)
    scale = float(abs(samples).max()) + 1e-30
    mean, var = band.sel(stat="mean"), band.sel(stat="var")
    want = samples.mean("seed").transpose(*mean.dims)
    np.testing.assert_allclose(mean, want, rtol=0, atol=tolerance * scale, err_msg=name)
    want = samples.var("seed", ddof=1).transpose(*var.dims)
    np.testing.assert_allclose(var, want, rtol=0, atol=4 * tolerance * scale**2, err_msg=name)


@pytest.mark.parametrize(
    ("which", "experiment"),
    [("ideal_run", CsUcbIdeal), ("fairness_run", CsUcbQFairness), ("grid_run", BetaRhoGrid)],
)
def test_device_reductions_equal_the_host_reference(which, experiment, request):
    """What the sweeps reduce on the device against the same runs' every output on the host:
    the per-run regrets, mean set reward and failed clients equal ``regret_metrics``' (float64)
    and the pseudo-regret a plain loop over the recorded selections and the float32 μ_k the runs
    held (where the runs record their selections); the gaps derived from them (``gap_metrics``)
    and the summary equal the host's; the
    bands of the figures' curves (``add_gap_bands``) and of Fig. 5's running selection fractions
    are the mean and variance over seeds of every run's (``add_gap_curves``,
    ``running_selection_fraction``). Tolerance: float32 rounding of each of T terms of at most 1
    in magnitude (failures are counts: exact)."""
    run = request.getfixturevalue(which)
    reduced, summary = run["ds"], run["summary"]
    ds = _every_run(run, experiment)
    rounds, tau_max = ds.sizes["round"], ds.attrs["tau_max"]
    tolerance = EPS * rounds
    np.testing.assert_array_equal(reduced["benchmark_reward"], ds["benchmark_reward"])
    bench = ds["benchmark_reward"].to_numpy()
    if "selected" in ds:
        mu = ds["mean_reward"].to_numpy().astype(np.float32).astype(float)
        expected = _pseudo_regret_numpy(ds["selected"].to_numpy(), mu, bench)  # [config, seed, T]
        np.testing.assert_allclose(ds["pseudo_regret_t"], expected, rtol=0, atol=1e-6 * rounds)
        np.testing.assert_allclose(reduced["pseudo_regret"], expected[..., -1], atol=tolerance)

    host = run_metrics(ds, regret_metrics)
    np.testing.assert_allclose(
        reduced["average_set_reward"], host["mean_set_reward"], rtol=0, atol=tolerance
    )
    for name in ("pseudo_regret", "realised_regret"):
        np.testing.assert_allclose(reduced[name], host[name], rtol=0, atol=tolerance, err_msg=name)
    np.testing.assert_array_equal(reduced["failed_clients"], host["failed_clients"])
    for name, gap in gap_metrics(reduced).items():
        atol = tau_max * tolerance
        np.testing.assert_allclose(gap, host[name], rtol=0, atol=atol, err_msg=name)
        np.testing.assert_allclose(summary[name], host[name].mean("seed"), rtol=0, atol=atol)

    curves, bands = add_gap_curves(ds), add_gap_bands(reduced)
    for _, (name, _) in regret_curves.GAP_CURVES.items():
        _assert_band(bands[f"{name}_band"], curves[name], tolerance, name)
    if experiment is CsUcbQFairness:
        fraction = running_selection_fraction(ds)
        _assert_band(reduced["selection_fraction_band"], fraction, tolerance, "fraction")

    # The host's curves among themselves: Θ(t)/t, the realised gap's first round, the counts.
    per_round = curves["cumulative_gap_t"] / curves["round"]
    np.testing.assert_allclose(
        curves["average_gap_t"], per_round.transpose(*curves["average_gap_t"].dims)
    )
    realised = performance_gap(ds, realised=True).isel(round=0)
    set_reward = ds["set_reward"].to_numpy().astype(float)
    np.testing.assert_allclose(realised, tau_max * (bench - set_reward[:, :, 0]), rtol=1e-6)
    np.testing.assert_array_equal(curves["failed_clients_t"].isel(round=-1), host["failed_clients"])


def test_reductions_do_not_depend_on_the_chunks(grid_run, tmp_path):
    """The grid in chunks of one configuration and with one more seed, keeping every run's
    rounds and selections too: the per-seed benchmark each run reads and every run's reduced
    regrets, reward and failures are the same bits for every shared run; μ(S(t)) and the
    selections are in results.nc beside them."""
    argv = ["--beta", "1e-3,0.1", "--rho", "0.5,1.2", "--trajectories", "--per-run-rounds"]
    argv += ["--chunk-size", "1", "--no-plots", "--rounds", str(ROUNDS), "--seeds", "3"]
    argv += ["--mc-samples", "2000", "--quiet", "--out", str(tmp_path / "o")]
    assert cli.main(BetaRhoGrid, argv, prog="p") == 0
    chunked = load_dataset(tmp_path / "o" / "results.nc")
    assert chunked["mean_set_reward"].dims == ("config", "seed", "round")
    assert chunked["selected"].dims == ("config", "seed", "round", "client")
    names = ["benchmark_reward", "average_set_reward", "pseudo_regret", "realised_regret"]
    for name in [*names, "failed_clients"]:
        np.testing.assert_array_equal(
            chunked[name].isel(seed=slice(0, 2)), grid_run["ds"][name], err_msg=name
        )


@pytest.fixture(scope="module")
def delay_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("delay") / "out"
    argv = ["--clients", "6", "--N", "2,1", "--rho", "0.2,0.6", "--policies", "cs_ucb_q,random"]
    argv += ["--rounds", str(ROUNDS), "--seeds", "2", "--quiet", "--out", str(out)]
    argv += ["--per-run-rounds"]  # every run's rounds too: the host's reference
    with record_figures() as figures:
        assert cli.main(CsUcbQDelay, argv, prog="prog") == 0
    return {
        "out": out,
        "figures": figures,
        "summary": pd.read_csv(out / "summary.csv"),
        "ds": load_dataset(out / "results.nc"),
        "metadata": json.loads((out / "metadata.json").read_text()),
    }


def test_delay_end_to_end(delay_run):
    """Fig. 7's sweep: CS-UCB-Q per (N, ρ) with c = ρ s/Σs, the baseline once per N with ρ
    empty and c = 0; delay = Σ_t round time per seed, averaged; the figure is written."""
    summary, ds = delay_run["summary"], delay_run["ds"]
    check_saved_figures(
        delay_run["out"] / "figures",
        delay_run["figures"],
        {
            "delay_vs_channels": {
                "title": f"Delay at T = {ROUNDS} vs channels N, K = 6 (Xia Fig. 7, τ_max = 0.5 s)",
                "xlabel": "N",
                "ylabel": "delay Σ_t round time (s)",
                "policies": ["cs_ucb_q", "cs_ucb_q", "random"],
            }
        },
    )
    assert delay_run["metadata"]["config"]["experiment"] == "cs_ucb_q_delay"
    assert delay_run["metadata"]["tau_max"] == pytest.approx(0.5)
    assert "not the paper's 5 s" in delay_run["metadata"]["tau_max_note"]
    rows = list(zip(summary["policy"], summary["N"], summary["rho"].fillna(-1), strict=True))
    assert rows == [
        ("cs_ucb_q", 1, 0.2), ("cs_ucb_q", 1, 0.6), ("random", 1, -1),
        ("cs_ucb_q", 2, 0.2), ("cs_ucb_q", 2, 0.6), ("random", 2, -1),
    ]  # fmt: skip
    assert np.isnan(summary.loc[summary["policy"] == "random", "beta"]).all()
    rho = np.nan_to_num(ds["rho"].to_numpy())
    np.testing.assert_allclose(ds["queue_rate"], np.repeat(rho[:, None] / 6, 6, axis=1))
    np.testing.assert_array_equal(ds["availability_prob"], 0.9)
    # Reduced on the device (float32 pairwise sums) against every run's rounds in float64.
    delay = ds["round_time"].to_numpy().astype(float).sum(axis=2)
    np.testing.assert_allclose(ds["delay"], delay, rtol=np.finfo(np.float32).eps * ROUNDS)
    np.testing.assert_allclose(summary["delay"], delay.mean(axis=1), rtol=1e-6)
    np.testing.assert_array_equal(ds["failed_clients"], ds["num_failed"].sum("round"))
    np.testing.assert_array_equal(ds["num_selected"] <= ds["N"], True)
    # The baseline ignores c: its rounds are those of any other ρ (common random numbers).
    assert {"delay_lo", "delay_hi", "failed_clients", "max_rate_violation"} <= set(summary)


def test_running_again_reuses_the_directory_and_other_settings_are_refused(fairness_run, capsys):
    """The same command (or --resume) recomputes nothing and reproduces the outputs; another β
    into the same --out exits 2 naming the difference."""
    out, argv = fairness_run["out"], fairness_run["argv"]
    written = (out / "results.nc").stat().st_mtime_ns
    assert not (out / "chunks").exists()  # all in results.nc
    for flags in ([], ["--resume"]):
        assert cli.main(CsUcbQFairness, [*argv, *flags, "--no-plots"], prog="prog") == 0
        assert (out / "results.nc").stat().st_mtime_ns == written  # nothing computed again
        pd.testing.assert_frame_equal(pd.read_csv(out / "summary.csv"), fairness_run["summary"])
        resumed = load_dataset(out / "results.nc")
        for name in ("pseudo_regret", "set_reward_band", "selection_fraction_band"):
            np.testing.assert_array_equal(resumed[name], fairness_run["ds"][name], err_msg=name)
        np.testing.assert_array_equal(
            resumed["benchmark_reward"], fairness_run["ds"]["benchmark_reward"]
        )
    capsys.readouterr()

    line = cli_fails(CsUcbQFairness, [*argv, "--beta", "0.5", "--no-plots"], capsys)
    assert f"--out {out} holds a sweep with other settings" in line
    assert "beta: was [0.001, 0.1], now [0.5]" in line
    assert (out / "results.nc").stat().st_mtime_ns == written
