"""Sweep utilities: grids, memory-bounded chunks, sharding over devices, resumable storage.

A sweep is a table of configurations (one row per policy × hyperparameter combination) run over a
shared set of seeds. Each policy compiles once; its configurations run in chunks of a fixed size
(the last one padded), each chunk written atomically to ``<out>/chunks`` as soon as it finishes,
so an interrupted sweep loses at most the chunk in flight and ``resume`` picks up the rest with
bit-identical results.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import re
import shutil
import tempfile
import threading
import zipfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from tqdm import tqdm  # plain: tqdm.auto's notebook widget needs ipywidgets, else it warns

from jfl.distributed import SINGLE, Layout, barrier
from jfl.kernels.selection import SMALL_POOL_MAX
from jfl.policies import get as get_policy

MANIFEST = "manifest.json"
CHUNK_DIR = "chunks"
# The files a finished sweep writes beside its manifest (and figures/).
OUTPUTS = ("results.nc", "results.nc.tmp", "summary.csv", "metadata.json")

# Set to stop a running sweep at its next chunk boundary (KeyboardInterrupt there, after the
# finished chunks are written): what the command line's Ctrl-C handler does, in case the
# KeyboardInterrupt it also raises lands where Python ignores it (a garbage-collector callback).
STOP = threading.Event()
# Set while the command line's Ctrl-C handler is installed: the device waits (a compilation,
# a chunk's computation) then run in a thread of their own, so that Ctrl-C acts at once instead
# of after the chunk in flight (a federated chunk takes seconds to minutes); the chunk in flight
# is abandoned, the finished ones are on disk. From Python the waits stay on the caller's
# thread, with whatever JAX settings its context holds.
WAIT_OFF_MAIN = threading.Event()
# Set when a Ctrl-C left such a wait running: the interpreter's exit would then stop its thread
# inside XLA and abort the process, so the command line leaves at once (``jfl.cli.main``).
ABANDONED = threading.Event()
_RANGE = re.compile(r"^\s*([^:]+):([^:]+):([^:]+)\s*$")


# --------------------------------------------------------------------------- grids


def parse_values(text: str, name: str) -> list[float]:
    """``"1,10,20"`` or an inclusive range ``"start:stop:count"`` (``"0:50:11"`` → 0, 5, …, 50)."""
    text = str(text).strip()
    match = _RANGE.match(text)
    if match and not (match[3].strip().isdigit() and int(match[3]) >= 1):
        raise ValueError(
            f"--{name}: the count of start:stop:count must be an integer >= 1, got {text!r}"
        )
    items = [] if match else list_items(text, f"--{name}")
    try:
        if match:
            start, stop = float(match[1]), float(match[2])
            return [float(v) for v in np.linspace(start, stop, int(match[3]))]
        values = [float(v) for v in items]
    except ValueError:
        raise ValueError(
            f"--{name}: expected a comma-separated list (1,10,20) or start:stop:count "
            f"(0:50:11), got {text!r}"
        ) from None
    if not values:
        raise ValueError(f"--{name}: no values given")
    return values


def list_items(text: str, name: str) -> list[str]:
    """The non-empty items of a comma-separated list; an empty item between two commas is refused
    (``name`` heads the message), one trailing comma is not an item."""
    items = [v.strip() for v in str(text).split(",")]
    if items[-1] == "" and len(items) > 1:
        items.pop()
    if len(items) > 1 and "" in items:
        raise ValueError(f"{name}: an empty item in {text!r} (a value missing between commas?)")
    return [v for v in items if v]


def config_table(
    policies: Sequence[str],
    swept: Mapping[str, Sequence[float]],
    fixed: Mapping[str, float] | None = None,
    shared: Mapping[str, Sequence[float]] | None = None,
) -> pd.DataFrame:
    """Cartesian grid per policy over the swept hyperparameters that policy reads.

    Columns: ``policy``, every ``shared`` name (scenario axes crossed with every policy, e.g. the
    number of channels or the fairness scale) and every swept name (NaN where the policy does not
    use it). Values are validated against each policy's ranges.
    """
    fixed = dict(fixed or {})
    shared = dict(shared or {})
    if not policies:
        raise ValueError("--policies: give at least one policy")
    if len(set(policies)) != len(policies):
        raise ValueError(f"--policies: duplicate names in {list(policies)}")
    rows = []
    for name in policies:
        spec = get_policy(name)
        used = [k for k in swept if k in spec.hparams]
        spec.validate({k: swept[k] for k in used})
        spec.validate({k: v for k, v in fixed.items() if k in spec.hparams})
        for scenario in itertools.product(*shared.values()):
            for values in itertools.product(*(swept[k] for k in used)):
                row = {
                    "policy": name,
                    **dict(zip(shared, scenario, strict=True)),
                    **{k: np.nan for k in swept},
                    **dict(zip(used, values, strict=True)),
                }
                rows.append(row)
    return pd.DataFrame(rows, columns=["policy", *shared, *swept])


def policy_hparams(name: str, rows: pd.DataFrame, fixed: Mapping[str, float] | None = None):
    """Full per-config hyperparameter arrays for ``name`` (defaults, then fixed, then swept)."""
    spec = get_policy(name)
    fixed = {k: v for k, v in (fixed or {}).items() if k in spec.hparams}
    values = spec.complete(fixed)
    out = {}
    for key, default in values.items():
        if key in rows and rows[key].notna().all():
            out[key] = rows[key].to_numpy(np.float32)
        else:
            out[key] = np.full(len(rows), default, np.float32)
    return out


# --------------------------------------------------------------------------- chunking


def bytes_per_run(
    num_rounds: int, num_clients: int, selection_size: int, trajectories: bool
) -> int:
    """Rough upper bound of device memory one (config, seed) run needs, outputs included."""
    outputs = 4 * 4 * num_rounds + 8 * num_clients
    if trajectories:
        outputs += 5 * num_rounds * num_clients
    # Pairwise ranks (O(N²)) up to SMALL_POOL_MAX clients, sorting (O(N)) above.
    pairwise = num_clients * min(num_clients, SMALL_POOL_MAX)
    working = 4 * (24 * num_clients + 8 * pairwise + 2 * num_clients * selection_size)
    return 2 * (outputs + working)  # ×2: double-buffered outputs and XLA temporaries


# Chunks on the device at once: one computing while the previous one is fetched.
IN_FLIGHT = 2


def auto_chunk_size(
    num_configs: int, num_seeds: int, per_run_bytes: int, budget_bytes: int, devices: int = 1
) -> int:
    """Largest number of configurations per chunk such that the chunks in flight
    (``IN_FLIGHT``) fit ``budget_bytes`` together."""
    per_config = max(1, num_seeds * per_run_bytes * IN_FLIGHT)
    size = max(1, budget_bytes // per_config)
    size = min(size, num_configs)
    return round_up(size, devices)


def _device_free() -> int | None:
    """Bytes free on this process's first device, None where it reports no memory statistics
    (the CPU)."""
    stats = jax.local_devices()[0].memory_stats() or {}
    if "bytes_limit" not in stats:
        return None
    return int(stats["bytes_limit"] - stats.get("bytes_in_use", 0))


def device_memory_budget(fraction: float = 0.5) -> int | None:
    """``fraction`` of the free memory of this process's first device, in bytes; None where the
    device reports no memory statistics (the CPU)."""
    free = _device_free()
    return None if free is None else int(fraction * free)


def free_memory() -> int | None:
    """Bytes free on this process's first device: an accelerator's own memory, the host's
    available memory for the CPU (Linux's MemAvailable); None where neither is known."""
    free = _device_free()
    if free is not None:
        return free
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_chunk_fits(
    chunk: int, num_seeds: int, per_run_bytes: int, auto: bool, shared_bytes: int = 0
) -> None:
    """ValueError, with the figure and the way out, when the chunks in flight (``chunk``
    configurations × ``num_seeds`` runs each) and the data they share (``shared_bytes``: a
    federated sweep's clients' data) cannot fit the device's free memory."""
    need = IN_FLIGHT * chunk * num_seeds * per_run_bytes + shared_bytes
    free = free_memory()
    if free is None or need <= free:
        return
    ways = ["fewer --seeds, --rounds or clients"]
    if chunk > 1:
        ways.insert(0, "a smaller --memory-budget" if auto else "a smaller --chunk-size")
    data = f" and {format_bytes(shared_bytes)} of data" if shared_bytes else ""
    raise ValueError(
        f"--seeds {num_seeds}: {IN_FLIGHT} chunks in flight of {chunk} configuration(s) × "
        f"{num_seeds} seeds{data} need about {format_bytes(need)} ({format_bytes(per_run_bytes)} "
        f"a run), more than the {format_bytes(free)} free on "
        f"{jax.local_devices()[0].platform.upper()}; "
        f"use {' or '.join(ways)}"
    )


def format_bytes(count: float) -> str:
    """``1.2 MB``: decimal units, three significant digits."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if count < 1000 or unit == "TB":
            return f"{count:.3g} {unit}"
        count /= 1000
    return f"{count:.3g} TB"


def disk_usage(folder: Path) -> int:
    """Bytes of every file under ``folder``."""
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def chunk_bounds(
    num_configs: int, max_size: int, devices: int = 1, exact: bool = False
) -> list[tuple[int, int]]:
    """``(start, stop)`` of each chunk: as few chunks as ``max_size`` allows, of equal size
    (``ceil(C / ceil(C / max))`` configurations, a multiple of ``devices``), the last one shorter.
    ``exact``: every chunk ``max_size`` configurations (rounded up to ``devices``), whatever C.

    Every chunk is computed at the same, first chunk's, size (the last padded), so one compiled
    program serves them all; balancing keeps that padding below one row per chunk and device.
    """
    if num_configs < 1:
        return []
    size = balanced_chunk_size(num_configs, max_size, devices, exact)
    return [(start, min(start + size, num_configs)) for start in range(0, num_configs, size)]


def balanced_chunk_size(
    num_configs: int, max_size: int, devices: int = 1, exact: bool = False
) -> int:
    """The size every chunk of ``chunk_bounds`` is computed at (the last one padded to it);
    ``exact``: ``max_size`` itself (rounded up to ``devices``), so that the batch's shape does
    not depend on how many configurations there are."""
    if exact:
        return round_up(max_size, devices)
    count = math.ceil(num_configs / max_size)
    return round_up(math.ceil(num_configs / count), devices)


def round_up(x: int, multiple: int) -> int:
    """The smallest multiple of ``multiple`` that is at least ``x``."""
    return int(math.ceil(x / multiple) * multiple)


# --------------------------------------------------------------------------- storage


class ChunkStore:
    """Finished chunks as ``.npz`` files under ``<root>/chunks/<label>/``, written atomically.

    ``computed`` and ``reused`` count the chunks this process computed and the ones it found
    finished (``run_chunked``), for the sweep's closing line."""

    def __init__(self, root):
        self.root = Path(root)
        self.computed = 0
        self.reused = 0

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
                "recompute the chunk, or start again without --resume"
            ) from None
        for name, shape in expected.items():
            if name not in arrays or arrays[name].shape != tuple(shape):
                got = arrays[name].shape if name in arrays else "missing"
                raise ValueError(
                    f"corrupt results directory: {path} has {name} of shape {got}, expected "
                    f"{tuple(shape)}; delete that file to recompute the chunk"
                )
        return arrays


def check_out_dir(out: Path, settings: Mapping, overwrite: bool, resume: bool = False) -> None:
    """Refuse early a directory whose sweep has other ``settings`` (the keys given), unless
    ``overwrite``, and with ``resume`` one that holds no sweep; :func:`prepare_out_dir` does the
    full check once the chunk size is known."""
    check_writable(Path(out))
    path = Path(out) / MANIFEST
    if resume and not overwrite and not path.exists():
        raise ValueError(_nothing_to_resume(Path(out)))
    if overwrite or not path.exists():
        return
    try:
        old = read_manifest(out)
    except (OSError, json.JSONDecodeError):
        return  # prepare_out_dir names the problem
    settings = as_stored(settings)
    _refuse_other_settings(out, {k: old.get(k) for k in settings}, settings)


def check_writable(out: Path) -> None:
    """ValueError unless ``out`` is a directory this process can write in, or can be created
    as one: probed with a temporary folder in ``out`` or its nearest existing parent."""
    existing = out.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"--out {out}: {existing} is a file, not a directory")
    try:
        tempfile.TemporaryDirectory(dir=existing, prefix=".jfl-probe-").cleanup()
    except OSError as err:
        raise ValueError(
            f"--out {out}: cannot create folders in {existing} ({err.strerror})"
        ) from None


def stored_chunk_size(out: Path, settings: Mapping) -> int | None:
    """The chunk size of the sweep ``out`` holds with these ``settings`` on this many devices
    (a resumed sweep keeps its chunks whatever memory is free now), None if there is none."""
    try:
        old = read_manifest(out)
    except (OSError, json.JSONDecodeError):
        return None
    settings = as_stored(settings)
    same = all(old.get(k) == v for k, v in settings.items())
    if not same or old.get("devices") != jax.local_device_count():
        return None
    return old.get("chunk_configs")


def as_stored(settings: Mapping) -> dict:
    """``settings`` as a manifest file holds them, the form they are compared in: JSON types,
    non-finite numbers as the strings "inf", "-inf", "nan" (strict JSON)."""
    from jfl.results import strict_json

    return json.loads(strict_json(settings))


def read_manifest(out: Path) -> dict:
    """The manifest of the sweep ``out`` holds, :func:`as_stored` (one written before manifests
    were strict JSON, with a bare ``Infinity``, reads the same)."""
    return as_stored(json.loads((Path(out) / MANIFEST).read_text()))


def _nothing_to_resume(out: Path) -> str:
    if not out.exists():
        return (
            f"--resume: {out} does not exist, so there is no sweep to resume: check --out, or "
            "drop --resume to start one"
        )
    return (
        f"--resume: {out} has no {MANIFEST}; it is not a sweep directory (or it is corrupt): "
        "pick another --out or drop --resume"
    )


def _refuse_other_settings(out: Path, old: Mapping, new: Mapping) -> None:
    differences = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    if differences:
        detail = "; ".join(f"{k}: was {old.get(k)!r}, now {new.get(k)!r}" for k in differences)
        raise ValueError(
            f"--out {out} holds a sweep with other settings ({detail}); use the same settings, "
            "another --out, or --overwrite to replace it"
        )


def prepare_out_dir(
    out: Path, manifest: Mapping, resume: bool, overwrite: bool, reuse_stale: bool = False
) -> list[str]:
    """Create ``out``, or reuse the sweep it holds, before any computation.

    A directory that holds a sweep with the same settings and code (``manifest["code"]``, a
    ``jfl.provenance.code_fingerprint``) is reused: its finished chunks are kept and only what
    is missing is computed (running the same command twice completes or reuses the first run).
    One with other settings is refused unless ``overwrite``, one made by other code unless
    ``overwrite`` or ``reuse_stale``; with ``resume`` a directory that holds no sweep (missing,
    empty or foreign) is refused too. Returns what changed in the code of a sweep reused with
    ``reuse_stale`` (the stored manifest keeps the code that computed its chunks).
    """
    from jfl import provenance

    out = Path(out)
    path = out / MANIFEST
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} exists and is not a directory")
    manifest = as_stored(manifest)
    if path.exists() and not overwrite:
        try:
            old = read_manifest(out)
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(
                f"corrupt results directory: cannot read {path} ({err}); pass --overwrite to "
                "start again"
            ) from None
        settings = {k: v for k, v in manifest.items() if k != "code"}
        _refuse_other_settings(out, {k: v for k, v in old.items() if k != "code"}, settings)
        changes = []
        if "code" in manifest:  # a caller that records its code
            changes = provenance.code_changes(old.get("code"), manifest["code"])
        if changes and not reuse_stale:
            raise ValueError(
                f"--out {out} holds results computed by other code ({'; '.join(changes)}); "
                "--overwrite recomputes them, --reuse-stale keeps them knowingly (recorded in "
                "metadata.json)"
            )
        return changes
    if resume and not path.exists():
        raise ValueError(_nothing_to_resume(out))
    if (out / CHUNK_DIR).exists() and not path.exists() and not overwrite:
        raise ValueError(
            f"--out {out} holds chunks but no {MANIFEST}; pass --overwrite to start again"
        )
    # A new sweep (or --overwrite): nothing of an earlier one may pass for its results.
    shutil.rmtree(out / CHUNK_DIR, ignore_errors=True)
    shutil.rmtree(out / "figures", ignore_errors=True)
    for name in OUTPUTS:
        (out / name).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True, allow_nan=False))
    return []


# --------------------------------------------------------------------------- execution


def _sharding():
    # This process's own devices: with several processes each runs its chunks on its own
    # devices (jfl.distributed), so no compiled program spans processes.
    devices = jax.local_devices()
    if len(devices) == 1:
        return None, None
    mesh = Mesh(np.array(devices), ("config",))
    return NamedSharding(mesh, PartitionSpec("config")), NamedSharding(mesh, PartitionSpec())


def run_chunked(
    batched: Callable,
    keys: jax.Array,
    hparams: Mapping[str, np.ndarray],
    chunk_size: int,
    *,
    store: ChunkStore | None = None,
    label: str = "run",
    progress: tqdm | None = None,
    layout: Layout = SINGLE,
    stream: tuple[str, ...] = (),
    num_configs: int | None = None,
    exact: bool = False,
) -> dict[str, np.ndarray]:
    """Run ``batched(keys, hparams)`` over configurations in chunks (``hparams``: [C, ...];
    ``num_configs`` is C, needed only when ``hparams`` is empty; ``exact``: every chunk is
    computed at ``chunk_size`` configurations, see ``chunk_bounds``).

    The chunks are balanced (``chunk_bounds``: at most ``chunk_size`` configurations each) and
    all computed at the first one's size (the last padded by repeating its final row, the padding
    trimmed before it leaves the device), so the whole sweep reuses one compiled program. With
    several local devices the configuration axis is sharded across them (``chunk_size`` must then
    be a multiple of the local device count).

    A pipeline: chunk i + 1 is dispatched before chunk i is fetched, and a background thread
    writes each finished chunk to ``store`` (atomically), so the device, the transfer and the
    disk overlap. Chunks already in ``store`` are reloaded, not computed. The outputs named in
    ``stream`` (large per-run values) go to the store only (``ChunkStore.save_per_run``) and are
    not returned; without a store they are returned like the others. With several processes
    (``layout``, see ``jfl.distributed``) each computes the chunks it owns, and after a barrier
    reads the others' from the shared ``store``.
    """
    if num_configs is None:
        num_configs = len(next(iter(hparams.values())))
    num_devices = jax.local_device_count()
    if chunk_size < 1 or chunk_size % num_devices:
        raise ValueError(
            f"chunk_size must be a positive multiple of the device count ({num_devices}), "
            f"got {chunk_size}"
        )
    if layout.count > 1 and store is None:
        raise ValueError("a sweep over several processes needs a chunk store (--out)")
    chunks = _Chunks(
        batched=batched,
        keys=keys,
        hparams=hparams,
        bounds=chunk_bounds(num_configs, chunk_size, num_devices, exact),
        size=balanced_chunk_size(num_configs, chunk_size, num_devices, exact),
        store=store,
        label=label,
        stream=tuple(stream) if store is not None else (),
    )
    results = chunks.stored() if store is not None and store.has_chunks(label) else {}
    todo = [i for i in range(len(chunks.bounds)) if i not in results and layout.owns(i)]
    if progress is not None and results:
        progress.update(sum(chunks.count(i) for i in results))
    if store is not None:
        store.reused += len(results)
    results.update(_pipeline(chunks, todo, progress))
    if store is not None:
        store.computed += len(todo)
    if layout.count > 1:
        barrier(f"jfl-{label}-chunks", layout)
        results.update(chunks.others(results))
    names = chunks.collected()
    return {k: np.concatenate([results[i][k] for i in range(len(chunks.bounds))]) for k in names}


@dataclasses.dataclass
class _Chunks:
    """One ``run_chunked`` call's chunks: their inputs, computation, shapes and storage."""

    batched: Callable
    keys: jax.Array
    hparams: Mapping[str, np.ndarray]
    bounds: list[tuple[int, int]]  # [start, stop) of every chunk
    size: int  # every chunk's padded number of configurations
    store: ChunkStore | None
    label: str
    stream: tuple[str, ...]  # outputs that go to the store only
    shapes: dict = dataclasses.field(default_factory=dict)  # one configuration's output shapes

    def count(self, index: int) -> int:
        start, stop = self.bounds[index]
        return stop - start

    def inputs(self, index: int) -> dict:
        """Chunk ``index``'s hyperparameters, padded by repeating its last row."""
        start, stop = self.bounds[index]
        rows = np.arange(start, start + self.size).clip(max=stop - 1)
        return {k: jnp.asarray(v[rows]) for k, v in self.hparams.items()}

    def per_config(self, arrays=None) -> dict:
        """Shapes of one configuration's outputs: from the first chunk computed, or, to validate
        stored chunks before computing anything, from tracing the program (which costs as much
        as the call's own trace, so only when there is something stored to read)."""
        if not self.shapes:
            if arrays is None:
                run = lambda keys, hparams: self.batched(keys, hparams, self.size)  # noqa: E731
                arrays = jax.eval_shape(run, self.keys, self.inputs(0))
                arrays = arrays if isinstance(arrays, Mapping) else arrays.arrays()
            self.shapes.update({k: v.shape[1:] for k, v in arrays.items()})
        return self.shapes

    def collected(self) -> list[str]:
        return [name for name in self.per_config() if name not in self.stream]

    def expected(self, index: int, names) -> dict:
        return {k: (self.count(index), *self.per_config()[k]) for k in names}

    def load(self, index: int):
        """Chunk ``index`` from the store, or None (missing, or its per-run values missing)."""
        chunk = self.store.load(self.label, index, self.expected(index, self.collected()))
        if chunk is None or not self.stream:
            return chunk
        if not self.store.has_per_run(self.label, index, self.expected(index, self.stream)):
            return None  # its per-run values are missing: compute it again
        return chunk

    def stored(self) -> dict:
        found = {index: self.load(index) for index in range(len(self.bounds))}
        return {index: chunk for index, chunk in found.items() if chunk is not None}

    def others(self, results) -> dict:
        """After every process finished: the chunks this one did not compute, from the store."""
        loaded = {}
        for index in range(len(self.bounds)):
            if index in results:
                continue
            loaded[index] = self.load(index)
            if loaded[index] is None:
                raise RuntimeError(
                    f"chunk {index} of {self.label} is missing after every process finished: is "
                    "--out on a filesystem that every process sees?"
                )
        return loaded

    def dispatch(self, index: int):
        """Start chunk ``index`` on the devices; returns before they finish."""
        hparams, keys = self.inputs(index), self.keys
        config_sharding, replicated = _sharding()
        if config_sharding is not None:
            hparams = jax.device_put(hparams, config_sharding)
            keys = jax.device_put(keys, replicated)
        output = self.batched(keys, hparams, self.size)
        return output if isinstance(output, Mapping) else output.arrays()

    def fetch(self, index: int, arrays) -> tuple[dict, dict]:
        """Chunk ``index``'s outputs on the host, padding trimmed: (collected, streamed)."""
        count = self.count(index)
        trim = (lambda x: x[:count]) if count < self.size else (lambda x: x)
        host = {name: np.asarray(trim(arrays[name])) for name in self.per_config(arrays)}
        return {k: host[k] for k in self.collected()}, {k: host[k] for k in self.stream}


def _pipeline(chunks: _Chunks, todo: list[int], progress) -> dict:
    """Compute the chunks ``todo``: chunk i + 1 is dispatched before chunk i is fetched, and a
    background thread writes each finished chunk, at most ``IN_FLIGHT`` writes behind; whatever
    was computed is written, even on an interrupt."""
    results, writes = {}, []
    writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jfl-chunk-writer")

    def finish(index, arrays):
        results[index], per_run = _interruptible(chunks.fetch, index, arrays)
        if chunks.store is not None:
            if len(writes) >= IN_FLIGHT:
                writes[-IN_FLIGHT].result()  # the disk keeps up, or the host holds few chunks
            args = (chunks.store, chunks.label, index, results[index], per_run)
            writes.append(writer.submit(_save_chunk, *args))
        if progress is not None:
            progress.update(chunks.count(index))

    try:
        pending = None
        for index in todo:
            dispatched = (index, _interruptible(chunks.dispatch, index))
            if pending is not None:
                finish(*pending)
            pending = dispatched
            if STOP.is_set():
                raise KeyboardInterrupt
        if pending is not None:
            finish(*pending)
    finally:
        _drain(writer)
    for write in writes:
        write.result()  # a failed write raises here
    return results


def _interruptible(fn: Callable, *args):
    """``fn(*args)``, waited for in short steps where ``WAIT_OFF_MAIN`` is set, so that a
    KeyboardInterrupt is raised within a tenth of a second; ``fn`` then finishes unobserved."""
    if not WAIT_OFF_MAIN.is_set() or threading.current_thread() is not threading.main_thread():
        return fn(*args)
    outcome = {}

    def call():
        try:
            outcome["value"] = fn(*args)
        except BaseException as err:  # raised again on the caller's thread
            outcome["error"] = err

    worker = threading.Thread(target=call, name="jfl-device-wait", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.1)
    except KeyboardInterrupt:
        ABANDONED.set()
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _drain(writer: ThreadPoolExecutor) -> None:
    """Wait until every submitted chunk is written, even through a Ctrl-C that lands in the
    wait (raised again afterwards): otherwise a chunk would be finished after the interrupt
    message had counted the chunks on disk."""
    interrupted = False
    while True:
        try:
            writer.shutdown(wait=True)
            break
        except KeyboardInterrupt:
            interrupted = True
    if interrupted:
        raise KeyboardInterrupt


def _save_chunk(store: ChunkStore, label: str, index: int, arrays, per_run) -> None:
    # The per-run values first: a chunk counts as finished once its main file is there.
    if per_run:
        store.save_per_run(label, index, per_run)
    store.save(label, index, arrays)


# --------------------------------------------------------------------------- orchestration


def run_policy_grid(
    env,
    env_params,
    configs: pd.DataFrame,
    *,
    num_clients: int,
    selection_size: int | str,
    num_rounds: int,
    seeds: Sequence[int],
    base_seed: int = 0,
    chunk_size: int,
    fixed: Mapping[str, float] | None = None,
    store: ChunkStore | None = None,
    trajectories: bool = False,
    show_progress: bool = True,
    per_config: Mapping[str, np.ndarray] | None = None,
    per_seed: Mapping[str, np.ndarray] | None = None,
    env_hparams: tuple[str, ...] = (),
    learner: Callable | None = None,
    data=None,
    eval_every: int | None = None,
    layout: Layout = SINGLE,
    reduce: bool = False,
    keep: tuple[str, ...] = (),
    trackers: tuple = (),
    exact_chunks: bool = False,
) -> dict[str, np.ndarray]:
    """Run every configuration of ``configs`` over ``seeds``; outputs have axes [config, seed].

    With ``reduce`` the runs are reduced on the device (``jfl.reduction``): the outputs are the
    per-run metrics [config, seed] and the bands over seeds [config, ...] that
    ``jfl.reduction.reduced_dims`` lists, and the per-run outputs named in ``keep``
    ([config, seed, ...]), which go to ``store`` chunk by chunk (``ChunkStore.save_per_run``;
    read them back with ``per_run_chunks``) instead of being returned, when there is a store.

    One compiled program per policy and ``selection_size`` (an int, or the name of a config
    column holding it per row); each group's rows must be contiguous. ``per_config`` holds extra
    per-configuration arrays (leading axis ``len(configs)``): hyperparameters that are vectors,
    such as a fairness vector c [C, N]. ``trackers`` (``jfl.trackers``) are kept in every run;
    the hyperparameters they read come from ``per_config`` or else from the column of that
    name. ``per_seed`` holds per-(configuration, seed) arrays (leading axes
    ``[len(configs), len(seeds)]``), passed as hyperparameters that each run reads for its own
    seed (``jfl.runner.make_batched_run``'s ``seed_hparams``). ``env_hparams`` names environment
    fields taken from the hyperparameters (see ``jfl.runner.make_run``).

    Federated runs: ``learner(policy_name, selection_size)`` builds each group's learner (its
    training slots can depend on the policy), ``data`` is the ``jfl.fl.FederatedData`` every run
    reads, and ``eval_every`` the evaluation period in rounds. ``layout`` shares the chunks among
    the processes of a distributed sweep (``jfl.distributed``); every process returns all outputs.
    ``exact_chunks``: every chunk holds exactly ``chunk_size`` configurations (the last padded),
    so a configuration's batch has the same shape in any sweep (``group_chunk_size``).
    """
    from jfl.reduction import make_reducer
    from jfl.runner import learner_outputs, make_batched_run, make_run, output_dims, seed_keys

    trackers = tuple(trackers)
    per_config, per_seed = _checked_arrays(configs, seeds, per_config, per_seed, trackers)
    sizes = _sizes(configs, selection_size)
    groups = policy_groups(configs, selection_size)
    # Every group is checked (environment, learner signals) before the first one compiles.
    learners = []
    for group in groups:
        name, size = configs["policy"].iloc[group.start], int(sizes[group.start])
        spec = get_policy(name)
        spec.check_environment(env)
        learners.append(None if learner is None else learner(name, size))
        spec.check_learner(learners[-1])
    if learner is not None and len({tuple(learner_outputs(g)) for g in learners}) > 1:
        raise ValueError("the policies' learners evaluate different quantities")
    reducer = None
    if reduce:
        dims = output_dims(
            env,
            learner=False if learner is None else learners[0],
            trajectories=trajectories,
            trackers=trackers,
        )
        rates = [t.hparams[0] for t in trackers if "final_queue" in t.outputs]
        reducer = make_reducer(dims, num_rounds, tuple(keep), *rates[:1])

    def batched_run(name: str, size: int, group_learner):
        run = make_run(
            env,
            env_params,
            get_policy(name).build(num_clients, size),
            num_rounds,
            trajectories=trajectories,
            env_hparams=env_hparams,
            learner=group_learner,
            eval_every=eval_every,
            trackers=trackers,
        )
        return make_batched_run(run, data, seed_hparams=tuple(per_seed), reduce=reducer)

    keys = seed_keys(base_seed, seeds)
    per_group = []
    bar = tqdm(total=len(configs), unit="config", disable=not show_progress, desc="sweep")
    try:
        for group, group_learner in zip(groups, learners, strict=True):
            start, stop = group.start, group.stop
            name, size = configs["policy"].iloc[start], int(sizes[start])
            hparams = policy_hparams(name, configs.iloc[start:stop], fixed)
            for arrays in (per_config, per_seed):
                hparams.update({k: v[start:stop].astype(np.float32) for k, v in arrays.items()})
            bar.set_postfix_str(name)
            per_group.append(
                run_chunked(
                    batched_run(name, size, group_learner),
                    keys,
                    hparams,
                    group_chunk_size(chunk_size, stop - start, exact_chunks),
                    num_configs=stop - start,
                    exact=exact_chunks,
                    store=store,
                    label=group.label,
                    progress=bar,
                    layout=layout,
                    stream=tuple(keep) if reduce else (),
                )
            )
    finally:
        bar.close()
    if len(per_group) == 1:
        return per_group[0]
    return {k: np.concatenate([p[k] for p in per_group]) for k in per_group[0]}


def _checked_arrays(configs, seeds, per_config, per_seed, trackers):
    """``per_config`` ([C, ...]) with the trackers' hyperparameters that only the table holds,
    and ``per_seed`` ([C, S, ...]), as NumPy arrays of the right leading shapes."""
    per_config = {k: np.asarray(v) for k, v in (per_config or {}).items()}
    for key, value in per_config.items():
        if value.shape[:1] != (len(configs),):
            raise ValueError(f"per_config[{key!r}] needs {len(configs)} rows, got {value.shape}")
    per_seed = {k: np.asarray(v) for k, v in (per_seed or {}).items()}
    for key, value in per_seed.items():
        if value.shape[:2] != (len(configs), len(seeds)):
            raise ValueError(
                f"per_seed[{key!r}] needs {len(configs)} rows of {len(seeds)} seeds, got "
                f"{value.shape}"
            )
    for name in {n for t in trackers for n in t.hparams} - set(per_config):
        if name not in configs:
            raise ValueError(f"a tracker reads {name!r}: give it as a column or per_config")
        per_config[name] = configs[name].to_numpy()
    return per_config, per_seed


class Group(NamedTuple):
    """The contiguous rows of ``configs`` that share one compiled program (policy and selection
    size)."""

    label: str  # its chunks' folder in the store
    start: int
    stop: int


def _sizes(configs: pd.DataFrame, selection_size: int | str) -> np.ndarray:
    """Every row's selection size: the int, or the column it names."""
    if isinstance(selection_size, str):
        return configs[selection_size].to_numpy()
    return np.full(len(configs), selection_size)


def policy_groups(configs: pd.DataFrame, selection_size: int | str) -> list[Group]:
    """The (policy, selection size) groups of ``configs``, in order; each group's rows must be
    contiguous."""
    sizes = _sizes(configs, selection_size)
    keys = pd.Series(list(zip(configs["policy"], sizes, strict=True))).to_numpy()
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    if pd.Series(keys[starts]).duplicated().any():
        raise ValueError(
            "configs must list each (policy, selection size) group's rows contiguously"
        )
    groups = []
    for start, stop in zip(starts, [*starts[1:], len(configs)], strict=True):
        name, size = configs["policy"].iloc[start], int(sizes[start])
        label = name if isinstance(selection_size, int | np.integer) else f"{name}-m{size}"
        groups.append(Group(label, int(start), int(stop)))
    return groups


def group_chunk_size(chunk_size: int, num_configs: int, exact: bool = False) -> int:
    """A group's largest chunk: a policy with few configurations is not padded to a large one,
    unless ``exact`` (the chunk's shape must not depend on the group's size)."""
    if exact:
        return chunk_size
    return min(chunk_size, round_up(num_configs, jax.local_device_count()))


def per_run_chunks(
    configs: pd.DataFrame, selection_size: int | str, chunk_size: int, exact: bool = False
):
    """``(label, chunk index, first row, stop row)`` of every chunk ``run_policy_grid`` stores,
    rows counted over the whole ``configs`` table (to read the per-run values back in order)."""
    for group in policy_groups(configs, selection_size):
        size = group_chunk_size(chunk_size, group.stop - group.start, exact)
        bounds = chunk_bounds(group.stop - group.start, size, jax.local_device_count(), exact)
        for index, (start, stop) in enumerate(bounds):
            yield group.label, index, group.start + start, group.start + stop
