"""Sweeps over several processes (``--distributed``, ``jfl.distributed``) on CPU.

Each scenario launches real processes of ``sweeps/v_beta_grid.py`` on localhost (an explicit
coordinator, gloo CPU collectives) and compares what process 0 writes with a one-process run of
the same sweep, byte for byte: the result may not depend on the number of processes or devices.
The grid is tiny (RBCS-F at two V and Random, 3 seeds × 20 rounds, one configuration a chunk).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from jfl import cli
from jfl.distributed import Layout, check_flags, fingerprint
from jfl.experiments import VBetaGrid
from jfl.results import load_dataset

# Sweeps launched as processes: out of the default run; CI runs them after it.
pytestmark = pytest.mark.processes

SCRIPT = Path(__file__).resolve().parents[1] / "sweeps" / "v_beta_grid.py"
GRID = [
    "--V", "0,50", "--beta", "0.15", "--seeds", "3", "--rounds", "20", "--clients", "12",
    "--m", "3", "--policies", "rbcsf,random", "--quiet", "--no-plots",
]  # fmt: skip
TIMEOUT = 240  # seconds for one launch, compilation on a busy machine included


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(devices: int = 1) -> dict[str, str]:
    env = dict(os.environ)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "device_count" not in f]
    if devices > 1:
        flags.append(f"--xla_force_host_platform_device_count={devices}")
    env["XLA_FLAGS"] = " ".join(flags)
    env["JAX_PLATFORMS"] = "cpu"
    return env


def launch(out: Path, flags=(), processes: int = 1, devices: int = 1, port: int | None = None):
    """Start the sweep into ``out`` as ``processes`` processes; return the Popen objects."""
    argv = [sys.executable, str(SCRIPT), *GRID, *flags, "--out", str(out)]
    if processes == 1:
        ids = [None]
    else:
        port = port or free_port()
        argv += ["--distributed", "--coordinator", f"127.0.0.1:{port}"]
        argv += ["--num-processes", str(processes), "--distributed-timeout", "60"]
        ids = range(processes)
    return [
        subprocess.Popen(
            argv if i is None else [*argv, "--process-id", str(i)],
            env=environment(devices),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in ids
    ]


def finish(procs) -> list[str]:
    """Wait for every process; assert each exited 0; their stdout."""
    outputs = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 0, stderr[-3000:]
        outputs.append(stdout)
    return outputs


def same_outputs(a: Path, b: Path) -> None:
    """summary.csv byte for byte; every variable of results.nc bit for bit."""
    assert (a / "summary.csv").read_bytes() == (b / "summary.csv").read_bytes()
    ds_a, ds_b = load_dataset(a / "results.nc"), load_dataset(b / "results.nc")
    assert set(ds_a.data_vars) == set(ds_b.data_vars)
    for name in ds_a.data_vars:
        np.testing.assert_array_equal(ds_a[name].to_numpy(), ds_b[name].to_numpy(), err_msg=name)


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """The one-process run every distributed run must reproduce, in chunks of one configuration
    as most of them: process 0 of those loads its programs from the compilation cache that this
    run fills (tests/conftest.py; process 1's device differs, so it compiles its own)."""
    out = tmp_path_factory.mktemp("single") / "out"
    finish(launch(out, ["--chunk-size", "1"]))
    return out


# --------------------------------------------------------------------------- without processes


def test_chunks_are_dealt_out_disjointly_and_completely():
    for count in (1, 2, 3, 5):
        owners = [[i for i in range(count) if Layout(i, count).owns(c)] for c in range(17)]
        assert all(len(o) == 1 for o in owners)
        assert {o[0] for o in owners} == set(range(min(count, 17)))
    assert Layout(0, 3).writes_outputs and not Layout(2, 3).writes_outputs


def test_fingerprint_tells_settings_apart():
    assert fingerprint({"V": [1.0], "seeds": 3}) == fingerprint({"seeds": 3, "V": [1.0]})
    assert fingerprint({"V": [1.0]}) != fingerprint({"V": [2.0]})
    assert 0 <= fingerprint({"V": [1.0]}) < 2**63


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--distributed", "--coordinator", "127.0.0.1:1234", "--num-processes", "2",
          "--process-id", "2"], "--process-id must be an integer in [0, --num-processes - 1 = 1]"),
        (["--distributed", "--coordinator", "127.0.0.1:1234", "--num-processes", "0",
          "--process-id", "0"], "--num-processes must be an integer >= 1, got 0"),
        (["--distributed", "--coordinator", "localhost", "--num-processes", "2",
          "--process-id", "0"], "--coordinator must be HOST:PORT, got 'localhost'"),
        (["--distributed", "--coordinator", "127.0.0.1:1234"], "go together"),
        (["--coordinator", "127.0.0.1:1234"], "need --distributed"),
        (["--distributed", "--distributed-timeout", "0"], "--distributed-timeout must be in"),
    ],
)  # fmt: skip
def test_bad_flags_fail_with_one_line(flags, message, capsys, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        cli.main(VBetaGrid, [*GRID, *flags, "--out", str(out)], prog="v_beta_grid.py")
    assert exc.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and message in lines[0], lines
    assert not out.exists()


def test_check_flags_accepts_cluster_detection_and_explicit_launches():
    check_flags(True, None, None, None, 300.0)  # SLURM / Open MPI / TPU pod detection
    check_flags(True, "node-1.cluster:1234", 4, 3, 10.0)
    check_flags(False, None, None, None, 300.0)


def test_unreachable_coordinator_is_one_line_not_a_hang(tmp_path):
    """Process 1 with no process 0 to join gives up after --distributed-timeout, exit 2."""
    out = tmp_path / "out"
    argv = [sys.executable, str(SCRIPT), *GRID, "--out", str(out), "--distributed"]
    argv += ["--coordinator", f"127.0.0.1:{free_port()}", "--num-processes", "2"]
    argv += ["--process-id", "1", "--distributed-timeout", "2"]
    start = time.monotonic()
    done = subprocess.run(argv, env=environment(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "cannot be reached within 2 s" in errors[0], done.stderr
    assert time.monotonic() - start < 60 and not out.exists()


# --------------------------------------------------------------------------- with processes


def test_processes_with_other_settings_are_refused_before_compiling(tmp_path):
    """Process 1 asks for another V: both stop with one line naming it, and --out is not
    created."""
    out, port = tmp_path / "out", free_port()
    argv = [sys.executable, str(SCRIPT), *GRID[2:], "--out", str(out), "--distributed"]
    argv += ["--coordinator", f"127.0.0.1:{port}", "--num-processes", "2"]
    argv += ["--distributed-timeout", "60"]
    procs = [
        subprocess.Popen(
            [*argv, "--V", V, "--process-id", str(i)],
            env=environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i, V in enumerate(("0,50", "0,40"))
    ]
    for proc in procs:
        _, stderr = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 2, stderr[-2000:]
        errors = [line for line in stderr.splitlines() if "error:" in line]
        assert len(errors) == 1 and "process(es) [1] run other settings" in errors[0], errors
    assert not out.exists()


def test_two_processes_write_what_one_does(single, tmp_path):
    """2 processes, one device each: process 0 writes the one-process run's files (its chunks
    and process 1's); process 1 writes nothing but chunks; the metadata counts the processes."""
    out = tmp_path / "out"
    stdouts = finish(launch(out, ["--chunk-size", "1"], processes=2))
    same_outputs(single, out)
    assert "process 1:" in stdouts[1] and "policy" not in stdouts[1]
    metadata = load_dataset(out / "results.nc").attrs["metadata"]
    assert '"processes": 2' in metadata and '"devices_per_process": 1' in metadata


def test_two_processes_of_two_devices_write_what_one_does(single, tmp_path):
    """2 processes × 2 forced host devices (chunks of 2 configurations sharded over each
    process's devices): the same files again."""
    out = tmp_path / "out"
    finish(launch(out, ["--chunk-size", "2"], processes=2, devices=2))
    same_outputs(single, out)


def test_a_killed_sweep_resumes_to_the_same_result(single, tmp_path):
    """Process 1 is killed once it has stored its first chunk (and process 0 with it, as a
    cluster tears a job down); the same command with --resume completes the sweep, keeps the
    stored chunk as it was, and writes the one-process run's files."""
    out = tmp_path / "out"
    procs = launch(out, ["--chunk-size", "1"], processes=2)
    chunk = out / "chunks" / "rbcsf" / "chunk_000001.npz"  # the second chunk: process 1's
    deadline = time.monotonic() + TIMEOUT
    while not chunk.exists() and time.monotonic() < deadline:
        assert all(p.poll() in (None, 0) for p in procs)
        time.sleep(0.05)
    assert chunk.exists()
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=TIMEOUT)
    # Random's program still had to compile after RBCS-F's barrier: the sweep was cut short.
    assert any(p.returncode == -signal.SIGKILL for p in procs)
    assert not (out / "summary.csv").exists()
    stored = chunk.stat().st_mtime_ns
    finish(launch(out, ["--chunk-size", "1", "--resume", "--keep-chunks"], processes=2))
    assert chunk.stat().st_mtime_ns == stored  # not computed again
    same_outputs(single, out)


def test_ctrl_c_prints_one_line_exits_130_and_resumes_bit_identically(single, tmp_path):
    """SIGINT once the first chunk is stored: one line on stderr, exit 130, the chunk kept; the
    same command completes the sweep (the stored chunk reused) into the one-process files."""
    out = tmp_path / "out"
    (proc,) = launch(out, ["--chunk-size", "1"])
    chunk = out / "chunks" / "rbcsf" / "chunk_000000.npz"
    deadline = time.monotonic() + TIMEOUT
    while not chunk.exists() and time.monotonic() < deadline:
        assert proc.poll() is None
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 130, stderr[-3000:]
    kept = len(list((out / "chunks").rglob("chunk_*.npz")))
    chunks = "1 chunk" if kept == 1 else f"{kept} chunks"
    line = f"v_beta_grid.py: interrupted: {chunks} kept in {out}; run the same command to continue"
    assert stderr.splitlines()[-1] == line and "Traceback" not in stderr
    assert stdout == "" and 1 <= kept < 3
    stored = chunk.stat().st_mtime_ns
    (again,) = finish(launch(out, ["--chunk-size", "1", "--keep-chunks"]))
    computed = "1 chunk" if kept == 2 else "2 chunks"
    assert f"({computed} computed, {kept} reused;" in again
    assert chunk.stat().st_mtime_ns == stored
    same_outputs(single, out)
