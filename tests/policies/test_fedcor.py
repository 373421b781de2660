"""FedCor against the plain float64 NumPy loop of the authors' code (jfl.reference.numpy_fedcor),
fed the same random draws: one round (store ΔL, refit, select, anneal) on many random states and
hyperparameters (warm-up, refit and greedy rounds, the first fit, unavailable clients, fewer
available than m, nobody available, stale stored rounds, ``update_mean`` and ``every_round``
on and off), a 25-round trajectory on synthetic loss sequences, the marginal likelihood and its
gradient (the policy's D×D form against the reference's N×N form; the reference's closed-form
gradient against finite differences), the greedy step on embeddings whose answer is known, a
run of the runner training the quadratic learner against a float64 replay, and the refusal of
a run without the learner's signals. One compiled vmapped program serves every round test
(small shapes: N = 10, m = 3, D = 3, M = 6, a few Adam steps).

Tolerances, float32 against float64: the likelihood's gradient agrees to ~1e-6 relative
(measured ≤ 3e-7), so one fit (≤ 12 Adam steps, X moving by up to 0.12) is compared to 2e-5
absolute (measured ≤ 3e-6); a wrong age, weight or mean moves X by ~1e-2. Greedy selections
are compared exactly except at steps whose two best scores (the reference's) are within 1e-4 of
each other, where float32 may break the near-tie either way.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfl.envs import RbcsfEnv
from jfl.envs.wireless import Observation, WirelessEnv, make_params
from jfl.experiments.common import check_policies
from jfl.fl.quadratic import make_instance, make_quadratic_learner
from jfl.policies import LearnerObservation, get
from jfl.policies._fedcor import FedcorState, fedcor, negative_log_likelihood
from jfl.reference import numpy_quadratic
from jfl.reference.numpy_fedcor import (
    FedcorNumpy,
    FedcorOptions,
    greedy_margins,
    greedy_numpy,
    nll_and_grad,
)
from jfl.runner import make_run, run_keys

N, M, D, WINDOW = 10, 3, 3, 6
STEPS, FIRST, WARM = 8, 12, 5
OPTIONS = {"dimension": D, "window": WINDOW, "steps": STEPS, "first_steps": FIRST,
           "warm_steps": WARM}  # fmt: skip
HP = (
    "warmup",
    "refit_every",
    "history_decay",
    "annealing",
    "gp_learning_rate",
    "gp_noise",
    "update_mean",
    "every_round",
)
INSTANCES = 256
SLOTS = WINDOW + 1
FIT_TOL = {"rtol": 0.0, "atol": 2e-5}
NEAR_TIE = 1e-4


@pytest.fixture(scope="module")
def policy():
    return fedcor(N, M, **OPTIONS)


@pytest.fixture(scope="module")
def one_round(policy):
    """One round, vmapped: the selection, the state after ``update`` and the Gumbel noise of
    the round's key (the uniform draw's), in one compiled program."""

    def one(key, state, local_loss, data_size, available, hp):
        hparams = dict(zip(HP, hp, strict=True))
        signals = {"local_loss": local_loss, "data_size": data_size}
        obs = LearnerObservation(Observation(available), signals)
        selected = policy.select(key, state, obs, hparams)
        new = policy.update(state, obs, selected, None, hparams)
        return selected, new, jax.random.gumbel(key, (N,), jnp.float32)

    jitted = jax.jit(jax.vmap(one))
    return lambda *args: jax.tree.map(np.asarray, jitted(*args))


def reference_of(state: FedcorState, hp) -> FedcorNumpy:
    """The reference's server holding the policy's state ``state`` (one instance's, NumPy)."""
    data = {int(s): state.history[j] for j, s in enumerate(state.stamp) if s >= 0}
    options = FedcorOptions(
        window=WINDOW, steps=STEPS, first_steps=FIRST, warm_steps=WARM,
        warmup=int(hp[0]), refit_every=int(hp[1]), gamma=float(hp[2]), beta=float(hp[3]),
        lr=float(hp[4]), noise=float(hp[5]), update_mean=hp[6] > 0.5, every_round=hp[7] > 0.5,
    )  # fmt: skip
    return FedcorNumpy(state.embedding, options, state.discount, data, state.last_loss,
                       int(state.round))  # fmt: skip


def reference_round(ref: FedcorNumpy, local_loss, data_size, available, gumbel):
    """One reference round: the selection, and the smallest relative gap between the two best
    scores of its greedy steps (inf for a random round)."""
    ref.observe(local_loss)
    selected = ref.select(available, data_size, gumbel, M)
    k = min(M, int(available.sum()))
    t = ref.round
    margin = np.inf
    if k and not (ref.is_warm(t) or ref.is_refit(t)):
        margin = min(greedy_margins(ref.sigma(), data_size, ref.discount, available, k))
    ref.update(selected, local_loss)
    return selected, margin


def _hparams(rng, size):
    hp = np.zeros((size, len(HP)), np.float32)
    hp[:, 0] = rng.choice([0, 2, 4], size)
    hp[:, 1] = rng.choice([1, 2, 3, 3, 4], size)
    hp[:, 2] = np.where(rng.uniform(size=size) < 0.3, 0.95, rng.uniform(0.5, 1.0, size))
    hp[:, 3] = np.where(rng.uniform(size=size) < 0.3, 0.95, rng.uniform(0.5, 1.0, size))
    hp[:, 4] = np.where(rng.uniform(size=size) < 0.5, 1e-2, rng.uniform(1e-3, 3e-2, size))
    hp[:, 5] = np.where(rng.uniform(size=size) < 0.5, 0.01, rng.uniform(0.01, 0.3, size))
    hp[:, 6] = rng.uniform(size=size) < 0.6
    hp[:, 7] = rng.uniform(size=size) < 0.3
    return hp


def _round_index(rng, warmup, every):
    """A round of interest: the first, the last warm-up round and the one after it (the first
    fit), a refit round and the one after it, or any of the first 15."""
    refit = next(t for t in range(warmup + 1, warmup + 10) if t % every == 0)
    return int(rng.choice([0, warmup, warmup + 1, warmup + 2, refit, refit + 1,
                           rng.integers(0, 15)]))  # fmt: skip


def _changes(rng, loadings, count):
    """Loss changes with a low-rank correlation between the clients: f[count, N]."""
    return 0.1 * rng.normal(size=(count, 2)) @ loadings.T + 0.02 * rng.normal(size=(count, N))


def _stored(rng, round_index, loadings):
    """Stored rounds for one state: per slot the newest past round of its residue (p 0.6), an
    older one outside the window (p 0.2) or nothing; their ΔL."""
    history = np.zeros((SLOTS, N))
    stamp = np.full(SLOTS, -1)
    for slot in range(SLOTS):
        rounds = [q for q in range(round_index - 1) if q % SLOTS == slot][::-1]
        u = rng.uniform()
        if rounds and u < 0.6:
            stamp[slot] = rounds[0]
        elif len(rounds) > 1 and u < 0.8:
            stamp[slot] = rounds[1]
    history[stamp >= 0] = _changes(rng, loadings, int((stamp >= 0).sum()))
    return history, stamp


def instances(seed: int):
    """Random one-round inputs: keys, states, losses, data sizes, availability, hyperparameters."""
    rng = np.random.default_rng(seed)
    hp = _hparams(rng, INSTANCES)
    fields = {name: [] for name in FedcorState._fields}
    loss = np.zeros((INSTANCES, N))
    for i in range(INSTANCES):
        r = _round_index(rng, int(hp[i, 0]), int(hp[i, 1]))
        loadings = rng.normal(size=(N, 2))
        history, stamp = _stored(rng, r, loadings)
        scale = rng.choice([1.0, 0.3])
        fields["embedding"].append(scale * rng.normal(size=(D, N)) / np.sqrt(D))
        discount = np.where(rng.uniform(size=N) < 0.5, 1.0, rng.uniform(0.3, 1.0, N))
        fields["discount"].append(discount)
        fields["history"].append(history)
        fields["stamp"].append(stamp)
        last = rng.uniform(0.5, 2.5, N) if r > 0 else np.zeros(N)
        fields["last_loss"].append(last)
        fields["round"].append(r)
        loss[i] = (last if r > 0 else 1.5) + _changes(rng, loadings, 1)[0]
    dtypes = {"stamp": np.int32, "round": np.int32}
    state = FedcorState(**{k: np.asarray(v, dtypes.get(k, np.float32)) for k, v in fields.items()})
    available = rng.uniform(size=(INSTANCES, N)) < 0.8
    available[:12] = rng.uniform(size=(12, N)) < 0.2  # often fewer than m
    available[12:16] = False
    size = rng.integers(0, 100, size=(INSTANCES, N)).astype(np.float32)
    size[:, 0] = np.maximum(size[:, 0], 1.0)
    keys = jax.random.split(jax.random.key(1000 + seed), INSTANCES)
    return keys, state, loss.astype(np.float32), size, available, hp


def _instance(state, i):
    return FedcorState(*(np.asarray(f)[i] for f in state))


@pytest.mark.parametrize("seed", range(2))
def test_fedcor_round_matches_numpy(one_round, seed):
    keys, state, loss, size, available, hp = instances(seed)
    selected, new, gumbel = one_round(keys, state, loss, size, available, hp)
    near_ties = 0
    for i in range(INSTANCES):
        msg = f"instance {i}"
        ref = reference_of(_instance(state, i), hp[i])
        before = ref.embedding.copy()
        want, margin = reference_round(ref, loss[i], size[i], available[i], gumbel[i])
        k = min(M, int(available[i].sum()))
        assert selected[i].sum() == k and not (selected[i] & ~available[i]).any(), msg
        if margin >= NEAR_TIE:
            np.testing.assert_array_equal(selected[i], want, err_msg=msg)
        else:
            near_ties += 1
        np.testing.assert_allclose(new.embedding[i], ref.embedding, **FIT_TOL, err_msg=msg)
        if np.array_equal(ref.embedding, before):  # no fit: X untouched
            np.testing.assert_array_equal(new.embedding[i], state.embedding[i], err_msg=msg)
        np.testing.assert_allclose(new.discount[i], ref.discount, rtol=1e-6, err_msg=msg)
        q = int(state.round[i]) - 1
        if q in ref.data:  # stored this round, in slot q mod (M + 1)
            assert new.stamp[i][q % SLOTS] == q, msg
            np.testing.assert_allclose(new.history[i][q % SLOTS], ref.data[q], rtol=1e-6,
                                       atol=1e-7, err_msg=msg)  # fmt: skip
        else:
            np.testing.assert_array_equal(new.stamp[i], state.stamp[i], err_msg=msg)
        np.testing.assert_array_equal(new.last_loss[i], loss[i], err_msg=msg)
        assert new.round[i] == state.round[i] + 1, msg
    assert near_ties <= INSTANCES // 50


def _synthetic_losses(rng, rounds, size):
    """F_i(w^t) over ``rounds`` rounds: a decay shared by the clients of one of three groups,
    plus a client's own level and noise: f[rounds, size, N]."""
    group = rng.integers(0, 3, size=(size, N))
    level = rng.uniform(0.2, 0.6, size=(size, N))
    rate = rng.uniform(0.05, 0.3, size=(rounds, size, 3))
    shared = np.take_along_axis(np.exp(-np.cumsum(rate, axis=0)), group[None], axis=2)
    noise = 0.01 * rng.normal(size=(rounds, size, N))
    return (level + 2.0 * shared + noise).astype(np.float32)


def _window(stored: dict, last: int) -> dict:
    """The stored rounds a fit after round ``last`` could read: age at most M."""
    return {e: v for e, v in stored.items() if last - e <= WINDOW}


def test_fedcor_trajectory_matches_numpy(one_round, policy):
    """25 rounds from ``init`` on synthetic loss sequences (W ∈ {2, 4}, Δt ∈ {2, 3, 4},
    ``update_mean`` and ``every_round`` on and off), ~80% of the clients available, against a
    reference that keeps its own stored rounds, annealing, last losses and round count: the
    selections, X, a and the stored ΔL round by round. X alone is handed back to the reference
    after each comparison: Adam's first step is lr·sign(g), so a float32 difference of 2e-5 in
    X can flip a small gradient component and move X by 2·lr in one fit (seen on these
    instances with a reference left to run free), which says nothing about the policy."""
    rng = np.random.default_rng(21)
    rounds = 25
    hp = _hparams(rng, INSTANCES)
    hp[:, 0] = rng.choice([2, 4], INSTANCES)
    hp[:, 1] = rng.choice([2, 3, 4], INSTANCES)
    losses = _synthetic_losses(rng, rounds, INSTANCES)
    available = rng.uniform(size=(rounds, INSTANCES, N)) < 0.8
    size = rng.integers(1, 100, size=(INSTANCES, N)).astype(np.float32)
    init_keys = jax.random.split(jax.random.key(5), INSTANCES)
    state = jax.tree.map(np.asarray, jax.vmap(lambda k: policy.init(k, {}))(init_keys))
    start = state.embedding
    checked = range(0, INSTANCES, 4)
    refs = {i: reference_of(_instance(state, i), hp[i]) for i in checked}
    near_ties, greedy_rounds = 0, 0
    keys = jax.random.split(jax.random.key(6), (rounds, INSTANCES))
    for t in range(rounds):
        selected, state, gumbel = one_round(keys[t], state, losses[t], size, available[t], hp)
        for i in checked:
            msg = f"instance {i}, round {t}"
            ref = refs[i]
            want, margin = reference_round(ref, losses[t, i], size[i], available[t, i],
                                           gumbel[i])  # fmt: skip
            greedy_rounds += np.isfinite(margin)
            if not np.array_equal(selected[i], want):
                assert margin < NEAR_TIE, msg
                near_ties += 1
                ref.discount = state.discount[i].astype(float)  # annealed as the policy chose
            np.testing.assert_allclose(state.embedding[i], ref.embedding, **FIT_TOL, err_msg=msg)
            np.testing.assert_allclose(state.discount[i], ref.discount, rtol=1e-6, err_msg=msg)
            stored = {int(e): state.history[i][j] for j, e in enumerate(state.stamp[i]) if e >= 0}
            stored, kept = _window(stored, t), _window(ref.data, t)
            assert sorted(stored) == sorted(kept), msg
            for e in kept:
                np.testing.assert_allclose(stored[e], kept[e], rtol=1e-6, atol=1e-7, err_msg=msg)
            ref.embedding = state.embedding[i].astype(float)
    assert near_ties <= rounds * len(checked) // 100
    assert greedy_rounds > rounds * len(checked) / 2
    assert (np.abs(state.embedding - start).max(axis=(1, 2)) > 0.05).all()  # every GP was fitted


def _loss_instances(seed, count=64):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(count, D, N)) / np.sqrt(D) * rng.choice([1.0, 0.2], (count, 1, 1))
    history = 0.1 * rng.normal(size=(count, SLOTS, N))
    weight = np.where(rng.uniform(size=(count, SLOTS)) < 0.7, rng.uniform(0.3, 1, (count, SLOTS)),
                      0.0)  # fmt: skip
    weight[:, 0] = 1.0
    mean = np.where(rng.uniform(size=(count, 1)) < 0.5, 0.0, rng.normal(0, 0.05, (count, N)))
    noise = rng.choice([0.01, 0.1], count)
    return x, history, weight, mean, noise


def test_marginal_likelihood_matches_numpy():
    """The policy's D×D form of −Σ w·log N(ΔL; μ, XᵀX + σ²I) and its autodiff gradient against
    the reference's N×N form and closed-form gradient, in float32 against float64."""
    f32 = np.float32
    x, history, weight, mean, noise = (a.astype(f32) for a in _loss_instances(3))
    value, grad = jax.jit(jax.vmap(jax.value_and_grad(negative_log_likelihood)))(
        x, history, weight, mean, noise
    )
    for i in range(len(x)):  # the reference on the same (float32) inputs, in float64
        data = {e: history[i, e].astype(float) for e in range(SLOTS) if weight[i, e] > 0}
        weights = {e: float(weight[i, e]) for e in data}
        want, want_grad = nll_and_grad(x[i].astype(float), data, weights, mean[i].astype(float),
                                       float(noise[i]))  # fmt: skip
        assert value[i] == pytest.approx(want, rel=1e-5), i
        scale = np.abs(want_grad).max()
        np.testing.assert_allclose(grad[i], want_grad, rtol=0, atol=2e-5 * scale, err_msg=str(i))


def test_reference_gradient_matches_finite_differences():
    """The reference's closed-form gradient ∂/∂X = 2X·Σ_e w_e·½(K⁻¹ − α_eα_eᵀ) against central
    differences of its own likelihood, entry by entry."""
    x, history, weight, mean, noise = _loss_instances(4, count=6)
    for i in range(len(x)):
        data = {e: history[i, e] for e in range(SLOTS) if weight[i, e] > 0}
        weights = {e: weight[i, e] for e in data}
        _, grad = nll_and_grad(x[i], data, weights, mean[i], noise[i])
        step = 1e-6 * max(1.0, np.abs(x[i]).max())
        numeric = np.zeros_like(x[i])
        for d in range(D):
            for n in range(N):
                up, down = x[i].copy(), x[i].copy()
                up[d, n] += step
                down[d, n] -= step
                numeric[d, n] = (nll_and_grad(up, data, weights, mean[i], noise[i])[0]
                                 - nll_and_grad(down, data, weights, mean[i], noise[i])[0]
                                 ) / (2 * step)  # fmt: skip
        np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-5 * np.abs(grad).max())


def _clusters(discount=None, available=None):
    """A greedy round's state whose covariance (σ_n = 0.3) has three independent groups of
    clients, 0-3, 4-6 and 7-9, each on its own axis of the embedding at decreasing distances
    from 0 (no two scores tie): with equal data the first group scores highest, and once one of
    its clients is observed the others' posterior correlation is too small to compete."""
    x = np.zeros((D, N), np.float32)
    x[0, :4], x[1, 4:7], x[2, 7:] = [1.0, 0.96, 0.92, 0.88], [0.9, 0.86, 0.82], [0.8, 0.76, 0.72]
    state = FedcorState(
        embedding=x,
        discount=np.ones(N, np.float32) if discount is None else discount,
        history=np.zeros((SLOTS, N), np.float32),
        stamp=np.full(SLOTS, -1, np.int32),
        last_loss=np.ones(N, np.float32),
        round=np.int32(8),  # W = 4, Δt = 3: a greedy round after a greedy round, no fit
    )
    return state, np.ones(N, bool) if available is None else available


def test_fedcor_edge_cases(one_round):
    """The greedy step takes one client per correlated group, the highest-scoring group first;
    the annealing a_k and an unavailable client move it to the group's next client; fewer
    available clients than m: all of them; nobody: nobody. Round 0 stores and fits nothing. A
    refit round draws uniformly and resets a; a greedy round anneals exactly its clients."""
    hp = np.array([4, 3, 0.95, 0.5, 1e-2, 0.3, 1, 0], np.float32)
    annealed = np.ones(N, np.float32)
    annealed[0] = 0.5
    rows = [
        _clusters(),  # 0: {0, 4, 7}
        _clusters(discount=annealed),  # 1: client 0's a halved: {1, 4, 7}
        _clusters(available=np.arange(N) != 4),  # 2: {0, 5, 7}
        _clusters(available=np.isin(np.arange(N), [2, 8])),  # 3: {2, 8}
        _clusters(available=np.zeros(N, bool)),  # 4: nobody
    ]
    start = _clusters()[0]._replace(round=np.int32(0), last_loss=np.zeros(N, np.float32))
    rows.append((start, np.ones(N, bool)))  # 5: round 0
    rows.append((rows[1][0]._replace(round=np.int32(6)), np.ones(N, bool)))  # 6: a refit round
    rows = [rows[i % len(rows)] for i in range(INSTANCES)]
    state = FedcorState(*(np.stack([np.asarray(r[0][j]) for r in rows]) for j in range(6)))
    available = np.stack([r[1] for r in rows])
    loss = np.full((INSTANCES, N), 1.5, np.float32)
    size = np.ones((INSTANCES, N), np.float32)
    keys = jax.random.split(jax.random.key(9), INSTANCES)
    hps = np.tile(hp, (INSTANCES, 1))
    selected, new, gumbel = one_round(keys, state, loss, size, available, hps)
    expect = {0: [0, 4, 7], 1: [1, 4, 7], 2: [0, 5, 7], 3: [2, 8], 4: []}
    for row, clients in expect.items():
        np.testing.assert_array_equal(np.flatnonzero(selected[row]), clients, err_msg=str(row))
        np.testing.assert_array_equal(new.embedding[row], state.embedding[row])  # no fit
        want = state.discount[row] * np.where(selected[row], 0.5, 1.0)
        np.testing.assert_allclose(new.discount[row], want, rtol=1e-7)
        sigma = state.embedding[row].T @ state.embedding[row] + 0.09 * np.eye(N)
        k = len(clients)
        assert greedy_numpy(sigma, size[row], state.discount[row], available[row], k) == clients
    # Round 0: uniform among all, nothing stored or fitted, a kept, the losses remembered.
    first = np.sort(np.argsort(-gumbel[5])[:M])
    np.testing.assert_array_equal(np.flatnonzero(selected[5]), first)
    np.testing.assert_array_equal(new.stamp[5], -1)
    np.testing.assert_array_equal(new.embedding[5], state.embedding[5])
    np.testing.assert_array_equal(new.discount[5], 1.0)
    np.testing.assert_array_equal(new.last_loss[5], loss[5])
    # Round 6 = 2Δt > W: a refit round, uniform, a reset to 1, no fit (round 5 stored nothing).
    refit = np.sort(np.argsort(-gumbel[6])[:M])
    np.testing.assert_array_equal(np.flatnonzero(selected[6]), refit)
    np.testing.assert_array_equal(new.discount[6], 1.0)
    np.testing.assert_array_equal(new.embedding[6], state.embedding[6])
    np.testing.assert_array_equal(new.stamp[6], -1)


def test_fedcor_init(policy):
    """X starts N(0, 1/D) (``torch.randn(dimension,num_users)/np.sqrt(dimension)``), a = 1,
    nothing stored."""
    keys = jax.random.split(jax.random.key(2), 400)
    state = jax.vmap(lambda k: policy.init(k, {}))(keys)
    x = np.asarray(state.embedding)
    assert x.shape == (400, D, N)
    se = np.sqrt(2.0 / x.size) / D  # SE of the mean of x² under N(0, 1/D)
    assert abs((x**2).mean() - 1 / D) < 5 * se and abs(x.mean()) < 5 / np.sqrt(x.size * D)
    assert (np.asarray(state.discount) == 1).all() and (np.asarray(state.stamp) == -1).all()
    assert (np.asarray(state.round) == 0).all()


def test_fedcor_in_the_runner_matches_numpy(policy):
    """A run of ``jfl.runner.make_run`` training the quadratic learner (every client available)
    against the reference fed that run's draws and the losses of a float64 replay of its
    training: the runner shows ``select`` and ``update`` of round t the losses F_k(w^t) of the
    model before the round, so the ΔL the GP stores are those of consecutive rounds."""
    rounds, steps, learning_rate = 16, 2, 0.01
    data = make_instance(0, N, 3, e_scale=10.0, w0_scale=10.0)
    env = RbcsfEnv()
    learner = make_quadratic_learner(N, local_steps=steps)
    run = make_run(env, env.default_params(num_clients=N, p_available=1.0), policy, rounds,
                   learner=learner, trajectories=True)  # fmt: skip
    hparams = {**get("fedcor").defaults(), "warmup": 3.0, "refit_every": 4.0,
               "learning_rate": learning_rate}  # fmt: skip
    key = jax.random.key(4)
    out = jax.jit(run)(key, hparams, data)
    _, k_init, k_rounds, _ = run_keys(key, learner=True)
    select_keys = jax.random.split(k_rounds, (rounds, 2))[:, 0]
    gumbel = np.asarray(jax.vmap(lambda k: jax.random.gumbel(k, (N,), jnp.float32))(select_keys))
    state = jax.tree.map(np.asarray, policy.init(k_init, hparams))
    ref = reference_of(state, np.array([hparams[name] for name in HP], np.float32))
    h, e, p, w = (np.asarray(a, np.float64) for a in data)
    everyone = np.ones(N, bool)
    for t in range(rounds):
        loss = numpy_quadratic.local_loss(h, e, w)
        want, margin = reference_round(ref, loss, p, everyone, gumbel[t])
        if margin < NEAR_TIE:  # the training from here on may differ
            break
        np.testing.assert_array_equal(np.asarray(out.selected[t]), want, err_msg=f"round {t}")
        w, _ = numpy_quadratic.fl_round(
            h, e, p, w, learning_rate, steps, draws=np.flatnonzero(want).tolist()
        )
    assert t == rounds - 1 and ref.round == rounds


def test_fedcor_spec_and_refusal():
    """Registered with the README's FMNIST defaults; needs the learner's loss and data size, so
    a run without a learner, or whose learner lacks them, is refused before compiling."""
    spec = get("fedcor")
    assert spec.requires == ("available", "local_loss", "data_size")
    assert spec.signals == ("local_loss", "data_size")
    assert spec.defaults() == {
        "warmup": 15.0, "refit_every": 10.0, "history_decay": 0.95, "annealing": 0.95,
        "gp_learning_rate": 1e-2, "gp_noise": 0.01, "update_mean": 1.0, "every_round": 0.0,
    }  # fmt: skip
    policy = spec.build(10, 3)
    assert set(policy.signals) == {"local_loss", "data_size"}
    with pytest.raises(ValueError, match=r"reads \['local_loss', 'data_size'\], which only a fed"):
        make_run(WirelessEnv(), make_params(10), policy, 5)
    with pytest.raises(ValueError, match="which only a federated training run computes"):
        check_policies(["fedcor"], "wireless")
    check_policies(["fedcor"], "wireless", trains=True)

    class Blind:
        provides = ("data_size",)

    with pytest.raises(ValueError, match=r"reads \['local_loss'\], which the run's learner"):
        spec.check_learner(Blind())
    with pytest.raises(ValueError, match="refit_every"):
        spec.validate({"refit_every": 0.5})
    with pytest.raises(ValueError, match="window"):
        fedcor(10, 3, window=0)
    with pytest.raises(ValueError, match="selection_size"):
        fedcor(10, 11)
