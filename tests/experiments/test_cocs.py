"""The cocs_hfl experiment: flags, outputs, Oracle regret, traced scenarios and bool[N, M]
actions.

One tiny run of every policy over two budgets × two deadlines (a module fixture) is the golden
run (``tests/golden.py``), reduced on the device, and serves every output check; the same plan's
every run's rounds (the same compiled runs, from the persistent compilation cache) are the host
reference of its metrics, curves and regrets. Bad flags stop before anything compiles, so they
are covered broadly.
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
from scipy import stats as sps

from jfl import cli, driver, sweep
from jfl.envs.hfl import HflEnv, preset_params
from jfl.experiments.cocs import (
    REGRET_REDUCTIONS,
    UTILITY_REDUCTIONS,
    CocsHfl,
    attach_oracle,
    oracle_regret,
    oracle_rows,
    utility_metrics,
)
from jfl.policies import Policy
from jfl.reduction import REFERENCE, Reductions, make_reducer
from jfl.results import load_dataset, summarize
from jfl.runner import make_run
from jfl.stats import stats_ci
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
    # The oracle, among the policies, is the reference of the running regret; else neither.
    assert list(mnist.reference.rows) == [1] * 5 and mnist.reference.outputs == ("utility",)
    assert "regret_cumsum" in mnist.reductions.curves
    alone = CocsHfl(policies=("cocs", "linucb"), **TINY).plan()
    assert alone.reference is None and alone.reductions == UTILITY_REDUCTIONS


# --------------------------------------------------------------------------- end to end


POLICIES = ["cocs", "oracle", "linucb", "cucb", "random_budget"]  # the golden run's


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The golden run (tests/golden.py): every policy over budgets {0.5, 4} × deadlines {2, 4},
    20 configurations, reduced on the device and with every run's rounds in results.nc
    (``--per-run-rounds``: the same summary); the run and the figures it saved."""
    out = tmp_path_factory.mktemp("cocs") / "run"
    argv = [*golden_argv("cocs_hfl"), "--per-run-rounds", "--quiet", "--out", str(out)]
    config = cli.parse(CocsHfl, argv)
    assert (config.clients, config.servers, config.seeds, config.rounds) == (8, M, 3, 30)
    assert list(config.policies) == POLICIES
    with record_figures() as figures:
        return driver.run(config), figures


@pytest.fixture(scope="module")
def tiny_run(tiny):
    return tiny[0]


@pytest.fixture(scope="module")
def every_run(tiny_run):
    """Every run's rounds of the golden run, the host reference of its reductions: the runs'
    own outputs, which ``--per-run-rounds`` streamed into results.nc (running the plan again
    with ``jfl.sweep.run_policy_grid`` would give the same arrays and trace COCS's programs
    again), with the Oracle attached (``attach_oracle``)."""
    return attach_oracle(load_dataset(tiny_run.out / "results.nc"))


def _pairwise_tolerance(values: np.ndarray) -> np.ndarray:
    """A bound on the error of a float32 pairwise sum of ``values`` [..., n] against the exact
    sum: ⌈log₂ n⌉ roundings of partial sums no larger than Σ|x|, each within eps/2 relative,
    plus the float32 rounding of each term (a square root)."""
    n = values.shape[-1]
    eps = np.finfo(np.float32).eps
    return (np.ceil(np.log2(n)) + 1) * eps * np.abs(values).sum(-1)


def test_end_to_end_writes_summary_results_metadata_and_figures(tiny, every_run):
    """A tiny run writes summary.csv, results.nc (reduced: no run's rounds), metadata.json and
    the utility figures."""
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
    ds = every_run
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

    # Reduced on the device: in memory the per-run metrics and the bands, no run's rounds.
    assert metadata["outputs"] == "reduced on the device"
    check_reduced(tiny_run.dataset)
    with xr.open_dataset(out / "results.nc", engine="h5netcdf") as ds:
        assert dict(ds.sizes) == {"config": 20, "seed": 3, "round": 30, "client": 8, "stat": 2}
        check_reduced(ds, per_run=metadata["per_run_outputs"])
        assert {"utility", "num_success", "num_selected"} <= set(metadata["per_run_outputs"])
        assert "queue_rate" not in ds.coords
        assert json.loads(ds.attrs["metadata"])["utility"] == "eq. 8 (linear)"


def check_reduced(ds, per_run=()) -> None:
    """``ds`` holds what a reduced cocs_hfl sweep keeps: per-run metrics, regrets included, and
    the bands of the utility, its running sums, the running regret and the successes; no run's
    rounds but those in ``per_run``, and no Oracle's rounds beside them."""
    metrics = {*UTILITY_REDUCTIONS.metrics, "regret_vs_oracle", "regret_vs_oracle_sqrt"}
    curves = (*UTILITY_REDUCTIONS.curves, *REGRET_REDUCTIONS.curves)
    bands = {f"{name}_band" for name in (*curves, "utility", "num_success")}
    assert metrics | bands <= set(ds.data_vars)
    for name in metrics:
        assert ds[name].dims == ("config", "seed"), name
    for name in bands:
        assert ds[name].dims == ("config", "stat", "round"), name
    rounds = [name for name in ds.data_vars if {"seed", "round"} <= set(ds[name].dims)]
    assert sorted(rounds) == sorted(name for name in per_run if "round" in ds[name].dims)
    assert "oracle_utility" not in ds


def test_reproduces_its_golden_run(tiny_run):
    """The tiny run is the golden run: its summary is the one stored before the refactor
    (tests/golden.py), bit for bit."""
    assert_golden_summary("cocs_hfl", pd.read_csv(tiny_run.out / "summary.csv"))


def test_oracle_utility_is_the_oracles_in_scenario_utility(tiny_run, every_run):
    """From every run's rounds: utility = successes / M, and oracle_utility is the Oracle's
    utility in the configuration's (budget, deadline), the match per scenario."""
    ds = every_run
    utility = ds["utility"].to_numpy()
    oracle_utility = ds["oracle_utility"].to_numpy()
    num_success = ds["num_success"].to_numpy()
    np.testing.assert_array_equal(utility, num_success.astype(np.float32) / M)
    assert (num_success <= ds["num_selected"].to_numpy()).all()
    for c in range(ds.sizes["config"]):
        budget, deadline = float(ds["budget"][c]), float(ds["deadline"][c])
        o = _config(ds, policy="oracle", budget=budget, deadline=deadline)
        np.testing.assert_array_equal(oracle_utility[c], utility[o])
    # The Oracle's utility differs between the scenarios: the match is per scenario.
    low, high = (_config(ds, policy="cocs", budget=b, deadline=4.0) for b in (0.5, 4.0))
    assert oracle_utility[low].sum() < oracle_utility[high].sum()
    np.testing.assert_array_equal(oracle_rows(ds), oracle_rows(ds.drop_vars("utility")))
    # The plan pairs the rows so before anything runs (the running regret's reference).
    plan = dataclasses.replace(tiny_run.experiment, out="unused").plan()
    np.testing.assert_array_equal(plan.reference.rows, oracle_rows(ds))


def test_device_metrics_equal_the_host_reference(tiny_run, every_run):
    """Each run's cumulative utility, its square-root form and successes per round, reduced on
    the device in float32, equal ``utility_metrics`` on every run's rounds in float64 within a
    pairwise sum's rounding; the summary's means are the means of those."""
    ds = every_run
    reduced = tiny_run.dataset
    host = utility_metrics(ds)
    utility = ds["utility"].transpose("config", "seed", "round").to_numpy().astype(np.float64)
    terms = {
        "cumulative_utility": utility,
        "cumulative_utility_sqrt": np.sqrt(utility),
        "success_per_round": ds["num_success"].to_numpy() / ds.sizes["round"],
    }
    for name, values in terms.items():
        got = reduced[name].transpose("config", "seed").to_numpy()
        assert got.dtype == np.float32, name
        want = host[name].transpose("config", "seed").to_numpy()
        np.testing.assert_array_less(np.abs(got - want), _pairwise_tolerance(values) + 1e-30)
        np.testing.assert_allclose(tiny_run.summary[name], got.astype(np.float64).mean(1))
    assert (reduced["cumulative_utility"] > 0).any()  # not every run empty


def test_regret_pairs_the_per_run_totals_by_seed(tiny_run, every_run):
    """The regrets paired on the host from the device totals equal the per-round sums of
    oracle − policy (``utility_metrics`` after ``attach_oracle``) within the two totals'
    float32 rounding; from float64 totals, the pairing is the per-round sum to float64's."""
    ds = every_run
    host = utility_metrics(ds)
    utility = ds["utility"].transpose("config", "seed", "round").to_numpy().astype(np.float64)
    match = oracle_rows(ds)
    device = oracle_regret(tiny_run.dataset)
    assert list(device) == ["regret_vs_oracle", "regret_vs_oracle_sqrt"]
    for regret, terms in (
        ("regret_vs_oracle", utility),
        ("regret_vs_oracle_sqrt", np.sqrt(utility)),
    ):
        want = host[regret].transpose("config", "seed").to_numpy()
        got = device[regret].transpose("config", "seed").to_numpy()
        tolerance = _pairwise_tolerance(terms)
        np.testing.assert_array_less(np.abs(got - want), tolerance[match] + tolerance + 1e-30)
        summary = tiny_run.summary
        np.testing.assert_array_equal(summary[regret], got.mean(1))
        assert (summary.loc[summary.policy == "oracle", regret] == 0.0).all()
    # The pairing alone, on the host's float64 totals.
    exact = oracle_regret(
        ds.assign({k: host[k] for k in ("cumulative_utility", "cumulative_utility_sqrt")})
    )
    for regret, values in exact.items():
        np.testing.assert_allclose(values, host[regret], rtol=1e-12, atol=1e-12)
    # A finished sweep's file, read back, pairs them the same.
    stored = oracle_regret(load_dataset(tiny_run.out / "results.nc"))
    for regret, values in stored.items():
        np.testing.assert_array_equal(values, device[regret], err_msg=regret)
    # A run against oracle_context, absent here, has no regret.
    assert oracle_regret(tiny_run.dataset, reference="oracle_context") == {}


def test_bands_equal_the_host_reference(tiny_run, every_run):
    """The running sums', the successes' and the running regret's bands over seeds (mean,
    variance with ddof=1) equal NumPy's on every run's rounds in float64: the regret's are
    paired by seed (the Oracle's running utility minus the configuration's on each seed, then
    the band), and at the last round they are the summary's paired regret totals' mean and
    variance, to float32 rounding."""
    ds = every_run
    reduced = tiny_run.dataset
    utility = ds["utility"].transpose("config", "seed", "round").to_numpy().astype(np.float64)
    oracle = utility[oracle_rows(ds)]
    curves = {
        "utility_cumsum": np.cumsum(utility, -1),
        "utility_sqrt_cumsum": np.cumsum(np.sqrt(utility), -1),
        "num_success": ds["num_success"].transpose("config", "seed", "round").to_numpy(),
        "regret_cumsum": np.cumsum(oracle - utility, -1),
    }
    # The largest partial sum of the terms' magnitudes over a configuration's seeds.
    magnitude = {name: np.abs(values) for name, values in curves.items()}
    magnitude["regret_cumsum"] = np.cumsum(oracle + utility, -1)
    rounds = ds.sizes["round"]
    eps = np.finfo(np.float32).eps
    for name, values in curves.items():
        band = reduced[f"{name}_band"].transpose("config", "stat", "round").to_numpy()
        scale = magnitude[name].max(1) + 1e-30
        np.testing.assert_array_less(
            np.abs(band[:, 0] - values.mean(1)), 4 * np.log2(rounds) * eps * scale, err_msg=name
        )
        np.testing.assert_array_less(
            np.abs(band[:, 1] - values.var(1, ddof=1)), 16 * np.log2(rounds) * eps * scale**2,
            err_msg=name,
        )  # fmt: skip
    regret = reduced["regret_cumsum_band"].transpose("config", "stat", "round").to_numpy()
    assert (regret[oracle_rows(ds) == np.arange(ds.sizes["config"])] == 0).all()  # the Oracle's
    assert (regret[:, 1, -1] > 0).any()
    totals = tiny_run.dataset["regret_vs_oracle"].transpose("config", "seed").to_numpy()
    scale = magnitude["regret_cumsum"].max(1)[:, -1]
    tolerance = 8 * np.log2(rounds) * eps * scale
    np.testing.assert_array_less(np.abs(regret[:, 0, -1] - totals.mean(1)), tolerance + 1e-30)
    np.testing.assert_array_less(
        np.abs(regret[:, 1, -1] - totals.var(1, ddof=1)), 4 * tolerance * scale + 1e-30
    )


def test_reductions_do_not_depend_on_the_chunk(tiny_run, every_run):
    """The utility reductions and the running regret of each configuration alone equal those of
    all twenty at once and the driver's (chunks of four, the Oracle's rows computed first),
    bit for bit: the regret reads the Oracle's rows from a table shared by every configuration,
    here every run's stored utility of the Oracle's four configurations."""
    plan = tiny_run.experiment.plan()
    dims = sweep.PolicyGrid(plan).dims  # every output the runs record
    extra = Reductions(plan.reductions.metrics, plan.reductions.curves)
    reducer = make_reducer(dims, tiny_run.experiment.rounds, extra=extra)
    reduce = jax.jit(jax.vmap(reducer, in_axes=(0, 0, 0, None)))
    ds = every_run
    arrays = {name: jnp.asarray(ds[name].transpose("config", "seed", *dims[name])) for name in dims}
    oracles, rows = np.unique(plan.reference.rows, return_inverse=True)
    table = {"utility": arrays["utility"][oracles]}
    hparams = {REFERENCE: jnp.asarray(rows, jnp.int32)}
    together = reduce(arrays, hparams, {}, table)
    names = [*extra.metrics, *(f"{c}_band" for c in extra.curves)]
    assert "regret_cumsum_band" in names
    for name in names:
        np.testing.assert_array_equal(
            together[name], tiny_run.dataset[name].to_numpy(), err_msg=name
        )
    for config in (0, 7, 19):
        one = {k: v[config : config + 1] for k, v in arrays.items()}
        alone = reduce(one, {k: v[config : config + 1] for k, v in hparams.items()}, {}, table)
        for name in names:
            np.testing.assert_array_equal(alone[name][0], together[name][config], err_msg=name)


def test_figures_draw_the_device_curves(tiny_run, every_run, tmp_path):
    """At budget 4 and deadline 4 the curves are the means over seeds of every run's running
    sums and the regret curve the paired mean regret, its bands the Student-t intervals of
    every run's paired running regret (the Oracle's minus the policy's on each seed)."""
    ds = every_run
    experiment = dataclasses.replace(tiny_run.experiment, plot_at=("budget=4,deadline=4",))
    with record_figures() as figures:
        experiment.figures(tiny_run.dataset, tiny_run.summary, tmp_path)
    at = (ds["budget"] == 4.0) & (ds["deadline"] == 4.0)
    configs = {p: int(ds["config"][at & (ds["policy"] == p)][0]) for p in POLICIES}
    utility = ds["utility"].astype(np.float64)
    oracle = ds["oracle_utility"].astype(np.float64)
    want = {
        "cumulative_utility.png": lambda c: utility.sel(config=c).cumsum("round"),
        "cumulative_utility_sqrt.png": lambda c: np.sqrt(utility.sel(config=c)).cumsum("round"),
        "success_per_round.png": lambda c: ds["num_success"].sel(config=c).astype(float),
        "regret.png": lambda c: (oracle - utility).sel(config=c).cumsum("round"),
    }
    for name, curve in want.items():
        ax = figures[name].axes[0]
        shown = [p for p in POLICIES if name != "regret.png" or p != "oracle"]
        lines = ax.get_lines()
        assert len(lines) == len(shown), name
        for line, policy in zip(lines, shown, strict=True):
            mean = curve(configs[policy]).mean("seed").to_numpy()
            np.testing.assert_allclose(line.get_ydata(), mean, rtol=1e-5, atol=1e-5, err_msg=name)
    ax = figures["regret.png"].axes[0]
    assert np.abs(ax.get_lines()[0].get_ydata()).max() > 0
    fills = [c for c in ax.collections if len(c.get_paths())]
    assert len(fills) == len(POLICIES) - 1
    for fill, policy in zip(fills, [p for p in POLICIES if p != "oracle"], strict=True):
        paired = (oracle - utility).sel(config=configs[policy]).cumsum("round").to_numpy()
        n = paired.shape[0]
        _, lo, hi = stats_ci(paired.mean(0), paired.var(0, ddof=1), n)
        half = sps.t.ppf(0.975, n - 1) * paired.std(0, ddof=1) / np.sqrt(n)
        np.testing.assert_allclose(hi, paired.mean(0) + half, rtol=1e-12, atol=1e-12)
        vertices = fill.get_paths()[0].vertices
        x = ds["round"].to_numpy()
        edges = [vertices[vertices[:, 0] == r, 1] for r in x]
        np.testing.assert_allclose([e.min() for e in edges], lo, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose([e.max() for e in edges], hi, rtol=1e-5, atol=1e-5)


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


def test_summary_without_oracle_has_no_regret(tiny_run, every_run):
    """Regret needs the Oracle: without oracle_utility (every run's rounds) or an Oracle
    configuration (reduced), the summary has no regret columns."""
    ds = every_run.drop_vars("oracle_utility")
    summary = summarize(ds, metrics=utility_metrics)
    assert "cumulative_utility" in summary and "regret_vs_oracle" not in summary
    reduced = tiny_run.dataset
    assert oracle_regret(reduced.isel(config=reduced["policy"].to_numpy() != "oracle")) == {}


# --------------------------------------------------------------------------- traced scenarios


def test_budget_and_deadline_are_traced_per_configuration(tiny_run, tmp_path):
    """In one grid the larger budget selects more; a configuration of COCS or the Oracle is
    bit-identical in another grid (other neighbours, another position)."""
    grid = tiny_run.dataset

    def oracle(budget, deadline, var):
        return grid[var][_config(grid, policy="oracle", budget=budget, deadline=deadline)]

    for deadline in (2.0, 4.0):
        small = oracle(0.5, deadline, "selected_per_round").mean()
        large = oracle(4.0, deadline, "selected_per_round").mean()
        assert small < large, (deadline, small, large)
    # Costs are at least 1 per client: a budget of 0.5 affords no one.
    assert (oracle(0.5, 4.0, "selected_per_round") == 0).all()
    # Same draws (common random numbers): the later deadline succeeds more often.
    assert oracle(4.0, 4.0, "success_per_round").sum() > oracle(4.0, 2.0, "success_per_round").sum()

    # Another grid of the same size (so the same compiled program) puts (4, 4) first, among
    # other neighbours; the runner's own tests cover a configuration alone.
    other_grid = dict(budget=(4.0, 9.0), deadline=(4.0, 1.0), plots=False, per_run_rounds=False)
    other_grid["out"] = str(tmp_path / "o")
    other_grid["policies"] = ("cocs", "oracle")
    other = driver.run(dataclasses.replace(tiny_run.experiment, **other_grid)).dataset
    # Without --per-run-rounds, results.nc holds no run's rounds either.
    with xr.open_dataset(tmp_path / "o" / "results.nc", engine="h5netcdf") as stored:
        check_reduced(stored)
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
