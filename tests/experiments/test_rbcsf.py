"""RBCS-F's V × β grid (``jfl.experiments.VBetaGrid``) through its command line ``jfl.cli.main``.

Bad input is refused before anything compiles. One tiny grid runs end to end (a module-scoped
fixture: its compiled programs and outputs are shared); the golden run (``tests/golden.py``, the
same grid with every policy) pins the numbers, the other tests the files, figures and the reuse
of an output directory.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import shutil

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from jfl import cli
from jfl.driver import EXECUTION_ONLY
from jfl.experiments import VBetaGrid
from jfl.results import load_dataset
from tests.golden import check_golden
from tests.helpers import check_saved_figures, record_figures

PROG = "v_beta_grid.py"
# 4 RBCS-F configurations in chunks of 3 (the second padded), Random and FedCS one each.
TINY = [
    "--V", "0,50", "--beta", "0,0.2", "--alpha", "0.1", "--seeds", "3", "--rounds", "20",
    "--clients", "12", "--m", "3", "--chunk-size", "3", "--quiet",
]  # fmt: skip


def _fails(argv, capsys) -> str:
    """``main`` exits 2 with exactly one stderr line ``v_beta_grid.py: error: …``; that line."""
    with pytest.raises(SystemExit) as exc:
        cli.main(VBetaGrid, argv, prog=PROG)
    captured = capsys.readouterr()
    assert exc.value.code == 2
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"{PROG}: error: ")
    return lines[0]


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--m", "41"], "--m must be an integer in [1, --clients=40], got 41"),
        (["--m", "0"], "--m must be an integer in [1, --clients=40], got 0"),
        (["--clients", "12", "--m", "13"], "--m must be an integer in [1, --clients=12], got 13"),
        (["--m", "2.5"], "--m"),
        (["--beta", "1.5"], "beta must be in [0, 1], got [1.5]"),
        (["--beta", "0.1,-0.1"], "beta must be in [0, 1], got [-0.1]"),
        (["--V", "-1"], "V must be in [0, inf), got [-1.0]"),
        (["--V", "1,x"], "--V"),
        (["--V", "0:50"], "--V"),
        (["--alpha", "-1"], "alpha must be in [0, inf), got [-1.0]"),
        (["--deadline", "0"], "deadline must be in (0, inf), got [0.0]"),
        (["--policies", "dirichlet_random", "--gamma2", "0"], "gamma2 must be in (0, inf)"),
        (["--policies", "rbcsf,magic"], "--policies: unknown policy 'magic'"),
        (["--policies", ""], "--policies"),
        (["--policies", "rbcsf,rbcsf"], "--policies: duplicate names in ['rbcsf', 'rbcsf']"),
        (["--policies", "cs_ucb"], "policy 'cs_ucb' reads ['reward'], which environment 'rbcsf'"),
        (["--seeds", "0"], "--seeds must be an integer >= 1, got 0"),
        (["--seeds", "x"], "--seeds"),
        (["--rounds", "0"], "--rounds must be an integer >= 1, got 0"),
        (["--base-seed", "-1"], "--base-seed must be an integer >= 0, got -1"),
        (["--clients", "0"], "--clients must be an integer in [1, 10000000], got 0"),
        (["--p-available", "1.5"], "--p-available must be in [0, 1], got 1.5"),
        (["--p-available", "-0.1"], "--p-available must be in [0, 1], got -0.1"),
        (["--fairness-target", "2"], "--fairness-target must be in [0, 1], got 2.0"),
        (["--chunk-size", "0"], "--chunk-size must be an integer >= 1, got 0"),
        (["--chunk-size", "many"], "--chunk-size must be a positive integer or 'auto', got 'many'"),
        (["--memory-budget", "0"], "--memory-budget must be in (0, inf), got 0.0"),
        (["--lam", "0"], "--lam must be in (0, inf), got 0.0"),
        (["--ci", "normal"], "--ci"),
        (["--eta-base", "10"], "--eta-base"),
        (["--resume", "--overwrite"], "--resume and --overwrite exclude each other"),
        (["--N", "2"], "--N"),  # a flag of another experiment
    ],
)
def test_bad_input_fails_early_with_one_line_naming_the_flag(argv, message, capsys, tmp_path):
    """Each bad flag exits with status 2 and one line naming it; --out is not created."""
    out = tmp_path / "out"
    line = _fails([*argv, "--out", str(out)], capsys)
    assert message in line
    assert not out.exists()


def test_refuses_to_resume_a_foreign_or_corrupt_directory(capsys, tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("not a sweep")
    line = _fails([*TINY, "--resume", "--out", str(foreign)], capsys)
    assert f"--resume: {foreign} has no manifest.json; it is not a sweep directory" in line
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "manifest.json").write_text("{not json")
    for flags in (["--resume"], []):
        line = _fails([*TINY, *flags, "--out", str(broken)], capsys)
        assert "corrupt results directory: cannot read" in line and "--overwrite" in line


# --------------------------------------------------------------------------- the plan


def test_plan_builds_the_grid_without_running():
    config = VBetaGrid(V=(0.0, 50.0), beta=(0.0, 0.2), alpha=(0.1,), clients=12, m=3, lam=2.0)
    config.check()
    plan = config.plan()
    assert list(plan.configs["policy"]) == ["rbcsf"] * 4 + ["random", "fedcs"]
    rbcsf = plan.configs[plan.configs.policy == "rbcsf"]
    assert sorted(zip(rbcsf["V"], rbcsf["beta"], strict=True)) == [
        (0.0, 0.0), (0.0, 0.2), (50.0, 0.0), (50.0, 0.2),
    ]  # fmt: skip
    np.testing.assert_allclose(rbcsf["queue_rate"], rbcsf["beta"])  # β is RBCS-F's own rate
    assert (plan.configs[plan.configs.policy != "rbcsf"]["queue_rate"] == 0.15).all()
    assert plan.selection_size == 3 and plan.fixed["lam"] == 2.0
    assert plan.env_params.num_clients == 12 and plan.per_run_bytes > 0


@pytest.mark.parametrize(("eta_base", "log"), [("2", math.log2), ("e", math.log)])
def test_eta_base_builds_theta_and_lemma1_bounds(eta_base, log):
    """--eta-base picks η = log₂ or ln of (1 + SNR) in θ*; the plan passes Lemma 1's R, S, L of
    that environment to RBCS-F (S = ‖θ*‖ and R hold 1/η) and the settings record the base."""
    config = VBetaGrid(clients=8, m=2, eta_base=eta_base)
    config.check()
    plan = config.plan()
    theta = np.asarray(plan.env_params.theta, float)
    snr = np.array([1000.0, 100.0, 10.0, 1.0]).repeat(2)
    np.testing.assert_allclose(theta[:, 2], [1.0 / log(1.0 + x) for x in snr], rtol=1e-6)
    assert plan.fixed["theta_bound"] == pytest.approx(np.linalg.norm(theta, axis=1).max())
    worst = 4.0 / 0.5 + 1.0 + 20.0 / 2.0 * theta[-1, 2]  # class 4 at μ = 0.5, s = 1, B = 2
    assert plan.fixed["noise_scale"] == pytest.approx(worst, rel=1e-6)
    assert plan.fixed["context_bound"] == pytest.approx(math.sqrt(4.0 + 1.0 + 100.0))
    assert config.settings()["eta_base"] == eta_base


def test_settings_are_what_the_sweep_computes():
    """The manifest holds the experiment and its settings, not where or how it is run."""
    settings = VBetaGrid(V=(1.0, 10.0), out="elsewhere", quiet=True).settings()
    assert settings["experiment"] == "v_beta_grid"
    assert settings["V"] == [1.0, 10.0] and settings["policies"] == ["rbcsf", "random", "fedcs"]
    assert not set(EXECUTION_ONLY) & set(settings)
    assert VBetaGrid(out="a", plots=False).settings() == VBetaGrid(out="b", resume=True).settings()
    assert VBetaGrid(seeds=2).settings() != VBetaGrid(seeds=3).settings()


# --------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def grid_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("v_beta_grid") / "out"
    argv = [*TINY, "--out", str(out)]
    stdout, stderr = io.StringIO(), io.StringIO()
    with (
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
        record_figures() as figures,
    ):
        assert cli.main(VBetaGrid, argv, prog=PROG) == 0
    return {
        "out": out,
        "argv": argv,
        "figures": figures,
        "stdout": stdout.getvalue(),
        "stderr": stderr.getvalue(),
        "summary": pd.read_csv(out / "summary.csv"),
        "ds": load_dataset(out / "results.nc"),
    }


def test_writes_summary_results_metadata_and_figures(grid_run):
    out, summary = grid_run["out"], grid_run["summary"]
    required = ["policy", "V", "beta", "alpha", "deadline", "n_seeds"]
    for metric in VBetaGrid.summary_columns[6:]:
        required += [metric, f"{metric}_lo", f"{metric}_hi"]
    assert set(required) <= set(summary.columns)
    assert list(summary["policy"]) == ["rbcsf"] * 4 + ["random", "fedcs"]
    assert (summary["n_seeds"] == 3).all()
    assert summary[summary.policy != "rbcsf"][["V", "beta", "alpha"]].isna().all(axis=None)
    assert summary[summary.policy == "fedcs"]["deadline"].tolist() == [3.0]
    ok = summary["mean_round_time_lo"] <= summary["mean_round_time"]
    assert (ok & (summary["mean_round_time"] <= summary["mean_round_time_hi"])).all()

    with xr.open_dataset(out / "results.nc", engine="h5netcdf") as ds:
        # Reduced on the device: per-run metrics [config, seed], bands [config, stat, …].
        assert dict(ds.sizes) == {"config": 6, "seed": 3, "round": 20, "client": 12, "stat": 2}
        assert ds["mean_round_time"].dims == ("config", "seed")
        assert ds["round_time_band"].dims == ("config", "stat", "round")
        assert ds["pull_record_band"].dims == ("config", "stat", "client")
        assert "round_time" not in ds and "selection_count" not in ds
        stored = json.loads(ds.attrs["metadata"])
    metadata = json.loads((out / "metadata.json").read_text())
    assert {"versions", "git_commit", "devices", "config", "wall_seconds", "note"} <= set(metadata)
    assert stored["config"] == metadata["config"]
    config = metadata["config"]
    assert config["experiment"] == "v_beta_grid" and config["V"] == [0.0, 50.0]
    assert config["chunk_configs"] == 3 and config["seeds"] == 3 and config["clients"] == 12
    assert config["eta_base"] == "2"  # η in bits; Lemma 1's constants of that environment:
    assert metadata["fixed_hparams"]["noise_scale"] == pytest.approx(19.0)
    assert json.loads((out / "manifest.json").read_text()) == config
    # One line per V at one β (the default 0.15 is not in the grid), named under the title.
    at = "β = 0 (the middle of the grid; the default is not in it)\n--plot-at beta=0.2 for another"
    legend = ["rbcsf V=0", "rbcsf V=50", "random", "fedcs"]
    check_saved_figures(
        out / "figures",
        grid_run["figures"],
        {
            "queue_vs_round": {
                "title": f"RBCS-F mean queue backlog (paper Fig. 2)\n{at}",
                "xlabel": "round",
                "ylabel": "mean queue backlog Z",
                "legend": legend[:2],
            },
            "cumulative_time": {
                "title": f"Training time (paper Fig. 3)\n{at}",
                "ylabel": "cumulative training time (s)",
                "lines": 4,
                "legend": legend,
            },
            "pull_record": {"title": f"Pull record\n{at}", "lines": 4, "legend": legend},
            "heatmap_mean_round_time": {
                "title": "RBCS-F mean round time (s)",
                "xlabel": "V",
                "ylabel": "β",
            },
            "heatmap_min_selection_rate": {
                "title": "RBCS-F minimum selection rate",
                "xlabel": "V",
                "ylabel": "β",
            },
        },
    )
    for metric in ("mean_round_time", "min_selection_rate"):  # the cells are the summary's
        (image,) = grid_run["figures"][f"heatmap_{metric}.png"].axes[0].get_images()
        rbcsf = summary[summary.policy == "rbcsf"]
        grid = rbcsf.pivot_table(index="beta", columns="V", values=metric)
        np.testing.assert_allclose(image.get_array(), grid.to_numpy(), rtol=1e-6)
    assert not (out / "chunks").exists()  # all in results.nc, read back identical


def test_reproduces_its_golden_run(tmp_path):
    """Every policy on the end-to-end grid reproduces the summary stored before the refactor
    (tests/golden.py); RBCS-F, Random and FedCS reuse the programs compiled above."""
    check_golden("v_beta_grid", tmp_path / "golden")


def test_notes_few_seeds_once(grid_run):
    """3 seeds: one line on stderr before the run says that the intervals are unreliable."""
    note = "note: 3 seeds: intervals over fewer than 5 seeds are wide and unreliable"
    assert grid_run["stderr"].splitlines().count(note) == 1
    assert "note:" not in grid_run["stdout"]


def test_redraws_its_figures_at_another_point_with_bootstrap_bands(grid_run, tmp_path):
    """The stored results drawn again (nothing runs) with --plot-at beta=0.2 and --ci
    bootstrap: the slice is named, the legends say Student-t (a reduced sweep keeps no runs to
    resample), the bands stay within their bounds."""
    argv = [*grid_run["argv"], "--plot-at", "beta=0.2", "--ci", "bootstrap"]
    config = cli.parse(VBetaGrid, argv, prog=PROG)
    config.check()
    with record_figures() as figures:
        config.figures(grid_run["ds"], grid_run["summary"], tmp_path)
    queue = figures["queue_vs_round.png"].axes[0]
    assert queue.get_title().endswith("\nβ = 0.2 (--plot-at)")
    assert [t.get_text() for t in queue.get_legend().get_texts()] == ["rbcsf V=0", "rbcsf V=50"]
    for name in ("queue_vs_round", "cumulative_time", "pull_record"):
        ax = figures[f"{name}.png"].axes[0]
        legend = ax.get_legend().get_title().get_text()
        assert legend.startswith("95% Student-t bands, 3 seeds") and "not bootstrap" in legend
        for band in ax.collections:
            assert min(p.vertices[:, 1].min() for p in band.get_paths()) >= 0.0


def test_prints_what_ran_and_the_summary(grid_run):
    lines = grid_run["stdout"].splitlines()
    assert lines[0].startswith("6 configurations × 3 seeds × 20 rounds in ")
    out = re.escape(str(grid_run["out"]))
    assert re.search(rf"→ {out} \(\d+ chunks? computed, 0 reused", lines[0])
    header = lines[1].split()
    assert header[:3] == ["policy", "V", "beta"] and "mean_round_time" in header
    assert len(lines) == 2 + 6


@pytest.mark.parametrize("flags", [[], ["--resume"]], ids=["same-command", "resume"])
def test_running_again_reuses_the_directory(grid_run, flags, capsys):
    """The same command (with or without --resume) recomputes nothing and gives the same results;
    the plots flag is not a setting."""
    out = grid_run["out"]
    written = (out / "results.nc").stat().st_mtime_ns
    assert cli.main(VBetaGrid, [*grid_run["argv"], *flags, "--no-plots"], prog=PROG) == 0
    assert (out / "results.nc").stat().st_mtime_ns == written  # read, not computed again
    reloaded = load_dataset(out / "results.nc")
    for name in ("round_time_band", "selection_count_band", "mean_round_time"):
        np.testing.assert_array_equal(reloaded[name], grid_run["ds"][name])
    pd.testing.assert_frame_equal(pd.read_csv(out / "summary.csv"), grid_run["summary"])
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("6 configurations × 3 seeds × 20 rounds")
    assert re.search(r"\(0 chunks computed, \d+ reused; [\d.]+ kB on disk\)$", line)


def test_other_settings_into_the_same_out_are_refused_unless_overwrite(grid_run, tmp_path, capsys):
    out = tmp_path / "copy"
    shutil.copytree(grid_run["out"], out)
    manifest = (out / "manifest.json").read_text()
    argv = [*grid_run["argv"], "--out", str(out), "--no-plots"]
    for flags in ([], ["--resume"]):
        line = _fails([*argv, *flags, "--V", "0,20"], capsys)
        assert f"--out {out} holds a sweep with other settings" in line
        assert "V: was [0.0, 50.0], now [0.0, 20.0]" in line and "--overwrite" in line
    assert (out / "manifest.json").read_text() == manifest
    assert (out / "results.nc").read_bytes() == (grid_run["out"] / "results.nc").read_bytes()

    # --overwrite replaces it (one cheap policy, to compile little; RBCS-F's flags would be
    # refused without RBCS-F, so they go back to their defaults).
    argv += ["--keep-chunks", "--V", "1,10,20,50", "--beta", "0.15"]
    assert cli.main(VBetaGrid, [*argv, "--policies", "random", "--overwrite"], prog=PROG) == 0
    capsys.readouterr()
    assert list(pd.read_csv(out / "summary.csv")["policy"]) == ["random"]
    assert [p.parent.name for p in (out / "chunks").rglob("*.npz")] == ["random"]
    assert json.loads((out / "manifest.json").read_text())["policies"] == ["random"]
