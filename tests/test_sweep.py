"""Grid building, output directory handling and the v_beta_grid command line."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from jfl.results import load_dataset
from jfl.sweep import config_table, parse_values, policy_hparams, prepare_out_dir
from tests.cli_helpers import load_script, run_cli

cli = load_script("v_beta_grid")


def test_parse_values_lists_and_ranges():
    assert parse_values("1,10,20", "V") == [1.0, 10.0, 20.0]
    assert parse_values("0:50:11", "V") == pytest.approx(list(np.linspace(0, 50, 11)))
    assert parse_values("0.15", "beta") == [0.15]
    for bad in ("", "a,b", "0:1", "0:1:0", "0:1:x"):
        with pytest.raises(ValueError, match="--V"):
            parse_values(bad, "V")


def test_config_table_grid_and_unused_hparams():
    """rbcsf gets the V×β×α product; baselines one row each with NaN for unused columns."""
    table = config_table(
        ["rbcsf", "random", "fedcs"],
        {"V": [1, 10], "beta": [0.1, 0.2], "alpha": [0.1], "deadline": [3, 4]},
        fairness_target=0.15,
    )
    assert list(table.columns) == ["policy", "V", "beta", "alpha", "deadline", "queue_rate"]
    rb = table[table.policy == "rbcsf"]
    assert len(rb) == 4 and rb["deadline"].isna().all()
    np.testing.assert_allclose(rb["queue_rate"], rb["beta"])
    rnd = table[table.policy == "random"]
    assert len(rnd) == 1 and rnd[["V", "beta", "alpha", "deadline"]].isna().all(axis=None)
    assert rnd["queue_rate"].item() == 0.15
    fed = table[table.policy == "fedcs"]
    assert sorted(fed["deadline"]) == [3, 4]
    hp = policy_hparams("rbcsf", rb, fixed={"lam": 2.0})
    np.testing.assert_allclose(hp["lam"], 2.0)
    np.testing.assert_allclose(hp["V"], [1, 1, 10, 10])


@pytest.mark.parametrize(
    ("swept", "message"),
    [
        ({"beta": [1.5]}, r"beta must be in \[0.0, 1.0\]"),
        ({"V": [-1]}, r"V must be in \[0.0, inf\)"),
        ({"alpha": [-0.1]}, "alpha"),
    ],
)
def test_config_table_rejects_out_of_range(swept, message):
    with pytest.raises(ValueError, match=message):
        config_table(["rbcsf"], swept)


def test_unknown_policy_is_rejected():
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        config_table(["nope"], {"V": [1]})


def _run_cli(argv, capsys):
    return run_cli(cli, argv, capsys)


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--m", "41"], "--m must be in [1, --clients=40]"),
        (["--m", "0"], "--m must be in"),
        (["--beta", "1.5"], "beta must be in [0.0, 1.0]"),
        (["--beta", "-0.1"], "beta must be in"),
        (["--V", "-1"], "V must be in [0.0, inf)"),
        (["--V", "1,x"], "--V: expected"),
        (["--alpha", "-1"], "alpha must be in"),
        (["--deadline", "0"], "deadline must be in"),
        (["--policies", "rbcsf,magic"], "unknown policy 'magic'"),
        (["--policies", ""], "--policies"),
        (["--seeds", "0"], "--seeds must be an integer >= 1"),
        (["--rounds", "0"], "--rounds must be an integer >= 1"),
        (["--clients", "0"], "--clients must be an integer >= 1"),
        (["--p-available", "1.2"], "--p-available must be in [0, 1]"),
        (["--fairness-target", "2"], "--fairness-target must be in [0, 1]"),
        (["--chunk-size", "0"], "--chunk-size must be an integer >= 1"),
        (["--chunk-size", "many"], "--chunk-size must be a positive integer or 'auto'"),
        (["--memory-budget", "0"], "--memory-budget must be > 0"),
        (["--lam", "0"], "--lam must be > 0"),
        (["--resume", "--overwrite"], "exclude each other"),
    ],
)
def test_cli_bad_input_fails_early_with_a_clear_message(argv, flag, capsys, tmp_path):
    """Each bad flag exits with status 2 and one message naming it; nothing is written."""
    out = tmp_path / "out"
    code, err = _run_cli([*argv, "--out", str(out)], capsys)
    assert code == 2
    assert flag in err
    assert not out.exists()


def test_cli_refuses_to_resume_a_foreign_or_changed_directory(capsys, tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("not a sweep")
    code, err = _run_cli(["--resume", "--out", str(foreign)], capsys)
    assert code == 2 and "is not a sweep directory" in err

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "manifest.json").write_text("{not json")
    code, err = _run_cli(["--resume", "--out", str(broken)], capsys)
    assert code == 2 and "corrupt results directory" in err

    manifest = {"rounds": 10, "seeds": 2}
    prepare_out_dir(tmp_path / "run", manifest, resume=False, overwrite=False)
    with pytest.raises(ValueError, match="rounds: was 10, now 20"):
        prepare_out_dir(tmp_path / "run", {**manifest, "rounds": 20}, resume=True, overwrite=False)
    with pytest.raises(ValueError, match="already holds a sweep"):
        prepare_out_dir(tmp_path / "run", manifest, resume=False, overwrite=False)


def test_cli_small_grid_end_to_end(capsys, tmp_path):
    """A small V×β grid writes summary.csv, results.nc, metadata and figures; resume reloads."""
    out = tmp_path / "grid"
    argv = [
        "--V", "0,50", "--beta", "0,0.2", "--alpha", "0.1", "--seeds", "3", "--rounds", "25",
        "--clients", "12", "--m", "3", "--chunk-size", "3", "--out", str(out), "--quiet",
    ]  # fmt: skip
    assert cli.main(argv) == 0
    summary = pd.read_csv(out / "summary.csv")
    required = ["policy", "V", "beta", "alpha", "n_seeds"]
    for metric in (
        "mean_round_time",
        "final_queue_mean",
        "min_selection_rate",
        "jain_index",
        "selected_per_round",
    ):
        required += [metric, f"{metric}_lo", f"{metric}_hi"]
    assert set(required) <= set(summary.columns)
    assert list(summary["policy"]) == ["rbcsf"] * 4 + ["random", "fedcs"]
    assert (summary["n_seeds"] == 3).all()
    baseline = summary[summary.policy != "rbcsf"]
    assert baseline[["V", "beta", "alpha"]].isna().all(axis=None)
    ok = summary["mean_round_time_lo"] <= summary["mean_round_time"]
    assert (ok & (summary["mean_round_time"] <= summary["mean_round_time_hi"])).all()

    with xr.open_dataset(out / "results.nc", engine="h5netcdf") as ds:
        assert dict(ds.sizes) == {"config": 6, "seed": 3, "round": 25, "client": 12}
        assert set(ds.data_vars) >= {"round_time", "queue_mean", "selection_count", "final_queue"}
        meta = json.loads(ds.attrs["metadata"])
        round_time = ds["round_time"].to_numpy()
    assert meta["config"]["grid"]["V"] == [0.0, 50.0]
    metadata = json.loads((out / "metadata.json").read_text())
    assert {"versions", "git_commit", "devices", "config"} <= set(metadata)
    for name in (
        "queue_vs_round",
        "cumulative_time",
        "pull_record",
        "heatmap_mean_round_time",
        "heatmap_min_selection_rate",
    ):
        assert (out / "figures" / f"{name}.png").stat().st_size > 1000

    # Resume over a finished sweep recomputes nothing and reproduces the same numbers.
    chunk = next((out / "chunks" / "rbcsf").glob("*.npz"))
    before = chunk.stat().st_mtime_ns
    assert cli.main([*argv, "--resume", "--no-plots"]) == 0
    assert chunk.stat().st_mtime_ns == before
    reloaded = load_dataset(out / "results.nc")  # the public loader for finished sweeps
    np.testing.assert_array_equal(reloaded["round_time"].to_numpy(), round_time)
    assert list(reloaded["policy"].to_numpy()) == list(summary["policy"])
    capsys.readouterr()
