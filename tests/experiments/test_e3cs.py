"""The e3cs_classes experiment (E3CS's setting, selection only): its configurations (E3CS per σ
and E3CS-inc, next to Random and the FedCS-like most_reliable), its metrics (effective
participation, selection fraction per class, E3CS's floor) on one tiny run, reduced on the device
and checked against their host reference on the same runs' rounds, its refusals, and (slow) the
paper's claim that E3CS's fairness floor keeps every class's selection fraction at or above σ."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from scipy import stats

from jfl import cli, driver, results, sweep
from jfl.experiments import EXPERIMENTS, E3csClasses
from jfl.experiments.e3cs import class_metrics, e3cs_configs, write_class_fractions
from tests.helpers import axes_summary, cli_fails, record_figures

F32 = float(np.finfo(np.float32).eps)

TINY = ["--clients", "8", "--m", "2", "--seeds", "3", "--rounds", "40", "--quiet"]
# The end-to-end run: E3CS and the oracle baseline (Random's program is the other experiments').
RUN = [*TINY, "--policies", "e3cs,most_reliable", "--no-plots"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("e3cs") / "out"
    config = cli.parse(E3csClasses, [*RUN, "--out", str(out)], prog="e3cs_classes")
    return driver.run(config), out


def test_registered_with_the_paper_setting():
    config = E3csClasses()
    assert EXPERIMENTS["e3cs_classes"] is E3csClasses
    assert (config.clients, config.m, config.rounds, config.eta) == (100, 20, 2500, (0.5,))
    assert config.success_rates == (0.1, 0.3, 0.6, 0.9) and config.sigma == (0.0, 0.5, 0.8)
    assert config.inc_switch() == 625 and E3csClasses(inc=False).inc_switch() is None


def test_configurations_add_e3cs_inc_after_the_e3cs_rows():
    configs = e3cs_configs(("random", "e3cs", "most_reliable"), (0.0, 0.5), (0.5,), 25)
    assert list(configs["policy"]) == ["random", "e3cs", "e3cs", "e3cs", "most_reliable"]
    np.testing.assert_array_equal(configs["sigma"], [np.nan, 0.0, 0.5, 1.0, np.nan])
    np.testing.assert_array_equal(configs["switch"], [np.nan, 0.0, 0.0, 25.0, np.nan])
    assert len(e3cs_configs(("random",), (0.0,), (0.5,), 25)) == 1


@pytest.fixture(scope="module")
def every_run(tiny):
    """The tiny sweep's runs again through ``run_policy_grid`` (the same programs: its chunk
    size), every run's outputs labelled on the host; and the sweep's own dataset, what it
    reduced on the device: per-run metrics and bands ``[config, ...]``."""
    result, out = tiny
    config = result.experiment
    plan = config.plan()
    seeds = np.arange(config.seeds)
    chunk = json.loads((out / "manifest.json").read_text())["chunk_configs"]
    options = {"rounds": config.rounds, "seeds": seeds, "chunk_size": chunk}
    outputs = sweep.run_policy_grid(plan, show_progress=False, **options)
    reduced = result.dataset.transpose("config", ...)
    return config, results.to_dataset(outputs, plan.configs, seeds), reduced


def test_class_metrics_reduced_on_the_device_are_the_hosts(every_run, tiny):
    """Each run's effective participation (a sum of counts: exact), success share, class
    fractions and their minimum (one float32 rounding each) and the band of the running
    effective participation, reduced on the device, against ``class_metrics`` in float64 on
    every run's rounds; the sweep's summary is theirs."""
    config, ds, reduced = every_run
    host = class_metrics(ds, len(config.success_rates), config.m)
    del host["fairness_floor"]  # its configuration's: the host's in either case
    assert len(host) == 3 + len(config.success_rates)
    for name, expected in host.items():
        expected = expected.transpose("config", "seed").to_numpy()
        got = reduced[name].transpose("config", "seed").to_numpy()
        np.testing.assert_allclose(got, expected, rtol=2 * F32, err_msg=name)
    np.testing.assert_array_equal(
        reduced["effective_participation"], host["effective_participation"]
    )
    running = ds["num_success"].cumsum("round").astype(float).to_numpy()  # [config, seed, round]
    band = reduced["cumulative_success_band"].to_numpy()  # [config, stat, round]
    np.testing.assert_allclose(band[:, 0], running.mean(1), rtol=4 * F32)
    scale = 16 * F32 * running.max() ** 2  # the two-pass variance's float32 error
    np.testing.assert_allclose(band[:, 1], running.var(1, ddof=1), rtol=16 * F32, atol=scale)
    summary = pd.read_csv(tiny[1] / "summary.csv")
    for name in host:
        np.testing.assert_allclose(summary[name], reduced[name].mean("seed"), rtol=2 * F32)


def test_tiny_run_writes_its_metrics_and_figures(tiny, every_run, tmp_path):
    result, out = tiny
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary["policy"]) == ["e3cs"] * 4 + ["most_reliable"]
    for name in ("summary.csv", "results.nc", "metadata.json"):
        assert (out / name).exists()
    # Reduced on the device, no run's rounds kept by default.
    stored = results.load_dataset(out / "results.nc")
    for name in ("num_success", "selection_count", "round_time"):
        assert name not in stored and f"{name}_band" in stored, name
    figure = out / "class_fractions.png"
    write_class_fractions(summary, (0.1, 0.3, 0.6, 0.9), figure)
    assert figure.stat().st_size > 0
    # The running effective participation from its band: its mean over seeds, every run's.
    with record_figures() as figures:
        result.experiment.figures(result.dataset, summary, tmp_path)
    assert sorted(figures) == ["class_fractions.png", "effective_participation.png",
                               "pull_record.png"]  # fmt: skip
    (ax,) = axes_summary(figures["effective_participation.png"])
    assert ax["legend"] == ["E3CS-0", "E3CS-0.5", "E3CS-0.8", "E3CS-inc", "most_reliable"]
    lines = figures["effective_participation.png"].axes[0].get_lines()[:5]
    running = every_run[1]["num_success"].cumsum("round").mean("seed").to_numpy()
    for line, expected in zip(lines, running, strict=True):
        np.testing.assert_allclose(line.get_ydata(), expected, rtol=4 * F32)
    # E3CS's floor: σ = sigma·k/N, and for E3CS-inc (switch 10 of 40 rounds) ¾·k/N.
    np.testing.assert_allclose(summary["fairness_floor"], [0, 0.125, 0.2, 0.1875, 0])
    fractions = summary[[f"class_{c}_fraction" for c in range(4)]].to_numpy()
    np.testing.assert_allclose(fractions.mean(axis=1), 2 / 8)  # k/N selected on average
    assert np.all(summary["min_class_fraction"] <= fractions.min(axis=1) + 1e-12)
    # The FedCS-like oracle selects only the most reliable class (2 clients, k = 2).
    np.testing.assert_allclose(fractions[-1], [0, 0, 0, 1])
    success = every_run[1]["num_success"].sum("round").to_numpy()
    np.testing.assert_allclose(summary["effective_participation"], success.mean(axis=1))
    assert np.all(summary["success_share"] <= 1) and np.all(summary["success_share"] > 0)


def test_class_metrics_on_a_hand_made_dataset():
    """Two configurations, one seed, four clients in two classes over 2 rounds."""
    counts = np.array([[[2, 0, 1, 1]], [[0, 0, 2, 2]]])
    ds = xr.Dataset(
        {
            "selection_count": (("config", "seed", "client"), counts),
            "num_selected": (("config", "seed", "round"), np.full((2, 1, 2), 2)),
            "num_success": (("config", "seed", "round"), np.array([[[1, 2]], [[0, 1]]])),
        },
        coords={
            "config": [0, 1],
            "seed": [0],
            "policy": ("config", ["e3cs", "random"]),
            "sigma": ("config", [0.5, np.nan]),
            "switch": ("config", [0.0, np.nan]),
        },
    )
    metrics = class_metrics(ds, num_classes=2, selection_size=2)
    np.testing.assert_allclose(metrics["class_0_fraction"].values, [[0.5], [0.0]])
    np.testing.assert_allclose(metrics["class_1_fraction"].values, [[0.5], [1.0]])
    np.testing.assert_allclose(metrics["min_class_fraction"].values, [[0.5], [0.0]])
    np.testing.assert_allclose(metrics["effective_participation"].values, [[3], [1]])
    np.testing.assert_allclose(metrics["success_share"].values, [[0.75], [0.25]])
    np.testing.assert_allclose(metrics["fairness_floor"].values, [[0.25], [0.0]])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sigma", "1.5"], "sigma"),
        (["--eta", "-1"], "eta"),
        (["--m", "9"], "--m must be an integer in [1, --clients=8]"),
        (["--success-rates", "0.5,1.2"], "--success-rates"),
        (["--availability", "2"], "--availability"),
        (["--availability", "0"], "--availability must be in (0, 1]"),
        (["--policies", "fedcs"], "expected_time"),
        (["--policies", "e3cs,pow_d"], "pow_d"),
        (["--sigma", "0.5,0.5"], "--sigma: duplicate values in [0.5, 0.5]"),
        (["--eta", "0.5,1,0.5"], "--eta: duplicate values"),
    ],
)
def test_bad_flags_stop_before_anything_compiles(argv, message, capsys, tmp_path):
    line = cli_fails(E3csClasses, [*TINY, *argv], capsys, tmp_path, prog="e3cs_classes")
    assert message in line


@pytest.mark.slow
def test_claim_the_fairness_floor_holds_for_every_class(tmp_path):
    """The paper's setting (K = 100 in classes 0.1/0.3/0.6/0.9, k = 20, 2500 rounds, 16 seeds):
    for E3CS-0.5, -0.8 and -inc every class's selection fraction is at least its floor σ
    (E3CS-inc: ¾·k/N over the run) up to 4.5 standard errors over the seeds; E3CS-0, with no
    floor, selects the least reliable class less than σ = 0.5·k/N would; the FedCS-like oracle
    selects it never; E3CS-0 has more effective participation than Random."""
    seeds = 16
    config = E3csClasses(seeds=seeds, out=str(tmp_path / "out"), quiet=True, plots=False)
    ds = driver.run(config).dataset  # the class metrics reduced on the device, per run
    policy = ds["policy"].to_numpy()
    for c in np.flatnonzero(policy == "e3cs"):
        floor = float(ds["fairness_floor"].isel(config=c, seed=0))
        for k in range(4):
            values = ds[f"class_{k}_fraction"].isel(config=c).to_numpy()
            se = values.std(ddof=1) / np.sqrt(seeds)
            if floor > 0:
                assert values.mean() >= floor - 4.5 * se, (c, k, values.mean(), floor)
    e3cs0 = int(np.flatnonzero((policy == "e3cs") & (ds["sigma"].to_numpy() == 0))[0])
    least = ds["class_0_fraction"].isel(config=e3cs0).to_numpy()
    assert stats.ttest_1samp(least, 0.5 * config.m / config.clients).statistic < -4.5
    oracle = int(np.flatnonzero(policy == "most_reliable")[0])
    assert float(ds["class_0_fraction"].isel(config=oracle).max()) == 0.0
    random = int(np.flatnonzero(policy == "random")[0])
    gain = (
        ds["effective_participation"].isel(config=e3cs0)
        - ds["effective_participation"].isel(config=random)
    ).to_numpy()
    assert gain.mean() > 4.5 * gain.std(ddof=1) / np.sqrt(seeds)
