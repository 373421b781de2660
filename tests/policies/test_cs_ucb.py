"""CS-UCB, modified CS-UCB, CS-UCB-Q and Round-robin against the NumPy reference loops.

The jfl policies run (float32) under one jitted ``lax.scan`` of select/update per shape, vmapped
over random instances; each instance is a reward matrix r[T, K] (exactly representable in
float32) and an availability matrix a[T, K]; the feedback of round t carries
``reward = where(selected, r[t], 0)``. The reference (float64) recomputes every round's selection
from the state that jfl's own selections produced (teacher forcing, ``played=``), so a float
near-tie, where the two precisions may rank differently, cannot make the trajectories drift apart.
Exact ties go by the random order each jfl run draws in ``init`` (its state's ``priority``), which
the reference is given.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jfl.policies
from jfl.envs.wireless import Feedback, Observation, WirelessEnv, make_params
from jfl.policies import initial_rounds
from jfl.reference import (
    client_times_numpy,
    cs_ucb_numpy,
    cs_ucb_q_numpy,
    modified_cs_ucb_numpy,
    paper_speed_bounds,
    round_robin_numpy,
    wireless_numpy_loop,
)
from jfl.runner import make_batched_run, make_run, seed_keys
from jfl.trackers import fairness_queue

NUM_ROUNDS = 120
SHAPES = [(5, 1), (4, 4), (12, 5)]  # (K, N): N = 1, N = K, N ∤ K
# Per instance: availability probability and whether rewards are rounded to one decimal (ties).
INSTANCES = [(1.0, False), (1.0, True), (0.9, False), (0.6, True), (0.35, False), (0.1, True)]
BETAS = [0.0, 1e-5, 0.1, 0.5, 1.0, 0.3]  # CS-UCB-Q β per instance
NEAR_TIE = 1e-5  # relative gap between float64 scores that float32 may rank differently


# --------------------------------------------------------------------------------------------
# drivers
# --------------------------------------------------------------------------------------------


def rollout(name, num_clients, m):
    """vmap over instances of a whole run of policy ``name`` on given rewards/availability.

    Returns the selections bool[I, T, K] and the initial policy state.
    """
    policy = jfl.policies.get(name).build(num_clients, m)

    def one(key, rewards, available, hparams):
        k_init, k_rounds = jax.random.split(key)
        state0 = policy.init(k_init, hparams)
        zeros = jnp.zeros(num_clients, jnp.float32)

        def body(state, inputs):
            reward, avail, key_t = inputs
            obs = Observation(available=avail)
            action = policy.select(key_t, state, obs, hparams)
            feedback = Feedback(
                time=zeros,
                reward=jnp.where(action, reward, 0.0),
                round_time=jnp.float32(0),
                set_reward=jnp.float32(0),
                num_failed=jnp.int32(0),
            )
            return policy.update(state, obs, action, feedback, hparams), action

        keys = jax.random.split(k_rounds, rewards.shape[0])
        _, actions = jax.lax.scan(body, state0, (rewards, available, keys))
        return actions, state0

    return jax.vmap(one)


UCB_POLICIES = ("cs_ucb", "modified_cs_ucb", "cs_ucb_q")


@functools.cache
def shape_runs(num_clients, m):
    """Every policy's selections on its own instances of shape (K, N), under one jit per shape
    (one compilation per shape keeps the tests fast): ``{name: (actions, initial state)}`` for
    the UCB policies (instances and seed of the reference test), Round-robin (those of its test)
    and, for K = 12, N = 5, Random (those of the size test)."""
    runs = {}
    rng = np.random.default_rng(1000 * num_clients + m)
    rewards, available = make_instances(rng, num_clients)
    q_hparams = cs_ucb_q_hparams(rng, num_clients, m)
    for name in UCB_POLICIES:
        hparams = q_hparams if name == "cs_ucb_q" else {}
        runs[name] = (rewards, available, hparams, num_clients)
    rewards, available = make_instances(np.random.default_rng(2000 * num_clients + m), num_clients)
    runs["round_robin"] = (rewards, available, {}, 7)
    if (num_clients, m) == (12, 5):
        rewards, available = make_instances(np.random.default_rng(3000), 12)
        runs["random"] = (rewards, available, {}, 8)
    rollouts = {name: rollout(name, num_clients, m) for name in runs}

    @jax.jit
    def all_policies(args):
        return {name: rollouts[name](*a) for name, a in args.items()}

    args = {}
    for name, (rewards, available, hparams, seed) in runs.items():
        keys = jax.random.split(jax.random.key(seed), rewards.shape[0])
        args[name] = (keys, jnp.asarray(rewards, jnp.float32), jnp.asarray(available), hparams)
    out = jax.tree.map(np.asarray, all_policies(args))
    return {name: (*runs[name][:3], *out[name]) for name in runs}


def make_instances(rng, num_clients, num_rounds=NUM_ROUNDS):
    """Rewards [I, T, K] (float32 values, as float64) and availability [I, T, K] per INSTANCES."""
    rewards, available = [], []
    for p_available, rounded in INSTANCES:
        level = rng.uniform(0.05, 0.95, num_clients)
        r = np.clip(level + rng.normal(0.0, 0.15, (num_rounds, num_clients)), 0.0, 1.0)
        if rounded:
            r = np.round(r, 1)
        a = rng.random((num_rounds, num_clients)) < p_available
        if p_available < 1:
            a[3::13] = False  # rounds with nobody available
        rewards.append(r.astype(np.float32).astype(np.float64))
        available.append(a)
    return np.stack(rewards), np.stack(available)


def cs_ucb_q_hparams(rng, num_clients, m):
    """β per instance and a per-client fairness vector c ∈ [0, 1) (float32-representable)."""
    beta = np.array(BETAS[: len(INSTANCES)], np.float32)
    c = rng.uniform(0.0, min(0.99, 1.2 * m / num_clients), (len(INSTANCES), num_clients))
    return {"beta": beta, "fairness": c.astype(np.float32)}


def check_sizes(selected, available, m):
    """Never an unavailable client; exactly min(m, |A(t)|) selected every round."""
    assert not np.any(selected & ~available), "selected an unavailable client"
    np.testing.assert_array_equal(selected.sum(axis=-1), np.minimum(m, available.sum(axis=-1)))


def near_tie_mismatches(ours, theirs, scores, available, m):
    """Rounds where the selections differ; each must be a float near-tie at the selection
    boundary: every client in the symmetric difference scores within NEAR_TIE (relative) of the
    k-th largest available float64 score. Returns the number of such rounds."""
    events = 0
    for t in np.flatnonzero((ours != theirs).any(axis=1)):
        k = min(m, int(available[t].sum()))
        ranked = np.sort(scores[t][available[t]])[::-1]
        boundary = ranked[k - 1]
        differ = ours[t] ^ theirs[t]
        gap = np.abs(scores[t][differ] - boundary)
        close = (scores[t][differ] == boundary) | (gap <= NEAR_TIE * max(1.0, abs(boundary)))
        assert np.all(close), (t, scores[t], ours[t], theirs[t])
        events += 1
    return events


# --------------------------------------------------------------------------------------------
# the four policies vs their NumPy loops
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("num_clients", "m"), SHAPES)
def test_ucb_policies_match_numpy_reference(num_clients, m):
    """CS-UCB (after jfl's initial rounds), modified CS-UCB and CS-UCB-Q select exactly what the
    float64 reference selects from the same state, round by round, on 6 instances (availability
    1 … 0.1, continuous and one-decimal rewards, rounds with nobody available), apart from float
    near-ties, which must be fewer than 1% of the rounds. Exact ties (one-decimal rewards,
    never-played clients, CS-UCB-Q's truncated indices) follow the order jfl's run drew."""
    runs = shape_runs(num_clients, m)
    kappa = initial_rounds(num_clients, m)
    events, rounds = 0, 0
    for name in UCB_POLICIES:
        rewards, available, q_hparams, ours, state0 = runs[name]
        check_sizes(ours, available, m)
        for i in range(len(INSTANCES)):
            r, a, played = rewards[i], available[i], ours[i]
            priority = state0.priority[i]
            np.testing.assert_array_equal(np.sort(priority), np.arange(num_clients))
            forced = {"priority": priority, "played": played, "return_scores": True}
            if name == "cs_ucb":
                theirs, scores = cs_ucb_numpy(r, a, m, played[:kappa], **forced)
            elif name == "modified_cs_ucb":
                theirs, scores = modified_cs_ucb_numpy(r, a, m, **forced)
            else:
                c = q_hparams["fairness"][i].astype(float)
                beta = float(q_hparams["beta"][i])
                theirs, scores = cs_ucb_q_numpy(r, a, m, c, beta, **forced)
            events += near_tie_mismatches(played, theirs, scores, a, m)
            rounds += NUM_ROUNDS
    assert events <= 0.01 * rounds, (events, rounds)


@pytest.mark.parametrize(("num_clients", "m"), SHAPES)
def test_round_robin_matches_numpy_reference(num_clients, m):
    """Round-robin equals round_robin_numpy on jfl's cycle order exactly (no floats involved)."""
    _, available, _, ours, state0 = shape_runs(num_clients, m)["round_robin"]
    check_sizes(ours, available, m)
    for i in range(len(INSTANCES)):
        slot = state0.slot[i]
        np.testing.assert_array_equal(np.sort(slot), np.arange(num_clients))
        order = np.argsort(slot)  # order[p] = client at cycle position p
        np.testing.assert_array_equal(ours[i], round_robin_numpy(available[i], m, order))


def test_random_policy_sizes():
    """Random (on the same instances, K = 12, N = 5): never an unavailable client, exactly
    min(N, |A(t)|) selected every round."""
    _, available, _, ours, _ = shape_runs(12, 5)["random"]
    check_sizes(ours, available, 5)
    assert len(np.unique(ours[0], axis=0)) > 100  # the choice does vary


def test_reference_without_teacher_forcing():
    """The reference loops run on their own choices by default: with full availability and
    distinct rewards, modified CS-UCB's first round takes clients 0..N-1 (infinite indices, lower
    index first) and CS-UCB-Q with β = 1, c = 0 keeps ranking by index (all queues 0); given a
    ``priority``, the same ties go to the lower priority instead."""
    rng = np.random.default_rng(5)
    r = rng.random((30, 6))
    a = np.ones((30, 6), bool)
    selected = modified_cs_ucb_numpy(r, a, 2)
    np.testing.assert_array_equal(np.flatnonzero(selected[0]), [0, 1])
    np.testing.assert_array_equal(np.flatnonzero(selected[1]), [2, 3])
    np.testing.assert_array_equal(selected.sum(axis=1), 2)
    q = cs_ucb_q_numpy(r, a, 2, 0.0, 1.0)
    np.testing.assert_array_equal(
        q, np.broadcast_to([True, True, False, False, False, False], q.shape)
    )
    priority = np.array([3, 5, 0, 4, 1, 2])  # clients by priority: 2, 4, 5, 0, 3, 1
    selected = modified_cs_ucb_numpy(r, a, 2, priority=priority)
    np.testing.assert_array_equal(np.flatnonzero(selected[0]), [2, 4])
    np.testing.assert_array_equal(np.flatnonzero(selected[1]), [0, 5])
    q = cs_ucb_q_numpy(r, a, 2, 0.0, 1.0, priority=priority)
    np.testing.assert_array_equal(
        q, np.broadcast_to([False, False, True, False, True, False], q.shape)
    )


def test_wireless_numpy_loop_is_consistent():
    """wireless_numpy_loop (fairness setting, 600 rounds): its selections are cs_ucb_q_numpy's on
    its own rewards and availability; set reward, round time, failures and queues follow from
    them (ties by the loop's own random order); availability frequency within 5 binomial SE of
    α; drawn distances lie in [10, 500]."""
    c, beta, alpha, tau_max = (0.6, 0.5, 0.4), 0.1, 0.9, 0.2
    trace = wireless_numpy_loop(3, 600, 3, 2, beta, c, alpha, tau_max, distance=300.0)
    np.testing.assert_array_equal(np.sort(trace.priority), np.arange(3))
    np.testing.assert_array_equal(
        trace.selected,
        cs_ucb_q_numpy(trace.reward, trace.available, 2, c, beta, priority=trace.priority),
    )
    check_sizes(trace.selected, trace.available, 2)
    b = trace.selected
    np.testing.assert_array_equal(
        trace.set_reward, np.where(b.any(1), np.where(b, trace.reward, np.inf).min(1), 0.0)
    )
    time = (1.0 - trace.reward) * tau_max
    np.testing.assert_allclose(trace.round_time, np.where(b, time, 0.0).max(1), atol=1e-12)
    np.testing.assert_array_equal(trace.num_failed, (b & (trace.reward == 0.0)).sum(1))
    queue = np.zeros(3)
    for t in range(600):
        queue = np.maximum(queue + np.asarray(c) - b[t], 0.0)
        np.testing.assert_allclose(trace.queue[t], queue, atol=1e-12)
    n = trace.available.size
    assert abs(trace.available.mean() - alpha) <= 5 * math.sqrt(alpha * (1 - alpha) / n)
    np.testing.assert_array_equal(trace.distance, 300.0)
    assert np.all(trace.reward >= 0) and np.all(trace.reward < 1)

    drawn = wireless_numpy_loop(4, 5, 50, 5, 0.1, 0.05, 1.0, 5.0)
    assert drawn.distance.min() >= 10.0 and drawn.distance.max() <= 500.0
    assert drawn.selected.sum() == 25
    # the same environment as client_times_numpy on the loop's own draws
    rng = np.random.default_rng(4)
    distance = np.sqrt(100.0 + (500.0**2 - 100.0) * rng.random(50))
    np.testing.assert_array_equal(drawn.priority, rng.permutation(50))  # drawn before the rounds
    draws = rng.random((4, 50))
    low, high = paper_speed_bounds(50)
    first, _ = client_times_numpy(draws[:3], distance, low, high, tau_max=5.0)
    np.testing.assert_allclose(drawn.distance, distance, rtol=1e-15)
    np.testing.assert_allclose(drawn.reward[0], 1.0 - first / 5.0, rtol=1e-15)


# --------------------------------------------------------------------------------------------
# CS-UCB initial rounds, and the first rounds' ties
# --------------------------------------------------------------------------------------------

FIRST_K, FIRST_N, FIRST_SEEDS = 7, 3, 4000


@functools.cache
def first_rounds():
    """The first κ = ⌈K/N⌉ = 3 rounds of each UCB policy (K = 7, N = 3, everyone available,
    every reward 0.5; CS-UCB-Q with β = 1e-5 and c = 0) over 4000 seeds, under one jit:
    ``{name: bool[S, κ, K]}``. Every client is alike, so a selection that favours none selects
    each client in each round w.p. N/K; in these rounds modified CS-UCB's and CS-UCB-Q's scores
    tie (infinite or equal indices, CS-UCB-Q's truncated ŷ all 1 and its queues all 0)."""
    kappa = initial_rounds(FIRST_K, FIRST_N)
    obs = Observation(available=jnp.ones(FIRST_K, bool))
    reward = jnp.full(FIRST_K, 0.5, jnp.float32)
    hparams = {name: {} for name in UCB_POLICIES}
    hparams["cs_ucb_q"] = {"beta": jnp.float32(1e-5), "fairness": jnp.float32(0.0)}

    def first(name, key):
        policy = jfl.policies.get(name).build(FIRST_K, FIRST_N)
        state = policy.init(key, hparams[name])
        actions = []
        for _ in range(kappa):
            action = policy.select(key, state, obs, hparams[name])
            feedback = Feedback(reward * action, reward * action, 0.0, 0.0, 0)
            state = policy.update(state, obs, action, feedback, hparams[name])
            actions.append(action)
        return jnp.stack(actions)

    @jax.jit
    def run(keys):
        return {name: jax.vmap(functools.partial(first, name))(keys) for name in UCB_POLICIES}

    keys = jax.random.split(jax.random.key(3), FIRST_SEEDS)
    return {name: np.asarray(sel) for name, sel in run(keys).items()}


def test_cs_ucb_initial_rounds():
    """CS-UCB's κ = ⌈K/N⌉ initial rounds (K = 7, N = 3, everyone available): exactly N per round,
    every client played by round κ, the κN − K fill clients of the last round were played before;
    over 4000 seeds each client is in the first group w.p. N/K and each earlier-played client is
    a fill client equally often (binomial counts within 5 standard errors)."""
    num_clients, m, num_seeds = FIRST_K, FIRST_N, FIRST_SEEDS
    kappa = initial_rounds(num_clients, m)
    assert kappa == 3
    num_fill = kappa * m - num_clients
    sel = first_rounds()["cs_ucb"]  # [S, κ, K]
    np.testing.assert_array_equal(sel.sum(axis=2), m)
    assert np.all(sel.any(axis=1)), "a client was not played in the initial rounds"
    before_last = sel[:, :-1].any(axis=1)
    np.testing.assert_array_equal(sel[:, :-1].sum(axis=1).max(axis=1), 1)  # no repeats before
    fill = sel[:, -1] & before_last
    np.testing.assert_array_equal(fill.sum(axis=1), num_fill)
    np.testing.assert_array_equal(sel[:, -1] | before_last, True)

    p_first = m / num_clients
    first = sel[:, 0].sum(axis=0)
    se = math.sqrt(num_seeds * p_first * (1 - p_first))
    assert np.all(np.abs(first - num_seeds * p_first) <= 5 * se), first
    # Given the first κ−1 groups, the fill clients are a uniform pick among the (κ−1)N played.
    p_fill = num_fill / ((kappa - 1) * m)
    fill_count = fill.sum(axis=0)
    exposure = before_last.sum(axis=0)  # seeds in which the client was eligible
    se = np.sqrt(exposure * p_fill * (1 - p_fill))
    assert np.all(np.abs(fill_count - exposure * p_fill) <= 5 * se), (fill_count, exposure)


@pytest.mark.parametrize("name", ["modified_cs_ucb", "cs_ucb_q"])
def test_first_round_ties_favour_no_client(name):
    """Where every score ties (modified CS-UCB's never-played clients, CS-UCB-Q's truncated
    indices all 1 with equal queues), the run's random order decides, not the client index: over
    4000 seeds each client is selected in each of the first 3 rounds w.p. N/K = 3/7 (binomial
    counts within 5 standard errors, ±0.04 in frequency), where ties by index would take
    clients 0–2 every time. CS-UCB-Q, its scores still all equal, repeats round 1's clients."""
    sel = first_rounds()[name]  # [S, 3, K]
    np.testing.assert_array_equal(sel.sum(axis=2), FIRST_N)
    p = FIRST_N / FIRST_K
    count = sel.sum(axis=0)  # [round, client]
    se = math.sqrt(FIRST_SEEDS * p * (1 - p))
    assert np.all(np.abs(count - FIRST_SEEDS * p) <= 5 * se), count
    if name == "cs_ucb_q":
        np.testing.assert_array_equal(sel[:, 1:], sel[:, :1].repeat(2, axis=1))
    else:  # never-played clients first: rounds 1 and 2 are disjoint
        assert not np.any(sel[:, 0] & sel[:, 1])


# --------------------------------------------------------------------------------------------
# inside the runner
# --------------------------------------------------------------------------------------------


class CountingEnv(WirelessEnv):
    """WirelessEnv whose ``num_failed`` metric reports |A(t)| instead (test-only), so that the
    runner's outputs show how many clients each round had available."""

    def step(self, key, state, action, params):
        obs, next_state, feedback = super().step(key, state, action, params)
        return (
            obs,
            next_state,
            feedback._replace(num_failed=jnp.sum(state.available, dtype=jnp.int32)),
        )


RUNNER_K, RUNNER_N, RUNNER_T = 6, 2, 99  # T a multiple of K/N
RUNNER_ALPHA = [1.0, 0.6, 0.2]


@functools.cache
def batched_run(name, env_cls=CountingEnv, num_clients=RUNNER_K, m=RUNNER_N):
    params = make_params(num_clients, tau_max=0.2)
    policy = jfl.policies.get(name).build(num_clients, m)
    # CS-UCB-Q's own queue: the fairness queue at its c.
    queue = (fairness_queue("fairness"),) if name == "cs_ucb_q" else ()
    run = make_run(
        env_cls(),
        params,
        policy,
        RUNNER_T,
        trajectories=True,
        env_hparams=("availability",),
        trackers=queue,
    )
    return make_batched_run(run)


def runner_hparams(name, alphas):
    spec = jfl.policies.get(name)
    hparams = {k: jnp.full(len(alphas), v, jnp.float32) for k, v in spec.defaults().items()}
    if name == "cs_ucb_q":
        hparams["fairness"] = jnp.full(len(alphas), 0.2, jnp.float32)
    hparams["availability"] = jnp.asarray(alphas, jnp.float32)
    return hparams


RUNNER_POLICIES = ("cs_ucb", "modified_cs_ucb", "cs_ucb_q", "round_robin", "random")


@functools.cache
def runner_outputs():
    """Each policy's batched run over RUNNER_ALPHA (3 seeds): CS-UCB-Q by its own compiled
    program (which the batch-invariance test calls again), the others under one jit."""
    keys = seed_keys(0, range(3))
    hparams = {name: runner_hparams(name, RUNNER_ALPHA) for name in RUNNER_POLICIES}
    others = [name for name in RUNNER_POLICIES if name != "cs_ucb_q"]
    runs = {name: batched_run(name) for name in others}
    out = jax.jit(
        lambda hparams: {
            name: runs[name](keys, hparams[name], len(RUNNER_ALPHA)) for name in others
        }
    )({name: hparams[name] for name in others})
    out["cs_ucb_q"] = batched_run("cs_ucb_q")(keys, hparams["cs_ucb_q"])
    return out


@pytest.mark.parametrize("name", RUNNER_POLICIES)
def test_runner_selects_min_n_available(name):
    """In the real runner (WirelessEnv, availability traced per configuration) every round selects
    exactly min(N, |A(t)|) clients, N when availability = 1; trajectories agree with the totals."""
    out = runner_outputs()[name]
    num_selected = np.asarray(out.num_selected)
    num_available = np.asarray(out.num_failed)  # CountingEnv: |A(t)|
    np.testing.assert_array_equal(num_selected, np.minimum(RUNNER_N, num_available))
    np.testing.assert_array_equal(num_selected[0], RUNNER_N)
    assert num_available[2].min() < RUNNER_N  # the low availability does bite
    selected = np.asarray(out.selected)
    np.testing.assert_array_equal(selected.sum(axis=-1), num_selected)
    np.testing.assert_array_equal(selected.sum(axis=-2), np.asarray(out.selection_count))
    if name == "round_robin":  # availability 1 and N | K: every client exactly T·N/K times
        np.testing.assert_array_equal(
            np.asarray(out.selection_count)[0], RUNNER_T * RUNNER_N // RUNNER_K
        )
        period = RUNNER_K // RUNNER_N  # fixed groups, served in turn, partitioning the clients
        np.testing.assert_array_equal(selected[0, :, period:], selected[0, :, :-period])
        np.testing.assert_array_equal(selected[0, :, :period].sum(axis=1), 1)


def test_cs_ucb_q_batch_invariance():
    """A CS-UCB-Q configuration gives bit-identical runner outputs alone and inside a batch of
    other β / c / availability configurations (every output field, 3 seeds)."""
    run = batched_run("cs_ucb_q")
    keys = seed_keys(2, range(3))
    batch = {
        "beta": np.array([1e-5, 0.1, 0.5], np.float32),
        "fairness": np.array([0.3, 0.2, 0.45], np.float32),
        "availability": np.array([0.9, 0.8, 0.5], np.float32),
    }
    alone = {name: value[1:2] for name, value in batch.items()}
    out_batch = run(keys, batch)
    out_alone = run(keys, alone)
    assert out_alone.final_queue is not None
    for field, value in out_alone.arrays().items():
        if value is not None:
            np.testing.assert_array_equal(
                np.asarray(getattr(out_batch, field))[1], np.asarray(value)[0], err_msg=field
            )
