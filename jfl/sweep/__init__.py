"""Sweeps: a table of configurations run over shared seeds, in memory-bounded chunks, sharded
over devices, resumable from disk.

A sweep is a table of configurations (one row per policy × hyperparameter combination) run over
a shared set of seeds. Each policy compiles once; its configurations run in chunks of one size
(the last one padded), each chunk written atomically to ``<out>/chunks`` as soon as it
finishes, so an interrupted sweep loses at most the chunk in flight and a resumed one picks up
the rest with bit-identical results. One topic a module:

- ``_grid``: the configuration table, its policy groups and the :class:`Plan`;
- ``_memory``: every memory estimate and budget, and the chunk size decided from them;
- ``_chunks``: chunk geometry;
- ``_directory``: the output directory (:class:`SweepDir`) and its :class:`ChunkStore`;
- ``_execution``: the pipeline that computes a group's chunks (:func:`run_chunked`);
- ``_policy_grid``: the table run group by group (:class:`PolicyGrid`, :func:`run_policy_grid`).
"""

from jfl.sweep._chunks import balanced_chunk_size, chunk_bounds, group_chunk_size, round_up
from jfl.sweep._directory import (
    CHUNK_DIR,
    MANIFEST,
    OUTPUTS,
    ChunkRows,
    ChunkStore,
    SweepDir,
    as_stored,
    check_writable,
    read_manifest,
)
from jfl.sweep._execution import ABANDONED, STOP, WAIT_OFF_MAIN, run_chunked
from jfl.sweep._grid import Group, Plan, config_table, policy_groups, policy_hparams
from jfl.sweep._memory import (
    CPU_BATCH,
    CPU_MEMORY_BUDGET,
    IN_FLIGHT,
    auto_chunk_size,
    bytes_per_fl_run,
    bytes_per_run,
    check_chunk_fits,
    chunk_size,
    device_memory_budget,
    format_bytes,
    free_memory,
    memory_budget_bytes,
    model_footprint,
)
from jfl.sweep._policy_grid import PolicyGrid, run_policy_grid

__all__ = [
    "ABANDONED",
    "CHUNK_DIR",
    "CPU_BATCH",
    "CPU_MEMORY_BUDGET",
    "IN_FLIGHT",
    "MANIFEST",
    "OUTPUTS",
    "STOP",
    "WAIT_OFF_MAIN",
    "ChunkRows",
    "ChunkStore",
    "Group",
    "Plan",
    "PolicyGrid",
    "SweepDir",
    "as_stored",
    "auto_chunk_size",
    "balanced_chunk_size",
    "bytes_per_fl_run",
    "bytes_per_run",
    "check_chunk_fits",
    "check_writable",
    "chunk_bounds",
    "chunk_size",
    "config_table",
    "device_memory_budget",
    "format_bytes",
    "free_memory",
    "group_chunk_size",
    "memory_budget_bytes",
    "model_footprint",
    "policy_groups",
    "policy_hparams",
    "read_manifest",
    "round_up",
    "run_chunked",
    "run_policy_grid",
]
