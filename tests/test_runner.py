"""The vectorised runner: batch/chunk invariance, resume, trajectories, sharding."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from jfl import results
from jfl.envs import Environment, Metric, RbcsfEnv
from jfl.envs.rbcsf import Feedback
from jfl.kernels import topk_mask
from jfl.outputs import CORE_OUTPUTS, output_dims
from jfl.policies import Policy, Selection, get
from jfl.runner import RunOutput, make_batched_run, make_run, run_keys, seed_keys
from jfl.sweep import ChunkStore, run_chunked
from jfl.trackers import fairness_queue

N, M, T, SEEDS = 12, 3, 30, 3
# RBCS-F's own queue: the fairness queue at its β.
QUEUE = (fairness_queue("beta"),)


@pytest.fixture(scope="module")
def setup():
    env = RbcsfEnv()
    params = env.default_params(num_clients=N)
    spec = get("rbcsf")
    policy = spec.build(N, M)
    batched = make_batched_run(make_run(env, params, policy, T, trackers=QUEUE))
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


@pytest.fixture(scope="module")
def with_trajectories(setup):
    """The setup's grid run once more, with trajectories, in ``SlowestEnv`` (RbcsfEnv with two
    more per-round metrics): one compiled program for the trajectory tests and
    test_a_new_round_metric_is_one_subclass, which checks that its other outputs are the setup's
    own, bit for bit."""
    _, params, policy, _, hparams, keys = setup
    run = make_run(SlowestEnv(), params, policy, T, trajectories=True, trackers=QUEUE)
    return make_batched_run(run)(keys, hparams)


def _alone(batched, keys, hparams, i):
    one = {k: v[i : i + 1] for k, v in hparams.items()}
    out = batched(keys, one)
    return {k: np.asarray(v)[0] for k, v in out.arrays().items() if v is not None}


def test_config_alone_equals_config_in_batch(setup):
    """Bit-identical outputs for a configuration run alone and inside a batch of 11."""
    _, _, _, batched, hparams, keys = setup
    together = batched(keys, hparams)
    for i in (0, 1, 5, 10):
        alone = _alone(batched, keys, hparams, i)
        for name, value in alone.items():
            np.testing.assert_array_equal(np.asarray(getattr(together, name))[i], value, name)


def test_unbatched_run_equals_batched(setup):
    """The plain single-instance ``run`` gives the same bits as its vmapped version."""
    env, params, policy, batched, hparams, keys = setup
    run = jax.jit(make_run(env, params, policy, T, trackers=QUEUE))
    together = batched(keys, hparams)
    i, s = 4, 2
    single = run(keys[s], {k: v[i] for k, v in hparams.items()})
    for name, value in single.arrays().items():
        if value is not None:
            np.testing.assert_array_equal(np.asarray(getattr(together, name))[i, s], value, name)


@pytest.mark.parametrize(
    "chunk_size, num_configs",
    [
        (1, 11),  # one configuration per chunk
        (4, 11),  # 4 + 4 + 3: the last chunk padded
        (11, 11),  # one exact chunk
        (11, 4),  # one chunk larger than the sweep, computed at its size (the 4-wide program)
    ],
)
def test_chunk_size_does_not_change_results(setup, chunk_size, num_configs):
    """Chunks of any size (last one padded) reproduce the one-batch results exactly."""
    _, _, _, batched, hparams, keys = setup
    reference = batched(keys, hparams)
    some = {k: v[:num_configs] for k, v in hparams.items()}
    chunked = run_chunked(batched, keys, some, chunk_size)
    for name, value in chunked.items():
        assert len(value) == num_configs, name
        want = np.asarray(getattr(reference, name))[:num_configs]
        np.testing.assert_array_equal(want, value, name)


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
    uninterrupted = run_chunked(batched, keys, hparams, 4)
    store = ChunkStore(tmp_path)
    with pytest.raises(_Interrupt):
        run_chunked(
            batched,
            keys,
            hparams,
            4,
            store=store,
            label="p",
            progress=_StopAfter(2),
        )
    assert store.path("p", 0).exists() and store.path("p", 1).exists()
    assert not store.path("p", 2).exists()
    mtime = store.path("p", 0).stat().st_mtime_ns
    resumed = run_chunked(batched, keys, hparams, 4, store=store, label="p")
    assert store.path("p", 0).stat().st_mtime_ns == mtime  # finished chunks are not recomputed
    for name, value in resumed.items():
        np.testing.assert_array_equal(uninterrupted[name], value, name)


def test_corrupt_chunk_is_reported_before_computing(setup, tmp_path):
    """A truncated or mis-shaped chunk file gives an error naming the file."""
    _, _, _, batched, hparams, keys = setup
    store = ChunkStore(tmp_path)
    run_chunked(batched, keys, hparams, 4, store=store, label="p")
    path = store.path("p", 1)
    path.write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match=r"corrupt results directory.*chunk_000001"):
        run_chunked(batched, keys, hparams, 4, store=store, label="p")
    arrays = {k: np.zeros((4, 1)) for k in ("round_time",)}
    store.save("p", 1, arrays)
    with pytest.raises(ValueError, match=r"corrupt results directory.*shape"):
        run_chunked(batched, keys, hparams, 4, store=store, label="p")


def test_trajectories_are_consistent_with_summaries(with_trajectories):
    """Per-client trajectories agree with the per-round scalars and per-client totals."""
    out = with_trajectories
    selected = np.asarray(out.selected)
    queue = np.asarray(out.queue)
    np.testing.assert_array_equal(selected.sum(axis=2), np.asarray(out.selection_count))
    np.testing.assert_array_equal(selected.sum(axis=3), np.asarray(out.num_selected))
    np.testing.assert_array_equal(queue[:, :, -1], np.asarray(out.final_queue))
    np.testing.assert_allclose(queue.max(axis=3), np.asarray(out.queue_max))
    np.testing.assert_allclose(queue.mean(axis=3), np.asarray(out.queue_mean), rtol=1e-6)
    # Exactly k = min(m, #available) per round: never more than m for RBCS-F.
    assert selected.sum(axis=3).max() <= M


@pytest.mark.processes
def test_sharded_over_four_devices_matches_single_device(setup, tmp_path):
    """With 4 forced host devices the configuration axis is sharded; results are unchanged."""
    _, _, _, batched, hparams, keys = setup
    reference = run_chunked(batched, keys, hparams, 4)
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
        from jfl.trackers import fairness_queue

        run = make_run(
            env, params, get("rbcsf").build({N}, {M}), {T}, trackers=(fairness_queue("beta"),)
        )
        batched = make_batched_run(run)
        hp = dict(np.load({str(tmp_path / "hparams.npz")!r}))
        out = run_chunked(batched, seed_keys(3, np.arange({SEEDS})), hp, 4)
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


# --------------------------------------------------------------------------- last_unmet_round,
# env_hparams and run_keys (wireless sweeps)


def _last_unmet_reference(selected, rate):
    """NumPy last_unmet_round from ``selected`` [C, S, T, N] and rates [C] or [C, N]."""
    selected = np.asarray(selected)
    num_rounds = selected.shape[2]
    count = np.cumsum(selected, axis=2, dtype=np.int64)  # count_n(t), t = 1..T
    # The decimal rates the test meant (float32 0.6 is 0.6000000238…): a client with exactly
    # 0.6·t selections meets 0.6.
    rate = np.round(np.asarray(rate, np.float64), 6)
    target = rate.reshape(len(selected), 1, 1, -1)
    t = np.arange(1, num_rounds + 1, dtype=np.float64)[None, None, :, None]
    unmet = (count < target * t).any(axis=3)  # [C, S, T]
    last = np.where(unmet, np.arange(1, num_rounds + 1), 0)
    return last.max(axis=2)


def test_last_unmet_round_matches_numpy_for_rbcsf(setup, with_trajectories):
    """rbcsf (scalar queue_rate β): last_unmet_round is the last t with count_n(t) < t·β."""
    _, _, _, _, hparams, _ = setup
    out = with_trajectories
    last = np.asarray(out.last_unmet_round)
    np.testing.assert_array_equal(last, _last_unmet_reference(out.selected, hparams["beta"]))
    dims = output_dims(SlowestEnv(), trajectories=True, trackers=QUEUE)
    assert list(out.arrays()) == list(dims)
    for name in ("set_reward", "num_failed"):  # the wireless metrics: none here
        with pytest.raises(AttributeError, match=f"no output '{name}'"):
            getattr(out, name)
    assert (last[1] == 0).all()  # β = 0 is met from the first round on
    assert last.max() > 0 and last.min() < T  # not a trivial case


def test_last_unmet_round_matches_numpy_for_cs_ucb_q_vector_rate():
    """cs_ucb_q with a per-client queue_rate c [C, K]: last_unmet_round from the trajectories."""
    from jfl.envs import WirelessEnv
    from jfl.envs.wireless import preset_params

    env, params, policy = WirelessEnv(), preset_params("fairness"), get("cs_ucb_q").build(3, 2)
    queue = (fairness_queue("fairness"),)
    run = make_run(env, params, policy, 150, trajectories=True, trackers=queue)
    batched = make_batched_run(run)
    fairness = np.array(
        [[0.6, 0.5, 0.4], [0.6, 0.5, 0.4], [0.3, 0.3, 0.3], [0.0, 0.0, 0.0]], np.float32
    )
    hparams = {"beta": np.array([1e-5, 0.1, 0.05, 0.1], np.float32), "fairness": fairness}
    out = batched(seed_keys(1, np.arange(3)), hparams)
    last = np.asarray(out.last_unmet_round)
    np.testing.assert_array_equal(last, _last_unmet_reference(out.selected, fairness))
    assert (last[3] == 0).all()
    assert last.max() > 0
    assert np.asarray(out.set_reward).shape == (4, 3, 150)
    assert np.asarray(out.num_failed).dtype.kind == "i"
    assert list(out.arrays()) == list(output_dims(env, trajectories=True, trackers=queue))


def test_env_hparams_availability_is_traced_per_configuration():
    """env_hparams=("availability",): α 0 selects nobody, α 1 selects N; batch-independent."""
    from jfl.envs import WirelessEnv
    from jfl.envs.wireless import preset_params

    # The sizes, seeds and (Random's) run of test_cs_ucb_q_selects_min_n_available_…: its
    # program without env_hparams is the one compiled there (availability 0.9, the preset's).
    env = WirelessEnv()
    num_clients, m, rounds = 3, 2, 300
    params = preset_params("fairness")
    policy = get("random").build(num_clients, m)
    batched = make_batched_run(make_run(env, params, policy, rounds, env_hparams=("availability",)))
    alpha = np.array([0.0, 1.0, 0.5, 0.9, 1.0], np.float32)
    hparams = {"availability": np.repeat(alpha[:, None], num_clients, 1)}
    keys = seed_keys(2, np.arange(8))
    together = batched(keys, hparams)
    num_selected = np.asarray(together.num_selected)
    assert (num_selected[0] == 0).all()
    assert (np.asarray(together.set_reward)[0] == 0).all()
    assert (np.asarray(together.round_time)[0] == 0).all()
    assert (num_selected[1] == m).all() and (num_selected[4] == m).all()
    assert (num_selected[2] < m).any()  # α = 0.5: some rounds have fewer than m available
    assert (num_selected[3] < m).any() and num_selected[3].mean() > num_selected[2].mean()
    # Among copies of itself: the same program (other batch sizes: test_config_alone_…).
    for i in range(5):
        copies = np.repeat(hparams["availability"][i : i + 1], len(alpha), axis=0)
        alone = batched(keys, {"availability": copies})
        for name, value in alone.arrays().items():
            if value is not None:
                np.testing.assert_array_equal(
                    np.asarray(getattr(together, name))[i], np.asarray(value)[0], name
                )
    # Without env_hparams the environment's own availability (0.9) is used: config 3's run.
    np.testing.assert_array_equal(params.availability, alpha[3])
    fixed = make_batched_run(make_run(env, params, policy, rounds))
    plain = fixed(keys, {}, num_configs=1)
    for name, value in plain.arrays().items():
        if value is not None:
            np.testing.assert_array_equal(
                np.asarray(value)[0], np.asarray(getattr(together, name))[3]
            )


def test_environment_parameters_given_to_the_batched_run_are_traced(setup):
    """``make_batched_run(..., params=)``: the environment's parameters are an argument of the
    program, so two settings of the same shapes trace to the same program (one compilation,
    and the persistent cache finds it across processes); without ``params`` they are the
    program's constants. (Traced only, nothing compiled: every experiment's golden run checks
    that a sweep's numbers are unchanged by it.)"""
    env, params, policy, _, hparams, keys = setup
    other = params.replace(p_available=0.5, noise=0.3, cpu_high=3.0)
    run = make_run(env, params, policy, T, trackers=QUEUE)
    small = {k: v[:2] for k, v in hparams.items()}

    def program(p, traced=True):
        """The jitted program's own jaxpr (its arguments' values are not part of it)."""
        built = make_run(env, p, policy, T, trackers=QUEUE)
        batched = make_batched_run(built, params=p) if traced else make_batched_run(built)
        (call,) = jax.make_jaxpr(batched)(keys, small).eqns
        return str(call.params["jaxpr"])

    assert program(params) == program(other)
    assert program(params, traced=False) != program(other, traced=False)
    one = {k: v[0] for k, v in hparams.items()}
    alone = [jax.make_jaxpr(lambda k, p: run(k, one, None, p))(keys[0], p) for p in (params, other)]
    assert str(alone[0]) == str(alone[1])


def test_cs_ucb_q_selects_min_n_available_in_a_batch_of_betas():
    """cs_ucb_q vmapped over β selects exactly min(N, |A(t)|) and matches its alone run."""
    # Regression: a fused score evaluated twice in topk_mask's pairwise ranking could rank a
    # client behind itself, dropping it in ~1-3% of rounds of a 32-β batch (fixed in 0c10718).
    from jfl.envs import WirelessEnv
    from jfl.envs.wireless import preset_params

    env = WirelessEnv()
    params = preset_params("fairness")
    num_clients, m, rounds = 3, 2, 300
    keys = seed_keys(2, np.arange(8))
    # random selects min(m, |A(t)|) and sees the same availability draws (common random numbers).
    random_run = make_batched_run(
        make_run(env, params, get("random").build(num_clients, m), rounds)
    )
    want = np.asarray(random_run(keys, {}, num_configs=1).num_selected)[0]
    batched = make_batched_run(make_run(env, params, get("cs_ucb_q").build(num_clients, m), rounds))
    count = 32
    hparams = {
        "beta": np.linspace(0.0, 1.0, count).astype(np.float32),
        "fairness": np.full((count, num_clients), 0.1, np.float32),
    }
    together = batched(keys, hparams)
    short = int((np.asarray(together.num_selected) < want[None]).sum())
    different = []
    for i in range(0, count, 3):  # among copies of itself (one compiled batch shape)
        copies = {k: np.repeat(v[i : i + 1], count, axis=0) for k, v in hparams.items()}
        alone = batched(keys, copies)
        if not np.array_equal(
            np.asarray(alone.num_selected)[0], np.asarray(together.num_selected)[i]
        ):
            different.append(i)
    assert short == 0 and not different, (
        f"{short} short rounds; configs {different} batch-dependent"
    )


def test_make_run_rejects_unknown_env_hparams():
    """An env_hparams name that is not a field of the environment parameters is a ValueError."""
    from jfl.envs import WirelessEnv
    from jfl.envs.wireless import make_params

    env = WirelessEnv()
    policy = get("random").build(4, 2)
    with pytest.raises(ValueError, match="bogus"):
        make_run(env, make_params(4), policy, 10, env_hparams=("availability", "bogus"))


def test_run_keys_reset_key_gives_the_run_layout():
    """run_keys' reset key gives the distances the run's environment uses (what the CS-UCB
    experiments' seed_layouts computes its benchmarks on)."""
    from jfl.envs import WirelessEnv
    from jfl.envs.wireless import make_params
    from jfl.runner import run_keys

    env = WirelessEnv()
    num_clients, m, rounds = 5, 2, 40
    params = make_params(num_clients, tau_max=0.5)
    keys = seed_keys(11, np.arange(3))
    layouts = np.asarray(jax.jit(jax.vmap(lambda k: env.layout(run_keys(k)[0], params)))(keys))
    assert layouts.shape == (3, num_clients)
    assert len(np.unique(layouts, axis=0)) == 3  # a fresh layout per seed
    reset = jax.jit(env.reset)  # one compiled reset for the three seeds
    for s in range(3):
        _, state = reset(run_keys(keys[s])[0], params)
        np.testing.assert_array_equal(np.asarray(state.distance), layouts[s])

    # The run with these distances given explicitly is the same run. Parameters are passed as
    # a traced argument: closed-over explicit distances are constants that XLA may fold into
    # the path loss with a last-bit difference.
    policy = get("random").build(num_clients, m)
    run = jax.jit(lambda key, p: make_run(env, p, policy, rounds)(key, {}))
    for s in range(3):
        drawn = run(keys[s], params)
        explicit = run(keys[s], make_params(num_clients, tau_max=0.5, distance=layouts[s]))
        for name, value in drawn.arrays().items():
            if value is not None:
                np.testing.assert_array_equal(value, getattr(explicit, name), name)


def test_last_unmet_round_counts_an_exactly_met_rate_as_met():
    """A client selected in exactly 3 of every 5 rounds meets c = 0.6 at every t: round 0."""
    import jax.numpy as jnp

    from jfl.envs import WirelessEnv
    from jfl.envs.wireless import make_params
    from jfl.policies import Policy

    three_of_five = Policy(
        init=lambda key, hparams: jnp.asarray(0, jnp.int32),
        select=lambda key, t, obs, hparams: jnp.full(1, t % 5 < 3),
        update=lambda t, obs, action, feedback, hparams: t + 1,
    )
    env = WirelessEnv()
    queue = (fairness_queue(),)
    run = jax.jit(
        make_run(env, make_params(1, availability=1.0), three_of_five, 50, trackers=queue)
    )
    out = run(seed_keys(0, [0])[0], {"queue_rate": 0.6})
    assert int(out.selection_count[0]) == 30  # 30 / 50 = 0.6: target_met in run_metrics
    assert int(out.last_unmet_round) == 0


# --------------------------------------------------------------------------- declared outputs


class SlowestEnv(RbcsfEnv):
    """RbcsfEnv with two more per-round metrics: all it takes is this class."""

    round_metrics: ClassVar[dict] = {
        "num_slow": Metric(("round",), "selected clients slower than 10 s"),
        "time": Metric(("round", "client"), "realised time of each client (0 if unselected)"),
    }

    def compute_round_metrics(self, feedback: Feedback):
        return {"num_slow": jnp.sum(feedback.time > 10.0, dtype=jnp.int32), "time": feedback.time}


def test_a_new_round_metric_is_one_subclass(setup, with_trajectories):
    """A subclass declaring metrics gets them from make_run and labelled by to_dataset; the
    other outputs are the parent environment's, bit for bit (the subclass's run: the
    trajectories' fixture, whose trajectories are outputs the parent's run does not record)."""
    _, _, _, batched, hparams, keys = setup
    env = SlowestEnv()
    out = with_trajectories
    num_configs = len(hparams["V"])
    assert list(out.extras)[-5:] == ["num_slow", "time", "selected", "queue", "nonfinite_round"]
    assert out.num_slow.shape == (num_configs, SEEDS, T)
    assert out.time.shape == (num_configs, SEEDS, T, N)
    parent = batched(keys, hparams)
    own = ["num_slow", "time", "selected", "queue"]  # the subclass's, the trajectories
    assert list(parent.extras) == [name for name in out.extras if name not in own]
    for name, value in parent.arrays().items():
        np.testing.assert_array_equal(np.asarray(getattr(out, name)), value, name)
    time = np.asarray(out.time)
    np.testing.assert_array_equal(out.num_slow, (time > 10).sum(-1))
    np.testing.assert_array_equal(out.round_time, time.max(-1))

    configs = pd.DataFrame({"policy": ["rbcsf"] * num_configs, "V": hparams["V"]})
    dims = output_dims(env, trajectories=True, trackers=QUEUE)
    ds = results.to_dataset(out.arrays(), configs, np.arange(SEEDS), dims)
    assert ds["num_slow"].dims == ("config", "seed", "round")
    assert ds["time"].dims == ("config", "seed", "round", "client")
    np.testing.assert_array_equal(ds["time"].to_numpy(), time)
    assert ds.sizes == {"config": num_configs, "seed": SEEDS, "round": T, "client": N}
    # Without the dims or the declarations, nothing is labelled.
    with pytest.raises(ValueError, match="needs the outputs' declarations"):
        results.to_dataset(out.arrays(), configs, np.arange(SEEDS))


def test_round_metrics_must_match_their_declaration():
    """Undeclared or missing metrics, or the wrong shape, fail when the run is traced."""
    params = RbcsfEnv().default_params(num_clients=4)
    policy = get("random").build(4, 2)

    class Undeclared(RbcsfEnv):
        def compute_round_metrics(self, feedback):
            return {"extra": feedback.round_time}

    class WrongShape(RbcsfEnv):
        round_metrics: ClassVar[dict] = {"time": Metric(("round",), "f[N] in fact")}

    for env, error in ((Undeclared(), ValueError), (WrongShape(), AssertionError)):
        run = make_run(env, params, policy, 3)
        with pytest.raises(error):
            jax.eval_shape(run, jax.random.key(0), {})


def test_output_dims():
    """Core outputs, the trackers', the environment's metrics, the learner's, the trajectories."""
    from jfl.envs import HflEnv, WirelessEnv

    core = {"round_time": ("round",), "num_selected": ("round",), "selection_count": ("client",)}
    queue = {
        "queue_mean": ("round",),
        "queue_max": ("round",),
        "final_queue": ("client",),
        "last_unmet_round": (),
    }
    health = {"nonfinite_round": ()}  # every run's, last
    assert output_dims(RbcsfEnv()) == {**core, **health}
    assert output_dims(RbcsfEnv(), trackers=QUEUE) == {**core, **queue, **health}
    assert output_dims(WirelessEnv(), trackers=QUEUE) == {
        **core,
        **queue,
        "set_reward": ("round",),
        "num_failed": ("round",),
        "mean_set_reward": ("round",),
        **health,
    }
    assert output_dims(HflEnv(), learner=True, trajectories=True) == {
        **core,
        "utility": ("round",),
        "num_success": ("round",),
        "wall_clock": ("round",),
        "num_delivered": ("round",),
        "accuracy": ("eval",),
        "test_loss": ("eval",),
        "untrained": (),
        "selected": ("round", "client"),
        **health,
    }
    with_queue = output_dims(HflEnv(), trajectories=True, trackers=QUEUE)
    assert list(with_queue)[-3:] == ["selected", "queue", "nonfinite_round"]

    class Clash(RbcsfEnv):
        round_metrics: ClassVar[dict] = {"queue_max": Metric(("round",), "already an output")}

    with pytest.raises(ValueError, match="queue_max"):
        output_dims(Clash(), trackers=QUEUE)


def test_first_nonfinite_round_against_a_loop():
    """The first round of a NaN or ±inf among a run's float outputs, against a plain loop over
    the rounds on random instances: per-round outputs at their round, evaluations at the
    round they follow, other outputs at round T; integer outputs never; NaN in an output
    declared ``missing`` not at all (±inf there does); -1 where none."""
    from jfl.outputs import Metric
    from jfl.runner import first_nonfinite_round

    rng = np.random.default_rng(0)
    rounds, every = 12, 3
    dims = {"a": ("round",), "b": ("round", "client"), "acc": ("eval",), "z": ("client",)}
    dims.update(n=("round",), mu=("round",))
    declared = {name: Metric(d, name, missing=name == "mu") for name, d in dims.items()}
    for _ in range(200):
        values = {
            "a": rng.normal(size=rounds),
            "b": rng.normal(size=(rounds, 4)),
            "acc": rng.normal(size=rounds // every + 1),
            "z": rng.normal(size=4),
            "n": rng.integers(0, 9, rounds),
            "mu": np.where(rng.random(rounds) < 0.5, np.nan, 0.5),  # NaN: not given
        }
        if rng.random() < 0.2:
            values["mu"][rng.integers(rounds)] = np.inf
        for name in ("a", "b", "acc", "z"):
            if rng.random() < 0.3:
                flat = values[name].reshape(-1)
                flat[rng.integers(flat.size)] = rng.choice([np.nan, np.inf, -np.inf])
        expected = rounds + 1
        for t in range(rounds + 1):
            if t >= 1:
                row = [values["a"][t - 1], *values["b"][t - 1]]
                if not np.isfinite(row).all() or np.isinf(values["mu"][t - 1]):
                    expected = min(expected, t)
            if t % every == 0 and not np.isfinite(values["acc"][t // every]):
                expected = min(expected, t)
        if not np.isfinite(values["z"]).all():
            expected = min(expected, rounds)
        expected = -1 if expected == rounds + 1 else expected
        as_jax = {name: jnp.asarray(v) for name, v in values.items()}
        assert int(first_nonfinite_round(as_jax, declared, rounds, every)) == expected


def test_run_output_attribute_access():
    """Extras read as attributes; the runner's optional outputs this run does not record read
    as None; any other name (another environment's or tracker's output, a typo) raises."""
    core = {name: np.zeros(1) for name in CORE_OUTPUTS}
    out = RunOutput(**core, extras={"set_reward": np.ones(2)})
    np.testing.assert_array_equal(out.set_reward, np.ones(2))
    assert out.accuracy is None and out.selected is None
    for name in ("bogus", "utility", "final_queue"):  # hfl's, the fairness queue's
        with pytest.raises(AttributeError, match=f"no output '{name}'"):
            getattr(out, name)
    assert not hasattr(out, "__array__")
    assert list(out.arrays()) == [*core, "set_reward"]
    leaves, tree = jax.tree.flatten(out)
    assert len(leaves) == 4 and isinstance(jax.tree.unflatten(tree, leaves), RunOutput)


def test_make_run_needs_an_environment():
    class Duck:
        def reset(self, key, params):
            raise AssertionError

    with pytest.raises(TypeError, match="Environment"):
        make_run(Duck(), RbcsfEnv().default_params(num_clients=4), get("random").build(4, 2), 3)
    assert isinstance(RbcsfEnv(), Environment)


class _CountingLearner(NamedTuple):
    """A learner whose model is the sum of the weights it was handed (per client), whose
    ``minibatch_loss`` is uniform noise from the probe key and whose ``train_loss`` of round t
    is t + n/100 for each trained client n: enough to follow every value through the runner."""

    num_servers: int = 1
    provides: tuple[str, ...] = ("minibatch_loss", "train_loss")

    def init(self, key, data, hparams):
        return jnp.zeros(N)

    def step(self, key, model, action, delivered, t, data, hparams, weight=None):
        weight = jnp.where(delivered, action if weight is None else weight, 0.0)
        train_loss = jnp.where(action, t + jnp.arange(N) / 100, 0.0)
        metrics = {"num_delivered": jnp.sum(delivered & action), "untrained": 0}
        return model + weight, {**metrics, "train_loss": train_loss}

    def evaluate(self, model, data):
        return {"accuracy": jnp.zeros(()), "test_loss": jnp.sum(model)}

    def signals(self, key, model, data, hparams, names):
        assert tuple(names) == ("minibatch_loss",)  # the round signal is not asked for here
        return {"minibatch_loss": jax.random.uniform(key, (N,))}


def _weighing_policy():
    """Selects the m clients with the smallest summed training loss so far, weighing each by its
    ``minibatch_loss``; its state sums the ``train_loss`` it is handed after each round."""

    def init(key, hparams):
        return jnp.zeros(N)

    def select(key, seen, obs, hparams):
        chosen = topk_mask(-seen, obs.available, M, jnp.arange(N))
        return Selection(chosen, obs.minibatch_loss)

    def update(seen, obs, action, feedback, hparams):
        return seen + obs.train_loss

    return Policy(init, select, update, signals=("minibatch_loss", "train_loss"))


def test_selection_weights_and_round_signals_reach_learner_and_policy():
    """A NumPy replay of the run: each round's selection follows the training losses handed to
    ``update`` after the previous rounds' training, and the learner accumulates the weights of
    the ``Selection`` (the probe noise drawn from the run's probe keys)."""
    env = RbcsfEnv()
    params = env.default_params(num_clients=N, p_available=1.0)
    learner = _CountingLearner()
    run = make_run(env, params, _weighing_policy(), T, learner=learner, trajectories=True)
    key = jax.random.key(9)
    out = jax.jit(run)(key, {}, None)
    k_probe = jax.random.split(jax.random.split(run_keys(key, learner=True)[3], 3)[2], T)
    seen, total = np.zeros(N), 0.0
    for t in range(T):
        chosen = np.zeros(N, bool)
        chosen[sorted(range(N), key=lambda n: (seen[n], n))[:M]] = True
        np.testing.assert_array_equal(np.asarray(out.selected[t]), chosen, f"round {t + 1}")
        total += np.asarray(jax.random.uniform(k_probe[t], (N,)))[chosen].sum()
        seen += np.where(chosen, t + 1 + np.arange(N) / 100, 0.0)
    np.testing.assert_allclose(float(out.test_loss[-1]), total, rtol=1e-5)
