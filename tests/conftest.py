"""Test-session setup: JAX's persistent compilation cache, one directory per worker.

Compilation dominates the suite's time, and many tests build the same program again (a fresh
``make_run`` closure, a notebook kernel, a sweep's driver): JAX's jit cache is keyed by the
function object, its persistent cache by the compiled program itself, so with the latter an
identical program is compiled once per worker. Results do not change (the cache stores what XLA
compiled for the same program and options). Each pytest-xdist worker of each run gets its own
directory, so no two processes write one entry at the same time and every run starts cold (the
suite's time is what a fresh machine sees); notebook kernels and subprocesses inherit it and
its settings through the environment (a distributed test's process 0 loads what the one-process
run compiled), and it is removed when the worker ends. An entry's key includes the directory, so
one directory for both workers would share nothing more: tests share programs within a file (a
file runs on one worker), which is where the tests that compile the same program belong.

Every worker registers the sweeps' CPU lowering of threefry (``jfl.prng``) before its first
test: the same bits as JAX's default (``tests/test_prng.py``), so every test runs the programs a
sweep runs, and which lowering a program gets no longer depends on whether a sweep ran before it
in the same worker. It also compiles faster than the rolled loop.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

CACHE_SETTINGS = {
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
}


_CACHE: Path | None = None

# The test files that take longest, longest first (CPU seconds of each file alone, measured on
# 2 cores: 14 to 104 s; every other file takes under 12 s), so that the two workers end
# together: with ``--no-loadscope-reorder`` (pyproject.toml) pytest-xdist hands out whole files
# in this order, two queued per worker, and the short files that follow fill in at the end.
LONGEST_FIRST = (
    "tests/policies/test_cocs.py",
    "tests/test_notebooks.py",
    "tests/policies/test_cocs_baselines.py",
    "tests/test_notebooks_later.py",
    "tests/experiments/test_cocs.py",
    "tests/test_runner.py",
    "tests/kernels/test_assignment.py",
    "tests/test_distributed.py",
    "tests/kernels/test_selection.py",
    "tests/fl/test_train.py",
    "tests/experiments/test_fl.py",
    "tests/experiments/test_cs_ucb.py",
    "tests/test_reduction.py",
    "tests/envs/test_hfl.py",
    "tests/test_claims_rbcsf.py",
    "tests/test_claims_cs_ucb.py",
)


def pytest_configure(config):
    global _CACHE
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", str(os.getpid()))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    _CACHE = Path(tempfile.gettempdir()) / f"jfl-tests-jax-cache-{run}-{worker}"
    os.environ["JAX_COMPILATION_CACHE_DIR"] = str(_CACHE)
    # Set, not defaulted: a subprocess or notebook kernel reads these from the environment, and
    # JAX's own default (entries that took at least 1 s to compile) would leave out most of them.
    os.environ.update(CACHE_SETTINGS)

    import jax

    jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

    # Hugging Face's caches in an empty directory of the worker's, offline: tests build their own
    # Parquet files, and nothing comes from the user's cache or the network (pyproject.toml's
    # pytest-socket options refuse every host but this one). Set before anything imports
    # huggingface_hub or datasets, which read them once.
    hub = _CACHE.with_name(_CACHE.name + "-hf")
    os.environ.update(
        HF_HOME=str(hub),
        HF_HUB_CACHE=str(hub / "hub"),
        HF_DATASETS_CACHE=str(hub / "datasets"),
        HF_HUB_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
    )

    from jfl import prng

    prng.use_unrolled_threefry_on_cpu()


def pytest_unconfigure(config):
    if _CACHE is not None:
        shutil.rmtree(_CACHE, ignore_errors=True)
        shutil.rmtree(_CACHE.with_name(_CACHE.name + "-hf"), ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    rank = {path: index for index, path in enumerate(LONGEST_FIRST)}

    def start(item) -> int:
        return rank.get(item.nodeid.split("::", 1)[0], len(rank))

    items.sort(key=start)  # stable: the other files keep their order


@pytest.fixture
def die_after_first_chunk(monkeypatch):
    """An interrupted sweep: ``ChunkStore.save`` stores the first chunk, then raises
    KeyboardInterrupt at the next; ``monkeypatch.undo()`` restores it."""
    from jfl import sweep

    save = sweep.ChunkStore.save
    saved = []

    def save_then_die(self, label, index, arrays):
        if saved:
            raise KeyboardInterrupt
        save(self, label, index, arrays)
        saved.append(index)

    monkeypatch.setattr(sweep.ChunkStore, "save", save_then_die)
