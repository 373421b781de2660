"""jfl.sweep: grids, hyperparameter arrays, chunk sizes, output directories and the chunk store.

The experiments' command lines are tested in ``tests/experiments/``; nothing here compiles.
"""

from __future__ import annotations

import json
import math
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import pytest

from jfl.envs import WirelessEnv
from jfl.envs.wireless import make_params
from jfl.sweep import (
    CHUNK_DIR,
    IN_FLIGHT,
    MANIFEST,
    ChunkStore,
    _drain,
    auto_chunk_size,
    bytes_per_run,
    check_out_dir,
    chunk_bounds,
    config_table,
    parse_values,
    policy_hparams,
    prepare_out_dir,
    round_up,
    run_policy_grid,
)
from jfl.trackers import fairness_queue

# --------------------------------------------------------------------------- grids


def test_parse_values_lists_and_ranges():
    assert parse_values("1,10,20", "V") == [1.0, 10.0, 20.0]
    assert parse_values(" 1, 10 ,20, ", "V") == [1.0, 10.0, 20.0]
    assert parse_values("0:50:11", "V") == pytest.approx(list(np.linspace(0, 50, 11)))
    assert parse_values("2:2:1", "V") == [2.0]
    assert parse_values("0.15", "beta") == [0.15]
    for bad in ("", "a,b", "0:1", "0:1:0", "0:1:x", "0:1:2.5", ",,", "1,,10", ",1"):
        with pytest.raises(ValueError, match="--V"):
            parse_values(bad, "V")
    # What is wrong, said: the range's count, an empty item.
    with pytest.raises(ValueError, match=r"count of start:stop:count must be an integer >= 1"):
        parse_values("1:10:0", "V")
    with pytest.raises(ValueError, match="an empty item in '1,,10'"):
        parse_values("1,,10", "V")


def test_config_table_grid_and_unused_hparams():
    """rbcsf gets the V×β×α product; baselines one row each with NaN for unused columns."""
    table = config_table(
        ["rbcsf", "random", "fedcs"],
        {"V": [1, 10], "beta": [0.1, 0.2], "alpha": [0.1], "deadline": [3, 4]},
    )
    assert list(table.columns) == ["policy", "V", "beta", "alpha", "deadline"]
    rb = table[table.policy == "rbcsf"]
    assert len(rb) == 4 and rb["deadline"].isna().all()
    rnd = table[table.policy == "random"]
    assert len(rnd) == 1 and rnd[["V", "beta", "alpha", "deadline"]].isna().all(axis=None)
    fed = table[table.policy == "fedcs"]
    assert sorted(fed["deadline"]) == [3, 4]


def test_config_table_crosses_shared_scenario_axes_with_every_policy():
    """``shared`` axes (N, ρ) multiply every policy's rows and come before the swept columns."""
    table = config_table(
        ["cs_ucb_q", "modified_cs_ucb"], {"beta": [0.1, 0.2]}, shared={"N": [2, 3], "rho": [0.5]}
    )
    assert list(table.columns) == ["policy", "N", "rho", "beta"]
    assert list(table["policy"]) == ["cs_ucb_q"] * 4 + ["modified_cs_ucb"] * 2
    assert list(table["N"]) == [2, 2, 3, 3, 2, 3]
    assert (table["rho"] == 0.5).all()
    assert table["beta"][:4].tolist() == [0.1, 0.2, 0.1, 0.2] and table["beta"][4:].isna().all()


@pytest.mark.parametrize(
    ("swept", "message"),
    [
        ({"beta": [1.5]}, r"beta must be in \[0, 1\], got \[1.5\]"),
        ({"V": [-1]}, r"V must be in \[0, inf\)"),
        ({"alpha": [-0.1]}, r"alpha must be in \[0, inf\)"),
    ],
)
def test_config_table_rejects_out_of_range(swept, message):
    with pytest.raises(ValueError, match=message):
        config_table(["rbcsf"], swept)


def test_config_table_rejects_out_of_range_fixed_values():
    with pytest.raises(ValueError, match="lam"):
        config_table(["rbcsf"], {"V": [1.0]}, fixed={"lam": -1.0})


@pytest.mark.parametrize(
    ("policies", "kwargs", "message"),
    [
        (["nope"], {}, "unknown policy 'nope'"),
        ([], {}, "--policies: give at least one policy"),
        (["random", "random"], {}, r"--policies: duplicate names in \['random', 'random'\]"),
    ],
)
def test_config_table_rejects_bad_policies(policies, kwargs, message):
    with pytest.raises(ValueError, match=message):
        config_table(policies, {"V": [1]}, **kwargs)


def test_policy_hparams_defaults_then_fixed_then_swept():
    table = config_table(["rbcsf", "random"], {"V": [1, 10], "beta": [0.1, 0.2]})
    rb = table[table.policy == "rbcsf"]
    hp = policy_hparams("rbcsf", rb, fixed={"lam": 2.0, "deadline": 9.0})
    assert set(hp) >= {"V", "beta", "alpha", "lam"} and "deadline" not in hp
    assert all(v.dtype == np.float32 and v.shape == (4,) for v in hp.values())
    np.testing.assert_allclose(hp["lam"], 2.0)  # fixed
    np.testing.assert_allclose(hp["V"], [1, 1, 10, 10])  # swept
    np.testing.assert_allclose(hp["beta"], [0.1, 0.2, 0.1, 0.2], rtol=1e-6)
    default = policy_hparams("rbcsf", rb)
    np.testing.assert_allclose(default["lam"], default["lam"][0])  # a default, per row
    assert policy_hparams("random", table[table.policy == "random"]) == {}


# --------------------------------------------------------------------------- chunk sizes


def test_chunk_sizes_fit_the_budget_and_the_devices():
    assert round_up(5, 4) == 8 and round_up(8, 4) == 8 and round_up(1, 1) == 1
    per_run = bytes_per_run(500, 40, 8, trajectories=False)
    assert bytes_per_run(500, 40, 8, trajectories=True) > per_run > 0
    assert bytes_per_run(1000, 40, 8, trajectories=False) > per_run
    # 10 seeds of per_run bytes: a budget of 3.5 configurations for each chunk in flight gives
    # 3, never more than exist.
    budget = int(3.5 * 10 * per_run * IN_FLIGHT)
    assert auto_chunk_size(100, 10, per_run, budget) == 3
    assert auto_chunk_size(100, 10, per_run, budget // IN_FLIGHT) == 1
    assert auto_chunk_size(2, 10, per_run, 10**12) == 2
    assert auto_chunk_size(100, 10, per_run, 1) == 1  # at least one configuration
    assert auto_chunk_size(100, 10, per_run, budget, devices=4) == 4


def test_chunk_fits_counts_the_shared_data(monkeypatch):
    """The clients' data (shared by every chunk, padded to the largest client) count once
    beside the chunks in flight: a sweep whose runs fit is refused when the data do not."""
    from jfl import sweep

    monkeypatch.setattr(sweep, "free_memory", lambda: 10_000)
    sweep.check_chunk_fits(2, 5, 100, auto=True)  # IN_FLIGHT · 2 · 5 · 100 = 2,000 bytes
    sweep.check_chunk_fits(2, 5, 100, auto=True, shared_bytes=8_000)  # 10,000: fits
    with pytest.raises(ValueError, match=r"5 seeds and 8\.01 kB of data need about 10 kB"):
        sweep.check_chunk_fits(2, 5, 100, auto=True, shared_bytes=8_010)


@pytest.mark.parametrize("devices", [1, 2, 4])
def test_balanced_chunks_cover_every_configuration_once(devices):
    for num_configs in range(1, 60):
        for max_size in range(devices, 25, devices):
            bounds = chunk_bounds(num_configs, max_size, devices)
            rows = np.concatenate([np.arange(a, b) for a, b in bounds])
            np.testing.assert_array_equal(rows, np.arange(num_configs))
            sizes = [b - a for a, b in bounds]
            assert max(sizes) <= max_size and len(set(sizes[:-1])) <= 1
            assert len(bounds) == 1 or sizes[0] % devices == 0
            assert len(bounds) == -(-num_configs // max_size)  # as few chunks as fit
            # Every chunk computes at the first one's size: the padding is below one row per
            # chunk and device.
            padded = -(-sizes[0] // devices) * devices
            assert len(bounds) * padded - num_configs < len(bounds) * devices


# --------------------------------------------------------------------------- output directory

MANIFEST_A = {"experiment": "v_beta_grid", "rounds": 10, "seeds": 2, "V": [1.0, 10.0]}


def _chunk(out):
    ChunkStore(out).save("rbcsf", 0, {"x": np.arange(3)})
    return ChunkStore(out).path("rbcsf", 0)


def test_prepare_out_dir_creates_the_directory_and_manifest(tmp_path):
    out = tmp_path / "a" / "b"
    prepare_out_dir(out, MANIFEST_A, resume=False, overwrite=False)
    assert json.loads((out / MANIFEST).read_text()) == MANIFEST_A
    # --resume where there is no sweep (an empty or a missing directory) is refused, writing
    # nothing: a mistyped --out does not start a new sweep.
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=f"--resume: {empty} has no {MANIFEST}"):
        prepare_out_dir(empty, MANIFEST_A, resume=True, overwrite=False)
    assert not any(empty.iterdir())
    missing = tmp_path / "typo"
    for check in (prepare_out_dir, check_out_dir):
        with pytest.raises(ValueError, match=f"--resume: {missing} does not exist"):
            check(missing, MANIFEST_A, resume=True, overwrite=False)
    assert not missing.exists()


def test_manifests_are_strict_json_and_older_ones_with_bare_infinity_still_match(tmp_path):
    """A non-finite setting (fl_selection's round_deadline = inf) is stored as "inf", which
    strict parsers read; a manifest written before, with a bare Infinity, is the same sweep."""

    def strict(text):
        return json.loads(text, parse_constant=lambda name: pytest.fail(f"bare {name}"))

    settings = {**MANIFEST_A, "round_deadline": math.inf, "low": [-math.inf, 1.0]}
    out = tmp_path / "run"
    prepare_out_dir(out, settings, resume=False, overwrite=False)
    stored = strict((out / MANIFEST).read_text())
    assert stored["round_deadline"] == "inf" and stored["low"] == ["-inf", 1.0]
    chunk = _chunk(out)
    (out / MANIFEST).write_text(json.dumps(settings))  # as older versions wrote it
    assert "Infinity" in (out / MANIFEST).read_text()
    check_out_dir(out, settings, overwrite=False)
    assert prepare_out_dir(out, settings, resume=True, overwrite=False) == []
    assert chunk.exists()
    with pytest.raises(ValueError, match=r"round_deadline: was 'inf', now 3\.0"):
        check_out_dir(out, {**settings, "round_deadline": 3.0}, overwrite=False)


@pytest.mark.parametrize("resume", [False, True])
def test_prepare_out_dir_reuses_a_sweep_with_the_same_settings(tmp_path, resume):
    """Running the same command twice (with or without --resume) keeps the finished chunks."""
    out = tmp_path / "run"
    prepare_out_dir(out, MANIFEST_A, resume=False, overwrite=False)
    chunk = _chunk(out)
    before = chunk.stat().st_mtime_ns
    prepare_out_dir(out, dict(MANIFEST_A), resume=resume, overwrite=False)
    # Settings compare as stored in JSON: a tuple is the list it was written as.
    prepare_out_dir(out, {**MANIFEST_A, "V": (1.0, 10.0)}, resume=resume, overwrite=False)
    assert chunk.exists() and chunk.stat().st_mtime_ns == before


@pytest.mark.parametrize("resume", [False, True])
def test_prepare_out_dir_refuses_other_settings_naming_them(tmp_path, resume):
    out = tmp_path / "run"
    prepare_out_dir(out, MANIFEST_A, resume=False, overwrite=False)
    chunk = _chunk(out)
    changed = {**MANIFEST_A, "rounds": 20, "V": [1.0], "new": 1}
    with pytest.raises(ValueError) as err:
        prepare_out_dir(out, changed, resume=resume, overwrite=False)
    message = str(err.value)
    assert message.startswith(f"--out {out} holds a sweep with other settings")
    assert "rounds: was 10, now 20" in message and "V: was [1.0, 10.0], now [1.0]" in message
    assert "new: was None, now 1" in message and "seeds" not in message
    assert "--overwrite" in message
    assert chunk.exists()  # nothing was touched
    assert json.loads((out / MANIFEST).read_text()) == MANIFEST_A


def test_prepare_out_dir_overwrite_replaces_the_sweep(tmp_path):
    out = tmp_path / "run"
    prepare_out_dir(out, MANIFEST_A, resume=False, overwrite=False)
    chunk = _chunk(out)
    changed = {**MANIFEST_A, "rounds": 20}
    prepare_out_dir(out, changed, resume=False, overwrite=True)
    assert not chunk.exists() and not (out / CHUNK_DIR).exists()
    assert json.loads((out / MANIFEST).read_text()) == changed
    # --overwrite with the same settings starts again too.
    chunk = _chunk(out)
    prepare_out_dir(out, changed, resume=False, overwrite=True)
    assert not chunk.exists()


def test_prepare_out_dir_refuses_foreign_corrupt_and_orphaned_directories(tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("not a sweep")
    with pytest.raises(ValueError, match=r"--resume: .* is not a sweep directory"):
        prepare_out_dir(foreign, MANIFEST_A, resume=True, overwrite=False)
    prepare_out_dir(foreign, MANIFEST_A, resume=False, overwrite=False)  # without --resume: used
    assert (foreign / "notes.txt").exists()

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / MANIFEST).write_text("{not json")
    for resume in (False, True):
        with pytest.raises(ValueError, match="corrupt results directory: cannot read"):
            prepare_out_dir(broken, MANIFEST_A, resume=resume, overwrite=False)
    prepare_out_dir(broken, MANIFEST_A, resume=False, overwrite=True)
    assert json.loads((broken / MANIFEST).read_text()) == MANIFEST_A

    orphaned = tmp_path / "orphaned"
    _chunk(orphaned)
    with pytest.raises(ValueError, match=r"holds chunks but no manifest\.json"):
        prepare_out_dir(orphaned, MANIFEST_A, resume=False, overwrite=False)
    prepare_out_dir(orphaned, MANIFEST_A, resume=False, overwrite=True)
    assert not (orphaned / CHUNK_DIR).exists()

    file = tmp_path / "file"
    file.write_text("")
    with pytest.raises(ValueError, match="exists and is not a directory"):
        prepare_out_dir(file, MANIFEST_A, resume=False, overwrite=False)


# --------------------------------------------------------------------------- chunk store


def test_chunk_store_round_trip_and_absent_chunks(tmp_path):
    store = ChunkStore(tmp_path)
    arrays = {"a": np.arange(6.0).reshape(2, 3), "b": np.array([1, 2], np.int32)}
    store.save("rbcsf", 3, arrays)
    assert store.path("rbcsf", 3) == tmp_path / CHUNK_DIR / "rbcsf" / "chunk_000003.npz"
    assert not list(store.path("rbcsf", 3).parent.glob("*.tmp"))  # written atomically
    loaded = store.load("rbcsf", 3, {"a": (2, 3), "b": (2,)})
    for name, value in arrays.items():
        np.testing.assert_array_equal(loaded[name], value)
        assert loaded[name].dtype == value.dtype
    assert store.load("rbcsf", 4, {"a": (2, 3)}) is None
    assert store.load("random", 3, {"a": (2, 3)}) is None


def test_chunk_store_reports_corrupt_chunks(tmp_path):
    store = ChunkStore(tmp_path)
    store.save("p", 0, {"a": np.zeros((2, 3))})
    with pytest.raises(ValueError, match=r"has a of shape \(2, 3\), expected \(4, 3\)"):
        store.load("p", 0, {"a": (4, 3)})
    with pytest.raises(ValueError, match="has b of shape missing"):
        store.load("p", 0, {"a": (2, 3), "b": (2,)})
    store.path("p", 1).write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match=r"corrupt results directory: cannot read .*chunk_000001"):
        store.load("p", 1, {"a": (2, 3)})


def test_a_ctrl_c_in_the_final_wait_still_lets_every_chunk_finish_writing(tmp_path):
    """A Ctrl-C that interrupts the wait for the chunk writer is raised only once the chunk in
    the writer is on disk: the interrupt message counts what the process leaves behind."""

    class InterruptedOnce(ThreadPoolExecutor):
        interrupts = 1

        def shutdown(self, wait=True, **kwargs):
            if self.interrupts:
                self.interrupts -= 1
                raise KeyboardInterrupt
            super().shutdown(wait, **kwargs)

    writer, done = InterruptedOnce(max_workers=1), tmp_path / "written"
    writer.submit(lambda: (time.sleep(0.2), done.touch()))
    with pytest.raises(KeyboardInterrupt):
        _drain(writer)
    assert done.exists()


def test_under_the_command_line_device_waits_leave_the_main_thread_free_for_ctrl_c(monkeypatch):
    """With the command line's Ctrl-C handler (``WAIT_OFF_MAIN``), a chunk's wait runs on a
    thread of its own: a SIGINT raises KeyboardInterrupt on the main thread while the wait is
    still blocked (a compilation or an XLA computation would hold the main thread until it
    ends); without the handler it runs on the caller's thread."""
    import signal
    import threading

    from jfl import sweep

    if threading.current_thread() is not threading.main_thread():
        pytest.fail("the tests run on the main thread, where signals are delivered")
    release, seen = threading.Event(), []

    def blocked():
        seen.append(threading.current_thread())
        release.wait(60)

    monkeypatch.setattr(sweep, "WAIT_OFF_MAIN", threading.Event())
    sweep.WAIT_OFF_MAIN.set()
    main = threading.main_thread().ident
    threading.Timer(0.3, lambda: signal.pthread_kill(main, signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt):
        sweep._interruptible(blocked)
    assert not release.is_set() and seen[0] is not threading.main_thread()
    release.set()
    sweep.WAIT_OFF_MAIN.clear()
    assert sweep._interruptible(threading.current_thread) is threading.main_thread()


# --------------------------------------------------------------------------- run_policy_grid


def test_run_policy_grid_checks_groups_and_per_config_rows_first(tmp_path):
    """Non-contiguous (policy, m) groups, per_config / per_seed arrays of the wrong shape and
    policies the environment cannot serve are refused before anything compiles."""
    env = WirelessEnv()
    params = make_params(3)
    configs = pd.DataFrame({"policy": ["random"] * 3, "N": [1, 2, 1]})
    common = dict(
        num_clients=3,
        selection_size="N",
        num_rounds=5,
        seeds=[0],
        chunk_size=1,
        show_progress=False,
    )
    with pytest.raises(ValueError, match="contiguously"):
        run_policy_grid(env, params, configs, **common)
    with pytest.raises(ValueError, match=r"per_config\['fairness'\] needs 3 rows"):
        run_policy_grid(env, params, configs, per_config={"fairness": np.zeros((2, 3))}, **common)
    with pytest.raises(ValueError, match=r"per_seed\['mean_reward'\] needs 3 rows of 1 seeds"):
        run_policy_grid(
            env, params, configs, per_seed={"mean_reward": np.zeros((3, 2, 3))}, **common
        )
    with pytest.raises(ValueError, match="a tracker reads 'queue_rate'"):
        run_policy_grid(env, params, configs.iloc[:1], trackers=(fairness_queue(),), **common)
    configs = pd.DataFrame({"policy": ["rbcsf"], "N": [1]})
    with pytest.raises(ValueError, match="'rbcsf' reads"):
        run_policy_grid(env, params, configs, **common)
    # A later group that cannot run stops the grid before the first group computes anything.
    store = ChunkStore(tmp_path)
    configs = pd.DataFrame({"policy": ["random", "local_accuracy"], "N": [1, 1]})
    with pytest.raises(ValueError, match="'local_accuracy' reads"):
        run_policy_grid(env, params, configs, store=store, **common)
    assert not (tmp_path / "chunks").exists()
