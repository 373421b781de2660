"""The federated-training experiments FlRbcsf, FlCsUcbIdeal, FlCsUcbQ and FlCocs: flags, outputs,
metrics.

Compilation dominates the cost (each policy compiles a learner), so each experiment runs once on
tiny settings (module fixtures shared by the output checks), keeping every run's rounds
(``--per-run-rounds``) beside what it reduced on the device, so that the accuracy metrics reduced
there are checked against the host's reference on the very runs; resuming and chunking are the
driver's and are tested in tests/test_driver.py. Bad flags stop before anything compiles, so
they are covered broadly. FlCocs runs on a tiny fake MNIST written here in the real (gzipped
IDX) format, which also covers ``--dataset mnist --data-dir``.
"""

from __future__ import annotations

import gzip
import json
import math
import struct

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from jfl import cli, driver, reduction, sweep
from jfl.envs.hfl import preset_params
from jfl.experiments.fl import (
    PAPER_PROTOCOL,
    FlCocs,
    FlCsUcbIdeal,
    FlCsUcbQ,
    FlRbcsf,
    max_selected,
)
from jfl.fl.data import MNIST_FILES
from jfl.results import accuracy_metrics, load_dataset, run_metrics
from tests.golden import assert_golden_summary, golden_argv
from tests.helpers import (
    assert_same_configurations,
    axes_summary,
    read_back_png,
    record_figures,
)

FAST = ["--seeds", "2", "--rounds", "4", "--eval-every", "2", "--quiet"]
ROUNDS = 4
EVALS = [0, 2, 4]
TINY = {
    FlRbcsf: [*FAST, "--clients", "8", "--m", "2", "--gamma1", "1,iid", "--V", "10"],
    FlCsUcbIdeal: [*FAST, "--clients", "6", "--N", "2"],
    FlCsUcbQ: [
        *FAST,
        *("--clients", "6", "--N", "2", "--rich-clients", "1", "--labels-per-rich", "3"),
    ],
    FlCocs: [*FAST, "--clients", "8", "--servers", "2"],
}
EXPERIMENTS = list(TINY)
EXPERIMENTS_BY_NAME = {experiment.name: experiment for experiment in EXPERIMENTS}


def _bad_flag(experiment, argv, capsys, tmp_path) -> str:
    """Bad flags: exit status 2, one line, no --out; returns the error message."""
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit:
        cli.main(experiment, [*TINY[experiment], *argv, "--out", str(out)], prog=experiment.name)
    err = capsys.readouterr().err
    assert exit.value.code == 2, err
    prefix = f"{experiment.name}: error: "
    assert err.count("\n") == 1 and err.startswith(prefix), err
    assert not out.exists()
    return err.removeprefix(prefix)


# --------------------------------------------------------------------------- flags


@pytest.mark.parametrize("experiment", EXPERIMENTS, ids=lambda e: e.name)
def test_help_lists_training_and_scenario_flags(experiment, capsys):
    with pytest.raises(SystemExit) as exit:
        cli.main(experiment, ["--help"], prog=experiment.name)
    assert exit.value.code == 0
    text = capsys.readouterr().out
    own = {
        FlRbcsf: "--gamma1",
        FlCsUcbIdeal: "--N",
        FlCsUcbQ: "--rich-clients",
        FlCocs: "--global-every",
    }
    for flag in ("--dataset", "--data-dir", "--lr", "--eval-every", "--seeds", own[experiment]):
        assert flag in text, flag


@pytest.mark.parametrize("experiment", EXPERIMENTS, ids=lambda e: e.name)
def test_reduced_on_the_device_keeping_no_run_by_default(experiment):
    """Every federated experiment reduces its runs on the device, the accuracy metrics among
    them, and keeps every run's rounds only with --per-run-rounds."""
    assert experiment.reduces_on_device
    config = cli.parse(experiment, TINY[experiment])
    plan = config.plan()
    grid = sweep.PolicyGrid(plan)
    names = reduction.run_metric_names(grid.dims, plan.reductions)
    assert names[:4] == list(reduction.ACCURACY_METRICS)
    assert driver.ON_DEVICE.per_run(config, grid.dims, plan.trackers) == ()
    kept = cli.parse(experiment, [*TINY[experiment], "--per-run-rounds"])
    assert {"accuracy", "wall_clock"} <= set(driver.ON_DEVICE.per_run(kept, grid.dims, ()))


COMMON_BAD = [
    (["--dataset", "imagenet"], "--dataset must be one of"),
    (["--model", "resnet"], "--model must be one of"),
    (["--padding", "full"], "--padding must be one of ['valid', 'same'], got 'full'"),
    # LeNet's "valid" CNN cannot take 8×8 digits: refused once the sample shape is known.
    (
        ["--model", "fashion_cnn"],
        "model fashion_cnn with padding valid needs inputs of at least 16×16, got 8×8×1 "
        "(digits); use --padding same",
    ),
    (["--model", "cifar_cnn"], "at least 16×16, got 8×8×1 (digits); use --padding same"),
    (["--epochs", "0"], "--epochs must be an integer >= 1, got 0"),
    (["--local-steps", "0"], "--local-steps must be an integer >= 1, got 0"),
    (["--local-steps", "-3"], "--local-steps must be an integer >= 1, got -3"),
    (["--local-steps", "1.5"], "--local-steps"),
    (["--local-steps", "none"], "--local-steps"),
    (["--batch-size", "0"], "--batch-size must be an integer >= 1, got 0"),
    (["--lr", "0"], "--lr must be in (0, inf)"),
    (["--lr", "-1"], "--lr must be in (0, inf)"),
    (["--lr", "nan"], "--lr must be in (0, inf)"),
    (["--lr", "inf"], "--lr must be in (0, inf)"),
    (["--lr", "0.1,0"], "--lr must be in (0, inf), got [0.0]"),
    (["--lr", "fast"], "--lr"),
    (["--eval-every", "3"], "--eval-every must divide --rounds=4, got 3"),
    (["--eval-every", "0"], "--eval-every must be an integer >= 1"),
    (["--target-accuracy", "0"], "--target-accuracy must be in (0, 1]"),
    (["--target-accuracy", "1.5"], "--target-accuracy must be in (0, 1]"),
    (["--target-accuracy", "nan"], "--target-accuracy must be in (0, 1]"),
    (["--aggregation", "magic"], "--aggregation must be one of"),
    (["--partition-seed", "-1"], "--partition-seed must be an integer >= 0"),
    (["--seeds", "0"], "--seeds must be an integer >= 1"),
    (["--rounds", "0"], "--rounds must be an integer >= 1"),
    (["--chunk-size", "0"], "--chunk-size must be an integer >= 1"),
    (["--resume", "--overwrite"], "exclude each other"),
    # Not in the Hugging Face cache (an empty one in the tests) and no --data-dir: the message
    # names the command that fetches it.
    (["--dataset", "mnist"], "not in the Hugging Face cache"),
    (["--dataset", "mnist"], "hf download ylecun/mnist --repo-type dataset"),
]


@pytest.mark.parametrize("experiment", EXPERIMENTS, ids=lambda e: e.name)
@pytest.mark.parametrize(("argv", "message"), COMMON_BAD)
def test_bad_training_flag_exits_2_naming_it(experiment, argv, message, capsys, tmp_path):
    """Every experiment refuses bad shared flags with status 2 and the flag named; no --out."""
    assert message in _bad_flag(experiment, argv, capsys, tmp_path)


@pytest.mark.parametrize("experiment", EXPERIMENTS, ids=lambda e: e.name)
def test_mnist_data_dir_missing_files_or_directory(experiment, capsys, tmp_path):
    """An empty --data-dir names the missing files; a missing directory is named too."""
    empty = tmp_path / "empty"
    empty.mkdir()
    argv = ["--dataset", "mnist", "--data-dir", str(empty)]
    message = _bad_flag(experiment, argv, capsys, tmp_path)
    assert f"missing {MNIST_FILES[0]}[.gz]" in message and str(empty) in message
    missing = tmp_path / "nowhere"
    argv = ["--dataset", "mnist", "--data-dir", str(missing)]
    message = _bad_flag(experiment, argv, capsys, tmp_path)
    assert f"data directory {missing}" in message and "does not exist" in message


@pytest.mark.parametrize(
    ("experiment", "argv", "message"),
    [
        (FlRbcsf, ["--m", "9"], "--m must be an integer in [1, --clients=8], got 9"),
        (FlRbcsf, ["--m", "0"], "--m must be an integer in [1, --clients=8], got 0"),
        (FlRbcsf, ["--clients", "0"], "--clients must be an integer in [1, 10000000]"),
        (FlRbcsf, ["--gamma1", "0"], "--gamma1: must be > 0 (or 'iid'), got 0.0"),
        (FlRbcsf, ["--gamma1", "-1"], "--gamma1: must be > 0 (or 'iid')"),
        (FlRbcsf, ["--gamma1", "nan"], "--gamma1: must be > 0 (or 'iid')"),
        (FlRbcsf, ["--gamma1", "foo"], "--gamma1: expected numbers > 0 or 'iid', got 'foo'"),
        (FlRbcsf, ["--gamma1", "1,1"], "--gamma1: duplicate values"),
        (FlRbcsf, ["--lr", "0.1,0.1"], "--lr: duplicate values"),
        (FlRbcsf, ["--gamma1", ","], "--gamma1: no values given"),
        (FlRbcsf, ["--policies", "cocs"], "--policies: policy 'cocs' reads"),
        (FlRbcsf, ["--policies", "rbcsf,magic"], "unknown policy 'magic'"),
        (FlRbcsf, ["--V", "-1"], "V must be in [0, inf), got [-1.0]"),
        (FlRbcsf, ["--V", "nan"], "V must be in [0, inf)"),
        (FlRbcsf, ["--alpha", "-1"], "alpha must be in [0, inf)"),
        (FlRbcsf, ["--deadline", "0"], "deadline must be in (0, inf)"),
        (FlRbcsf, ["--beta", "0.1,2"], "--beta must be in [0, 1]"),
        (FlRbcsf, ["--beta", "-0.5"], "--beta must be in [0, 1]"),
        (
            FlRbcsf,
            ["--policies", "dirichlet_random", "--gamma2", "0"],
            "gamma2 must be in (0, inf)",
        ),
        (FlRbcsf, ["--p-available", "1.5"], "--p-available must be in [0, 1]"),
        (FlRbcsf, ["--samples-per-client", "0"], "--samples-per-client must be an integer"),
        (FlRbcsf, ["--samples-per-client", "-2"], "--samples-per-client must be an integer"),
        (FlRbcsf, ["--samples-per-client", "many"], "--samples-per-client"),
        (FlCsUcbIdeal, ["--N", "0"], "--N must be an integer in [1, --clients=6], got 0"),
        (FlCsUcbIdeal, ["--N", "7"], "--N must be an integer in [1, --clients=6], got 7"),
        (FlCsUcbIdeal, ["--clients", "0"], "--clients must be an integer in [1, 10000000]"),
        (FlCsUcbIdeal, ["--tau-max", "0"], "--tau-max must be in (0, inf), got 0.0"),
        (FlCsUcbIdeal, ["--policies", "cocs"], "--policies: policy 'cocs' reads"),
        (FlCsUcbIdeal, ["--policies", "local_accuracy,magic"], "unknown policy 'magic'"),
        (FlCsUcbQ, ["--N", "0"], "--N must be an integer in [1, --clients=6], got 0"),
        (FlCsUcbQ, ["--N", "7"], "--N must be an integer in [1, --clients=6], got 7"),
        (FlCsUcbQ, ["--rich-clients", "7"], "--rich-clients must be an integer in [0, --clients"),
        (FlCsUcbQ, ["--rich-clients", "-1"], "--rich-clients must be an integer in [0, --clients"),
        (FlCsUcbQ, ["--labels-per-rich", "0"], "--labels-per-rich must be an integer >= 1"),
        (FlCsUcbQ, ["--labels-per-rich", "11"], "rich_clients · labels_per_rich must be"),
        (FlCsUcbQ, ["--availability", "2"], "--availability must be in [0, 1], got 2.0"),
        (FlCsUcbQ, ["--availability", "nan"], "--availability must be in [0, 1]"),
        (FlCsUcbQ, ["--tau-max", "0"], "--tau-max must be in (0, inf), got 0.0"),
        (FlCsUcbQ, ["--tau-max", "nan"], "--tau-max must be in (0, inf)"),
        (FlCsUcbQ, ["--distance", "0"], "--distance must be in (0, inf)"),
        (FlCsUcbQ, ["--beta", "2"], "beta must be in [0, 1]"),
        (FlCsUcbQ, ["--policies", "cocs"], "--policies: policy 'cocs' reads"),
        (FlCocs, ["--servers", "0"], "--servers must be an integer in [1, --clients=8], got 0"),
        (FlCocs, ["--servers", "9"], "--servers must be an integer in [1, --clients=8], got 9"),
        (FlCocs, ["--budget", "0"], "--budget must be in (0, inf)"),
        (FlCocs, ["--budget", "inf"], "--budget must be in (0, inf)"),
        (FlCocs, ["--budget", "nan"], "--budget must be in (0, inf)"),
        (FlCocs, ["--deadline", "-1"], "--deadline must be in (0, inf)"),
        (FlCocs, ["--global-every", "0"], "--global-every must be an integer >= 1"),
        (FlCocs, ["--labels-per-client", "0"], "--labels-per-client must be an integer >= 1"),
        (FlCocs, ["--labels-per-client", "11"], "labels_per_client must be an integer in"),
        (FlCocs, ["--policies", "rbcsf"], "--policies: policy 'rbcsf' reads ['available']"),
    ],
    ids=lambda v: v.name if isinstance(v, type) else None,
)
def test_bad_scenario_flag_exits_2_naming_it(experiment, argv, message, capsys, tmp_path):
    """Experiment-specific flags: status 2, one line naming the flag, no --out."""
    assert message in _bad_flag(experiment, argv, capsys, tmp_path)


def test_infeasible_fairness_message_matches_check_fairness(capsys, tmp_path):
    """FlCsUcbQ reports check_fairness's own message for the c it derives from the data:
    c = (N/2)·s_k/Σs, and the rich client's c ≈ 0.18 exceeds its availability 0.1."""
    from jfl.experiments.regret import check_fairness
    from jfl.fl.data import load_digits
    from jfl.fl.partition import make_partition

    partition = make_partition(
        "heterogeneous", load_digits().y_train, 6, 0, rich_clients=1, labels_per_rich=3
    )
    sizes = partition.count.astype(float)
    with pytest.raises(ValueError) as expected:
        check_fairness(0.5 * sizes / sizes.sum(), np.full(6, 0.1), 1)
    argv = ["--N", "1", "--availability", "0.1"]
    message = _bad_flag(FlCsUcbQ, argv, capsys, tmp_path)
    assert "fairness is infeasible" in message
    assert message.strip() == str(expected.value)


def test_fl_cocs_slots_are_what_the_budget_affords():
    """Each ES affords ⌊B / min cost⌋ clients, at least 1 and at most N in all."""
    params = preset_params("mnist", num_clients=8, num_servers=2)
    cheapest = float(params.price_low * params.computation_low)
    assert max_selected(params, 3 * cheapest) == 6
    assert max_selected(params, 0.1 * cheapest) == 1
    assert max_selected(params, 100 * cheapest) == 8


def test_fl_rbcsf_client_size_is_500_capped_by_the_data():
    """§6.2.1's 500 samples per client, capped at n // N; None is n // N."""
    assert FlRbcsf().samples_per_client == 500
    assert FlRbcsf().client_size(60_000) == 500  # Fashion-MNIST: 40 clients of 500
    assert FlRbcsf().client_size(50_000) == 500  # CIFAR-10
    assert FlRbcsf().client_size(1437) == 35  # digits: 1437 // 40
    assert FlRbcsf(clients=8).client_size(1437) == 179
    assert FlRbcsf(clients=8, samples_per_client=100).client_size(1437) == 100
    assert FlRbcsf(samples_per_client=None).client_size(60_000) == 1500
    assert FlRbcsf(samples_per_client=None).client_size(1437) == 35


@pytest.mark.parametrize(
    ("argv", "used", "note"),
    [
        ([], 35, True),  # 500 capped by digits
        (["--samples-per-client", "20"], 20, False),
        (["--samples-per-client", "None"], 35, False),
    ],
)
def test_fl_rbcsf_plan_partitions_note_and_metadata(argv, used, note, capsys):
    """The paper's 40 clients on digits: every γ₁ scenario, IID included, gets the same client
    size; a cap prints one note line and the metadata records the size asked for and used.
    Planning compiles nothing."""
    config = cli.parse(FlRbcsf, [*argv, "--quiet"], prog="fl_rbcsf")
    config.check()
    plan = config.plan()
    err = capsys.readouterr().err
    expected = "note: digits has 1437 training samples, 35 per client instead of 500"
    if note:
        assert err.count("\n") == 1 and err.startswith(expected), err
        assert "--samples-per-client" in err
    else:
        assert err == ""
    count = np.asarray(plan.data.count)
    assert count.shape == (3, 40) and (count == used).all()  # γ₁ = 1, 10, IID
    requested = config.samples_per_client
    assert plan.metadata["data"]["samples_per_client"] == {"requested": requested, "used": used}
    assert plan.metadata["data"]["clients_samples_max"] == used


def test_fl_rbcsf_records_the_cnn_padding():
    """A CNN's padding sits next to its name in the metadata ("same" lets it take digits)."""
    argv = ["--model", "fashion_cnn", "--padding", "same", "--clients", "8", "--m", "2"]
    config = cli.parse(FlRbcsf, [*argv, "--gamma1", "1", "--quiet"], prog="fl_rbcsf")
    config.check()
    model = config.plan().metadata["model"]
    # 8×8 → 4 → 2 with "same": 2·2·50 inputs to Dense 500.
    conv = 5 * 5 * 1 * 20 + 20 + 5 * 5 * 20 * 50 + 50
    assert model == {
        "name": "fashion_cnn",
        "parameters": conv + 200 * 500 + 500 + 500 * 10 + 10,
        "padding": "same",
    }


# --------------------------------------------------------------------------- tiny runs


def _idx(array: np.ndarray) -> bytes:
    """``array`` (uint8) as an IDX file: two zero bytes, type 0x08, ndim, big-endian sizes."""
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}i", *array.shape)
    return header + array.tobytes()


@pytest.fixture(scope="module")
def mnist_dir(tmp_path_factory):
    """A fake MNIST: 60 train and 20 test 28×28 images, labels 0–9 balanced, gzipped IDX."""
    directory = tmp_path_factory.mktemp("mnist")
    rng = np.random.default_rng(0)

    def images(labels):
        x = rng.integers(0, 60, (len(labels), 28, 28), dtype=np.uint8)
        for i, y in enumerate(labels):  # a bright block whose place tells the label
            x[i, 2 * y : 2 * y + 6, 2 * y : 2 * y + 6] = 255
        return x

    train = rng.permutation(np.repeat(np.arange(10, dtype=np.uint8), 6))
    test = rng.permutation(np.repeat(np.arange(10, dtype=np.uint8), 2))
    arrays = (images(train), train, images(test), test)
    for name, array in zip(MNIST_FILES, arrays, strict=True):
        (directory / f"{name}.gz").write_bytes(gzip.compress(_idx(array)))
    return directory


def _run(name, out, **placeholders):
    """Run ``name``'s golden flags through the command line, every run's rounds kept beside the
    reductions (``--per-run-rounds``: the summary is the same, tests/test_reduction.py), then
    read back what it wrote."""
    argv = [*golden_argv(name, **placeholders), "--quiet", "--per-run-rounds", "--out", str(out)]
    with record_figures() as figures:
        assert cli.main(EXPERIMENTS_BY_NAME[name], argv) == 0
    return {
        "out": out,
        "figures": figures,
        "ds": load_dataset(out / "results.nc"),
        "summary": pd.read_csv(out / "summary.csv"),
        "metadata": json.loads((out / "metadata.json").read_text()),
    }


# The runs are the golden runs (tests/golden.py): their summaries are also checked bit for bit.
@pytest.fixture(scope="module")
def rbcsf_run(tmp_path_factory):
    """FlRbcsf: RBCS-F and FedCS over γ₁ ∈ {1, IID} on digits (2 policies × 2 scenarios), with a
    target accuracy of 0.6."""
    return _run("fl_rbcsf", tmp_path_factory.mktemp("fl_rbcsf") / "run")


@pytest.fixture(scope="module")
def cs_ucb_q_run(tmp_path_factory):
    """FlCsUcbQ: CS-UCB-Q on digits, with a target accuracy of 1 that is never reached."""
    return _run("fl_cs_ucb_q", tmp_path_factory.mktemp("fl_cs_ucb_q") / "run")


@pytest.fixture(scope="module")
def cocs_run(tmp_path_factory, mnist_dir):
    """FlCocs: COCS on the fake MNIST from --data-dir."""
    out = tmp_path_factory.mktemp("fl_cocs") / "run"
    return _run("fl_cocs", out, mnist_dir=str(mnist_dir))


AGAINST = {"round": "round", "time": "simulated wall-clock time (s)"}  # the accuracy figures' x
RUNS = {
    "rbcsf_run": ("fl_rbcsf", 4, ["gamma1-1", "gamma1-iid"]),
    "cs_ucb_q_run": ("fl_cs_ucb_q", 1, [None]),
    "cocs_run": ("fl_cocs", 1, [None]),
}


@pytest.fixture(params=list(RUNS))
def run(request):
    return request.param, request.getfixturevalue(request.param)


def test_summary_reproduces_its_golden_run(run):
    """The summary equals the one the code before the refactor wrote (tests/golden.py)."""
    fixture, run = run
    assert_golden_summary(RUNS[fixture][0], run["summary"])


def test_outputs_summary_results_metadata_and_figures(run):
    """summary.csv, results.nc, metadata.json and the accuracy figures of a tiny run."""
    fixture, run = run
    name, rows, scenarios = RUNS[fixture]
    out, ds, summary, metadata = run["out"], run["ds"], run["summary"], run["metadata"]

    required = [
        "policy",
        "n_seeds",
        "final_accuracy",
        "final_accuracy_lo",
        "final_accuracy_hi",
        "rounds_to_accuracy",
        "time_to_accuracy",
        "reached_accuracy",
    ]
    assert set(required) <= set(summary.columns)
    assert len(summary) == rows == ds.sizes["config"]
    assert (summary["n_seeds"] == 2).all()
    assert list(summary["policy"]) == list(ds["policy"].to_numpy())
    assert summary["final_accuracy"].between(0, 1).all()
    assert (summary["final_accuracy_lo"] <= summary["final_accuracy"]).all()
    assert (summary["final_accuracy"] <= summary["final_accuracy_hi"]).all()
    assert summary["reached_accuracy"].between(0, 1).all()

    accuracy = ds["accuracy"]
    assert accuracy.dims == ("config", "seed", "eval")
    assert accuracy.shape == (rows, 2, len(EVALS))
    assert list(ds["eval"].to_numpy()) == EVALS
    assert ((accuracy >= 0) & (accuracy <= 1)).all()
    np.testing.assert_allclose(
        summary["final_accuracy"], accuracy.isel(eval=-1).mean("seed"), rtol=1e-6
    )
    round_time = ds["round_time"].to_numpy()
    wall_clock = ds["wall_clock"].to_numpy()
    assert wall_clock.shape == (rows, 2, ROUNDS)
    assert (round_time >= 0).all() and (np.diff(wall_clock, axis=-1) >= 0).all()
    np.testing.assert_allclose(wall_clock, np.cumsum(round_time, axis=-1), rtol=1e-6)
    assert (ds["num_delivered"] <= ds["num_selected"]).all()
    assert (ds["untrained"] == 0).all()
    assert float(ds.attrs["target_accuracy"]) == float(metadata["config"]["target_accuracy"])

    assert metadata["config"]["experiment"] == name
    assert metadata["model"]["name"] == "logistic" and metadata["model"]["parameters"] > 0
    assert "padding" not in metadata["model"]  # logistic regression has none
    assert metadata["config"]["model"] == "logistic"
    dataset = "mnist" if name == "fl_cocs" else "digits"
    assert metadata["config"]["dataset"] == dataset
    assert metadata["data"]["train"] == (60 if dataset == "mnist" else 1437)
    assert json.loads(ds.attrs["metadata"])["config"]["dataset"] == dataset

    # One pair of accuracy figures per scenario, each with a band per configuration of it (the
    # mean over seeds of its accuracy; drawn from the bands reduced on the device) labelled with
    # its policy; together they show every row.
    means = ds["accuracy"].mean("seed").to_numpy()
    mean_clock = ds["wall_clock"].mean("seed").to_numpy()
    clocks = np.concatenate([np.zeros((rows, 1)), mean_clock], axis=1)[:, EVALS]
    policy = ds["policy"].to_numpy()
    shown = set()
    figures = [f"accuracy_vs_{a}{f'_{s}' if s else ''}" for s in scenarios for a in AGAINST]
    assert sorted(p.stem for p in (out / "figures").glob("*.png")) == sorted(figures)
    for name in figures:
        figure = run["figures"][f"{name}.png"]
        read_back_png(out / "figures" / f"{name}.png", figure)
        (ax,) = axes_summary(figure)
        assert ax["ylabel"] == "test accuracy"
        assert ax["xlabel"] == AGAINST[name.split("_")[2]], ax
        bands = figure.axes[0].get_lines()[: len(ax["legend"])]
        assert len(bands) == rows // len(scenarios), ax
        for band, text in zip(bands, ax["legend"], strict=True):
            same = [c for c in range(rows) if np.allclose(band.get_ydata(), means[c])]
            assert any(policy[c] == text.split()[0] for c in same), (name, text, same)
            shown.update(c for c in same if policy[c] == text.split()[0])
            # Against time, each evaluation at the seed-mean clock of its round (0 at round 0).
            x = EVALS if "round" in name else [clocks[c] for c in same]
            assert any(np.allclose(band.get_xdata(), a, rtol=1e-6) for a in np.atleast_2d(x))
    assert shown == set(range(rows))


# Each golden run again with a second learning rate listed before its own: twice the
# configurations, in other positions of the sweep. Every chunk holds one configuration, so the
# programs are the golden run's, loaded from the compilation cache.
RECOMPOSED = {
    "rbcsf_run": ["--lr", "0.1,0.3"],
    "cs_ucb_q_run": ["--lr", "0.05,0.1"],
    "cocs_run": ["--lr", "0.05,0.1"],
}
LABELS = (
    "policy",
    "aggregation",
    "learning_rate",
    "partition",
    "gamma1",
    "V",
    "beta",
    "budget",
    "deadline",
)


def test_configuration_results_do_not_depend_on_the_rest_of_the_sweep(run, tmp_path, mnist_dir):
    """A configuration's per-run values are bit-identical in a sweep of twice the
    configurations (docs/decisions.md#federated-chunks)."""
    fixture, run = run
    name = RUNS[fixture][0]
    argv = [*golden_argv(name, mnist_dir=str(mnist_dir)), *RECOMPOSED[fixture], "--per-run-rounds"]
    out = tmp_path / "recomposed"
    assert (
        cli.main(EXPERIMENTS_BY_NAME[name], [*argv, "--quiet", "--no-plots", "--out", str(out)])
        == 0
    )
    large = load_dataset(out / "results.nc")
    keys = [k for k in LABELS if k in run["ds"].coords and k != "partition"]
    assert_same_configurations(run["ds"], large, keys)


def test_rbcsf_gamma1_scenarios_and_fedcs_rows(rbcsf_run):
    """--gamma1 1,iid gives a gamma1 column {1, inf}; FedCS rows train every client it picks."""
    ds, summary = rbcsf_run["ds"], rbcsf_run["summary"]
    assert list(summary["policy"]) == ["rbcsf", "rbcsf", "fedcs", "fedcs"]
    assert list(summary["gamma1"]) == [1.0, math.inf] * 2
    assert (summary["learning_rate"] == 0.3).all()
    fedcs = ds["policy"].to_numpy() == "fedcs"
    assert (ds["untrained"].to_numpy()[fedcs] == 0).all()
    assert ds["num_selected"].to_numpy()[fedcs].max() >= 1
    assert (ds["num_selected"].to_numpy()[fedcs] <= 8).all()
    # RBCS-F selects m = 2 clients whenever two are available.
    assert ds["num_selected"].to_numpy()[~fedcs].max() <= 2
    # Dirichlet and IID clients alike hold 1437 // 8 = 179 samples (500 capped by digits).
    sizes = ds["data_size"].to_numpy()
    assert sizes.shape == (2, 8) and (sizes == 179).all()
    metadata = rbcsf_run["metadata"]
    assert metadata["data"]["samples_per_client"] == {"requested": 500, "used": 179}
    assert metadata["config"]["samples_per_client"] == 500
    assert metadata["config"]["padding"] == "valid"


def test_cocs_runs_on_mnist_from_data_dir(cocs_run, mnist_dir):
    """FlCocs reads the fake MNIST from --data-dir; the metadata says mnist."""
    metadata = cocs_run["metadata"]
    assert metadata["config"]["dataset"] == "mnist"
    assert metadata["config"]["data_dir"] == str(mnist_dir)
    assert metadata["data"]["train"] == 60 and metadata["data"]["test"] == 20
    assert cocs_run["ds"]["data_size"].to_numpy().sum() <= 60
    assert list(cocs_run["summary"]["policy"]) == ["cocs"]
    assert "success_per_round" in cocs_run["summary"]


# --------------------------------------------------------------------------- FlCsUcbIdeal


def test_cs_ucb_sweeps_default_to_the_papers_protocol():
    """Xia §V-A: SGD, "mini-batch size ρ is 2 and the learning rate is 0.001", one step a round
    (ρ samples per local update, eq. 36); the FedAvg epochs are a flag away, None spelled so."""
    assert PAPER_PROTOCOL == {"local_steps": 1, "batch_size": 2, "lr": (0.001,)}
    for experiment in (FlCsUcbIdeal, FlCsUcbQ):
        training = experiment().training
        assert (training.local_steps, training.batch_size, training.lr) == (1, 2, (0.001,))
        fedavg = ["--local-steps", "None", "--batch-size", "10", "--lr", "0.1"]
        training = cli.parse(experiment, fedavg).training
        assert (training.local_steps, training.batch_size, training.lr) == (None, 10, (0.1,))
        assert training.epochs == 1
    ideal = FlCsUcbIdeal()
    assert (ideal.clients, ideal.N) == (20, 5)
    assert ideal.policies == ("cs_ucb", "random", "round_robin", "local_accuracy")
    assert ideal.rounds % ideal.training.eval_every == 0
    # The other federated sweeps keep FedAvg's epochs.
    assert FlRbcsf().training.local_steps is None and FlCocs().training.local_steps is None


@pytest.fixture(scope="module")
def ideal_run(tmp_path_factory):
    """FlCsUcbIdeal through jfl.driver.run at its defaults' protocol: local_accuracy and CS-UCB
    on 6 always-available clients and 2 channels, per-round selections stored."""
    out = tmp_path_factory.mktemp("fl_cs_ucb") / "run"
    argv = [*TINY[FlCsUcbIdeal], "--policies", "local_accuracy,cs_ucb", "--trajectories"]
    result = driver.run(cli.parse(FlCsUcbIdeal, [*argv, "--no-plots", "--out", str(out)]))
    return {
        "result": result,
        "ds": load_dataset(out / "results.nc"),
        "summary": pd.read_csv(out / "summary.csv"),
        "metadata": json.loads((out / "metadata.json").read_text()),
    }


def test_fl_cs_ucb_ideal_results_do_not_depend_on_the_rest_of_the_sweep(ideal_run, tmp_path):
    """The ideal scenario's runs, per-round selections included, are bit-identical in a sweep
    with a second learning rate listed first (the same programs, from the compilation cache)."""
    argv = [*TINY[FlCsUcbIdeal], "--policies", "local_accuracy,cs_ucb", "--trajectories"]
    out = tmp_path / "recomposed"
    argv += ["--lr", "0.01,0.001", "--no-plots", "--out", str(out)]
    driver.run(cli.parse(FlCsUcbIdeal, argv))
    keys = ("policy", "aggregation", "learning_rate")
    assert_same_configurations(ideal_run["ds"], load_dataset(out / "results.nc"), keys)


def test_fl_cs_ucb_ideal_runs_end_to_end(ideal_run):
    ds, summary, metadata = ideal_run["ds"], ideal_run["summary"], ideal_run["metadata"]
    assert set(FlCsUcbIdeal.summary_columns) <= set(summary.columns)
    assert list(summary["policy"]) == ["local_accuracy", "cs_ucb"]
    assert (summary["learning_rate"] == 0.001).all() and (summary["n_seeds"] == 2).all()
    assert summary["final_accuracy"].between(0, 1).all()
    assert metadata["config"]["experiment"] == "fl_cs_ucb"
    assert metadata["config"]["local_steps"] == 1 and metadata["config"]["batch_size"] == 2
    # Reduced on the device: with --trajectories (and not --per-run-rounds) every run's
    # selections are kept, not its per-round values, which have their bands.
    for name in ("accuracy", "wall_clock", "round_time", "num_selected", "num_failed"):
        assert name not in ds and f"{name}_band" in ds, name
    # The ideal scenario: every client available, so N = 2 selected every round; digits' 1437
    # training samples split equally (to one sample).
    assert ds["selected"].shape == (2, 2, ROUNDS, 6)
    assert (ds["selected"].sum("client") == 2).all()
    selected = ds["num_selected_band"]
    assert (selected.sel(stat="mean") == 2).all() and (selected.sel(stat="var") == 0).all()
    sizes = ds["data_size"].to_numpy()
    assert sizes.sum() == 1437 and sizes.max() - sizes.min() <= 1
    assert ds["accuracy_band"].shape == (2, 2, len(EVALS))
    assert (ds["untrained"] == 0).all()
    failed = ds["num_failed_band"].sel(stat="mean").sum("round")  # mean over seeds of Σ_t
    np.testing.assert_allclose(summary["failed_clients"], failed, rtol=1e-6)
    np.testing.assert_allclose(summary["failed_clients"], ds["failed_clients"].mean("seed"))


# --------------------------------------------------------------------------- accuracy metrics


def _time_to_target(accuracy, evals, wall_clock, target):
    """(rounds, time) of the first evaluation with accuracy ≥ target, NaN if none."""
    for index, value in enumerate(accuracy):
        if value >= target:
            rounds = int(evals[index])
            return rounds, (0.0 if rounds == 0 else float(wall_clock[rounds - 1]))
    return math.nan, math.nan


def test_rounds_and_time_to_accuracy_recomputed_from_curves(run):
    """rounds/time to the target match a plain loop over (config, seed); summary averages them."""
    _, run = run
    ds, summary = run["ds"], run["summary"]
    target = float(ds.attrs["target_accuracy"])
    metrics = run_metrics(ds)
    accuracy = ds["accuracy"].to_numpy()
    wall_clock = ds["wall_clock"].to_numpy()
    evals = ds["eval"].to_numpy()
    configs, seeds = ds.sizes["config"], ds.sizes["seed"]
    rounds = np.full((configs, seeds), np.nan)
    time = np.full((configs, seeds), np.nan)
    for c in range(configs):
        for s in range(seeds):
            rounds[c, s], time[c, s] = _time_to_target(
                accuracy[c, s], evals, wall_clock[c, s], target
            )
    reached = ~np.isnan(rounds)
    for name, expected in (
        ("rounds_to_accuracy", rounds),
        ("time_to_accuracy", time),
        ("reached_accuracy", reached.astype(float)),
        ("final_accuracy", accuracy[..., -1]),
    ):
        got = metrics[name].transpose("config", "seed").to_numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-6, err_msg=name)
    for c in range(configs):
        row = summary.iloc[c]
        assert row["reached_accuracy"] == pytest.approx(reached[c].mean())
        if reached[c].any():  # the mean over the seeds that reach the target
            assert row["rounds_to_accuracy"] == pytest.approx(rounds[c][reached[c]].mean())
            assert row["time_to_accuracy"] == pytest.approx(time[c][reached[c]].mean(), rel=1e-6)
        else:
            assert math.isnan(row["rounds_to_accuracy"]) and math.isnan(row["time_to_accuracy"])


def test_target_reached_by_some_runs_only(rbcsf_run):
    """A target between the runs' best accuracies is reached by some runs only: rounds and time
    to it match the plain loop for both kinds (the golden flags' target may suit every run)."""
    ds = rbcsf_run["ds"].copy()
    best = ds["accuracy"].max("eval").to_numpy()
    assert best.min() < best.max()
    target = float((best.min() + best.max()) / 2)
    ds.attrs["target_accuracy"] = target
    metrics = run_metrics(ds)
    reached = metrics["reached_accuracy"].transpose("config", "seed").to_numpy()
    assert 0 < reached.mean() < 1
    accuracy, evals = ds["accuracy"].to_numpy(), ds["eval"].to_numpy()
    wall_clock = ds["wall_clock"].to_numpy()
    rounds = metrics["rounds_to_accuracy"].transpose("config", "seed").to_numpy()
    time = metrics["time_to_accuracy"].transpose("config", "seed").to_numpy()
    for c in range(ds.sizes["config"]):
        for s in range(ds.sizes["seed"]):
            expected = _time_to_target(accuracy[c, s], evals, wall_clock[c, s], target)
            np.testing.assert_allclose((rounds[c, s], time[c, s]), expected, rtol=1e-6)
            assert reached[c, s] == (not math.isnan(expected[0]))


def test_unreachable_target_gives_nan_rounds_and_zero_reached(cs_ucb_q_run, rbcsf_run):
    """A target of 1 is never reached: NaN rounds and time, reached_accuracy 0."""
    summary = cs_ucb_q_run["summary"]
    assert summary["rounds_to_accuracy"].isna().all()
    assert summary["time_to_accuracy"].isna().all()
    assert (summary["reached_accuracy"] == 0).all()
    ds = rbcsf_run["ds"].copy()
    ds.attrs["target_accuracy"] = 1.0
    metrics = run_metrics(ds)
    assert bool(np.isnan(metrics["rounds_to_accuracy"]).all())
    assert bool(np.isnan(metrics["time_to_accuracy"]).all())
    assert (metrics["reached_accuracy"] == 0).all()


def test_accuracy_metrics_reduced_on_the_device_are_the_hosts(run):
    """Every run's accuracy metrics as the sweep reduced them on the device equal the host's
    reference (``jfl.results.accuracy_metrics``) on the same runs' kept rounds: the same float32
    accuracy and clock values picked at the same evaluation, NaN where the target is never
    reached (``fl_cs_ucb_q``'s target of 1)."""
    _, run = run
    ds, summary = run["ds"], run["summary"]
    host = accuracy_metrics(ds)
    assert list(host) == list(reduction.ACCURACY_METRICS)
    for name, expected in host.items():
        got = ds[name].transpose("config", "seed").to_numpy()
        assert got.dtype == np.float32, name
        expected = expected.transpose("config", "seed").to_numpy()
        np.testing.assert_array_equal(got, expected.astype(np.float32), err_msg=name)
    # The summary's accuracy columns lead its metrics, as on the host.
    metrics = [c for c in summary.columns if c.endswith("_lo")]
    assert [c.removesuffix("_lo") for c in metrics[:4]] == list(reduction.ACCURACY_METRICS)


def _device_accuracy(ds, target: float) -> dict[str, np.ndarray]:
    """``jfl.reduction.accuracy_metrics(target)`` of every run of ``ds`` (its kept rounds), as
    the device computes them: [config, seed] each."""
    metrics = reduction.accuracy_metrics(target)
    rounds = ds.sizes["round"]

    def per_run(accuracy, wall_clock):
        outputs = {"accuracy": accuracy, "wall_clock": wall_clock}
        run = reduction.RunView(outputs, {}, rounds, "queue_rate")
        return {name: metric.fn(run) for name, metric in metrics.items()}

    accuracy = ds["accuracy"].transpose("config", "seed", "eval").to_numpy()
    wall_clock = ds["wall_clock"].transpose("config", "seed", "round").to_numpy()
    values = jax.jit(jax.vmap(jax.vmap(per_run)))(jnp.asarray(accuracy), jnp.asarray(wall_clock))
    return {name: np.asarray(value) for name, value in values.items()}


# Targets on the runs' own accuracies [config, seed, eval]: reached at round 0 by the runs whose
# initial model is at least as accurate as the median's (time 0), equal to an accuracy that
# some run reaches (≥ counts it), between the runs' best (some runs never reach it: NaN), and
# reached by none.
TARGETS = {
    "round 0": lambda accuracy: np.median(accuracy[..., 0]),
    "equal": lambda accuracy: accuracy[0, 0, 1],
    "between": lambda accuracy: (accuracy.max(-1).min() + accuracy.max(-1).max()) / 2,
    "never": lambda accuracy: 1.0,
}


@pytest.mark.parametrize("target", TARGETS)
def test_accuracy_metrics_on_the_device_at_other_targets(rbcsf_run, target):
    """The device's accuracy metrics against other targets on the same runs equal the host's:
    a target reached at round 0 (time 0), one equal to an accuracy, one some runs never reach
    (censored: NaN rounds and time), one none reaches."""
    ds = rbcsf_run["ds"].copy()
    value = float(TARGETS[target](ds["accuracy"].to_numpy()))
    ds.attrs["target_accuracy"] = value
    host = {k: v.transpose("config", "seed").to_numpy() for k, v in accuracy_metrics(ds).items()}
    device = _device_accuracy(ds, value)
    for name in reduction.ACCURACY_METRICS:
        np.testing.assert_array_equal(device[name], host[name].astype(np.float32), err_msg=name)
    rounds, reached = device["rounds_to_accuracy"], device["reached_accuracy"]
    if target == "round 0":
        assert (rounds == 0).any() and (device["time_to_accuracy"][rounds == 0] == 0).all()
        assert (rounds > 0).any() or np.isnan(rounds).any()
    if target in ("between", "never"):
        assert np.isnan(rounds[reached == 0]).all() and (reached == 0).any()
        assert np.isnan(device["time_to_accuracy"][reached == 0]).all()
    if target == "never":
        assert (reached == 0).all()


# --------------------------------------------------------------------------- fairness metrics


def test_runs_leave_guaranteed_rates_unmet(rbcsf_run, cs_ucb_q_run):
    """The runner's last_unmet_round says some runs miss their rate at T (so the rate-metric
    tests below are not vacuous): FedCS leaves clients unselected, and CS-UCB-Q cannot meet c in
    4 rounds."""
    for run in (rbcsf_run, cs_ucb_q_run):
        assert (run["ds"]["last_unmet_round"].to_numpy() == ROUNDS).any()
    fedcs = rbcsf_run["ds"]["policy"].to_numpy() == "fedcs"
    assert (rbcsf_run["ds"]["selection_count"].to_numpy()[fedcs] == 0).any()


def test_rbcsf_rate_metrics_use_the_guaranteed_rate(rbcsf_run):
    """FedCS leaves clients unselected, so its rate violation against β = 0.15 is positive."""
    ds, summary = rbcsf_run["ds"], rbcsf_run["summary"]
    rate = ds["selection_count"].to_numpy() / ROUNDS
    expected = np.maximum(0.15 - rate, 0.0).max(-1).mean(-1)
    np.testing.assert_allclose(summary["max_rate_violation"], expected, rtol=1e-6)
    # target_met agrees with the runner's own last_unmet_round (T: unmet at the end).
    met = (ds["last_unmet_round"].to_numpy() < ROUNDS).mean(-1)
    np.testing.assert_allclose(summary["target_met"], met)


def test_cs_ucb_q_rate_metrics_use_c(cs_ucb_q_run):
    """max_rate_violation is max_k (c_k − rate_k)⁺ with c_k = (N/2)·s_k/Σs (N = 2)."""
    ds, summary = cs_ucb_q_run["ds"], cs_ucb_q_run["summary"]
    sizes = ds["data_size"].to_numpy()[0].astype(float)
    c = sizes / sizes.sum()
    np.testing.assert_allclose(ds["queue_rate"].to_numpy()[0], c, rtol=1e-12)
    rate = ds["selection_count"].to_numpy() / ROUNDS
    expected = np.maximum(c - rate, 0.0).max(-1).mean(-1)
    np.testing.assert_allclose(summary["max_rate_violation"], expected, rtol=1e-6)
    met = (ds["last_unmet_round"].to_numpy() < ROUNDS).mean(-1)
    np.testing.assert_allclose(summary["target_met"], met)
