"""The papers' benchmarks in fl_selection: the Hugging Face datasets, the shards and natural
(by writer) splits, the presets of ``--setting`` and the larger models, on tiny files in the
Hub's layout (offline; tests/helpers.write_hub_parquet)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jfl import cli
from jfl.experiments import FlSelection
from jfl.experiments.selection import SETTINGS
from jfl.fl import load_dataset
from jfl.results import load_dataset as load_results
from tests.helpers import cli_fails, write_hub_parquet

pytest.importorskip("datasets")

SCRIPT = Path(__file__).resolve().parents[2] / "sweeps" / "fl_selection.py"
WRITERS = 7  # the fixture's writers, each with enough samples to keep after LEAF's split


@pytest.fixture(scope="module")
def femnist(tmp_path_factory):
    folder = tmp_path_factory.mktemp("femnist")
    write_hub_parquet(folder, "femnist", {"train": 140}, seed=0)
    return folder


@pytest.fixture(scope="module")
def three_splits(femnist, tmp_path_factory):
    """The command line, as a process: every split of the FEMNIST fixture in one sweep."""
    out = tmp_path_factory.mktemp("three_splits") / "out"
    argv = [
        *(sys.executable, str(SCRIPT), "--dataset", "femnist", "--data-dir", str(femnist)),
        *("--partition", "dirichlet,shards,natural", "--dirichlet", "0.3", "--shards", "2"),
        *("--clients", str(WRITERS), "--m", "3", "--seeds", "2", "--rounds", "2"),
        *("--policies", "random", "--eval-every", "2", "--quiet", "--no-plots", "--out", str(out)),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.processes  # a fresh interpreter compiles its program: CI's second stage
def test_shards_and_natural_splits_run(three_splits, femnist):
    ds = load_results(three_splits / "results.nc")
    assert ds["split"].to_numpy().tolist() == ["dirichlet 0.3", "2 shards", "natural"]
    dataset = load_dataset("femnist", femnist)
    sizes = ds["data_size"].to_numpy()  # [partition, client]
    n = len(dataset.y_train)
    assert sizes[1].tolist() == [2 * (n // (2 * WRITERS))] * WRITERS  # equal shards
    np.testing.assert_array_equal(sizes[2], np.bincount(dataset.groups_train))  # the writers
    assert sizes[0].sum() == n  # the per-class Dirichlet deals every sample
    summary = pd.read_csv(three_splits / "summary.csv")
    assert summary["split"].tolist() == ["dirichlet 0.3", "2 shards", "natural"]
    data = json.loads((three_splits / "metadata.json").read_text())["data"]
    assert data["source"] == str(femnist) and data["device_bytes"] > 0


@pytest.mark.paper  # ResNet-18's programs take a minute to compile on 2 cores: CI's second stage
def test_resnet18_gn_trains_a_cifar_shaped_fixture(tmp_path):
    folder = tmp_path / "cifar"
    write_hub_parquet(folder, "cifar10", {"train": 24, "test": 8}, seed=1)
    out = tmp_path / "out"
    argv = [
        *("--dataset", "cifar10", "--data-dir", str(folder), "--model", "resnet18_gn"),
        *("--padding", "same", "--policies", "random", "--dirichlet", "iid", "--clients", "4"),
        *("--m", "2", "--seeds", "1", "--rounds", "1", "--eval-every", "1", "--local-steps", "1"),
        *("--batch-size", "2", "--quiet", "--no-plots", "--out", str(out)),
    ]
    assert cli.main(FlSelection, argv, prog="fl_selection") == 0
    ds = load_results(out / "results.nc")
    # Reduced on the device: the loss's band over seeds (its mean: one seed) and each run's last.
    loss = ds["test_loss_band"].sel(stat="mean").to_numpy()
    assert loss.size and np.all(np.isfinite(loss))
    assert np.all(np.isfinite(ds["final_test_loss"].to_numpy()))
    model = json.loads((out / "metadata.json").read_text())["model"]
    assert model["name"] == "resnet18_gn" and model["parameters"] > 11_000_000


def test_femnist_without_data_is_one_line(capsys, tmp_path):
    line = cli_fails(
        FlSelection, ["--dataset", "femnist", "--partition", "natural"], capsys, tmp_path
    )
    assert "not in the Hugging Face cache" in line and "--download" in line
    assert "hf download flwrlabs/femnist --repo-type dataset" in line


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--shards", "1"], "--shards is read by --partition shards"),
        (["--partition", "shards", "--shards", "1.5"], "--shards must be an integer"),
        (["--partition", "natural"], "--partition natural .* needs --dataset femnist"),
        (["--partition", "iid"], "--partition must be one of"),
        (["--partition", "shards", "--dirichlet", "0.5"], "--dirichlet is read by --partition"),
        (["--writers", "20"], "--writers samples FEMNIST's writers, not digits'"),
        (["--download"], "--download needs --dataset"),
        (["--setting", "fedcor"], r"--setting must be one of \['fedcor_fmnist', "),
    ],
)
def test_bad_benchmark_flags_are_one_line(capsys, tmp_path, argv, message):
    import re

    assert re.search(message, cli_fails(FlSelection, argv, capsys, tmp_path))


def test_natural_needs_a_client_per_writer(femnist, capsys, tmp_path):
    argv = ["--dataset", "femnist", "--data-dir", str(femnist), "--partition", "natural"]
    line = cli_fails(FlSelection, [*argv, "--clients", "5", "--m", "3"], capsys, tmp_path)
    assert f"each of the {WRITERS} writers" in line and f"--clients {WRITERS}" in line


def test_a_setting_gives_defaults_that_flags_override():
    config = cli.parse(FlSelection, ["--setting", "fedcor_fmnist", "--rounds", "7"])
    assert config == SETTINGS["fedcor_fmnist"].__class__(
        **{**vars(SETTINGS["fedcor_fmnist"]), "rounds": 7}
    )
    assert (config.m, config.clients, config.training.model) == (5, 100, "fedcor_mlp")
    assert config.training.aggregation == ("uniform",)  # FedCor's code averages every method
    later = cli.parse(FlSelection, ["--lr", "0.1", "--setting=pow_d_fmnist"])
    assert later.training.lr == (0.1,) and later.training.local_steps == 30
    for name, preset in SETTINGS.items():
        assert preset.setting == name
        preset.check()  # every preset passes the checks a command line does
