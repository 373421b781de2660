"""FlSelection (``sweeps/fl_selection.py``): every selection method on one federated task.

One tiny run (one policy, so one small compiled program: rpow-d, whose round signal goes
through the real learner; the Selection weights are tests/fl/test_train.py's) shared by the
output checks; bad flags stop before anything compiles."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from jfl import cli
from jfl.experiments import FlSelection
from jfl.experiments.selection import SELECTION_METHODS
from jfl.policies import REGISTRY
from jfl.results import load_dataset
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


def test_tiny_run_writes_its_summary_and_figures(tiny):
    ds = load_dataset(tiny / "results.nc")
    summary = pd.read_csv(tiny / "summary.csv")
    assert list(summary["policy"].unique()) == [POLICIES]
    assert len(summary) == 2 and np.all(summary["final_test_loss"] >= 0)
    assert ds["dirichlet"].to_numpy().tolist() == [0.3, 1.0]
    assert ds["data_size"].to_numpy()[0].std() > 0  # the per-class split skews the sizes
    assert np.all(ds["untrained"].to_numpy() == 0)  # multiplicities never exceed the m slots
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


def test_configuration_results_do_not_depend_on_the_other_partitions(tiny, tmp_path):
    """The runs of each α are bit-identical with the partitions stacked in the other order and
    a second learning rate: other partition indices and other positions in the sweep (the
    same shapes, so the program comes from the compilation cache; a sweep whose partitions pad
    to another width is CI's test_every_method_is_independent_of_the_rest_of_the_sweep)."""
    out = tmp_path / "recomposed"
    argv = [*TINY, "--dirichlet", "1,0.3", "--lr", "0.1,0.3", "--no-plots", "--out", str(out)]
    assert cli.main(FlSelection, argv, prog="fl_selection") == 0
    small, large = load_dataset(tiny / "results.nc"), load_dataset(out / "results.nc")
    assert large.sizes["config"] == 4
    assert_same_configurations(small, large, ("policy", "dirichlet", "learning_rate"))


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
