"""Power-of-Choice's quadratic experiment (``jfl.experiments.PowDQuadratic``) end to end.

Bad flags are refused in one line before anything compiles. One tiny run (a module fixture: 8
clients, 40 rounds, rand, pow-d, adapow-d and cpow-d) goes through the command line, keeping every
run's evaluations beside its reductions (``--per-run-rounds``): its summary's rows and columns,
the gap it records instead of an accuracy, the gaps reduced on the device against their host
reference, the figure (from the gap's band), and two identities of the methods' definitions:
cpow-d ranks by the probe F_k(w), which on the quadratic is exact, so it is pow-d bit for bit;
adapow-d draws d = K candidates before its switch, as pow-d with d = K does.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from jfl import cli
from jfl.experiments import PowDQuadratic
from jfl.experiments.power_of_choice import gap_metrics
from jfl.results import load_dataset
from tests.helpers import (
    assert_same_configurations,
    axes_summary,
    cli_fails,
    read_back_png,
    record_figures,
)

PROG = "pow_d_quadratic.py"
TINY = [
    "--clients", "8", "--m", "2", "--d", "4,8", "--variant-d", "4", "--rounds", "40",
    "--eval-every", "10", "--early-round", "20", "--seeds", "3", "--quiet",
    "--methods", "rand,pow_d,adapow_d,cpow_d",
]  # fmt: skip


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("pow_d_quadratic") / "out"
    argv = [*TINY, "--per-run-rounds", "--out", str(out)]
    with record_figures() as figures:
        assert cli.main(PowDQuadratic, argv, prog=PROG) == 0
    return out, figures


def test_the_quadratic_is_batch_invariant_so_its_chunks_hold_several_configurations(tiny, tmp_path):
    """The quadratic's learner sums by halvings only (``batch_invariant``): its sweep batches
    a policy's configurations together, and a chunk of one configuration gives the same bits."""
    from jfl import sweep

    config = cli.parse(PowDQuadratic, [*TINY, "--out", str(tmp_path / "auto")])
    plan = config.plan()
    assert not sweep.PolicyGrid(plan).exact
    assert sweep.chunk_size(config.chunk_size, plan, config.seeds) > 1
    out = tmp_path / "one"
    argv = [*TINY, "--methods", "pow_d", "--chunk-size", "1", "--no-plots", "--per-run-rounds"]
    argv += ["--out", str(out)]
    assert cli.main(PowDQuadratic, argv, prog=PROG) == 0
    keys = ("policy", "d", "switch", "learning_rate")
    assert_same_configurations(
        load_dataset(out / "results.nc"), load_dataset(tiny[0] / "results.nc"), keys
    )


def test_summary_has_a_row_per_method_and_d(tiny):
    out, _ = tiny
    summary = pd.read_csv(out / "summary.csv")
    rows = list(
        zip(summary["policy"], summary["d"].fillna(-1), summary["switch"].fillna(-1), strict=True)
    )
    assert rows == [
        ("proportional", -1, -1),
        ("pow_d", 4, 0),
        ("pow_d", 8, 0),
        ("pow_d", 8, 20),  # adapow-d: d = K before round 20 (half the rounds), m from it
        ("cpow_d", 4, 0),
    ]
    for column in ("early_gap", "final_gap"):
        assert (summary[column] > 0).all()
        assert (summary[f"{column}_lo"] <= summary[column]).all()
    assert "final_accuracy" not in summary


def test_it_records_the_gap_and_the_methods_identities(tiny):
    out, _ = tiny
    ds = load_dataset(out / "results.nc")
    assert "accuracy" not in ds and ds["gap"].dims == ("config", "seed", "eval")
    np.testing.assert_array_equal(ds["eval"], np.arange(0, 41, 10))
    gap = ds["gap"].to_numpy()
    assert np.all(gap[:, :, 0] == pytest.approx(ds.attrs["initial_gap"], rel=1e-6))
    np.testing.assert_array_equal(gap[4], gap[1])  # cpow-d d=4 is pow-d d=4
    np.testing.assert_array_equal(gap[3][:, :3], gap[2][:, :3])  # adapow-d before its switch
    assert np.all(gap[:, :, -1] < gap[:, :, 0])
    np.testing.assert_allclose(ds["p"].sum(), 1.0, rtol=1e-6)


def test_the_gaps_reduced_on_the_device_are_the_hosts(tiny):
    """Each run's early and final gap as the sweep reduced them on the device are the host
    reference's (``gap_metrics``) on every run's kept evaluations: the same float32 values."""
    out, _ = tiny
    ds = load_dataset(out / "results.nc")
    host = gap_metrics(ds, early_round=20)
    for name, expected in host.items():
        expected = expected.transpose("config", "seed").to_numpy()
        got = ds[name].transpose("config", "seed").to_numpy()
        np.testing.assert_array_equal(got, expected, err_msg=name)


def test_it_draws_the_gap_against_the_round(tiny):
    """The figure draws each configuration's gap band over seeds, reduced on the device: its
    mean line is the mean over seeds of every run's gap."""
    out, figures = tiny
    assert sorted(p.name for p in (out / "figures").glob("*.png")) == ["gap_vs_round.png"]
    figure = figures["gap_vs_round.png"]
    read_back_png(out / "figures" / "gap_vs_round.png", figure)
    linear, log = axes_summary(figure)
    assert linear["lines"] == log["lines"] == 5
    assert log["legend"] == ["rand", "pow-d d=4", "pow-d d=8", "adapow-d", "cpow-d d=4"]
    assert figure.axes[1].get_yscale() == "log"
    means = load_dataset(out / "results.nc")["gap"].mean("seed").to_numpy()
    for line, expected in zip(figure.axes[0].get_lines()[:5], means, strict=True):
        np.testing.assert_allclose(line.get_ydata(), expected, rtol=1e-6)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--d", "2"], "--d must be an integer in [3, --clients=30], got 2"),
        (["--d", "6.5"], "--d takes integers, got 6.5"),
        (["--methods", "rand,oort"], "--methods must be one of"),
        (["--eval-every", "7"], "--eval-every must divide --rounds=15000, got 7"),
        (["--early-round", "2525"], "--early-round must be a multiple of --eval-every=50"),
        (["--h-low", "5", "--h-high", "4"], "--h-high"),
        (["--lr", "0"], "--lr"),
    ],
)
def test_bad_flags_are_refused_in_one_line(argv, message, capsys, tmp_path):
    assert message in cli_fails(PowDQuadratic, argv, capsys, tmp_path, prog=PROG)


def test_diverged_runs_are_counted_and_named_not_averaged_around(tmp_path, capsys):
    """--lr 1 diverges: one line names the configuration, its runs and the first round with a
    NaN or ±inf; the summary counts them (nonfinite_runs) where the stable rate has none."""
    out = tmp_path / "diverged"
    argv = [*TINY, "--methods", "pow_d", "--d", "4", "--lr", "0.05,1", "--no-plots"]
    assert cli.main(PowDQuadratic, [*argv, "--out", str(out)], prog=PROG) == 0
    err = capsys.readouterr().err
    warning = [line for line in err.splitlines() if line.startswith("warning:")]
    assert warning == [
        "warning: 1 of 2 configurations have runs with NaN or ±inf values, which the means and "
        "intervals leave out: pow_d learning_rate=1 (3 of 3 runs, from round 10) "
        "(summary.csv: nonfinite_runs)"
    ]
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary["nonfinite_runs"]) == [0, 3]
    assert np.isfinite(summary["final_gap"][0]) and np.isnan(summary["final_gap"][1])
    # By default, reduced on the device: the gap's band and per-run gaps, no run's evaluations.
    ds = load_dataset(out / "results.nc")
    assert "gap" not in ds and ds["gap_band"].dims == ("config", "stat", "eval")
    assert ds["final_gap"].dims == ("config", "seed")
