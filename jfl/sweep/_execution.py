"""Execution: a group's chunks computed through a pipeline (device, transfer and disk overlap),
sharded over this process's devices, resumable from the chunk store."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from tqdm import tqdm

from jfl.distributed import SINGLE, Layout, barrier
from jfl.sweep._chunks import balanced_chunk_size, chunk_bounds
from jfl.sweep._directory import ChunkStore
from jfl.sweep._memory import IN_FLIGHT

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
    per_run: tuple[str, ...] = (),
    num_configs: int | None = None,
    exact: bool = False,
    first_row: int = 0,
) -> dict[str, np.ndarray]:
    """Run ``batched(keys, hparams)`` over configurations in chunks (``hparams``: [C, ...];
    ``num_configs`` is C, needed only when ``hparams`` is empty; ``exact``: every chunk is
    computed at ``chunk_size`` configurations, see ``chunk_bounds``; ``first_row``: where
    ``hparams``' first row sits in the sweep's table, as the store records it).

    The chunks are balanced (``chunk_bounds``: at most ``chunk_size`` configurations each) and
    all computed at the first one's size (the last padded by repeating its final row, the padding
    trimmed before it leaves the device), so the whole sweep reuses one compiled program. With
    several local devices the configuration axis is sharded across them (``chunk_size`` must then
    be a multiple of the local device count).

    A pipeline: chunk i + 1 is dispatched before chunk i is fetched, and a background thread
    writes each finished chunk to ``store`` (atomically), so the device, the transfer and the
    disk overlap. Chunks already in ``store`` are reloaded, not computed. The outputs named in
    ``per_run`` (large per-run values) go to the store only (``ChunkStore.save_per_run``) and are
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
        raise ValueError("a sweep over several processes needs a chunk store (`out`)")
    chunks = _Chunks(
        batched=batched,
        keys=keys,
        hparams=hparams,
        bounds=chunk_bounds(num_configs, chunk_size, num_devices, exact),
        chunk_configs=balanced_chunk_size(num_configs, chunk_size, num_devices, exact),
        store=store,
        label=label,
        per_run=tuple(per_run) if store is not None else (),
    )
    if store is not None:
        for index, (start, stop) in enumerate(chunks.bounds):
            store.record(label, index, first_row + start, first_row + stop)
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
    chunk_configs: int  # every chunk's padded number of configurations
    store: ChunkStore | None
    label: str
    per_run: tuple[str, ...]  # outputs that go to the store only
    shapes: dict = dataclasses.field(default_factory=dict)  # one configuration's output shapes

    def count(self, index: int) -> int:
        start, stop = self.bounds[index]
        return stop - start

    def inputs(self, index: int) -> dict:
        """Chunk ``index``'s hyperparameters, padded by repeating its last row."""
        start, stop = self.bounds[index]
        rows = np.arange(start, start + self.chunk_configs).clip(max=stop - 1)
        return {k: jnp.asarray(v[rows]) for k, v in self.hparams.items()}

    def config_shapes(self, arrays=None) -> dict:
        """Shapes of one configuration's outputs: from the first chunk computed, or, to validate
        stored chunks before computing anything, from tracing the program (which costs as much
        as the call's own trace, so only when there is something stored to read)."""
        if not self.shapes:
            if arrays is None:
                run = lambda keys, hparams: self.batched(keys, hparams, self.chunk_configs)  # noqa: E731
                arrays = jax.eval_shape(run, self.keys, self.inputs(0))
                arrays = arrays if isinstance(arrays, Mapping) else arrays.arrays()
            self.shapes.update({k: v.shape[1:] for k, v in arrays.items()})
        return self.shapes

    def collected(self) -> list[str]:
        return [name for name in self.config_shapes() if name not in self.per_run]

    def expected(self, index: int, names) -> dict:
        return {k: (self.count(index), *self.config_shapes()[k]) for k in names}

    def load(self, index: int):
        """Chunk ``index`` from the store, or None (missing, or its per-run values missing)."""
        chunk = self.store.load(self.label, index, self.expected(index, self.collected()))
        if chunk is None or not self.per_run:
            return chunk
        if not self.store.has_per_run(self.label, index, self.expected(index, self.per_run)):
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
                    "`out` on a filesystem that every process sees?"
                )
        return loaded

    def dispatch(self, index: int):
        """Start chunk ``index`` on the devices; returns before they finish."""
        hparams, keys = self.inputs(index), self.keys
        config_sharding, replicated = _sharding()
        if config_sharding is not None:
            hparams = jax.device_put(hparams, config_sharding)
            keys = jax.device_put(keys, replicated)
        output = self.batched(keys, hparams, self.chunk_configs)
        return output if isinstance(output, Mapping) else output.arrays()

    def fetch(self, index: int, arrays) -> tuple[dict, dict]:
        """Chunk ``index``'s outputs on the host, padding trimmed: (collected, streamed)."""
        count = self.count(index)
        trim = (lambda x: x[:count]) if count < self.chunk_configs else (lambda x: x)
        host = {name: np.asarray(trim(arrays[name])) for name in self.config_shapes(arrays)}
        return {k: host[k] for k in self.collected()}, {k: host[k] for k in self.per_run}


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
    message had counted the chunks on disk.

    The wait is on a no-op job queued behind the writes (one worker: it runs last), not on
    ``shutdown(wait=True)``: in CPython 3.11 a KeyboardInterrupt inside ``Thread.join`` can
    mark the still-running thread as stopped, and a second join then returns at once
    (CPython issue gh-90882). Waiting on a future is safe to repeat, and a write whose
    ``submit`` was interrupted after queueing it is waited for too."""
    interrupted, last = False, None
    while True:
        try:
            if last is None:
                last = writer.submit(lambda: None)
            last.result()
            break
        except KeyboardInterrupt:
            interrupted = True
    writer.shutdown(wait=False)  # idle: its thread ends on its own
    if interrupted:
        raise KeyboardInterrupt


def _save_chunk(store: ChunkStore, label: str, index: int, arrays, per_run) -> None:
    # The per-run values first: a chunk counts as finished once its main file is there.
    if per_run:
        store.save_per_run(label, index, per_run)
    store.save(label, index, arrays)
