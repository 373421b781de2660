"""The cocs_hfl sweep: flags, outputs, Oracle regret, traced scenarios and bool[N, M] actions."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
import xarray as xr

from jfl.envs.hfl import HflEnv, preset_params
from jfl.policies import Policy
from jfl.results import attach_oracle, load_dataset, summarize
from jfl.runner import make_run
from tests.cli_helpers import load_script, run_cli

cli = load_script("cocs_hfl")

TINY = ["--clients", "8", "--servers", "2", "--seeds", "3", "--rounds", "30", "--quiet"]
M = 2  # --servers in TINY


def _run_cli(argv, capsys):
    return run_cli(cli, argv, capsys)


def _config(ds, **labels):
    """Index of the single configuration of ``ds`` with these coordinate values."""
    match = np.ones(ds.sizes["config"], bool)
    for name, value in labels.items():
        match &= ds[name].to_numpy() == value
    (index,) = np.flatnonzero(match)
    return int(index)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--budget", "0"], "--budget must be finite and > 0"),
        (["--budget", "-1"], "--budget must be finite and > 0"),
        (["--budget", "2,0"], "--budget must be finite and > 0"),
        (["--deadline", "0"], "--deadline must be finite and > 0"),
        (["--h-T", "0"], "--h-T must be integers in [1, 10]"),
        (["--h-T", "11"], "--h-T must be integers in [1, 10]"),
        (["--h-T", "2.5"], "--h-T must be integers in [1, 10]"),
        (["--z", "0"], "z must be in (0.0, 1.0]"),
        (["--z", "1.5"], "z must be in (0.0, 1.0]"),
        (["--servers", "0"], "--servers must be in [1, --clients=8]"),
        (["--servers", "9"], "--servers must be in [1, --clients=8]"),
        (["--p-cover", "1.5"], "--p-cover must be in [0, 1]"),
        (["--seeds", "0"], "--seeds must be an integer >= 1"),
        (["--policies", "cocs,magic"], "unknown policy 'magic'"),
        (["--resume", "--overwrite"], "exclude each other"),
    ],
)
def test_bad_flag_exits_2_naming_it_before_writing(argv, message, capsys, tmp_path):
    """Each bad flag exits with status 2 and a message naming it; --out is never created."""
    out = tmp_path / "out"
    code, err = _run_cli([*TINY, *argv, "--out", str(out)], capsys)
    assert code == 2
    assert message in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--h-T", "inf"], "--h-T"),  # OverflowError from int(inf): a traceback, exit status 1
        (["--h-T", "nan"], "--h-T"),  # "cannot convert float NaN to integer", no flag named
        (["--budget", "inf"], "--budget"),  # accepted; make_params would refuse budget=inf
        (["--deadline", "inf"], "--deadline"),  # accepted; make_params would refuse deadline=inf
    ],
)
def test_non_finite_scenario_values_are_refused(argv, flag):
    """Non-finite --h-T, --budget and --deadline raise a ValueError naming the flag."""
    args = cli.build_parser().parse_args([*TINY, *argv])
    with pytest.raises(ValueError, match=flag):
        cli.check_args(args)


@pytest.mark.parametrize(
    ("policy", "reads"),
    [("rbcsf", "['available']"), ("random", "['available']"), ("cs_ucb", "'reward'")],
)
def test_client_level_policy_is_refused_for_hfl(policy, reads, capsys, tmp_path):
    """Client-level policies are refused, naming the policy, the fields it reads and hfl."""
    out = tmp_path / "out"
    code, err = _run_cli([*TINY, "--policies", f"oracle,{policy}", "--out", str(out)], capsys)
    assert code == 2
    assert f"policy {policy!r} reads" in err and reads in err and "'hfl'" in err
    assert not out.exists()


# --------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One small Oracle/COCS run over two budgets (shared by the output checks)."""
    out = tmp_path_factory.mktemp("cocs") / "run"
    argv = [*TINY, "--policies", "cocs,oracle", "--budget", "2,4", "--out", str(out)]
    assert cli.main(argv) == 0
    return argv, out


def test_end_to_end_writes_summary_results_metadata_and_figures(tiny_run):
    """A tiny run writes summary.csv, results.nc, metadata.json and the utility figures."""
    _, out = tiny_run
    for name in ("summary.csv", "results.nc", "metadata.json"):
        assert (out / name).is_file()
    metadata = json.loads((out / "metadata.json").read_text())
    assert metadata["utility"] == "eq. 8 (linear)"
    assert metadata["config"]["environment"] == "hfl"
    for name in (
        "cumulative_utility",
        "cumulative_utility_sqrt",
        "regret",
        "success_per_round",
        "utility_vs_budget",
    ):
        assert (out / "figures" / f"{name}.png").stat().st_size > 1000

    summary = pd.read_csv(out / "summary.csv")
    required = ["policy", "budget", "deadline", "h_T", "z", "n_seeds"]
    for metric in (
        "cumulative_utility",
        "cumulative_utility_sqrt",
        "success_per_round",
        "regret_vs_oracle",
    ):
        required += [metric, f"{metric}_lo", f"{metric}_hi"]
    assert set(required) <= set(summary.columns)
    assert list(summary["policy"]) == ["cocs"] * 2 + ["oracle"] * 2
    assert list(summary["budget"]) == [2.0, 4.0] * 2
    assert (summary["deadline"] == 3.0).all() and (summary["n_seeds"] == 3).all()
    assert summary.loc[summary.policy != "cocs", ["h_T", "z"]].isna().all(axis=None)
    assert (summary.loc[summary.policy == "cocs", ["h_T", "z"]] == [5.0, 0.4]).all(axis=None)
    oracle = summary[summary.policy == "oracle"]
    for column in ("regret_vs_oracle", "regret_vs_oracle_lo", "regret_vs_oracle_hi"):
        assert (oracle[column] == 0.0).all()

    with xr.open_dataset(out / "results.nc", engine="h5netcdf") as ds:
        assert dict(ds.sizes) == {"config": 4, "seed": 3, "round": 30, "client": 8}
        assert {"utility", "num_success", "num_selected", "oracle_utility"} <= set(ds.data_vars)
        assert json.loads(ds.attrs["metadata"])["utility"] == "eq. 8 (linear)"


def test_oracle_utility_and_utility_metrics_recomputed_from_results(tiny_run):
    """oracle_utility is the Oracle's in-scenario utility; summary metrics match results.nc."""
    _, out = tiny_run
    ds = load_dataset(out / "results.nc")
    summary = pd.read_csv(out / "summary.csv")
    utility = ds["utility"].to_numpy().astype(np.float64)
    oracle_utility = ds["oracle_utility"].to_numpy().astype(np.float64)
    num_success = ds["num_success"].to_numpy()
    np.testing.assert_array_equal(ds["utility"].to_numpy(), num_success.astype(np.float32) / M)
    assert (num_success <= ds["num_selected"].to_numpy()).all()
    for c in range(ds.sizes["config"]):
        budget = float(ds["budget"][c])
        o = _config(ds, policy="oracle", budget=budget, deadline=float(ds["deadline"][c]))
        np.testing.assert_array_equal(oracle_utility[c], utility[o])
        row = summary.iloc[c]
        assert (row["policy"], row["budget"]) == (str(ds["policy"][c].item()), budget)
        for metric, per_seed in (
            ("cumulative_utility", utility[c].sum(-1)),
            ("cumulative_utility_sqrt", np.sqrt(utility[c]).sum(-1)),
            ("success_per_round", num_success[c].mean(-1)),
            ("regret_vs_oracle", (oracle_utility[c] - utility[c]).sum(-1)),
        ):
            np.testing.assert_allclose(row[metric], per_seed.mean(), rtol=1e-12, err_msg=metric)
    # The Oracle's utility differs between the budgets: the match is per budget, not any Oracle.
    low, high = (_config(ds, policy="cocs", budget=b) for b in (2.0, 4.0))
    assert oracle_utility[low].sum() < oracle_utility[high].sum()


def test_attach_oracle_matches_budget_and_deadline_by_hand():
    """Each config gets the Oracle row with its (budget, deadline); no Oracle, no oracle_utility."""
    policy = ["cocs", "cocs", "cocs", "oracle", "oracle", "oracle", "cucb"]
    budget = [1.0, 2.0, 2.0, 2.0, 1.0, 2.0, 1.0]
    deadline = [3.0, 3.0, 5.0, 5.0, 3.0, 3.0, 3.0]
    utility = np.arange(7 * 2 * 4, dtype=np.float32).reshape(7, 2, 4)
    ds = xr.Dataset(
        {"utility": (("config", "seed", "round"), utility)},
        coords={
            "config": np.arange(7),
            "seed": [0, 1],
            "round": np.arange(1, 5),
            "policy": ("config", np.array(policy)),
            "budget": ("config", budget),
            "deadline": ("config", deadline),
        },
    )
    oracle_row = [4, 5, 3, 3, 4, 5, 4]  # by hand
    attached = attach_oracle(ds)
    assert attached["oracle_utility"].dims == ("config", "seed", "round")
    np.testing.assert_array_equal(attached["oracle_utility"].to_numpy(), utility[oracle_row])
    np.testing.assert_array_equal(attached["utility"].to_numpy(), utility)
    without = ds.isel(config=[0, 1, 6])
    assert "oracle_utility" not in attach_oracle(without)


def test_summary_without_oracle_has_no_regret(tiny_run):
    """Regret needs the Oracle: without oracle_utility the summary has no regret columns."""
    _, out = tiny_run
    ds = load_dataset(out / "results.nc").drop_vars("oracle_utility")
    summary = summarize(ds)
    assert "cumulative_utility" in summary and "regret_vs_oracle" not in summary


def test_resume_reproduces_the_summary_and_rerun_needs_a_flag(tiny_run, capsys):
    """--resume over a finished run rewrites the same summary.csv; a bare re-run exits 2."""
    argv, out = tiny_run
    before = (out / "summary.csv").read_bytes()
    chunk = next((out / "chunks" / "cocs").glob("*.npz"))
    mtime = chunk.stat().st_mtime_ns
    assert cli.main([*argv, "--resume", "--no-plots"]) == 0
    assert (out / "summary.csv").read_bytes() == before
    assert chunk.stat().st_mtime_ns == mtime  # nothing recomputed
    capsys.readouterr()
    code, err = _run_cli(argv, capsys)
    assert code == 2 and "already holds a sweep" in err
    assert (out / "summary.csv").read_bytes() == before


# --------------------------------------------------------------------------- traced scenarios


def test_budget_and_deadline_are_traced_per_configuration(tmp_path):
    """In one grid the larger budget selects more; a config is bit-identical alone or in a grid."""
    common = [*TINY, "--policies", "oracle", "--no-plots"]
    grid_out, alone_out = tmp_path / "grid", tmp_path / "alone"
    argv = [*common, "--budget", "0.5,10", "--deadline", "2,4", "--out", str(grid_out)]
    assert cli.main(argv) == 0
    argv = [*common, "--budget", "10", "--deadline", "4", "--out", str(alone_out)]
    assert cli.main(argv) == 0
    grid, alone = load_dataset(grid_out / "results.nc"), load_dataset(alone_out / "results.nc")
    assert grid.sizes["config"] == 4 and alone.sizes["config"] == 1

    def oracle(budget, deadline, var):
        return grid[var][_config(grid, policy="oracle", budget=budget, deadline=deadline)]

    for deadline in (2.0, 4.0):
        small = oracle(0.5, deadline, "num_selected").mean()
        large = oracle(10.0, deadline, "num_selected").mean()
        assert small < large, (deadline, small, large)
    # Costs are at least 1 per client: a budget of 0.5 affords no one.
    assert (oracle(0.5, 4.0, "num_selected") == 0).all()
    # Same draws (common random numbers): the later deadline succeeds more often.
    assert oracle(10.0, 4.0, "num_success").sum() > oracle(10.0, 2.0, "num_success").sum()

    a = alone.isel(config=0)
    g = grid.isel(config=_config(grid, policy="oracle", budget=10.0, deadline=4.0))
    assert set(alone.data_vars) >= {"utility", "num_success", "num_selected", "selection_count"}
    for var in alone.data_vars:
        np.testing.assert_array_equal(g[var].to_numpy(), a[var].to_numpy(), err_msg=var)


# --------------------------------------------------------------------------- runner


def test_runner_reduces_client_to_server_actions_over_servers():
    """bool[N, M] actions: selected = any over ES; counts, queues and utility follow from it."""
    n, m, rounds, rate = 8, 3, 12, 0.3
    env = HflEnv()
    params = preset_params("mnist", num_clients=n, num_servers=m, p_cover=0.6)
    home = jnp.arange(n)[:, None] % m == jnp.arange(m)  # client n on ES n % M
    recorded = {}

    def record(t, action):
        recorded[int(t)] = np.asarray(action)

    def init(key, hparams):
        return jnp.asarray(0, jnp.int32)

    def select(key, state, obs, hparams):
        action = home & obs.available
        jax.debug.callback(record, state, action)
        return action

    def update(state, obs, action, feedback, hparams):
        return state + 1

    run = jax.jit(make_run(env, params, Policy(init, select, update), rounds, trajectories=True))
    out = run(jax.random.key(3), {}, rate)
    jax.effects_barrier()
    assert sorted(recorded) == list(range(rounds))
    action = np.stack([recorded[t] for t in range(rounds)])  # [T, N, M]
    assert action.shape == (rounds, n, m) and 0 < action.sum() < rounds * n  # coverage varies
    assert (action.sum(-1) <= 1).all()

    selected = np.asarray(out.selected)
    assert selected.shape == (rounds, n) and selected.dtype == bool
    np.testing.assert_array_equal(selected, action.any(-1))
    np.testing.assert_array_equal(out.num_selected, selected.sum(1))
    np.testing.assert_array_equal(out.selection_count, selected.sum(0))
    queue = np.zeros(n, np.float32)
    for t in range(rounds):
        queue = np.maximum(queue + np.float32(rate) - selected[t], 0.0)
        np.testing.assert_allclose(out.queue[t], queue, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(out.final_queue, out.queue[-1])
    num_success = np.asarray(out.num_success)
    assert num_success.shape == (rounds,) and (num_success <= out.num_selected).all()
    assert num_success.sum() > 0
    # XLA divides by the constant M as a multiplication by 1/M: equal within an ulp.
    np.testing.assert_allclose(out.utility, num_success / m, rtol=2e-7)
    assert out.set_reward is None and out.num_failed is None
