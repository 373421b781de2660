"""The vectorised runner: batch/chunk invariance, resume, trajectories, sharding."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from jfl.envs import RbcsfEnv
from jfl.policies import get
from jfl.runner import make_batched_run, make_run, seed_keys
from jfl.sweep import ChunkStore, run_chunked

N, M, T, SEEDS = 12, 3, 30, 3


@pytest.fixture(scope="module")
def setup():
    env = RbcsfEnv()
    params = env.default_params(num_clients=N)
    spec = get("rbcsf")
    policy = spec.build(N, M)
    batched = make_batched_run(make_run(env, params, policy, T))
    rng = np.random.default_rng(7)
    num_configs = 11
    hparams = {k: np.full(num_configs, v, np.float32) for k, v in spec.defaults().items()}
    hparams["V"] = rng.uniform(0, 60, num_configs).astype(np.float32)
    hparams["beta"] = rng.uniform(0, 0.4, num_configs).astype(np.float32)
    hparams["alpha"] = rng.uniform(0, 1, num_configs).astype(np.float32)
    hparams["V"][0] = 0.0  # edge cases: V = 0 and β = 0
    hparams["beta"][1] = 0.0
    keys = seed_keys(3, np.arange(SEEDS))
    return env, params, policy, batched, hparams, keys


def _alone(batched, keys, hparams, i):
    one = {k: v[i : i + 1] for k, v in hparams.items()}
    out = batched(keys, one, one["beta"])
    return {k: np.asarray(v)[0] for k, v in out._asdict().items() if v is not None}


def test_config_alone_equals_config_in_batch(setup):
    """Bit-identical outputs for a configuration run alone and inside a batch of 11."""
    _, _, _, batched, hparams, keys = setup
    together = batched(keys, hparams, hparams["beta"])
    for i in (0, 1, 5, 10):
        alone = _alone(batched, keys, hparams, i)
        for name, value in alone.items():
            np.testing.assert_array_equal(np.asarray(getattr(together, name))[i], value, name)


def test_unbatched_run_equals_batched(setup):
    """The plain single-instance ``run`` gives the same bits as its vmapped version."""
    env, params, policy, batched, hparams, keys = setup
    run = jax.jit(make_run(env, params, policy, T))
    together = batched(keys, hparams, hparams["beta"])
    i, s = 4, 2
    single = run(keys[s], {k: v[i] for k, v in hparams.items()}, hparams["beta"][i])
    for name, value in single._asdict().items():
        if value is not None:
            np.testing.assert_array_equal(np.asarray(getattr(together, name))[i, s], value, name)


@pytest.mark.parametrize("chunk_size", [1, 4, 11, 16])
def test_chunk_size_does_not_change_results(setup, chunk_size):
    """Chunks of any size (last one padded) reproduce the one-batch results exactly."""
    _, _, _, batched, hparams, keys = setup
    reference = batched(keys, hparams, hparams["beta"])
    chunked = run_chunked(batched, keys, hparams, hparams["beta"], chunk_size)
    for name, value in chunked.items():
        np.testing.assert_array_equal(np.asarray(getattr(reference, name)), value, name)


class _Interrupt(Exception):
    pass


class _StopAfter:
    """A progress stand-in that interrupts the sweep after ``n`` chunks."""

    def __init__(self, n):
        self.left = n

    def update(self, _):
        self.left -= 1
        if self.left == 0:
            raise _Interrupt


def test_interrupted_sweep_resumes_bit_identical(setup, tmp_path):
    """Kill after 2 of 3 chunks, resume from disk: identical to an uninterrupted run."""
    _, _, _, batched, hparams, keys = setup
    uninterrupted = run_chunked(batched, keys, hparams, hparams["beta"], 4)
    store = ChunkStore(tmp_path)
    with pytest.raises(_Interrupt):
        run_chunked(
            batched,
            keys,
            hparams,
            hparams["beta"],
            4,
            store=store,
            label="p",
            progress=_StopAfter(2),
        )
    assert store.path("p", 0).exists() and store.path("p", 1).exists()
    assert not store.path("p", 2).exists()
    mtime = store.path("p", 0).stat().st_mtime_ns
    resumed = run_chunked(batched, keys, hparams, hparams["beta"], 4, store=store, label="p")
    assert store.path("p", 0).stat().st_mtime_ns == mtime  # finished chunks are not recomputed
    for name, value in resumed.items():
        np.testing.assert_array_equal(uninterrupted[name], value, name)


def test_corrupt_chunk_is_reported_before_computing(setup, tmp_path):
    """A truncated or mis-shaped chunk file gives an error naming the file."""
    _, _, _, batched, hparams, keys = setup
    store = ChunkStore(tmp_path)
    run_chunked(batched, keys, hparams, hparams["beta"], 4, store=store, label="p")
    path = store.path("p", 1)
    path.write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match=r"corrupt results directory.*chunk_000001"):
        run_chunked(batched, keys, hparams, hparams["beta"], 4, store=store, label="p")
    arrays = {k: np.zeros((4, 1)) for k in ("round_time",)}
    store.save("p", 1, arrays)
    with pytest.raises(ValueError, match=r"corrupt results directory.*shape"):
        run_chunked(batched, keys, hparams, hparams["beta"], 4, store=store, label="p")


def test_trajectories_are_consistent_with_summaries(setup):
    """Per-client trajectories agree with the per-round scalars and per-client totals."""
    env, params, policy, _, hparams, keys = setup
    batched = make_batched_run(make_run(env, params, policy, T, trajectories=True))
    out = batched(keys, hparams, hparams["beta"])
    selected = np.asarray(out.selected)
    queue = np.asarray(out.queue)
    np.testing.assert_array_equal(selected.sum(axis=2), np.asarray(out.selection_count))
    np.testing.assert_array_equal(selected.sum(axis=3), np.asarray(out.num_selected))
    np.testing.assert_array_equal(queue[:, :, -1], np.asarray(out.final_queue))
    np.testing.assert_allclose(queue.max(axis=3), np.asarray(out.queue_max))
    np.testing.assert_allclose(queue.mean(axis=3), np.asarray(out.queue_mean), rtol=1e-6)
    # Exactly k = min(m, #available) per round: never more than m for RBCS-F.
    assert selected.sum(axis=3).max() <= M


def test_sharded_over_four_devices_matches_single_device(setup, tmp_path):
    """With 4 forced host devices the configuration axis is sharded; results are unchanged."""
    _, _, _, batched, hparams, keys = setup
    reference = run_chunked(batched, keys, hparams, hparams["beta"], 4)
    np.savez(tmp_path / "hparams.npz", **hparams)
    script = textwrap.dedent(
        f"""
        import json, numpy as np, jax
        from jfl.envs import RbcsfEnv
        from jfl.policies import get
        from jfl.runner import make_batched_run, make_run, seed_keys
        from jfl.sweep import run_chunked
        assert jax.device_count() == 4, jax.devices()
        env = RbcsfEnv(); params = env.default_params(num_clients={N})
        batched = make_batched_run(make_run(env, params, get("rbcsf").build({N}, {M}), {T}))
        hp = dict(np.load({str(tmp_path / "hparams.npz")!r}))
        out = run_chunked(batched, seed_keys(3, np.arange({SEEDS})), hp, hp["beta"], 4)
        np.savez({str(tmp_path / "sharded.npz")!r}, **out)
        print(json.dumps(str(jax.devices())))
        """
    )
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "cpu" in json.loads(done.stdout.strip().splitlines()[-1]).lower()
    sharded = dict(np.load(tmp_path / "sharded.npz"))
    for name, value in reference.items():
        np.testing.assert_array_equal(value, sharded[name], name)
