"""The output directory of a sweep: its manifest, its chunk store and its outputs."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import jax
import numpy as np
import xarray as xr

from jfl import provenance, results
from jfl.results import strict_json

MANIFEST = "manifest.json"


CHUNK_DIR = "chunks"


# The files a finished sweep writes beside its manifest (and figures/).
OUTPUTS = ("results.nc", "results.nc.tmp", "summary.csv", "metadata.json")


class ChunkRows(NamedTuple):
    """Where one stored chunk's configurations sit in the sweep's configuration table."""

    label: str  # its group's folder in the store
    index: int  # its number in the group
    start: int  # its first row of the table
    stop: int  # one past its last row


class ChunkStore:
    """Finished chunks as ``.npz`` files under ``<root>/chunks/<label>/``, written atomically.

    ``computed`` and ``reused`` count the chunks this process computed and the ones it found
    finished (``run_chunked``), for the sweep's closing line; ``rows`` records where each chunk's
    configurations sit in the sweep's table, as ``run_chunked`` reads or writes it."""

    def __init__(self, root):
        self.root = Path(root)
        self.computed = 0
        self.reused = 0
        self.rows: list[ChunkRows] = []  # every chunk of the sweep, in row order

    def record(self, label: str, index: int, start: int, stop: int) -> None:
        """Note that chunk ``index`` of ``label`` holds the table's rows [start, stop)."""
        self.rows.append(ChunkRows(label, index, start, stop))

    def path(self, label: str, index: int) -> Path:
        """Where chunk ``index`` of group ``label`` is stored."""
        return self.root / CHUNK_DIR / label / f"chunk_{index:06d}.npz"

    def save(self, label: str, index: int, arrays: Mapping[str, np.ndarray]) -> None:
        """Write a chunk atomically (a temporary file renamed into place)."""
        target = self.path(label, index)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
        os.close(fd)
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, target)

    def has_chunks(self, label: str) -> bool:
        """Whether anything is stored under ``label`` (a finished chunk, or a stray file that
        ``load`` will name)."""
        folder = self.root / CHUNK_DIR / label
        return folder.is_dir() and any(folder.iterdir())

    def finished(self) -> int:
        """How many finished chunks the store holds, of every group."""
        return sum(1 for _ in (self.root / CHUNK_DIR).glob("*/chunk_*.npz"))

    def per_run_path(self, label: str, index: int) -> Path:
        """The directory of chunk ``index``'s per-run values."""
        return self.root / CHUNK_DIR / label / f"per_run_{index:06d}"

    def save_per_run(self, label: str, index: int, arrays: Mapping[str, np.ndarray]) -> None:
        """A chunk's per-run values as raw ``.npy`` files in one directory, renamed into place
        when complete (no archive: they are large, and read back one array at a time)."""
        target = self.per_run_path(label, index)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, suffix=".tmp"))
        for name, value in arrays.items():
            np.save(tmp / f"{name}.npy", value)
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)

    def has_per_run(self, label: str, index: int, expected: Mapping[str, tuple]) -> bool:
        """Whether the chunk's per-run values are all there, with the ``expected`` shapes."""
        path = self.per_run_path(label, index)
        for name, shape in expected.items():
            try:
                array = np.load(path / f"{name}.npy", mmap_mode="r")
            except (OSError, ValueError):
                return False
            if array.shape != tuple(shape):
                return False
        return True

    def load_per_run(self, label: str, index: int, name: str) -> np.ndarray:
        """One per-run array of a chunk, memory-mapped."""
        return np.load(self.per_run_path(label, index) / f"{name}.npy", mmap_mode="r")

    def remove(self) -> None:
        """Delete every chunk (of a sweep whose results file holds them all, verified)."""
        shutil.rmtree(self.root / CHUNK_DIR, ignore_errors=True)

    def remove_per_run(self) -> None:
        """Delete every chunk's per-run values (once they are in the results file)."""
        for path in (self.root / CHUNK_DIR).glob("*/per_run_*"):
            shutil.rmtree(path, ignore_errors=True)

    def load(self, label: str, index: int, expected: Mapping[str, tuple]) -> dict | None:
        """The chunk's arrays, ``None`` if absent; a clear error if it is corrupt."""
        path = self.path(label, index)
        if not path.exists():
            return None
        try:
            with np.load(path) as data:
                arrays = {k: data[k] for k in data.files}
        except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
            raise ValueError(
                f"corrupt results directory: cannot read {path} ({err}); delete that file to "
                "recompute the chunk, or start again without `resume=True`"
            ) from None
        for name, shape in expected.items():
            if name not in arrays or arrays[name].shape != tuple(shape):
                got = arrays[name].shape if name in arrays else "missing"
                raise ValueError(
                    f"corrupt results directory: {path} has {name} of shape {got}, expected "
                    f"{tuple(shape)}; delete that file to recompute the chunk"
                )
        return arrays


def check_writable(out: Path) -> None:
    """ValueError unless ``out`` is a directory this process can write in, or can be created
    as one: probed with a temporary folder in ``out`` or its nearest existing parent."""
    existing = out.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"`out` {out}: {existing} is a file, not a directory")
    try:
        tempfile.TemporaryDirectory(dir=existing, prefix=".jfl-probe-").cleanup()
    except OSError as err:
        raise ValueError(
            f"`out` {out}: cannot create folders in {existing} ({err.strerror})"
        ) from None


def as_stored(settings: Mapping) -> dict:
    """``settings`` as a manifest file holds them, the form they are compared in: JSON types,
    non-finite numbers as the strings "inf", "-inf", "nan" (strict JSON)."""
    return json.loads(strict_json(settings))


def read_manifest(out: Path) -> dict:
    """The manifest of the sweep ``out`` holds, :func:`as_stored` (one written before manifests
    were strict JSON, with a bare ``Infinity``, reads the same)."""
    return as_stored(json.loads((Path(out) / MANIFEST).read_text()))


def _nothing_to_resume(out: Path) -> str:
    if not out.exists():
        return (
            f"`resume=True`: {out} does not exist, so there is no sweep to resume: check `out`, "
            "or drop `resume=True` to start one"
        )
    return (
        f"`resume=True`: {out} has no {MANIFEST}; it is not a sweep directory (or it is "
        "corrupt): pick another `out` or drop `resume=True`"
    )


# The keys a manifest adds to the settings: the resolved chunk size and this process's devices
# (the same chunks are what make a resumed sweep bit-identical) and the code that computed it.
RUN_KEYS = ("chunk_configs", "devices", "code")
_UNREAD = object()


class SweepDir:
    """The one owner of a sweep's output directory (``out``): it reads the stored manifest
    once, compares settings by one rule, prepares the directory, finds the finished results and
    writes the outputs; ``store`` holds the chunks.

    A directory that holds a sweep with the same settings and code is reused: its finished
    chunks are kept and only what is missing is computed (running the same command twice
    completes or reuses the first run). One with other settings is refused unless
    ``overwrite``, one made by other code unless ``overwrite`` or ``reuse_stale``; with
    ``resume`` a directory that holds no sweep (missing, empty or foreign) is refused too.
    """

    def __init__(self, out):
        self.path = Path(out)
        self.store = ChunkStore(self.path)
        self._stored = _UNREAD

    def stored(self) -> dict | None:
        """The stored manifest, :func:`as_stored`; None where there is none (or it does not
        read: :meth:`prepare` names that problem)."""
        if self._stored is _UNREAD:
            try:
                self._stored = read_manifest(self.path)
            except (OSError, json.JSONDecodeError):
                self._stored = None
        return self._stored

    def check(self, settings: Mapping, overwrite: bool, resume: bool = False) -> None:
        """Refuse early, before the plan's own computations, a directory that will be refused:
        one that cannot be written, one holding a sweep with other ``settings`` (unless
        ``overwrite``), and with ``resume`` one that holds no sweep."""
        check_writable(self.path)
        if resume and not overwrite and not (self.path / MANIFEST).exists():
            raise ValueError(_nothing_to_resume(self.path))
        if not overwrite and self.stored() is not None:
            self._refuse_other(as_stored(settings), RUN_KEYS)

    def chunk_size(self, settings: Mapping) -> int | None:
        """The chunk size of the sweep held here with these ``settings`` on this many devices
        (a resumed sweep keeps its chunks whatever memory is free now), None if there is none."""
        old = self.stored()
        if old is None or _differences(old, as_stored(settings), RUN_KEYS):
            return None
        if old.get("devices") != jax.local_device_count():
            return None
        return old.get("chunk_configs")

    def prepare(
        self,
        manifest: Mapping,
        resume: bool = False,
        overwrite: bool = False,
        reuse_stale: bool = False,
    ) -> list[str]:
        """Create the directory, or reuse the sweep it holds, before any computation. Returns
        what changed in the code of a sweep reused with ``reuse_stale`` (the stored manifest
        keeps the code that computed its chunks)."""
        out, path = self.path, self.path / MANIFEST
        if out.exists() and not out.is_dir():
            raise ValueError(f"`out` {out} exists and is not a directory")
        manifest = as_stored(manifest)
        if path.exists() and not overwrite:
            return self._reuse(manifest, reuse_stale)
        if resume and not path.exists():
            raise ValueError(_nothing_to_resume(out))
        if (out / CHUNK_DIR).exists() and not path.exists() and not overwrite:
            raise ValueError(
                f"`out` {out} holds chunks but no {MANIFEST}; pass `overwrite=True` to start again"
            )
        # A new sweep (or overwrite): nothing of an earlier one may pass for its results.
        shutil.rmtree(out / CHUNK_DIR, ignore_errors=True)
        shutil.rmtree(out / "figures", ignore_errors=True)
        for name in OUTPUTS:
            (out / name).unlink(missing_ok=True)
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(manifest, indent=2, sort_keys=True, allow_nan=False))
        self._stored = manifest
        return []

    def _reuse(self, manifest: dict, reuse_stale: bool) -> list[str]:
        if self.stored() is None:
            try:
                read_manifest(self.path)
            except (OSError, json.JSONDecodeError) as err:
                raise ValueError(
                    f"corrupt results directory: cannot read {self.path / MANIFEST} ({err}); "
                    "pass `overwrite=True` to start again"
                ) from None
        self._refuse_other(manifest, ("code",))
        changes = []
        if "code" in manifest:  # a caller that records its code
            changes = provenance.code_changes(self.stored().get("code"), manifest["code"])
        if changes and not reuse_stale:
            raise ValueError(
                f"`out` {self.path} holds results computed by other code ({'; '.join(changes)}); "
                "`overwrite=True` recomputes them, `reuse_stale=True` keeps them knowingly "
                "(recorded in metadata.json)"
            )
        return changes

    def _refuse_other(self, new: Mapping, ignored: tuple[str, ...]) -> None:
        differences = _differences(self.stored(), new, ignored)
        if differences:
            detail = "; ".join(differences)
            raise ValueError(
                f"`out` {self.path} holds a sweep with other settings ({detail}); use the same "
                "settings, another `out`, or `overwrite=True` to replace it"
            )

    def finished(self, per_run: tuple[str, ...], dropped: tuple[str, ...] = ()):
        """The dataset of the finished sweep held in ``results.nc`` alone (its chunks deleted
        once it was verified), without the variables ``dropped``; None where there is none, or
        it lacks the per-run values asked for, or its ``metadata.json`` does not say how many
        chunks computed it (written before it did): the sweep is then computed again."""
        path = self.path / "results.nc"
        if not path.exists() or self.store.finished() or self.finished_chunks() is None:
            return None
        ds = results.load_dataset(path)
        if not all(name in ds for name in per_run):
            return None
        return ds.drop_vars([name for name in dropped if name in ds])

    def finished_chunks(self) -> int | None:
        """How many chunks the finished sweep held here computed (``metadata.json``), None
        where that file does not say."""
        try:
            chunks = json.loads((self.path / "metadata.json").read_text()).get("chunks")
        except (OSError, json.JSONDecodeError):
            return None
        return None if chunks is None else int(chunks)

    def note_stale(self, changes: list[str], chunks: int) -> None:
        """Record in ``metadata.json`` that these results were reused although other code
        computed them (``--reuse-stale``)."""
        path = self.path / "metadata.json"
        metadata = json.loads(path.read_text())
        metadata["reused_stale"] = {"changes": changes, "chunks_reused": chunks}
        path.write_text(strict_json(metadata, indent=2))

    def write(
        self,
        ds: xr.Dataset,
        summary,
        metadata: Mapping,
        per_run: Mapping[str, tuple[str, ...]],
        keep_chunks: bool = False,
    ) -> None:
        """``results.nc`` (with the per-run values named in ``per_run``, by their dims, streamed
        in from the chunk store), read back identical; then ``summary.csv`` and
        ``metadata.json``; then the chunks are deleted unless ``keep_chunks``, since
        everything is in ``results.nc``."""
        stream = results.PerRun(per_run, self.store.rows, self.store.load_per_run)
        stream = stream if per_run else None
        results.write_dataset(ds, self.path / "results.nc", metadata, per_run=stream)
        results.verify_dataset(ds, self.path / "results.nc", per_run=stream)
        if per_run:
            self.store.remove_per_run()  # they are in results.nc now: one copy on disk
        summary.to_csv(self.path / "summary.csv", index=False)
        (self.path / "metadata.json").write_text(strict_json(metadata, indent=2))
        if not keep_chunks:
            self.store.remove()

    def disk_usage(self) -> int:
        """Bytes of every file the directory holds."""
        return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())


def _differences(old: Mapping, new: Mapping, ignored: tuple[str, ...]) -> list[str]:
    """``"key: was …, now …"`` for each setting that differs, but the ``ignored`` keys."""
    keys = sorted(k for k in set(old) | set(new) if k not in ignored)
    return [
        f"{k}: was {old.get(k)!r}, now {new.get(k)!r}" for k in keys if old.get(k) != new.get(k)
    ]
