"""FlSelection (``sweeps/fl_selection.py``): every selection method on one federated task.

One tiny run (one policy, so one small compiled program: rpow-d, whose round signal goes
through the real learner; the Selection weights are tests/fl/test_train.py's) shared by the
output checks, reduced on the device and keeping no run's rounds (the default); the same
program again in a recomposed sweep that keeps them (``--per-run-rounds``), on which the metrics
reduced on the device are checked against their host references. Bad flags stop before
anything compiles."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from jfl import cli
from jfl.experiments import FlSelection
from jfl.experiments.selection import SELECTION_METHODS, final_test_loss
from jfl.policies import REGISTRY
from jfl.results import accuracy_metrics, load_dataset
from tests.helpers import assert_same_configurations, cli_fails

POLICIES = "rpow_d"
TINY = [
    *("--seeds", "2", "--rounds", "4", "--eval-every", "2", "--quiet"),
    *("--clients", "12", "--m", "3", "--dirichlet", "0.3,1", "--policies", POLICIES),
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("fl_selection") / "out"
    assert cli.main(FlSelection, [*TINY, "--out", str(out)], prog="fl_selection") == 0
    return out


@pytest.fixture(scope="module")
def recomposed(tiny, tmp_path_factory):
    """The tiny run's configurations with the partitions stacked in the other order and a
    second learning rate, keeping every run's rounds: other partition indices and other
    positions in the sweep (the same shapes, so the program comes from the compilation
    cache)."""
    out = tmp_path_factory.mktemp("fl_selection") / "recomposed"
    argv = [*TINY, "--dirichlet", "1,0.3", "--lr", "0.1,0.3", "--no-plots", "--per-run-rounds"]
    assert cli.main(FlSelection, [*argv, "--out", str(out)], prog="fl_selection") == 0
    return load_dataset(out / "results.nc")


def test_tiny_run_writes_its_summary_and_figures(tiny):
    ds = load_dataset(tiny / "results.nc")
    summary = pd.read_csv(tiny / "summary.csv")
    assert list(summary["policy"].unique()) == [POLICIES]
    assert len(summary) == 2 and np.all(summary["final_test_loss"] >= 0)
    assert ds["dirichlet"].to_numpy().tolist() == [0.3, 1.0]
    assert ds["data_size"].to_numpy()[0].std() > 0  # the per-class split skews the sizes
    assert np.all(ds["untrained"].to_numpy() == 0)  # multiplicities never exceed the m slots
    # Reduced on the device: per-run metrics and bands over seeds, no run's rounds.
    for name in ("accuracy", "test_loss", "wall_clock", "round_time", "selection_count"):
        assert name not in ds and f"{name}_band" in ds, name
    assert ds["final_test_loss"].dims == ("config", "seed")
    figures = {p.name for p in (tiny / "figures").iterdir()}
    for variable in ("accuracy", "test_loss"):
        for against in ("round", "time"):
            assert any(f.startswith(f"{variable}_vs_{against}") for f in figures), figures


def _refuse(constant):
    raise ValueError(f"not strict JSON: {constant}")


def test_metadata_is_strict_json(tiny):
    """metadata.json and results.nc's copy parse with a strict JSON parser: the default
    --round-deadline inf is the string "inf", not a bare Infinity (RFC 8259 has none)."""
    import json

    metadata = json.loads((tiny / "metadata.json").read_text(), parse_constant=_refuse)
    assert metadata["config"]["round_deadline"] == "inf"
    json.loads(load_dataset(tiny / "results.nc").attrs["metadata"], parse_constant=_refuse)


def test_configuration_results_do_not_depend_on_the_other_partitions(tiny, recomposed):
    """The reductions of each α's runs are bit-identical with the partitions stacked in the
    other order and a second learning rate (a sweep whose partitions pad to another width is
    CI's test_every_method_is_independent_of_the_rest_of_the_sweep)."""
    small = load_dataset(tiny / "results.nc")
    assert recomposed.sizes["config"] == 4
    assert_same_configurations(small, recomposed, ("policy", "dirichlet", "learning_rate"))


def test_metrics_reduced_on_the_device_are_the_hosts(recomposed):
    """The accuracy metrics and the final test loss that the sweep reduced on the device equal
    their host references on every run's kept evaluations (the same float32 values picked)."""
    ds = recomposed
    host = {**accuracy_metrics(ds), **final_test_loss(ds)}
    assert len(host) == 5
    for name, expected in host.items():
        expected = expected.transpose("config", "seed").to_numpy().astype(np.float32)
        got = ds[name].transpose("config", "seed").to_numpy()
        np.testing.assert_array_equal(got, expected, err_msg=name)


def test_default_methods_are_registered_and_run_on_rbcsf():
    from jfl.envs import ENVIRONMENTS

    for name in SELECTION_METHODS:
        REGISTRY[name].check_environment(ENVIRONMENTS["rbcsf"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--round-deadline", "0"], "--round-deadline must be > 0 or inf"),
        (["--dirichlet", "0"], "--dirichlet: must be > 0 (or 'iid')"),
        (["--dirichlet", "0.1,0.1"], "--dirichlet: duplicate values"),
        (["--policies", "pow_d", "--d", "-1"], "--d must be in [0, inf)"),
        (["--policies", "e3cs", "--sigma", "2"], "--sigma must be in [0, 1]"),
        (["--policies", "cs_ucb"], "--policies: policy 'cs_ucb' reads"),
        (["--m", "13"], "--m must be an integer in [1, --clients=12], got 13"),
        # Power-of-Choice's d: integers in [m, N] (0 is the default 2m).
        (["--policies", "pow_d", "--d", "2"], "--d must be an integer in [3, --clients=12], got 2"),
        (["--policies", "pow_d", "--d", "4.5"], "--d must be an integer in [3, --clients=12]"),
        (["--policies", "pow_d", "--d", "500"], "--d must be an integer in [3, --clients=12]"),
        (["--policies", "pow_d", "--d", "4,4"], "--d: duplicate values"),
        # A flag that no selected policy reads is refused, naming the policies that read it.
        (["--policies", "random", "--d", "6"], "--d is read by cpow_d, pow_d, rpow_d, and none"),
        (["--policies", "random", "--alpha", "0"], "--alpha is read by linucb, linucb_pairs"),
        (["--policies", "random", "--sigma", "0.2"], "--sigma is read by e3cs"),
        (["--policies", "random", "--V", "1"], "--V is read by rbcsf"),
        (["--policies", "random", "--delta-zeta", "update"], "--delta-zeta is read by delta"),
        (["--data-dir", "X"], "--data-dir needs --dataset"),
        (["--min-samples", "-1"], "--min-samples must be an integer >= 0, got -1"),
        (["--min-samples", "200"], "min_samples = 200 cannot be met"),  # 12 · 200 > 1437
        (["--aggregation", "mean"], "--aggregation must be one of"),
    ],
)
def test_bad_flags_exit_2_before_compiling(argv, message, capsys, tmp_path):
    assert message in cli_fails(FlSelection, [*TINY, *argv], capsys, tmp_path, "fl_selection")


@pytest.mark.paper
def test_every_method_is_independent_of_the_rest_of_the_sweep(tmp_path):
    """Every default method's α = 0.1 runs are bit-identical alone and beside α = 1 and 0.3
    (listed first: their data stacked before, padded to another width), each under both
    aggregations (CI's second stage: every method compiles twice)."""
    small = [
        *("--seeds", "2", "--rounds", "6", "--eval-every", "3", "--quiet", "--no-plots"),
        *("--clients", "20", "--m", "4", "--aggregation", "paper,uniform"),
    ]
    outs = {"alone": ["--dirichlet", "0.1"], "beside": ["--dirichlet", "1,0.3,0.1"]}
    for name, argv in outs.items():
        out = tmp_path / name
        assert cli.main(FlSelection, [*small, *argv, "--out", str(out)], prog="fl_selection") == 0
    alone, beside = (load_dataset(tmp_path / name / "results.nc") for name in outs)
    assert set(alone["policy"].to_numpy()) == set(SELECTION_METHODS)
    keys = ("policy", "aggregation", "dirichlet", "learning_rate")
    assert_same_configurations(alone, beside, keys)
