"""The cocs_hfl experiment: flags, outputs, Oracle regret, traced scenarios and bool[N, M]
actions.

One tiny run of every policy over two budgets × two deadlines (a module fixture) is the golden
run (``tests/golden.py``) and serves every output check; bad flags stop before anything
compiles, so they are covered broadly.
"""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
import xarray as xr

from jfl import cli, driver
from jfl.envs.hfl import HflEnv, preset_params
from jfl.experiments.cocs import CocsHfl, attach_oracle, utility_metrics
from jfl.policies import Policy
from jfl.results import load_dataset, summarize
from jfl.runner import make_run
from jfl.trackers import fairness_queue
from tests.golden import assert_golden_summary, golden_argv
from tests.helpers import check_saved_figures, record_figures

TINY = dict(clients=8, servers=2, seeds=3, rounds=30, quiet=True)
TINY_ARGV = ["--clients", "8", "--servers", "2", "--seeds", "3", "--rounds", "30", "--quiet"]
M = 2  # servers in TINY


def _config(ds, **labels):
    """Index of the single configuration of ``ds`` with these coordinate values."""
    match = np.ones(ds.sizes["config"], bool)
    for name, value in labels.items():
        match &= ds[name].to_numpy() == value
    (index,) = np.flatnonzero(match)
    return int(index)


def _error(argv, capsys, tmp_path) -> str:
    """Run the command line expecting one error line and exit 2 before --out is created."""
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit:
        cli.main(CocsHfl, [*TINY_ARGV, *argv, "--out", str(out)], prog="cocs_hfl")
    err = capsys.readouterr().err
    assert exit.value.code == 2, err
    assert err.count("\n") == 1 and err.startswith("cocs_hfl: error: "), err
    assert not out.exists()
    return err


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--budget", "0"], "--budget must be in (0, inf), got [0.0]"),
        (["--budget", "-1"], "--budget must be in (0, inf)"),
        (["--budget", "2,0"], "--budget must be in (0, inf), got [0.0]"),
        (["--budget", "inf"], "--budget must be in (0, inf)"),
        (["--budget", "nan"], "--budget must be in (0, inf)"),
        (["--budget", "a,b"], "--budget"),
        (["--deadline", "0"], "--deadline must be in (0, inf)"),
        (["--deadline", "inf"], "--deadline must be in (0, inf)"),
        (["--h-T", "0"], "--h-T must be integers in [1, 10]"),
        (["--h-T", "11"], "--h-T must be integers in [1, 10]"),
        (["--h-T", "2.5"], "--h-T must be integers in [1, 10]"),
        (["--h-T", "inf"], "--h-T must be integers in [1, 10]"),
        (["--h-T", "nan"], "--h-T must be integers in [1, 10]"),
        (["--z", "0"], "z must be in (0, 1]"),
        (["--z", "1.5"], "z must be in (0, 1]"),
        (["--servers", "0"], "--servers must be an integer in [1, --clients=8], got 0"),
        (["--servers", "9"], "--servers must be an integer in [1, --clients=8], got 9"),
        (["--clients", "x"], "--clients"),
        (["--p-cover", "1.5"], "--p-cover must be in [0, 1]"),
        (["--preset", "imagenet"], "--preset"),
        (["--seeds", "0"], "--seeds must be an integer >= 1"),
        (["--policies", "cocs,magic"], "--policies: unknown policy 'magic'"),
        (["--policies", "cocs,cocs"], "--policies: duplicate names"),
        (["--resume", "--overwrite"], "--resume and --overwrite exclude each other"),
        (["--no-such-flag"], "--no-such-flag"),
    ],
)
def test_bad_flag_gives_one_line_and_exit_2(argv, message, capsys, tmp_path):
    """Each bad flag: exit status 2, one line naming it; --out is never created."""
    assert message in _error(argv, capsys, tmp_path)


@pytest.mark.parametrize(
    ("policy", "reads"),
    [("rbcsf", "['available']"), ("random", "['available']"), ("cs_ucb", "'reward'")],
)
def test_client_level_policy_is_refused_for_hfl(policy, reads, capsys, tmp_path):
    """Client-level policies are refused, naming the policy, the fields it reads and hfl."""
    err = _error(["--policies", f"oracle,{policy}"], capsys, tmp_path)
    assert f"--policies: policy {policy!r} reads" in err and reads in err and "'hfl'" in err


def test_preset_decides_the_utility_and_the_scenario():
    """mnist: eq. 8 and Table I's budget/deadline; cifar: eq. 19 (plan only, nothing runs)."""
    mnist = CocsHfl(**TINY).plan()
    assert mnist.metadata["utility"] == "eq. 8 (linear)"
    assert CocsHfl(**TINY).scenario() == {"budget": [3.5], "deadline": [3.0]}
    assert CocsHfl(preset="cifar", **TINY).plan().metadata["utility"] == "eq. 19 (square root)"
    assert CocsHfl(preset="cifar", **TINY).scenario() == {"budget": [40.0], "deadline": [20.0]}


# --------------------------------------------------------------------------- end to end


POLICIES = ["cocs", "oracle", "linucb", "cucb", "random_budget"]  # the golden run's


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The golden run (tests/golden.py): every policy over budgets {0.5, 4} × deadlines {2, 4},
    20 configurations; the run and the figures it saved."""
    out = tmp_path_factory.mktemp("cocs") / "run"
    config = cli.parse(CocsHfl, [*golden_argv("cocs_hfl"), "--quiet", "--out", str(out)])
    assert (config.clients, config.servers, config.seeds, config.rounds) == (8, M, 3, 30)
    assert list(config.policies) == POLICIES
    with record_figures() as figures:
        return driver.run(config), figures


@pytest.fixture(scope="module")
def tiny_run(tiny):
    return tiny[0]


def test_end_to_end_writes_summary_results_metadata_and_figures(tiny):
    """A tiny run writes summary.csv, results.nc, metadata.json and the utility figures."""
    tiny_run, figures = tiny
    out = tiny_run.out
    metadata = json.loads((out / "metadata.json").read_text())
    assert metadata["utility"] == "eq. 8 (linear)"
    assert metadata["config"]["experiment"] == "cocs_hfl"
    # The curves: every policy at one budget and deadline, named under the title (the preset's
    # 3.5 and 3 are not in the grid: its middle); the sweeps: every policy at every value.
    at = "budget = 0.5, deadline = 2 (the middle of the grid; the defaults are not in it)"
    at += "\n--plot-at budget=4 for another"
    curves = {"xlabel": "round", "policies": POLICIES}
    sweep = {"ylabel": "cumulative utility", "policies": [p for p in POLICIES for _ in range(2)]}
    check_saved_figures(
        out / "figures",
        figures,
        {
            "cumulative_utility": {
                "title": f"Cumulative utility (Qu Fig. 3a)\n{at}",
                "ylabel": "cumulative utility (eq. 8)",
                **curves,
            },
            "cumulative_utility_sqrt": {
                "title": f"Cumulative non-convex utility (Qu Fig. 7)\n{at}",
                "ylabel": "cumulative utility (eq. 19)",
                **curves,
            },
            "success_per_round": {
                "title": f"Successful clients per round (Qu Fig. 4b)\n{at}",
                "ylabel": "successful clients per round",
                **curves,
            },
            "regret": {
                "title": f"Cumulative regret against the Oracle (Qu Fig. 3b)\n{at}",
                "ylabel": "regret vs Oracle",
                "xlabel": "round",
                "policies": [p for p in POLICIES if p != "oracle"],
            },
            "utility_vs_budget": {
                "title": "Cumulative utility vs budget (Qu Fig. 4d)",
                "xlabel": "budget",
                **sweep,
            },
            "utility_vs_deadline": {
                "title": "Cumulative utility vs deadline (Qu Fig. 4f)",
                "xlabel": "deadline",
                **sweep,
            },
        },
    )
    ds = tiny_run.dataset
    first = (ds["budget"] == 0.5) & (ds["deadline"] == 2.0)
    lines = figures["cumulative_utility.png"].axes[0].get_lines()
    for line, policy in zip(lines, POLICIES, strict=True):  # means over seeds
        config = int(ds["config"][first & (ds["policy"] == policy)][0])
        want = ds["utility"].sel(config=config).cumsum("round").mean("seed")
        np.testing.assert_allclose(line.get_ydata(), want, rtol=1e-5)

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
    assert list(summary["policy"]) == [p for p in POLICIES for _ in range(4)]
    assert list(summary["budget"]) == [0.5, 0.5, 4.0, 4.0] * 5
    assert list(summary["deadline"]) == [2.0, 4.0] * 10
    assert (summary["n_seeds"] == 3).all()
    assert summary.loc[summary.policy != "cocs", ["h_T", "z"]].isna().all(axis=None)
    assert (summary.loc[summary.policy == "cocs", ["h_T", "z"]] == [5.0, 0.4]).all(axis=None)
    oracle = summary[summary.policy == "oracle"]
    for column in ("regret_vs_oracle", "regret_vs_oracle_lo", "regret_vs_oracle_hi"):
        assert (oracle[column] == 0.0).all()

    with xr.open_dataset(out / "results.nc", engine="h5netcdf") as ds:
        assert dict(ds.sizes) == {"config": 20, "seed": 3, "round": 30, "client": 8}
        assert {"utility", "num_success", "num_selected", "oracle_utility"} <= set(ds.data_vars)
        assert "queue_rate" not in ds.coords
        assert json.loads(ds.attrs["metadata"])["utility"] == "eq. 8 (linear)"


def test_reproduces_its_golden_run(tiny_run):
    """The tiny run is the golden run: its summary is the one stored before the refactor
    (tests/golden.py), bit for bit."""
    assert_golden_summary("cocs_hfl", pd.read_csv(tiny_run.out / "summary.csv"))


def test_oracle_utility_and_utility_metrics_recomputed_from_results(tiny_run):
    """oracle_utility is the Oracle's in-scenario utility; summary metrics match results.nc."""
    ds = load_dataset(tiny_run.out / "results.nc")
    summary = tiny_run.summary
    utility = ds["utility"].to_numpy().astype(np.float64)
    oracle_utility = ds["oracle_utility"].to_numpy().astype(np.float64)
    num_success = ds["num_success"].to_numpy()
    np.testing.assert_array_equal(ds["utility"].to_numpy(), num_success.astype(np.float32) / M)
    assert (num_success <= ds["num_selected"].to_numpy()).all()
    for c in range(ds.sizes["config"]):
        budget, deadline = float(ds["budget"][c]), float(ds["deadline"][c])
        o = _config(ds, policy="oracle", budget=budget, deadline=deadline)
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
    # The Oracle's utility differs between the scenarios: the match is per scenario.
    low, high = (_config(ds, policy="cocs", budget=b, deadline=4.0) for b in (0.5, 4.0))
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
    assert "oracle_utility" not in attach_oracle(ds.isel(config=[0, 1, 6]))
    with pytest.raises(ValueError, match="no oracle configuration shares the scenario"):
        attach_oracle(ds.isel(config=[1, 4]))


def test_summary_without_oracle_has_no_regret(tiny_run):
    """Regret needs the Oracle: without oracle_utility the summary has no regret columns."""
    ds = tiny_run.dataset.drop_vars("oracle_utility")
    summary = summarize(ds, metrics=utility_metrics)
    assert "cumulative_utility" in summary and "regret_vs_oracle" not in summary


# --------------------------------------------------------------------------- traced scenarios


def test_budget_and_deadline_are_traced_per_configuration(tiny_run, tmp_path):
    """In one grid the larger budget selects more; a configuration of COCS or the Oracle is
    bit-identical in another grid (other neighbours, another position)."""
    grid = tiny_run.dataset

    def oracle(budget, deadline, var):
        return grid[var][_config(grid, policy="oracle", budget=budget, deadline=deadline)]

    for deadline in (2.0, 4.0):
        small = oracle(0.5, deadline, "num_selected").mean()
        large = oracle(4.0, deadline, "num_selected").mean()
        assert small < large, (deadline, small, large)
    # Costs are at least 1 per client: a budget of 0.5 affords no one.
    assert (oracle(0.5, 4.0, "num_selected") == 0).all()
    # Same draws (common random numbers): the later deadline succeeds more often.
    assert oracle(4.0, 4.0, "num_success").sum() > oracle(4.0, 2.0, "num_success").sum()

    # Another grid of the same size (so the same compiled program) puts (4, 4) first, among
    # other neighbours; the runner's own tests cover a configuration alone.
    other_grid = dict(budget=(4.0, 9.0), deadline=(4.0, 1.0), plots=False, out=str(tmp_path / "o"))
    other_grid["policies"] = ("cocs", "oracle")
    other = driver.run(dataclasses.replace(tiny_run.experiment, **other_grid)).dataset
    assert set(other.data_vars) >= {"utility", "num_success", "num_selected", "selection_count"}
    for policy in ("cocs", "oracle"):
        at = dict(policy=policy, budget=4.0, deadline=4.0)
        first = int(np.flatnonzero(other["policy"].to_numpy() == policy)[0])
        assert _config(other, **at) == first  # in the tiny grid, the last of its policy
        a, g = other.isel(config=first), grid.isel(config=_config(grid, **at))
        for var in other.data_vars:
            np.testing.assert_array_equal(g[var].to_numpy(), a[var].to_numpy(), err_msg=var)


# --------------------------------------------------------------------------- runner on hfl


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

    queue = (fairness_queue(),)
    run = make_run(
        env, params, Policy(init, select, update), rounds, trajectories=True, trackers=queue
    )
    out = jax.jit(run)(jax.random.key(3), {"queue_rate": rate})
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
    for name in ("set_reward", "num_failed"):  # the wireless environment's, not hfl's
        with pytest.raises(AttributeError, match=f"no output '{name}'"):
            getattr(out, name)
