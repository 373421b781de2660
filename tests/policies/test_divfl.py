"""DivFL against the plain loops of jfl.reference.numpy_divfl, fed the same draws: one round's
selection by greedy facility location (every client covered, or the available ones), by
stochastic greedy (the paper's subset size and the code's), and the state update, on many random
instances (unavailable clients, fewer than m available, repeated rows, rounds that read every
client's gradient); a 10-round trajectory with and without the full refresh; the edge cases of
ties and empty rounds; the refusal of a run without a learner. One compiled program."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfl.envs.wireless import Observation
from jfl.policies import LearnerObservation, get
from jfl.policies._divfl import DivflState, divfl
from jfl.reference.numpy_divfl import divfl_numpy_loop, divfl_select_numpy, subset_size_numpy

N, M, K = 10, 3, 4
INSTANCES = 300
VARIANTS = 3  # greedy covering everyone, stochastic greedy, greedy covering the available


@pytest.fixture(scope="module")
def one_round():
    """One round of the three variants, vmapped: their selections, the state after the round
    with variant ``variant``'s selection, and stochastic greedy's noise, in one program."""
    policies = [
        divfl(N, M, sketch_dim=K),
        divfl(N, M, stochastic=True, sketch_dim=K),
        divfl(N, M, cover="available", sketch_dim=K),
    ]

    def one(key, grads, priority, round_index, available, gradient, variant, hparams):
        obs = LearnerObservation(Observation(available), {"grad_sketch": gradient})
        state = DivflState(grads, priority, round_index)
        selected = jnp.stack([p.select(key, state, obs, hparams) for p in policies])
        new = policies[0].update(state, obs, selected[variant], None, hparams)
        return selected, new.grads, new.round, jax.random.uniform(key, (M, N))

    jitted = jax.jit(jax.vmap(one))
    return lambda *args: tuple(np.asarray(a) for a in jitted(*args))


def hparams_of(epsilon, subsample, refresh_every):
    f32 = np.float32
    return {"epsilon": epsilon.astype(f32), "subsample": subsample.astype(f32),
            "refresh_every": refresh_every.astype(f32)}  # fmt: skip


def instances(seed: int):
    rng = np.random.default_rng(seed)
    grads = rng.normal(size=(INSTANCES, N, K)).astype(np.float32)
    grads[1::6, 4] = grads[1::6, 7]  # repeated rows
    grads[2::6, :3] = 0.0  # zero rows
    gradient = rng.normal(size=(INSTANCES, N, K)).astype(np.float32)
    priority = np.stack([rng.permutation(N) for _ in range(INSTANCES)]).astype(np.int32)
    round_index = rng.choice([0, 1, 2, 3, 4, 6], size=INSTANCES).astype(np.int32)
    available = rng.uniform(size=(INSTANCES, N)) < 0.8
    available[:20] = rng.uniform(size=(20, N)) < 0.25  # often fewer than m
    available[20] = False
    epsilon = rng.uniform(0.01, 0.95, INSTANCES)
    subsample = np.where(rng.uniform(size=INSTANCES) < 0.3, rng.uniform(0.05, 0.6, INSTANCES), 0)
    refresh_every = rng.choice([0.0, 0.0, 2.0, 3.0], size=INSTANCES)
    variant = (np.arange(INSTANCES) % VARIANTS).astype(np.int32)
    keys = jax.random.split(jax.random.key(seed), INSTANCES)
    hparams = hparams_of(epsilon, subsample, refresh_every)
    return keys, grads, priority, round_index, available, gradient, variant, hparams


def reads_gradient(round_index, refresh_every) -> bool:
    every = int(refresh_every)
    return round_index == 0 or (every >= 1 and round_index % every == 0)


@pytest.mark.parametrize("seed", range(2))
def test_divfl_round_matches_numpy(one_round, seed):
    args = instances(seed)
    _, grads, priority, round_index, available, gradient, variant, hparams = args
    selected, new_grads, new_round, noise = one_round(*args)
    for i in range(INSTANCES):
        fresh = reads_gradient(round_index[i], hparams["refresh_every"][i])
        rows = gradient[i] if fresh else grads[i]
        k = min(M, available[i].sum())
        size = subset_size_numpy(available[i].sum(), k, float(hparams["epsilon"][i]),
                                 float(hparams["subsample"][i]))  # fmt: skip
        want = [
            divfl_select_numpy(rows, available[i], M, priority[i]),
            divfl_select_numpy(rows, available[i], M, priority[i], noise=noise[i], size=size),
            divfl_select_numpy(rows, available[i], M, priority[i], cover_all=False),
        ]
        msg = f"instance {i}"
        for v in range(VARIANTS):
            np.testing.assert_array_equal(selected[i, v], want[v], err_msg=f"{msg} variant {v}")
            assert selected[i, v].sum() == k and not np.any(selected[i, v] & ~available[i]), msg
        # The selected clients' rows become this round's gradients; the others keep G.
        action = want[variant[i]]
        np.testing.assert_array_equal(new_grads[i], np.where(action[:, None], gradient[i], rows))
    np.testing.assert_array_equal(new_round, round_index + 1)


def test_divfl_trajectory_matches_numpy(one_round):
    """10 rounds from the start (G read from every client at round 0), with no refresh and with
    a refresh every 3 rounds, greedy and stochastic greedy side by side: the selections of the
    policy, its state fed forward, and of the NumPy loop, round by round."""
    rng = np.random.default_rng(17)
    num_rounds = 10
    gradients = rng.normal(size=(num_rounds, INSTANCES, N, K)).astype(np.float32)
    available = rng.uniform(size=(num_rounds, INSTANCES, N)) < 0.8
    priority = np.stack([rng.permutation(N) for _ in range(INSTANCES)]).astype(np.int32)
    variant = np.where(np.arange(INSTANCES) % 2 == 0, 0, 1).astype(np.int32)
    every = np.where(np.arange(INSTANCES) % 4 < 2, 0.0, 3.0)
    epsilon, subsample = np.full(INSTANCES, 0.2), np.zeros(INSTANCES)
    hparams = hparams_of(epsilon, subsample, every)
    grads = np.zeros((INSTANCES, N, K), np.float32)
    round_index = np.zeros(INSTANCES, np.int32)
    keys = jax.random.split(jax.random.key(5), (num_rounds, INSTANCES))
    got, noises = [], []
    for t in range(num_rounds):
        selected, grads, round_index, noise = one_round(
            keys[t], grads, priority, round_index, available[t], gradients[t], variant, hparams
        )
        got.append(selected[np.arange(INSTANCES), variant])
        noises.append(noise)
    got, noises = np.stack(got, axis=1), np.stack(noises, axis=1)
    for i in range(0, INSTANCES, 3):
        stochastic = variant[i] == 1
        want = divfl_numpy_loop(
            gradients[:, i], available[:, i], M, priority[i], int(every[i]),
            noises=noises[i] if stochastic else None, epsilon=0.2,
        )  # fmt: skip
        np.testing.assert_array_equal(got[i], want, err_msg=f"instance {i}")


def test_divfl_edge_cases(one_round):
    """Identical rows tie everywhere: the k available clients of lowest priority (greedy; the
    stochastic variant takes them from its random subsets, as the round test checks). No client
    available: nobody; fewer than m: all of them. Round 0 reads the round's gradients, not the
    state (zeros); later rounds read the state unless refreshing."""
    rng = np.random.default_rng(9)
    keys, grads, priority, round_index, available, gradient, variant, hparams = instances(4)
    same = np.broadcast_to(rng.normal(size=K), (N, K)).astype(np.float32)
    gradient[:50] = same
    round_index[:50] = 0
    available[:10] = False
    available[10:20] = np.arange(N) < 2
    selected, *_ = one_round(keys, grads, priority, round_index, available, gradient, variant,
                             hparams)  # fmt: skip
    for i in range(50):
        k = min(M, available[i].sum())
        lowest = np.zeros(N, bool)
        lowest[np.argsort(np.where(available[i], priority[i], N))[:k]] = True
        for v in (0, 2):
            np.testing.assert_array_equal(selected[i, v], lowest, err_msg=f"instance {i}")
        assert selected[i, 1].sum() == k and not np.any(selected[i, 1] & ~available[i])
    assert not selected[:10].any()
    np.testing.assert_array_equal(selected[10:20], np.broadcast_to(np.arange(N) < 2, (10, 3, N)))
    # The state's G (zeros) ties everything too, so a round that reads it selects as above,
    # while one that reads the gradients (round 0) generally does not.
    round_index[:] = 5
    hparams["refresh_every"][:] = 0.0
    zeros = np.zeros_like(grads)
    later, *_ = one_round(keys, zeros, priority, round_index, available, gradient, variant,
                          hparams)  # fmt: skip
    first, *_ = one_round(keys, zeros, priority, np.zeros_like(round_index), available, gradient,
                          variant, hparams)  # fmt: skip
    for i in range(50, INSTANCES):
        k = min(M, available[i].sum())
        lowest = np.zeros(N, bool)
        lowest[np.argsort(np.where(available[i], priority[i], N))[:k]] = True
        np.testing.assert_array_equal(later[i, 0], lowest, err_msg=f"instance {i}")
    assert np.mean([(first[i, 0] != later[i, 0]).any() for i in range(50, INSTANCES)]) > 0.5


def test_divfl_spec_and_refusal():
    """DivFL reads the learner's gradient sketches: refused, in one line and before anything
    compiles, by a run without a learner; its options and ranges are checked."""
    spec = get("divfl")
    assert spec.requires == ("available", "grad_sketch") and spec.signals == ("grad_sketch",)
    assert spec.build(N, M).signals == ("grad_sketch",)
    assert spec.defaults() == {"epsilon": 0.1, "subsample": 0.0, "refresh_every": 0.0}
    with pytest.raises(ValueError, match=r"reads \['grad_sketch'\]") as err:
        spec.check_learner(None)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="epsilon"):
        spec.validate({"epsilon": 1.0})
    with pytest.raises(ValueError, match="cover"):
        divfl(N, M, cover="everyone")
    with pytest.raises(ValueError, match="selection_size"):
        divfl(N, N + 1)
    policy = spec.build(N, M, sketch_dim=K)
    state = policy.init(jax.random.key(0), spec.defaults())
    assert state.grads.shape == (N, K) and sorted(np.asarray(state.priority)) == list(range(N))
    wide = {"grad_sketch": jnp.zeros((N, K + 1))}
    obs = LearnerObservation(Observation(jnp.ones(N, bool)), wide)
    with pytest.raises(ValueError, match=rf"has {K + 1} coordinates.*sketch_dim={K}"):
        policy.select(jax.random.key(0), state, obs, spec.defaults())
