"""Sweeps over several processes and hosts, on JAX's multi-controller runtime.

Every process runs the same command. ``initialize`` joins them (``jax.distributed.initialize``:
cluster auto-detection on SLURM, Open MPI and TPU pods, or an explicit coordinator). The sweep's
chunks are then dealt out by index: process ``i`` of ``P`` computes the chunks ``i, i + P, …`` on
its own local devices and writes them to the shared chunk store (``--out`` on a filesystem every
process sees), a barrier waits for all, and every process reads the other chunks back. Only
process 0 writes ``summary.csv``, ``results.nc``, ``metadata.json`` and the figures.

Why chunks by index rather than one globally sharded array: a chunk is already the unit of
resumption, its result depends only on its rows (never on the device or process that ran it), and
processes need no collective inside the compiled sweep, so one slow or lost process costs only its
own chunks: re-running the command with ``--resume`` computes exactly the missing ones.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import time
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np


class Layout(NamedTuple):
    """Where this process stands among the sweep's processes."""

    index: int  # this process, 0 … count − 1
    count: int  # processes in the sweep

    def owns(self, chunk: int) -> bool:
        """Whether this process computes chunk ``chunk`` (chunks are dealt out round-robin)."""
        return chunk % self.count == self.index

    @property
    def writes_outputs(self) -> bool:
        return self.index == 0


SINGLE = Layout(0, 1)
_ADDRESS = re.compile(r"^[A-Za-z0-9._\-\[\]:]+:\d{1,5}$")


def check_flags(
    distributed: bool,
    coordinator: str | None,
    num_processes: int | None,
    process_id: int | None,
    timeout: float,
) -> None:
    """ValueError naming the flag of the first bad value (before anything starts)."""
    explicit = (coordinator, num_processes, process_id)
    if not distributed:
        if any(v is not None for v in explicit):
            raise ValueError("--coordinator, --num-processes and --process-id need --distributed")
        return
    if any(v is not None for v in explicit) and any(v is None for v in explicit):
        raise ValueError(
            "--coordinator, --num-processes and --process-id go together (or none of them, to "
            "detect the cluster)"
        )
    if coordinator is not None:
        if not _ADDRESS.match(coordinator) or not 0 < int(coordinator.rsplit(":", 1)[1]) < 65536:
            raise ValueError(f"--coordinator must be HOST:PORT, got {coordinator!r}")
        if not isinstance(num_processes, int) or num_processes < 1:
            raise ValueError(f"--num-processes must be an integer >= 1, got {num_processes!r}")
        if not isinstance(process_id, int) or not 0 <= process_id < num_processes:
            raise ValueError(
                f"--process-id must be an integer in [0, --num-processes - 1 = "
                f"{num_processes - 1}], got {process_id!r}"
            )
    if not timeout > 0:
        raise ValueError(f"--distributed-timeout must be in (0, inf), got {timeout}")


def initialize(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    timeout: float = 300.0,
) -> Layout:
    """Join the sweep's processes (``jax.distributed.initialize``); this process's ``Layout``.

    Without arguments JAX detects the cluster (SLURM, Open MPI, TPU pods). A coordinator that
    cannot be reached within ``timeout`` seconds is a ValueError (one line), not a hang.
    """
    import jax

    if coordinator is not None and process_id != 0:
        # JAX's client aborts the whole process when it cannot reach the coordinator; check
        # first, so that an unreachable one is one line, not a crash.
        wait_for_coordinator(coordinator, timeout)
    try:
        jax.distributed.initialize(
            coordinator_address=coordinator,
            num_processes=num_processes,
            process_id=process_id,
            initialization_timeout=max(1, int(timeout)),
        )
    except (RuntimeError, ValueError) as err:  # XlaRuntimeError is a RuntimeError
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if coordinator is None:
            hint = (
                "no SLURM, Open MPI or TPU-pod cluster detected; launch with --coordinator "
                "HOST:PORT --num-processes N --process-id I"
            )
        else:
            hint = f"coordinator {coordinator}, --distributed-timeout {timeout:g} s"
        raise ValueError(f"--distributed: could not join the processes ({hint}): {first}") from None
    return Layout(jax.process_index(), jax.process_count())


def wait_for_coordinator(coordinator: str, timeout: float) -> None:
    """Return once ``HOST:PORT`` accepts a TCP connection; ValueError after ``timeout`` s."""
    host, port = coordinator.rsplit(":", 1)
    host = host.strip("[]")
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=min(1.0, timeout)):
                return
        except OSError as err:
            if time.monotonic() >= deadline:
                raise ValueError(
                    f"--coordinator {coordinator} cannot be reached within {timeout:g} s "
                    f"(--distributed-timeout): {err.strerror or err}; is process 0 running?"
                ) from None
            time.sleep(0.2)


def fingerprint(settings: Mapping) -> int:
    """A 63-bit hash of ``settings`` (JSON, sorted keys): equal settings, equal fingerprints."""
    text = json.dumps(settings, sort_keys=True, default=str)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def check_same_settings(settings: Mapping, layout: Layout) -> None:
    """ValueError unless every process runs the same settings (compared by fingerprint)."""
    if layout.count == 1:
        return
    from jax.experimental import multihost_utils

    mine = np.array([fingerprint(settings)], np.int64)
    everyone = np.asarray(multihost_utils.process_allgather(mine)).reshape(-1)
    differ = [int(i) for i in np.flatnonzero(everyone != everyone[0])]
    if differ:
        raise ValueError(
            f"--distributed: process(es) {differ} run other settings than process 0; every "
            "process must run the same command"
        )


def barrier(name: str, layout: Layout) -> None:
    """Wait until every process reaches ``name``."""
    if layout.count == 1:
        return
    from jax.experimental import multihost_utils

    multihost_utils.sync_global_devices(name)
