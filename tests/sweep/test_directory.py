"""jfl.sweep's output directory (SweepDir) and chunk store; nothing here compiles."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from jfl.sweep import CHUNK_DIR, MANIFEST, ChunkStore, SweepDir

MANIFEST_A = {"experiment": "v_beta_grid", "rounds": 10, "seeds": 2, "V": [1.0, 10.0]}


def prepare(out, manifest, **options):
    return SweepDir(out).prepare(manifest, **options)


def check(out, settings, **options):
    return SweepDir(out).check(settings, **options)


def _chunk(out):
    ChunkStore(out).save("rbcsf", 0, {"x": np.arange(3)})
    return ChunkStore(out).path("rbcsf", 0)


def test_prepare_out_dir_creates_the_directory_and_manifest(tmp_path):
    out = tmp_path / "a" / "b"
    prepare(out, MANIFEST_A, resume=False, overwrite=False)
    assert json.loads((out / MANIFEST).read_text()) == MANIFEST_A
    # --resume where there is no sweep (an empty or a missing directory) is refused, writing
    # nothing: a mistyped --out does not start a new sweep.
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=f"`resume=True`: {empty} has no {MANIFEST}"):
        prepare(empty, MANIFEST_A, resume=True, overwrite=False)
    assert not any(empty.iterdir())
    missing = tmp_path / "typo"
    for refuse in (prepare, check):
        with pytest.raises(ValueError, match=f"`resume=True`: {missing} does not exist"):
            refuse(missing, MANIFEST_A, resume=True, overwrite=False)
    assert not missing.exists()


def test_manifests_are_strict_json_and_older_ones_with_bare_infinity_still_match(tmp_path):
    """A non-finite setting (fl_selection's round_deadline = inf) is stored as "inf", which
    strict parsers read; a manifest written before, with a bare Infinity, is the same sweep."""

    def strict(text):
        return json.loads(text, parse_constant=lambda name: pytest.fail(f"bare {name}"))

    settings = {**MANIFEST_A, "round_deadline": math.inf, "low": [-math.inf, 1.0]}
    out = tmp_path / "run"
    prepare(out, settings, resume=False, overwrite=False)
    stored = strict((out / MANIFEST).read_text())
    assert stored["round_deadline"] == "inf" and stored["low"] == ["-inf", 1.0]
    chunk = _chunk(out)
    (out / MANIFEST).write_text(json.dumps(settings))  # as older versions wrote it
    assert "Infinity" in (out / MANIFEST).read_text()
    check(out, settings, overwrite=False)
    assert prepare(out, settings, resume=True, overwrite=False) == []
    assert chunk.exists()
    with pytest.raises(ValueError, match=r"round_deadline: was 'inf', now 3\.0"):
        check(out, {**settings, "round_deadline": 3.0}, overwrite=False)


@pytest.mark.parametrize("resume", [False, True])
def test_prepare_out_dir_reuses_a_sweep_with_the_same_settings(tmp_path, resume):
    """Running the same command twice (with or without --resume) keeps the finished chunks."""
    out = tmp_path / "run"
    prepare(out, MANIFEST_A, resume=False, overwrite=False)
    chunk = _chunk(out)
    before = chunk.stat().st_mtime_ns
    prepare(out, dict(MANIFEST_A), resume=resume, overwrite=False)
    # Settings compare as stored in JSON: a tuple is the list it was written as.
    prepare(out, {**MANIFEST_A, "V": (1.0, 10.0)}, resume=resume, overwrite=False)
    assert chunk.exists() and chunk.stat().st_mtime_ns == before


@pytest.mark.parametrize("resume", [False, True])
def test_prepare_out_dir_refuses_other_settings_naming_them(tmp_path, resume):
    out = tmp_path / "run"
    prepare(out, MANIFEST_A, resume=False, overwrite=False)
    chunk = _chunk(out)
    changed = {**MANIFEST_A, "rounds": 20, "V": [1.0], "new": 1}
    with pytest.raises(ValueError) as err:
        prepare(out, changed, resume=resume, overwrite=False)
    message = str(err.value)
    assert message.startswith(f"`out` {out} holds a sweep with other settings")
    assert "rounds: was 10, now 20" in message and "V: was [1.0, 10.0], now [1.0]" in message
    assert "new: was None, now 1" in message and "seeds" not in message
    assert "`overwrite=True`" in message  # the library names parameters, the CLI flags
    assert chunk.exists()  # nothing was touched
    assert json.loads((out / MANIFEST).read_text()) == MANIFEST_A


def test_prepare_out_dir_overwrite_replaces_the_sweep(tmp_path):
    out = tmp_path / "run"
    prepare(out, MANIFEST_A, resume=False, overwrite=False)
    chunk = _chunk(out)
    changed = {**MANIFEST_A, "rounds": 20}
    prepare(out, changed, resume=False, overwrite=True)
    assert not chunk.exists() and not (out / CHUNK_DIR).exists()
    assert json.loads((out / MANIFEST).read_text()) == changed
    # --overwrite with the same settings starts again too.
    chunk = _chunk(out)
    prepare(out, changed, resume=False, overwrite=True)
    assert not chunk.exists()


def test_prepare_out_dir_refuses_foreign_corrupt_and_orphaned_directories(tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("not a sweep")
    with pytest.raises(ValueError, match=r"`resume=True`: .* is not a sweep directory"):
        prepare(foreign, MANIFEST_A, resume=True, overwrite=False)
    prepare(foreign, MANIFEST_A, resume=False, overwrite=False)  # without --resume: used
    assert (foreign / "notes.txt").exists()

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / MANIFEST).write_text("{not json")
    for resume in (False, True):
        with pytest.raises(ValueError, match="corrupt results directory: cannot read"):
            prepare(broken, MANIFEST_A, resume=resume, overwrite=False)
    prepare(broken, MANIFEST_A, resume=False, overwrite=True)
    assert json.loads((broken / MANIFEST).read_text()) == MANIFEST_A

    orphaned = tmp_path / "orphaned"
    _chunk(orphaned)
    with pytest.raises(ValueError, match=r"holds chunks but no manifest\.json"):
        prepare(orphaned, MANIFEST_A, resume=False, overwrite=False)
    prepare(orphaned, MANIFEST_A, resume=False, overwrite=True)
    assert not (orphaned / CHUNK_DIR).exists()

    file = tmp_path / "file"
    file.write_text("")
    with pytest.raises(ValueError, match="exists and is not a directory"):
        prepare(file, MANIFEST_A, resume=False, overwrite=False)


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


def test_the_manifest_is_read_once_and_compared_by_one_rule(tmp_path):
    """A resumed sweep keeps its stored chunk size for the same settings on as many devices;
    other settings, another device count or no sweep give none. The stored manifest is read
    once per SweepDir (the same object answers every question)."""
    import jax

    out = tmp_path / "run"
    manifest = {**MANIFEST_A, "chunk_configs": 7, "devices": jax.local_device_count()}
    prepare(out, {**manifest, "code": {"jfl": "a"}})
    directory = SweepDir(out)
    assert directory.chunk_size(MANIFEST_A) == 7
    assert directory.stored() is directory.stored()
    assert directory.chunk_size({**MANIFEST_A, "rounds": 11}) is None
    other = {**manifest, "devices": manifest["devices"] + 1}
    (out / MANIFEST).write_text(json.dumps(other))
    assert SweepDir(out).chunk_size(MANIFEST_A) is None
    assert SweepDir(tmp_path / "none").chunk_size(MANIFEST_A) is None
    # The chunk size and devices are the run's, not settings: the early check ignores them,
    # preparing with another chunk size is refused by name.
    SweepDir(out).check(MANIFEST_A, overwrite=False)
    with pytest.raises(ValueError, match="chunk_configs: was 7, now 8"):
        prepare(out, {**other, "chunk_configs": 8})


def test_the_store_records_where_each_chunk_sits(tmp_path):
    store = ChunkStore(tmp_path)
    store.record("random", 0, 0, 4)
    store.record("rbcsf-m2", 0, 4, 6)
    assert [tuple(r) for r in store.rows] == [("random", 0, 0, 4), ("rbcsf-m2", 0, 4, 6)]


def test_a_finished_sweep_is_reused_only_where_its_metadata_counts_its_chunks(tmp_path):
    """results.nc alone is a finished sweep when metadata.json says how many chunks computed
    it; one written before it did (or without metadata) is computed again, never reused with
    a count of 0."""
    import xarray as xr

    out = tmp_path / "run"
    prepare(out, MANIFEST_A)
    xr.Dataset({"x": ("config", np.arange(2.0))}).to_netcdf(out / "results.nc")
    directory = SweepDir(out)
    assert directory.finished(()) is None  # no metadata.json
    (out / "metadata.json").write_text(json.dumps({"experiment": "v_beta_grid"}))
    assert directory.finished(()) is None and directory.finished_chunks() is None
    (out / "metadata.json").write_text(json.dumps({"chunks": 3}))
    assert directory.finished_chunks() == 3
    np.testing.assert_array_equal(directory.finished(())["x"], [0.0, 1.0])
    _chunk(out)  # chunks left over: not finished
    assert directory.finished(()) is None
