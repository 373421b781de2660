"""Wireless sweeps (CS-UCB / CS-UCB-Q): scenario vectors, benchmarks and the three scripts."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from jfl import regret
from jfl.envs import RbcsfEnv, WirelessEnv
from jfl.envs.wireless import make_params
from jfl.policies import get
from jfl.results import load_dataset, performance_gap, run_metrics, running_selection_fraction
from jfl.runner import seed_keys
from jfl.sweep import config_table, run_policy_grid
from jfl.wireless_sweep import (
    add_gap_curves,
    check_scenarios,
    parse_floats,
    scenario_vectors,
    seed_benchmarks,
    seed_layouts,
)
from tests.cli_helpers import load_script, run_cli

ideal = load_script("cs_ucb_ideal")
fairness = load_script("cs_ucb_q_fairness")
grid = load_script("beta_rho_grid")
SCRIPTS = {"ideal": ideal, "fairness": fairness, "grid": grid}

C_DEFAULT = np.array([0.6, 0.5, 0.4])
SAMPLES = np.array([1500.0, 1000.0, 500.0])


_run_cli = run_cli


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


def test_parse_floats_one_or_per_client():
    """One value is repeated for every client; otherwise exactly K values."""
    assert parse_floats("300", "distance", 3) == [300.0, 300.0, 300.0]
    assert parse_floats("1,2,3", "distance", 3) == [1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match=r"--distance: expected 1 or --clients=3 values, got 2"):
        parse_floats("1,2", "distance", 3)
    with pytest.raises(ValueError, match="--distance: expected comma-separated numbers"):
        parse_floats("1,x,3", "distance", 3)


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


# --------------------------------------------------------------------------- grids


def test_config_table_crosses_shared_scenario_axes_with_every_policy():
    """``shared`` axes (N, ρ) multiply every policy's rows and come before the swept columns."""
    table = config_table(
        ["cs_ucb_q", "modified_cs_ucb"], {"beta": [0.1, 0.2]}, shared={"N": [2, 3], "rho": [0.5]}
    )
    assert list(table.columns) == ["policy", "N", "rho", "beta", "queue_rate"]
    assert list(table["policy"]) == ["cs_ucb_q"] * 4 + ["modified_cs_ucb"] * 2
    assert list(table["N"]) == [2, 2, 3, 3, 2, 3]
    assert (table["rho"] == 0.5).all()
    assert table["beta"][:4].tolist() == [0.1, 0.2, 0.1, 0.2] and table["beta"][4:].isna().all()
    assert (table["queue_rate"] == 0.15).all()  # c is not swept: the fairness target


def test_run_policy_grid_checks_groups_and_per_config_rows_first():
    """Non-contiguous (policy, m) groups and per_config arrays of the wrong length are refused."""
    env = WirelessEnv()
    params = make_params(3)
    configs = pd.DataFrame({"policy": ["random"] * 3, "N": [1, 2, 1], "queue_rate": 0.0})
    common = dict(num_clients=3, m="N", num_rounds=5, seeds=[0], chunk_size=1)
    with pytest.raises(ValueError, match="contiguously"):
        run_policy_grid(env, params, configs, show_progress=False, **common)
    with pytest.raises(ValueError, match=r"per_config\['fairness'\] needs 3 rows"):
        run_policy_grid(env, params, configs, per_config={"fairness": np.zeros((2, 3))}, **common)
    configs = pd.DataFrame({"policy": ["rbcsf"], "N": [1], "queue_rate": 0.0})
    with pytest.raises(ValueError, match="'rbcsf' reads"):
        run_policy_grid(env, params, configs, show_progress=False, **common)


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

TINY = ["--seeds", "2", "--rounds", "10", "--mc-samples", "100", "--quiet", "--no-plots"]


@pytest.mark.parametrize(
    ("script", "argv", "expected"),
    [
        ("ideal", ["--N", "0"], "--N must be integers in [1, --clients=20]"),
        ("ideal", ["--N", "21"], "--N must be integers in [1, --clients=20], got 21"),
        ("ideal", ["--N", "2.5"], "--N must be integers in [1, --clients=20], got 2.5"),
        ("ideal", ["--N", "x"], "--N: expected"),
        ("ideal", ["--tau-max", "0"], "--tau-max must be > 0"),
        ("ideal", ["--seeds", "0"], "--seeds must be an integer >= 1"),
        ("ideal", ["--rounds", "0"], "--rounds must be an integer >= 1"),
        ("ideal", ["--clients", "0"], "--clients must be an integer >= 1"),
        ("ideal", ["--mc-samples", "0"], "--mc-samples must be an integer >= 1"),
        ("ideal", ["--policies", "cs_ucb,magic"], "unknown policy 'magic'"),
        ("ideal", ["--resume", "--overwrite"], "exclude each other"),
        ("fairness", ["--N", "0"], "--N must be in [1, --clients=3], got 0"),
        ("fairness", ["--N", "4"], "--N must be in [1, --clients=3], got 4"),
        ("fairness", ["--N", "2.5"], "--N: invalid int value"),
        ("fairness", ["--tau-max", "0"], "--tau-max must be > 0"),
        ("fairness", ["--tau-max", "-1"], "--tau-max must be > 0"),
        ("fairness", ["--seeds", "0"], "--seeds must be an integer >= 1"),
        ("fairness", ["--policies", "nope"], "unknown policy 'nope'"),
        ("fairness", ["--beta", "1.5"], "beta must be in [0.0, 1.0], got [1.5]"),
        ("fairness", ["--beta", "-0.1"], "beta must be in [0.0, 1.0]"),
        ("fairness", ["--fairness", "0.6,0.5"], "--fairness: expected 1 or --clients=3 values"),
        ("fairness", ["--fairness", "1.0,0.5,0.4"], "--fairness values c_k must be in [0, 1)"),
        ("fairness", ["--fairness", "0.9,0.9,0.5"], "fairness is infeasible: sum c = 2.3 > N = 2"),
        ("fairness", ["--fairness", "0.95,0.5,0.4"], "c_k > availability_k for client(s) {1}"),
        ("fairness", ["--availability", "1.2"], "--availability must be in [0, 1], got 1.2"),
        ("fairness", ["--availability", "-0.1"], "--availability must be in [0, 1]"),
        ("fairness", ["--distance", "-5"], "--distance must be > 0 m"),
        ("fairness", ["--distance", "300,0,300"], "--distance must be > 0 m"),
        ("fairness", ["--mc-samples", "0"], "--mc-samples must be an integer >= 1"),
        ("fairness", ["--resume", "--overwrite"], "exclude each other"),
        ("grid", ["--rho", "-1"], "--rho must be >= 0, got [-1.0]"),
        ("grid", ["--rho", "3"], "rho=3.0"),
        ("grid", ["--rho", "3"], "fairness c_k must be in [0, 1), got [1.5, 1.0, 0.5]"),
        ("grid", ["--rho", "0.5,1.9"], "rho=1.9"),
        ("grid", ["--rho", "1.9"], "infeasible: c_k > availability_k for client(s) {1}"),
        ("grid", ["--rho", "1.5", "--availability", "0.7"], "infeasible"),
        ("grid", ["--beta", "1.5"], "beta must be in [0.0, 1.0]"),
        ("grid", ["--samples", "1,2"], "--samples: expected 1 or --clients=3 values, got 2"),
        ("grid", ["--samples", "0"], "--samples must be > 0"),
        ("grid", ["--N", "0"], "--N must be in [1, --clients=3]"),
        ("grid", ["--availability", "1.2"], "--availability must be in [0, 1]"),
        ("grid", ["--distance", "-5"], "--distance must be > 0 m"),
        ("grid", ["--tau-max", "0"], "--tau-max must be > 0"),
        ("grid", ["--mc-samples", "0"], "--mc-samples must be an integer >= 1"),
        ("grid", ["--seeds", "0"], "--seeds must be an integer >= 1"),
        ("grid", ["--resume", "--overwrite"], "exclude each other"),
    ],
)
def test_bad_input_fails_early_with_a_clear_message(script, argv, expected, capsys, tmp_path):
    """Each bad flag exits with status 2 and a message naming it; nothing is written."""
    out = tmp_path / "out"
    code, err = _run_cli(SCRIPTS[script], [*TINY, *argv, "--out", str(out)], capsys)
    assert code == 2
    assert expected in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("policies", "message"),
    [
        ("rbcsf", "policy 'rbcsf' reads ['context'], which environment 'wireless' does not"),
        ("random,fedcs", "policy 'fedcs' reads ['expected_time'], which environment 'wireless'"),
    ],
)
def test_ideal_script_refuses_policies_the_environment_cannot_serve(
    policies, message, capsys, tmp_path
):
    """A policy that needs RBCS-F's context exits with status 2 naming it and the field."""
    out = tmp_path / "out"
    code, err = _run_cli(ideal, [*TINY, "--policies", policies, "--out", str(out)], capsys)
    assert code == 2
    assert message in err


def test_ideal_script_refuses_incompatible_policies_before_any_run(capsys, tmp_path):
    """The compatibility error comes before --out is written or any chunk is computed."""
    out = tmp_path / "out"
    code, err = _run_cli(ideal, [*TINY, "--policies", "cs_ucb,rbcsf", "--out", str(out)], capsys)
    assert code == 2 and "'rbcsf'" in err
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
    "mean_set_reward",
    "regret",
]


def _run_script(script, argv, out):
    assert script.main([*argv, "--out", str(out)]) == 0
    return {
        "out": out,
        "argv": argv,
        "summary": pd.read_csv(out / "summary.csv"),
        "ds": load_dataset(out / "results.nc"),
        "metadata": json.loads((out / "metadata.json").read_text()),
    }


@pytest.fixture(scope="module")
def ideal_run(tmp_path_factory):
    argv = [
        "--clients", "6", "--N", "2,3", "--policies", "cs_ucb,random", "--seeds", "2",
        "--rounds", "60", "--mc-samples", "2000", "--quiet",
    ]  # fmt: skip
    return _run_script(ideal, argv, tmp_path_factory.mktemp("ideal") / "out")


@pytest.fixture(scope="module")
def fairness_run(tmp_path_factory):
    argv = [
        "--beta", "1e-3,0.1", "--seeds", "2", "--rounds", "80", "--mc-samples", "2000", "--quiet",
    ]  # fmt: skip
    return _run_script(fairness, argv, tmp_path_factory.mktemp("fairness") / "out")


@pytest.fixture(scope="module")
def grid_run(tmp_path_factory):
    argv = [
        "--beta", "1e-3,0.1", "--rho", "0.5,1.2", "--seeds", "2", "--rounds", "60",
        "--mc-samples", "2000", "--quiet",
    ]  # fmt: skip
    return _run_script(grid, argv, tmp_path_factory.mktemp("grid") / "out")


def _check_common_outputs(run, figures, tau_max, benchmark_word):
    out = run["out"]
    for name in ("summary.csv", "results.nc", "metadata.json"):
        assert (out / name).stat().st_size > 0, name
    for name in figures:
        assert (out / "figures" / f"{name}.png").stat().st_size > 1000, name
    metadata = run["metadata"]
    assert {"benchmark", "tau_max", "config", "versions", "git_commit"} <= set(metadata)
    assert metadata["tau_max"] == tau_max
    assert benchmark_word in metadata["benchmark"]
    summary = run["summary"]
    assert set(REGRET_COLUMNS) <= set(summary.columns)
    assert (summary["n_seeds"] == 2).all()
    ds = run["ds"]
    assert ds.attrs["tau_max"] == tau_max
    assert ds["benchmark_reward"].dims == ("config", "seed")
    assert ds["rate_target"].dims == ("config", "client")
    assert ds["mean_reward"].dims == ("seed", "client")
    assert list(ds["policy"].to_numpy()) == list(summary["policy"])


def test_ideal_end_to_end(ideal_run):
    """N = 2, 3 × two policies: files, figures, rows per N and μ(S*) as the benchmark."""
    _check_common_outputs(
        ideal_run,
        ["cumulative_gap_vs_round", "average_gap_vs_round", "failed_clients_vs_round",
         "gap_vs_channels"],
        tau_max=5.0,
        benchmark_word="mu(S*)",
    )  # fmt: skip
    summary, ds = ideal_run["summary"], ideal_run["ds"]
    pairs = sorted(zip(summary["policy"], summary["N"], strict=True))
    assert pairs == [("cs_ucb", 2), ("cs_ucb", 3), ("random", 2), ("random", 3)]
    assert dict(ds.sizes) == {"config": 4, "seed": 2, "round": 60, "client": 6}
    np.testing.assert_array_equal(ds["rate_target"], 0.0)
    np.testing.assert_array_equal(ds["availability_prob"], 1.0)
    mu = ds["mean_reward"].to_numpy()
    assert len(np.unique(mu, axis=0)) == 2  # a fresh layout per seed
    for config in range(4):
        n = int(ds["N"][config])
        np.testing.assert_array_equal((ds["num_selected"][config] == n), True)
        nth_largest = -np.sort(-mu, axis=1)[:, n - 1]
        np.testing.assert_array_equal(ds["benchmark_reward"][config], nth_largest)
    # Always available and c = 0: every target is met from the first round.
    assert (summary["target_met"] == 1).all() and (summary["rounds_to_target"] == 1).all()


def test_fairness_end_to_end(fairness_run):
    """The Fig. 4–5 sweep: c per config, r* of the LP, trajectories and selection fractions."""
    _check_common_outputs(
        fairness_run,
        ["cumulative_gap_vs_round", "average_gap_vs_round", "selection_fraction"],
        tau_max=0.2,
        benchmark_word="linear program (23)",
    )
    summary, ds = fairness_run["summary"], fairness_run["ds"]
    assert {"beta", "N"} <= set(summary.columns)
    assert list(summary["policy"]) == ["cs_ucb_q", "cs_ucb_q", "modified_cs_ucb"]
    np.testing.assert_allclose(summary["beta"][:2], [1e-3, 0.1])
    assert np.isnan(summary["beta"][2])
    assert dict(ds.sizes) == {"config": 3, "seed": 2, "round": 80, "client": 3}
    np.testing.assert_array_equal(ds["rate_target"], np.tile(C_DEFAULT, (3, 1)))
    np.testing.assert_array_equal(ds["availability_prob"], 0.9)
    mu = ds["mean_reward"].to_numpy()
    assert (mu == mu[0]).all()  # explicit equal distances: one layout for every seed
    r_star = regret.availability_lp(mu[0], np.full(3, 0.9), C_DEFAULT, 2).r_star
    np.testing.assert_allclose(ds["benchmark_reward"], r_star, rtol=0, atol=1e-12)
    # Every policy's queue is measured against c: the final queue is the eq. (6) backlog.
    selected = ds["selected"].to_numpy()
    np.testing.assert_array_equal(selected.sum(axis=2), ds["selection_count"])
    fraction = running_selection_fraction(ds)
    np.testing.assert_allclose(fraction.isel(round=-1), ds["selection_count"] / 80)
    np.testing.assert_allclose(fraction.isel(round=0), selected[:, :, 0, :])


def test_beta_rho_grid_end_to_end(grid_run):
    """β × ρ grid: c = ρ s/Σs per configuration, heatmaps, rho and beta columns."""
    _check_common_outputs(
        grid_run,
        [f"heatmap_cs_ucb_q_{m}" for m in ("average_gap", "max_rate_violation",
                                          "rounds_to_target")],
        tau_max=0.2,
        benchmark_word="linear program (23)",
    )  # fmt: skip
    summary, ds = grid_run["summary"], grid_run["ds"]
    assert {"rho", "beta"} <= set(summary.columns)
    assert sorted(zip(summary["rho"], summary["beta"], strict=True)) == [
        (0.5, 1e-3), (0.5, 0.1), (1.2, 1e-3), (1.2, 0.1),
    ]  # fmt: skip
    rho = ds["rho"].to_numpy()
    np.testing.assert_allclose(ds["rate_target"], rho[:, None] * SAMPLES / SAMPLES.sum())
    mu = ds["mean_reward"].to_numpy()[0]
    for config in range(4):
        c = ds["rate_target"][config].to_numpy()
        r_star = regret.availability_lp(mu, np.full(3, 0.9), c, 2).r_star
        np.testing.assert_allclose(ds["benchmark_reward"][config], r_star, atol=1e-12)
    # A tighter fairness constraint cannot raise the optimum of the LP.
    low, high = ds["benchmark_reward"].to_numpy()[rho == 0.5], ds["benchmark_reward"][rho == 1.2]
    assert low.min() >= float(high.max()) - 1e-12


@pytest.mark.parametrize("which", ["ideal_run", "fairness_run", "grid_run"])
def test_gap_metrics_recomputed_from_results(which, request):
    """Summary gap = τ_max·(T·benchmark − Σ set_reward), averaged over seeds; curves agree."""
    run = request.getfixturevalue(which)
    ds, summary = run["ds"], run["summary"]
    tau_max = ds.attrs["tau_max"]
    rounds = ds.sizes["round"]
    set_reward = ds["set_reward"].to_numpy().astype(float)
    bench = ds["benchmark_reward"].to_numpy()
    gap = tau_max * (rounds * bench - set_reward.sum(axis=2))  # [config, seed]
    np.testing.assert_allclose(summary["cumulative_gap"], gap.mean(axis=1), rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(summary["average_gap"], gap.mean(axis=1) / rounds, rtol=1e-5)
    np.testing.assert_allclose(summary["regret"], gap.mean(axis=1) / tau_max, rtol=1e-5)
    failed = ds["num_failed"].to_numpy().sum(axis=2).mean(axis=1)
    np.testing.assert_allclose(summary["failed_clients"], failed)
    np.testing.assert_allclose(summary["mean_set_reward"], set_reward.mean(axis=(1, 2)), rtol=1e-6)

    metrics = run_metrics(ds)
    curve = performance_gap(ds).transpose("config", "seed", "round")
    # The curve is a float32 running sum, the metric a float32 pairwise sum: equal up to the
    # rounding of a sum of T rewards of at most 1.
    tolerance = 1e-6 * tau_max * rounds
    np.testing.assert_allclose(
        curve.isel(round=-1), metrics["cumulative_gap"], rtol=0, atol=tolerance
    )
    np.testing.assert_allclose(curve.isel(round=0), tau_max * (bench - set_reward[:, :, 0]))
    curves = add_gap_curves(ds)
    np.testing.assert_allclose(
        curves["average_gap_t"].isel(round=-1), metrics["average_gap"], atol=tolerance / rounds
    )
    per_round = curves["cumulative_gap_t"] / curves["round"]
    np.testing.assert_allclose(
        curves["average_gap_t"], per_round.transpose(*curves["average_gap_t"].dims)
    )
    np.testing.assert_array_equal(
        curves["failed_clients_t"].isel(round=-1), metrics["failed_clients"]
    )
    # Rows of the summary are labelled like the dataset's configurations.
    assert list(summary["policy"]) == list(ds["policy"].to_numpy())


def test_fairness_resume_reproduces_the_summary(fairness_run, capsys):
    """--resume over a finished sweep recomputes nothing; without it the directory is refused."""
    out, argv = fairness_run["out"], fairness_run["argv"]
    chunk = next((out / "chunks").rglob("*.npz"))
    before = chunk.stat().st_mtime_ns
    assert fairness.main([*argv, "--out", str(out), "--resume", "--no-plots"]) == 0
    assert chunk.stat().st_mtime_ns == before
    pd.testing.assert_frame_equal(pd.read_csv(out / "summary.csv"), fairness_run["summary"])
    resumed = load_dataset(out / "results.nc")
    np.testing.assert_array_equal(resumed["set_reward"], fairness_run["ds"]["set_reward"])
    np.testing.assert_array_equal(resumed["selected"], fairness_run["ds"]["selected"])
    capsys.readouterr()

    code, err = _run_cli(fairness, [*argv, "--out", str(out), "--no-plots"], capsys)
    assert code == 2 and "already holds a sweep" in err
    code, err = _run_cli(fairness, [*argv, "--beta", "0.5", "--out", str(out), "--resume"], capsys)
    assert code == 2 and "--resume: the settings differ" in err
