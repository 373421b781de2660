"""The driver: adding an experiment is one module, and a sweep directory is reused or completed.

``RandomFairness`` below is a whole new experiment (it is also the README's example): a frozen
dataclass deriving from :class:`jfl.driver.Experiment` with its own settings, ``plan()``,
``metrics()`` and ``figures()``. ``jfl.driver.run`` runs it, and ``jfl.cli.main`` gives it a
command line whose flags are its fields. The remaining tests use it, the cheapest sweep there
is, to check what the driver does with an output directory.
"""

from __future__ import annotations

import dataclasses
import shutil
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest

from jfl import checks, cli, driver, plots, sweep
from jfl.cli import Floats
from jfl.driver import Experiment
from jfl.envs import RbcsfEnv
from jfl.sweep import Plan
from jfl.trackers import fairness_queue
from tests.helpers import check_saved_figures, record_figures


@dataclasses.dataclass(frozen=True)
class RandomFairness(Experiment):
    """Random selection of m clients: how far it misses guaranteed selection rates."""

    target: Floats = (0.2, 0.4)
    """guaranteed selection rates in [0, 1] (a swept axis)"""
    clients: int = 6
    """clients N"""
    m: int = 2
    """clients selected per round"""
    seeds: int = 2
    rounds: int = 20
    out: str = "runs/random_fairness"

    name: ClassVar[str] = "random_fairness"
    summary_columns: ClassVar[tuple[str, ...]] = ("target", "max_rate_violation", "starved")

    def check(self) -> None:
        super().check()
        checks.in_range("--target", self.target, 0.0, 1.0)
        checks.integer("--m", self.m, 1, self.clients, "--clients")

    def plan(self) -> Plan:
        env = RbcsfEnv()
        configs = pd.DataFrame(
            {"policy": "random", "target": self.target, "queue_rate": self.target}
        )
        return Plan(
            env,
            env.default_params(num_clients=self.clients),
            configs,
            selection_size=self.m,
            per_run_bytes=sweep.bytes_per_run(self.rounds, self.clients, self.m, False),
            trackers=(fairness_queue(),),
        )

    def metrics(self, ds) -> dict:
        return {"starved": (ds["selection_count"] == 0).mean("client")}

    def figures(self, ds, summary, folder) -> None:
        plots.plot_metric_vs(summary, "max_rate_violation", "target", folder / "violation.png")


# --------------------------------------------------------------------------- a new experiment


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """One finished sweep in two chunks (one configuration each), and the figures it saved."""
    out = tmp_path_factory.mktemp("driver") / "run"
    with record_figures() as figures:
        return driver.run(RandomFairness(out=str(out), chunk_size="1", quiet=True)), figures


@pytest.fixture(scope="module")
def first(first_run):
    return first_run[0]


def test_new_experiment_runs_with_its_own_metric_and_figure(first_run):
    first, figures = first_run
    summary, out = first.summary, first.out
    assert list(summary["target"]) == [0.2, 0.4]
    assert {"starved", "starved_lo", "starved_hi", "max_rate_violation"} <= set(summary)
    assert first.dataset.sizes == {"config": 2, "seed": 2, "round": 20, "client": 6}
    # The experiment's own figure: the metric at each target (queue_rate varies with it, so
    # each target is a line of its own).
    violation = {
        "title": "max_rate_violation",
        "xlabel": "target",
        "ylabel": "max_rate_violation",
        "legend": ["random queue_rate=0.2", "random queue_rate=0.4"],
    }
    check_saved_figures(out / "figures", figures, {"violation": violation})
    points = [c.lines[0].get_ydata() for c in figures["violation.png"].axes[0].containers]
    np.testing.assert_allclose(np.concatenate(points), summary["max_rate_violation"])
    for name in ("summary.csv", "results.nc", "metadata.json", "manifest.json"):
        assert (out / name).is_file()
    # results.nc read back identical, the chunk store is gone: the results are on disk once.
    assert not (out / "chunks").exists()


def test_new_experiment_has_a_command_line(first, capsys):
    """Its fields are flags; the same command again reuses the finished sweep."""
    with pytest.raises(SystemExit) as exit:
        cli.main(RandomFairness, ["--help"], prog="random_fairness")
    assert exit.value.code == 0
    assert "--target" in capsys.readouterr().out

    argv = ["--target", "0.2,0.4", "--chunk-size", "1", "--out", str(first.out), "--quiet"]
    assert cli.main(RandomFairness, argv, prog="random_fairness") == 0
    assert "starved" in capsys.readouterr().out

    with pytest.raises(SystemExit) as exit:
        cli.main(RandomFairness, ["--target", "0.2,1.5"], prog="random_fairness")
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("random_fairness: error: --target must be in [0, 1]")


# --------------------------------------------------------------------------- output directory


def _chunks(out):
    return {p.name: p.stat().st_mtime_ns for p in sorted((out / "chunks").rglob("*.npz"))}


def _assert_same(a: driver.Result, b: driver.Result) -> None:
    pd.testing.assert_frame_equal(a.summary, b.summary)
    assert set(a.dataset.data_vars) == set(b.dataset.data_vars)
    for name in a.dataset.data_vars:
        np.testing.assert_array_equal(a.dataset[name], b.dataset[name], err_msg=name)


def test_same_settings_reuse_the_directory(first):
    """A second identical run computes nothing (chunk files untouched): the same summary, and
    its closing line says so."""
    before = _chunks(first.out)
    csv = (first.out / "summary.csv").read_bytes()
    again = driver.run(first.experiment)
    assert _chunks(first.out) == before
    assert (first.chunks_computed, first.chunks_reused) == (2, 0)
    assert (again.chunks_computed, again.chunks_reused) == (0, 2)
    disk = sum(p.stat().st_size for p in first.out.rglob("*") if p.is_file())
    assert disk == again.disk_bytes and not (first.out / "chunks").exists()
    kilobytes = f"{disk / 1000:.3g} kB"
    assert again.describe().endswith(f"(0 chunks computed, 2 reused; {kilobytes} on disk)")
    _assert_same(first, again)
    assert (first.out / "summary.csv").read_bytes() == csv


def test_other_settings_are_refused_unless_overwrite(first, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(first.out, out)
    other = RandomFairness(target=(0.3,), out=str(out), chunk_size="1", quiet=True, plots=False)
    refused = r"other settings \(.*target: was \[0.2, 0.4\], now \[0.3\]"
    stored = (out / "results.nc").read_bytes()
    with pytest.raises(ValueError, match=refused):
        driver.run(other)
    assert (out / "results.nc").read_bytes() == stored  # untouched
    replaced = driver.run(dataclasses.replace(other, overwrite=True, keep_chunks=True))
    assert list(replaced.summary["target"]) == [0.3]
    assert len(_chunks(out)) == 1


POLICY_SOURCE = """
from jfl.policies import random
from mine_scale import SCALE


def build(num_clients, size):
    assert SCALE > 0
    return random(num_clients, size){edit}
"""


@dataclasses.dataclass(frozen=True)
class MineFairness(RandomFairness):
    """RandomFairness with the policy ``mine`` (registered by the test, from a file)."""

    def plan(self) -> Plan:
        plan = super().plan()
        return dataclasses.replace(plan, configs=plan.configs.assign(policy="mine"))


def _register_mine(folder, monkeypatch, edit="", scale=2.0):
    """Write, import and register the policy ``mine`` from ``folder/mine_policy.py``, which
    imports a module-level constant from ``folder/mine_scale.py``."""
    import importlib
    import sys

    from jfl.policies import REGISTRY, PolicySpec

    (folder / "mine_policy.py").write_text(POLICY_SOURCE.format(edit=edit))
    (folder / "mine_scale.py").write_text(f"SCALE = {scale}\n")
    monkeypatch.syspath_prepend(str(folder))
    sys.modules.pop("mine_policy", None)
    sys.modules.pop("mine_scale", None)
    importlib.invalidate_caches()
    module = importlib.import_module("mine_policy")
    monkeypatch.setitem(REGISTRY, "mine", PolicySpec("mine", module.build))


def test_results_of_edited_code_are_refused_unless_reuse_stale_or_overwrite(tmp_path, monkeypatch):
    """An edited custom policy: the same command refuses the stored chunks, naming the policy
    and the two ways out; --reuse-stale keeps them and says so in metadata.json; --overwrite
    recomputes them. A manifest without a fingerprint (an older jfl) is refused alike."""
    import json

    out = tmp_path / "run"
    config = MineFairness(out=str(out), chunk_size="1", quiet=True, plots=False)
    _register_mine(tmp_path, monkeypatch)
    first = driver.run(config)
    assert (first.chunks_computed, first.chunks_reused) == (2, 0)
    code = json.loads((out / "manifest.json").read_text())["code"]
    assert code["external"]["policy mine"]["name"] == "mine_policy.build"
    assert set(code["external"]) == {"experiment", "policy mine"}  # the rest is jfl's own
    chunks = _chunks(out)

    _register_mine(tmp_path, monkeypatch, edit="  # edited")
    with pytest.raises(ValueError) as refused:
        driver.run(config)
    line = str(refused.value)
    # From Python, in the arguments' words (the command line names its flags).
    assert "\n" not in line and f"`out` {out} holds results computed by other code" in line
    assert "the source of policy mine (mine_policy.build) changed" in line
    assert "overwrite=True" in line and "reuse_stale=True" in line and "--" not in line
    assert _chunks(out) == chunks

    stale = driver.run(dataclasses.replace(config, reuse_stale=True))
    assert (stale.chunks_computed, stale.chunks_reused) == (0, 2)
    assert "2 stale chunks reused (--reuse-stale)" in stale.describe()
    _assert_same(first, stale)
    recorded = json.loads((out / "metadata.json").read_text())["reused_stale"]
    assert recorded == {
        "changes": ["the source of policy mine (mine_policy.build) changed"],
        "chunks_reused": 2,
    }
    with pytest.raises(ValueError, match="other code"):  # the manifest keeps the old code
        driver.run(config)

    fresh = driver.run(dataclasses.replace(config, overwrite=True))
    assert (fresh.chunks_computed, fresh.chunks_reused) == (2, 0)
    assert driver.run(config).chunks_reused == 2  # the new code's chunks are reused

    # A constant the policy imports from another of the user's files, edited: refused too,
    # naming that file (the builder's own source is unchanged).
    stored = (out / "results.nc").read_bytes()
    _register_mine(tmp_path, monkeypatch, edit="  # edited", scale=3.0)
    with pytest.raises(ValueError) as refused:
        driver.run(config)
    assert str(refused.value).count("changed") == 1
    assert f"{tmp_path / 'mine_scale.py'} changed" in str(refused.value)
    assert (out / "results.nc").read_bytes() == stored

    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["code"]
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="records no code fingerprint"):
        driver.run(config)


def test_interrupted_sweep_completes_bit_identically(
    first, tmp_path, monkeypatch, die_after_first_chunk
):
    """A run that dies after its first chunk is completed by the same run again."""
    out = tmp_path / "run"
    config = dataclasses.replace(first.experiment, out=str(out))
    with pytest.raises(KeyboardInterrupt):
        driver.run(config)
    monkeypatch.undo()
    kept = _chunks(out)
    assert list(kept) == ["chunk_000000.npz"]
    assert not (out / "results.nc").exists()
    resumed = driver.run(dataclasses.replace(config, keep_chunks=True))
    assert (resumed.chunks_computed, resumed.chunks_reused) == (1, 1)
    assert _chunks(out).items() >= kept.items()  # the first chunk was not computed again
    assert len(_chunks(out)) == 2  # --keep-chunks: the store stays beside results.nc
    _assert_same(first, resumed)


def test_results_file_that_does_not_read_back_keeps_the_chunks(first, tmp_path, monkeypatch):
    """The chunk store goes only once results.nc reads back identical: a file that does not
    (a failing disk, say) stops the sweep with the chunks kept, and the same command rewrites it."""
    from jfl import results

    out = tmp_path / "run"
    config = dataclasses.replace(first.experiment, out=str(out))
    write = results.write_dataset

    def corrupt(ds, path, *args, **kwargs):
        write(ds.assign(round_time=ds["round_time"] + 1), path, *args, **kwargs)

    monkeypatch.setattr(results, "write_dataset", corrupt)
    with pytest.raises(RuntimeError, match="does not hold round_time as computed"):
        driver.run(config)
    assert len(_chunks(out)) == 2
    monkeypatch.undo()
    again = driver.run(config)
    assert (again.chunks_computed, again.chunks_reused) == (0, 2)
    assert not (out / "chunks").exists()
    _assert_same(first, again)


def test_a_new_sweep_removes_the_outputs_of_the_one_it_replaces(first, tmp_path, monkeypatch):
    """--overwrite interrupted before its first chunk: the old results.nc is not taken for the
    new sweep's (it is deleted when the new sweep starts)."""
    out = tmp_path / "run"
    shutil.copytree(first.out, out)
    other = dataclasses.replace(first.experiment, out=str(out), target=(0.3,), overwrite=True)
    monkeypatch.setattr(
        sweep.PolicyGrid, "run", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt)
    )
    with pytest.raises(KeyboardInterrupt):
        driver.run(other)
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json"]
