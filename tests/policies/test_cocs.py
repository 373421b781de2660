"""COCS, CUCB and LinUCB against the NumPy loops of ``jfl.reference.numpy_cocs``; invariants of
the five COCS-family policies; the hypercube index and K(t); batch invariance in the runner.

The jfl policies run (float32) under one jitted ``lax.scan`` of select/update per shape, vmapped
over random instances. An instance is T rounds of contexts, coverage (with gaps), costs, budgets
(tight, loose, per ES, exactly fillable) and the outcome X of every pair; the feedback of round t
is ``success = action & X[t]``. The reference (float64) recomputes every round's selection from
the state that jfl's own selections produced (teacher forcing, ``played=``), so that a float
near-tie, where the two precisions may order pairs differently, cannot make the trajectories
drift apart. A differing round must be explained by a near-tie of the reference's greedy
problem and such rounds must be rare.
"""

from __future__ import annotations

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfl.envs import HflEnv
from jfl.envs.hfl import Feedback, make_params
from jfl.kernels import budgeted_assignment, ridge_estimate, ucb_bonus
from jfl.policies import get
from jfl.policies.cocs import (
    cocs,
    cucb_pairs,
    exploration_threshold,
    hypercube_index,
    linucb_pairs,
    oracle_state,
    random_budget,
)
from jfl.reference.milp_assignment import BUDGET_RTOL, _pairwise_sum, greedy_numpy
from jfl.reference.numpy_cocs import (
    cocs_numpy,
    cocs_numpy_loop,
    cucb_numpy,
    exploration_threshold_numpy,
    greedy_assignment_numpy,
    hypercube_index_numpy,
    linucb_numpy,
)
from jfl.runner import make_batched_run, make_run, seed_keys
from tests.policies.cocs_inputs import observation

NUM_ROUNDS = 100
SHAPES = [(4, 1, 2), (7, 3, 2), (7, 2, 4)]  # (N clients, M edge servers, context dimension D)
MAX_CUBES = 5  # the policies' static max_cubes_per_dim here (h_T ≤ 5)
# Per instance: P(pair covered), budget kind, costs on a 1/8 grid (exact sums in float32).
INSTANCES = [
    (1.0, "tight", False),
    (0.8, "loose", False),
    (0.6, "per_server", True),
    (1.0, "exact", True),
    (0.9, "tight", True),
    (0.4, "medium", False),
]
COCS_CONFIGS = [(1, 0.1), (2, 0.4), (5, 0.1), (1, 0.4), (2, 0.1), (5, 0.4)]  # (h_T, z)
LINUCB_CONFIGS = [(0.5, 1.0), (1.0, 0.5), (2.0, 2.0), (0.25, 1.0), (1.0, 4.0), (0.1, 1.0)]  # α, λ
NEAR_TIE = 1e-6  # relative gap between float64 densities that float32 may order differently
# A budget comparison c ≤ left is a near-tie when |left − c| is below this fraction of the ES's
# budget: float32 holds the capacity B(1 + 1e-6) and the running spend to a few 1e-8·B each.
BUDGET_NEAR_TIE = 5e-7
GRID = np.array([0.0, 0.2, 0.4, 0.5, 0.6, 0.8, 1.0], np.float32)  # cell boundaries for h_T ≤ 5


# --------------------------------------------------------------------------------------------
# instances and drivers
# --------------------------------------------------------------------------------------------


def make_instances(rng, num_clients, num_servers, dim, num_rounds=NUM_ROUNDS):
    """Stacked random instances [I, T, ...] per INSTANCES, all values float32-representable."""
    shape = (num_rounds, num_clients, num_servers)
    out = {k: [] for k in ("available", "context", "cost", "budget", "success", "success_prob")}
    for p_cover, budget_kind, grid_costs in INSTANCES:
        available = rng.random(shape) < p_cover
        available[5::17, 0] = False  # a client out of every ES's coverage
        available[7::29] = False  # nobody covered
        context = rng.random((*shape, dim)).astype(np.float32)
        on_grid = rng.random(context.shape) < 0.25  # exactly on cell boundaries, at 0 and 1
        context = np.where(on_grid, rng.choice(GRID, context.shape), context)
        context = np.where(available[..., None], context, np.float32(0))  # as the environment
        cost = rng.uniform(0.5, 2.0, shape[:2]) * rng.uniform(2.0, 4.0, shape[:2])
        if grid_costs:
            cost = np.round(cost * 8) / 8
        budget = {
            "tight": np.full(num_servers, 3.5),
            "loose": np.full(num_servers, 100.0),
            "medium": np.full(num_servers, 8.0),
            "exact": np.full(num_servers, 4.0),  # e.g. 1.5 + 2.5: exactly spent
            "per_server": np.array([2.5, 6.0, 4.0])[:num_servers],
        }[budget_kind]
        prob = 0.1 + 0.8 * context[..., 0] * (0.5 + 0.5 * context[..., 1])
        prob = np.where(available, prob, 0.0)
        out["available"].append(available)
        out["context"].append(context)
        out["cost"].append(cost.astype(np.float32))
        out["budget"].append(np.broadcast_to(budget, (num_rounds, num_servers)).astype(np.float32))
        out["success"].append(rng.random(shape) < prob)
        out["success_prob"].append(prob.astype(np.float32))
    return {k: np.stack(v) for k, v in out.items()}


POLICIES = ("cocs", "cucb_pairs", "linucb_pairs", "oracle_state", "random_budget")


def build(name, num_clients, num_servers, dim):
    if name == "cocs":
        return cocs(num_clients, num_servers, context_dim=dim, max_cubes_per_dim=MAX_CUBES)
    if name == "linucb_pairs":
        return linucb_pairs(num_clients, num_servers, context_dim=dim)
    builders = {
        "cucb_pairs": cucb_pairs,
        "oracle_state": oracle_state,
        "random_budget": random_budget,
    }
    return builders[name](num_clients, num_servers)


def implied_weights(name, num_clients, num_servers, dim):
    """``(weight, under_explored)`` f[N, M], bool[N, M] that jfl's state implies for the round
    (COCS: p̂ of each pair's cube and C ≤ K(t); CUCB, LinUCB: the index), recomputed with jfl's
    own functions: the float32 side of the near-tie analysis."""
    shape = (num_clients, num_servers)

    def weights(state, obs, hparams):
        nobody = jnp.zeros(shape, bool)
        if name == "cocs":
            cube = hypercube_index(obs.context, hparams["h_T"])[..., None]
            count = jnp.take_along_axis(state.count, cube, axis=-1)[..., 0]
            estimate = jnp.take_along_axis(state.estimate, cube, axis=-1)[..., 0]
            threshold = exploration_threshold(state.t + 1, hparams["z"])
            return estimate, obs.available & (count <= threshold)
        if name == "cucb_pairs":
            bonus = ucb_bonus(state.stats.count, state.t + 1, 1.5)
            return jnp.minimum(state.stats.mean + bonus, 1.0).reshape(shape), nobody
        if name == "linucb_pairs":
            ones = jnp.ones((*shape, 1), obs.context.dtype)
            features = jnp.concatenate([ones, obs.context], axis=-1).reshape(-1, dim + 1)
            estimate = ridge_estimate(state.ridge, features)
            index = estimate.mean + hparams["alpha"] * estimate.width
            return jnp.clip(index, 0.0, 1.0).reshape(shape), nobody
        return jnp.zeros(shape, jnp.float32), nobody

    return weights


def rollout(name, num_clients, num_servers, dim):
    """A whole run of policy ``name`` on given inputs (one instance): the actions bool[T, N, M],
    the final policy state and the per-round ``implied_weights``."""
    policy = build(name, num_clients, num_servers, dim)
    weights = implied_weights(name, num_clients, num_servers, dim)

    def one(key, inputs, hparams):
        k_init, k_rounds = jax.random.split(key)
        state0 = policy.init(k_init, hparams)
        zeros = jnp.zeros(num_clients, jnp.float32)

        def body(state, xs):
            key_t, x = xs
            obs = observation(x)
            action = policy.select(key_t, state, obs, hparams)
            tiebreak = jax.random.uniform(key_t, obs.available.shape, obs.cost.dtype)
            feedback = Feedback(
                success=action & x["success"],
                time=zeros,
                round_time=jnp.float32(0),
                utility=jnp.float32(0),
                num_success=jnp.int32(0),
            )
            weight, under = weights(state, obs, hparams)
            next_state = policy.update(state, obs, action, feedback, hparams)
            return next_state, (action, weight, under, tiebreak)

        keys = jax.random.split(k_rounds, inputs["available"].shape[0])
        final, (actions, weight, under, tiebreak) = jax.lax.scan(body, state0, (keys, inputs))
        return actions, final, weight, under, tiebreak

    return one


LEARNERS = ("cocs", "cucb_pairs", "linucb_pairs")  # compared with the NumPy loops


@functools.cache
def rollout_fn(num_clients, num_servers, dim, policies):
    """One jit, per shape, of the runs of ``policies`` vmapped over instances (one compilation
    per shape keeps the test fast); with ``oracle_state`` also the kernel's own assignment on
    ``success_prob`` every round, with the policy's tie-break. ``hparams`` maps policy names to
    batched hyperparameters."""
    runs = {name: jax.vmap(rollout(name, num_clients, num_servers, dim)) for name in policies}
    direct = jax.vmap(jax.vmap(lambda *a: budgeted_assignment(*a).mask))

    def all_policies(keys, inputs, hparams):
        out = {name: run(keys, inputs, hparams[name]) for name, run in runs.items()}
        if "oracle_state" not in policies:
            return out, None
        fields = ("success_prob", "cost", "available", "budget")
        return out, direct(*(inputs[f] for f in fields), out["oracle_state"][4])

    return jax.jit(all_policies)


def run_jfl(inputs, hparams, policies=LEARNERS, seed=0):
    """``policies`` on ``inputs``: ``({name: (actions, final state, weights, under_explored,
    tie-breaks)}, the kernel's masks on success_prob)``, with a leading instance axis."""
    keys = jax.random.split(jax.random.key(seed), inputs["available"].shape[0])
    hparams = {name: hparams.get(name, {}) for name in policies}
    out, direct = rollout_fn(*shape_of(inputs), policies)(
        keys, {k: jnp.asarray(v) for k, v in inputs.items()}, hparams
    )
    return jax.tree.map(np.asarray, out), None if direct is None else np.asarray(direct)


def shape_of(inputs):
    _, _, num_clients, num_servers, dim = inputs["context"].shape
    return num_clients, num_servers, dim


def instance(inputs, i):
    """Instance i as float64 reference inputs (the float32 values, exactly)."""
    return (
        inputs["context"][i].astype(np.float64),
        inputs["available"][i],
        inputs["cost"][i].astype(np.float64),
        inputs["budget"][i].astype(np.float64),
        inputs["success"][i],
    )


def check_feasible(actions, inputs):
    """Every round of every instance: only covered pairs, at most one ES per client, every ES
    within B_m(1 + 1e-6) (plus float32 rounding of the running spend: an ulp of B per client)."""
    assert not np.any(actions & ~inputs["available"]), "selected a pair out of coverage"
    assert actions.sum(axis=-1).max() <= 1, "a client on two edge servers"
    cost = inputs["cost"].astype(np.float64)
    budget = inputs["budget"].astype(np.float64)
    spent = np.einsum("itnm,itn->itm", actions, cost)
    num_clients = actions.shape[-2]
    bound = budget * (1 + BUDGET_RTOL) + (num_clients + 1) * np.finfo(np.float32).eps * budget
    assert np.all(spent <= bound), float((spent - budget * (1 + BUDGET_RTOL)).max())


# --------------------------------------------------------------------------------------------
# near-tie explanations
# --------------------------------------------------------------------------------------------


def _before(d, tiebreak, p, q):
    """Pair p precedes pair q in the greedy's order (density descending, ties to the lower
    tie-break, then to the lower row-major index)."""
    return (-d[p], tiebreak[p], p) < (-d[q], tiebreak[q], q)


def greedy_near_tie(w64, w32, cost, eligible, budget, ours, theirs, tiebreak, scale=None):
    """Whether the reference's greedy problem has a near-tie that explains why jfl's solution
    ``ours`` differs from the reference's ``theirs``.

    ``w64``: the reference's weights; ``w32``: the weights jfl's state implies (float32); ``cost``
    and ``budget`` the float32 values (in float64). Explanations: (a) two competing pairs (same
    client or same ES), one of them chosen by one solution only, whose float64 densities are
    within NEAR_TIE (relative) and which the two precisions order differently (an exact tie in
    both is broken alike, by ``tiebreak`` f[N, M], the round's draw, then by index);
    (b) a budget comparison of the reference's greedy within
    BUDGET_NEAR_TIE of the budget (``scale``, default ``budget``); (c) a comparison of the
    modified-greedy fix (a free client against the ES's total, or two free clients for the
    argmax) within NEAR_TIE, decided differently in float32.
    """
    scale = budget if scale is None else scale
    pos = eligible & (w64 > 0)
    pos32 = eligible & (w32 > 0)
    differ = ours ^ theirs
    if np.any(differ & ~pos & ~pos32):
        return False  # a pair that neither precision may take
    if np.any(differ & (pos != pos32)):
        return bool(np.all(np.abs(w64[differ & (pos != pos32)]) <= NEAR_TIE))
    shape = w64.shape
    d64 = np.where(pos, w64 / cost[:, None], np.nan).reshape(-1)
    d32 = np.where(pos, np.float32(w32) / np.float32(cost)[:, None], np.nan).reshape(-1)
    flat = np.flatnonzero(pos)
    tb = np.asarray(tiebreak).reshape(-1)
    for p, q in itertools.combinations(flat, 2):
        (n1, m1), (n2, m2) = np.unravel_index(p, shape), np.unravel_index(q, shape)
        if (n1 == n2 or m1 == m2) and (differ.flat[p] or differ.flat[q]):
            close = abs(d64[p] - d64[q]) <= NEAR_TIE * max(d64[p], d64[q])
            if close and _before(d64, tb, p, q) != _before(d32, tb, p, q):
                return True
    # (b) the reference's walk
    order = sorted(flat, key=lambda p: (-d64[p], tb[p], p))
    left = budget * (1 + BUDGET_RTOL)
    taken = np.zeros(shape, bool)
    for p in order:
        n, m = np.unravel_index(p, shape)
        if taken[n].any():
            continue
        if abs(left[m] - cost[n]) <= BUDGET_NEAR_TIE * scale[m]:
            return True
        if cost[n] <= left[m]:
            taken[n, m] = True
            left[m] -= cost[n]
    # (c) the fix, ES by ES as the reference does it (a swap frees clients for the next ESs)
    for m in range(shape[1]):
        free = ~taken.any(axis=1)
        total64 = np.sum(np.where(taken[:, m], w64[:, m], 0.0))
        total32 = np.sum(np.where(taken[:, m], w32[:, m], 0.0).astype(np.float32))
        candidates = np.flatnonzero(free & pos[:, m] & (cost <= budget[m] * (1 + BUDGET_RTOL)))
        for n in candidates:
            close = abs(w64[n, m] - total64) <= NEAR_TIE * max(w64[n, m], total64)
            if close and (w64[n, m] > total64) != (np.float32(w32[n, m]) > total32):
                return True
        for n1, n2 in itertools.combinations(candidates, 2):  # the argmax among them
            close = abs(w64[n1, m] - w64[n2, m]) <= NEAR_TIE * max(w64[n1, m], w64[n2, m])
            if close and (w64[n1, m] >= w64[n2, m]) != (w32[n1, m] >= w32[n2, m]):
                return True
        if len(candidates):
            best = candidates[np.argmax(w64[candidates, m])]
            if w64[best, m] > total64:
                taken[:, m] = False
                taken[best, m] = True
    return False


def cocs_near_tie(trace, t, ours, theirs, weight32, available, cost, budget, tiebreak):
    """Round t of COCS: the stage where the selections first differ has a near-tie (the
    under-explored pairs are the same in both, see the test)."""
    under = trace["under_explored"][t]
    if np.any((ours ^ theirs) & under):  # exploration differs: weights 1 in both
        one = under.astype(float)
        return greedy_near_tie(
            one, one, cost, under, budget, ours & under, theirs & under, tiebreak
        )
    explored = available & ~under.any(axis=1, keepdims=True)
    return greedy_near_tie(
        trace["estimate"][t],
        weight32,
        cost,
        explored,
        budget - trace["spent"][t],
        ours & ~under,
        theirs & ~under,
        tiebreak,
        scale=budget,
    )


def count_mismatches(ours, theirs, explain):
    """Rounds where the selections differ; each must satisfy ``explain(t)``."""
    events = 0
    for t in np.flatnonzero((ours != theirs).any(axis=(1, 2))):
        assert explain(t), (t, np.argwhere(ours[t]), np.argwhere(theirs[t]))
        events += 1
    return events


# --------------------------------------------------------------------------------------------
# jfl vs the NumPy loops
# --------------------------------------------------------------------------------------------


def f32(x):
    return float(np.float32(x))


def compare_cocs(inputs, i, h, z, result):
    """COCS instance i against cocs_numpy; returns (mismatched rounds, phase counts)."""
    ours, final, weight32, under32, tiebreak = jax.tree.map(lambda x: x[i], result)
    # Preconditions: float32 and float64 K(t) classify every integer count alike, and the cubes
    # agree (the instances' boundary contexts are float32 values ≥ k/h).
    k32 = np.asarray(exploration_threshold(jnp.arange(1, NUM_ROUNDS + 1), f32(z)))
    k64 = [exploration_threshold_numpy(t, f32(z)) for t in range(1, NUM_ROUNDS + 1)]
    np.testing.assert_array_equal(np.floor(k32), np.floor(k64))
    cube32 = np.asarray(hypercube_index(jnp.asarray(inputs["context"][i]), h))
    np.testing.assert_array_equal(cube32, hypercube_index_numpy(inputs["context"][i], h))

    context, available, cost, budget, success = instance(inputs, i)
    theirs, count, estimate, trace = cocs_numpy(
        context,
        available,
        cost,
        budget,
        success,
        h,
        f32(z),
        MAX_CUBES,
        played=ours,
        tiebreak=tiebreak,
        return_trace=True,
    )
    np.testing.assert_array_equal(final.count, count)
    np.testing.assert_allclose(final.estimate, estimate, rtol=0, atol=1e-5)
    assert final.t == NUM_ROUNDS
    np.testing.assert_array_equal(under32, trace["under_explored"])
    np.testing.assert_allclose(weight32, trace["estimate"], rtol=0, atol=1e-6)

    def explain(t):
        return cocs_near_tie(
            trace, t, ours[t], theirs[t], weight32[t], available[t], cost[t], budget[t],
            tiebreak[t],
        )  # fmt: skip

    under = trace["under_explored"].any(axis=(1, 2))
    stage2 = (theirs & ~trace["under_explored"]).any(axis=(1, 2))
    phases = [np.sum(under & ~stage2), np.sum(under & stage2), np.sum(~under & stage2)]
    return count_mismatches(ours, theirs, explain), np.array(phases)


def compare_index_policy(name, inputs, i, result, reference, weight_atol):
    """Per-pair CUCB or LinUCB instance i against its loop; returns the number of mismatched
    rounds."""
    ours, _, weight32, _, tiebreak = jax.tree.map(lambda x: x[i], result)
    context, available, cost, budget, success = instance(inputs, i)
    theirs, trace = reference(
        context, available, cost, budget, success, played=ours, tiebreak=tiebreak,
        return_trace=True,
    )  # fmt: skip
    w64 = trace["weight"]
    np.testing.assert_allclose(weight32, w64, rtol=0, atol=weight_atol, err_msg=name)

    def explain(t):
        return greedy_near_tie(
            w64[t], weight32[t], cost[t], available[t], budget[t], ours[t], theirs[t], tiebreak[t]
        )

    return count_mismatches(ours, theirs, explain), trace


@pytest.mark.parametrize(("num_clients", "num_servers", "dim"), SHAPES)
def test_policies_match_numpy_reference(num_clients, num_servers, dim):
    """COCS, CUCB and LinUCB match their float64 loops round by round, up to rare near-ties."""
    # 6 instances (coverage gaps, tight/loose/per-ES/exactly fillable budgets, contexts on cell
    # boundaries, h_T ∈ {1, 2, 5}, z ∈ {0.1, 0.4}): the weights agree; differing rounds are
    # float32/float64 near-ties of the reference's greedy, under 0.5% of the rounds; final COCS
    # counters equal, estimates within 1e-5; CUCB/LinUCB statistics agree; COCS meets
    # exploration-only, mixed and exploitation-only rounds.
    rng = np.random.default_rng(100 * num_clients + 10 * num_servers + dim)
    inputs = make_instances(rng, num_clients, num_servers, dim)
    hparams = {
        "cocs": {
            "h_T": np.array([h for h, _ in COCS_CONFIGS], np.float32),
            "z": np.array([z for _, z in COCS_CONFIGS], np.float32),
        },
        "linucb_pairs": {
            "alpha": np.array([a for a, _ in LINUCB_CONFIGS], np.float32),
            "lam": np.array([lam for _, lam in LINUCB_CONFIGS], np.float32),
        },
    }
    out, _ = run_jfl(inputs, hparams)
    for name in LEARNERS:
        check_feasible(out[name][0], inputs)
    exact = INSTANCES.index((1.0, "exact", True))
    spent = np.einsum("tnm,tn->tm", out["cocs"][0][exact], inputs["cost"][exact])
    assert np.any(spent == inputs["budget"][exact])  # some budget is spent exactly
    events, phases = 0, np.zeros(3, int)
    for i, (h, z) in enumerate(COCS_CONFIGS):
        e, p = compare_cocs(inputs, i, h, z, out["cocs"])
        events, phases = events + e, phases + p
    assert np.all(phases > 0), phases

    for i in range(len(INSTANCES)):
        e, trace = compare_index_policy(
            "cucb_pairs", inputs, i, out["cucb_pairs"], cucb_numpy, 1e-6
        )
        events += e
        final = out["cucb_pairs"][1]
        np.testing.assert_array_equal(final.stats.count[i], trace["count"].reshape(-1))
        np.testing.assert_allclose(final.stats.mean[i], trace["mean"].reshape(-1), atol=1e-6)

    d = dim + 1
    for i, (alpha, lam) in enumerate(LINUCB_CONFIGS):
        reference = functools.partial(linucb_numpy, alpha=f32(alpha), lam=f32(lam))
        e, trace = compare_index_policy(
            "linucb_pairs", inputs, i, out["linucb_pairs"], reference, 1e-5
        )
        events += e
        final = out["linucb_pairs"][1].ridge
        np.testing.assert_allclose(final.gram[i], trace["gram"].reshape(-1, d, d), rtol=1e-6)
        np.testing.assert_allclose(final.target[i], trace["target"].reshape(-1, d), rtol=1e-6)
    rounds = 3 * len(INSTANCES) * NUM_ROUNDS
    assert events <= 0.005 * rounds, (events, rounds)


def test_reference_without_teacher_forcing():
    """Without played= the loops follow their own choices; loose budgets explore everyone first."""
    # Feeding a loop its own selections changes nothing; in round 1, C = 0 ≤ K(1) = 0, so COCS
    # with loose budgets explores every client that has a covered pair.
    rng = np.random.default_rng(7)
    inputs = make_instances(rng, 5, 2, 2, num_rounds=40)
    context, available, cost, budget, success = instance(inputs, 1)  # loose budgets
    sel, count, estimate = cocs_numpy(context, available, cost, budget, success, 2, 0.4)
    again, count2, _ = cocs_numpy(context, available, cost, budget, success, 2, 0.4, played=sel)
    np.testing.assert_array_equal(sel, again)
    np.testing.assert_array_equal(count, count2)
    assert count.sum() == sel.sum() and np.all((estimate >= 0) & (estimate <= 1))
    covered = available[0].any(axis=1)
    np.testing.assert_array_equal(sel[0].any(axis=1), covered)
    sel_c = cucb_numpy(context, available, cost, budget, success)
    np.testing.assert_array_equal(sel_c, cucb_numpy(*instance(inputs, 1), played=sel_c))
    sel_l = linucb_numpy(context, available, cost, budget, success, 1.0, 1.0)
    np.testing.assert_array_equal(
        sel_l, linucb_numpy(context, available, cost, budget, success, 1.0, 1.0, played=sel_l)
    )


# --------------------------------------------------------------------------------------------
# invariants of the five policies
# --------------------------------------------------------------------------------------------


@functools.cache
def default_runs():
    """Every policy with its default hyperparameters on the instances of shape SHAPES[1]."""
    inputs = make_instances(np.random.default_rng(11), *SHAPES[1])
    hparams = {
        name: {k: np.full(len(INSTANCES), v, np.float32) for k, v in get(name).defaults().items()}
        for name in POLICIES
    }
    out, _ = run_jfl(inputs, hparams, seed=3)  # the learners' compiled program
    others, direct = run_jfl(inputs, hparams, ("oracle_state", "random_budget"), seed=3)
    return inputs, {**out, **others}, direct


@pytest.mark.parametrize("name", POLICIES)
def test_policy_invariants(name):
    """Covered pairs only, one ES per client, budgets kept; oracle_state = budgeted_assignment
    on success_prob."""
    # Random observations: N = 7, M = 3, 6 instances, 100 rounds, default hyperparameters;
    # budgets with the kernel's 1e-6 relative slack.
    inputs, out, direct = default_runs()
    actions = out[name][0]
    check_feasible(actions, inputs)
    assert actions.any(axis=(2, 3)).mean() > 0.5  # it does select
    if name == "oracle_state":
        np.testing.assert_array_equal(actions, direct)
    if name == "random_budget":
        assert len(np.unique(actions[1].reshape(NUM_ROUNDS, -1), axis=0)) > 50  # it varies


# --------------------------------------------------------------------------------------------
# hypercube index and exploration threshold
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [2, 4])
@pytest.mark.parametrize("h", [1, 3, 5, 10])
def test_hypercube_index(h, dim):
    """hypercube_index = Σ_d min(floor(x_d·h), h − 1)·h^d (float32) at 0, boundaries, 1, random."""
    # Boundaries float32(k/h) and an ulp either side, h static or traced; k/h lies in cell k (1 in
    # cell h − 1). The float64 reference agrees except where a float32 context is less than an
    # ulp·h below a boundary, which float32's x·h rounds up onto it (float32(0.7) for h = 10).
    rng = np.random.default_rng(h * 10 + dim)
    points = np.array([k / h for k in range(h + 1)], np.float32)
    points = np.concatenate(
        [
            points,
            np.nextafter(points, np.float32(0)),
            np.nextafter(points, np.float32(1)),
            rng.random(200).astype(np.float32),
        ]
    )
    points = np.clip(points, 0, 1).astype(np.float32)
    context = rng.choice(points, (2000, dim)).astype(np.float32)
    context[: len(points), 0] = points  # every point in the lowest dimension at least once
    context[: len(points), -1] = points[::-1]

    cell = np.clip(np.floor(context * np.float32(h)), 0, h - 1).astype(np.int64)  # float32
    want = (cell * h ** np.arange(dim)).sum(axis=-1)
    got = np.asarray(hypercube_index(jnp.asarray(context), h))
    traced = np.asarray(jax.jit(hypercube_index)(jnp.asarray(context), jnp.float32(h)))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(traced, want)
    assert got.min() >= 0 and got.max() <= h**dim - 1

    boundary = np.array([k / h for k in range(h + 1)], np.float32)
    single = np.asarray(hypercube_index(jnp.asarray(boundary)[:, None], h))
    np.testing.assert_array_equal(single, np.minimum(np.arange(h + 1), h - 1))
    exact = hypercube_index_numpy(context, h)
    differ = got != exact
    # where they differ, some coordinate sits less than an ulp·h below an integer multiple
    x = context.astype(np.float64) * h
    below = (np.ceil(x) - x > 0) & (np.ceil(x) - x <= h * np.spacing(np.float32(1)))
    assert np.all(below[differ].any(axis=-1))
    if h in (1, 5):  # float32(k/5) ≥ k/5: no such point
        np.testing.assert_array_equal(got, exact)


def test_exploration_threshold():
    """exploration_threshold(t, z) = t^z ln t within 1e-6 relative, 0 at t = 1, increasing."""
    # t = 1..3000, z ∈ {0.1, 0.4, 1}, z static and traced.
    t = np.arange(1, 3001)
    for z in (0.1, 0.4, 1.0):
        got = np.asarray(exploration_threshold(jnp.asarray(t), z))
        traced = np.asarray(jax.jit(exploration_threshold)(jnp.asarray(t), jnp.float32(z)))
        want = np.array([exploration_threshold_numpy(s, f32(z)) for s in t])
        assert got[0] == 0.0 and traced[0] == 0.0 and want[0] == 0.0
        np.testing.assert_allclose(got, want, rtol=1e-6)
        np.testing.assert_allclose(traced, want, rtol=1e-6)
        assert np.all(np.diff(want) > 0)
    assert math.isclose(exploration_threshold_numpy(100, 0.4), 100**0.4 * math.log(100))


# --------------------------------------------------------------------------------------------
# the reference's own solver and simulation
# --------------------------------------------------------------------------------------------


def _greedy_by_tuple_sort(weight, cost, available, budget):
    """P2's greedy with the pair order of a sort of (−density, n, m) tuples, in float64."""
    eligible = available & (weight > 0) & (cost[:, None] >= 0)
    capacity = budget * (1 + BUDGET_RTOL)
    with np.errstate(divide="ignore"):
        density = np.minimum(weight / cost[:, None], np.finfo(np.float64).max)
    pairs = sorted((-density[n, m], n, m) for n, m in zip(*np.nonzero(eligible), strict=True))
    mask, left = np.zeros(weight.shape, bool), capacity.copy()
    for _, n, m in pairs:
        if not mask[n].any() and cost[n] <= left[m]:
            mask[n, m], left[m] = True, left[m] - cost[n]
    for m in range(weight.shape[1]):
        free = ~mask.any(axis=1)
        candidate = np.where(free & eligible[:, m] & (cost <= capacity[m]), weight[:, m], -np.inf)
        best = int(np.argmax(candidate))
        if candidate[best] > _pairwise_sum(np.where(mask[:, m], weight[:, m], 0.0)):
            mask[:, m] = False
            mask[best, m] = True
    return mask


def test_greedy_numpy_pair_order_and_alias():
    """greedy_numpy takes pairs by density, ties to the lower client then ES (as a sort of
    tuples would), and greedy_assignment_numpy, its old name in numpy_cocs, is its float64 mask."""
    # 2000 random float64 instances: 0/1 and one-decimal weights, quarter-grid costs.
    rng = np.random.default_rng(21)
    for i in range(2000):
        n, m = int(rng.integers(1, 9)), int(rng.integers(1, 4))
        weight = rng.random((n, m))
        if i % 3 == 0:
            weight = np.round(weight, 1)
        if i % 5 == 0:
            weight = (weight > 0.5).astype(float)
        cost = rng.uniform(0.5, 4.0, n)
        if i % 2:
            cost = np.round(cost * 4) / 4
        available = rng.random((n, m)) < 0.8
        budget = rng.uniform(0.5, 8.0, m)
        want, _ = greedy_numpy(weight, cost, available, budget)
        np.testing.assert_array_equal(
            greedy_assignment_numpy(weight, cost, available, budget), want
        )
        np.testing.assert_array_equal(_greedy_by_tuple_sort(weight, cost, available, budget), want)


def test_cocs_numpy_loop_is_consistent():
    """cocs_numpy_loop is cocs_numpy on its own draws, feasible, with utility Σ_selected X / M."""
    # MNIST preset, N = 20, 80 rounds: selections, counters and estimates as cocs_numpy's;
    # contexts in [0, 1] and 0 out of coverage; it selects and succeeds.
    trace = cocs_numpy_loop(5, 80, N=20, M=3, h_T=2, z=0.4)
    budget = np.broadcast_to(trace.budget, (80, 3))
    selected, count, estimate = cocs_numpy(
        trace.context, trace.available, trace.cost, budget, trace.success, 2, 0.4, 2
    )
    np.testing.assert_array_equal(trace.selected, selected)
    np.testing.assert_array_equal(trace.count, count)
    np.testing.assert_allclose(trace.estimate, estimate, rtol=0, atol=1e-15)
    assert trace.context.min() >= 0 and trace.context.max() <= 1
    np.testing.assert_array_equal(trace.context[~trace.available], 0.0)
    check_feasible(
        trace.selected[None],
        {"available": trace.available[None], "cost": trace.cost[None], "budget": budget[None]},
    )
    hits = (trace.selected & trace.success).sum(axis=(1, 2))
    np.testing.assert_array_equal(trace.num_success, hits)
    np.testing.assert_allclose(trace.utility, hits / 3)
    assert trace.selected.sum() > 80 and hits.sum() > 0
    assert np.all(np.isfinite(trace.cost)) and np.all(trace.cost > 0)


# --------------------------------------------------------------------------------------------
# inside the runner
# --------------------------------------------------------------------------------------------


def test_cocs_batch_invariance():
    """A COCS (h_T, z) configuration's runner outputs are bit-identical alone and in a batch."""
    # HflEnv, N = 6, M = 2, 30 rounds, 3 seeds, trajectories; every output field.
    params = make_params(6, 2, p_cover=0.8, budget=(3.5, 5.0))
    run = make_batched_run(make_run(HflEnv(), params, cocs(6, 2), 30, trajectories=True))
    keys = seed_keys(4, range(3))
    batch = {
        "h_T": np.array([5.0, 2.0, 1.0, 10.0], np.float32),
        "z": np.array([0.4, 0.1, 0.25, 1.0], np.float32),
    }
    rate = np.zeros(4, np.float32)
    out_batch = run(keys, batch, rate)
    for c in (1, 3):
        alone = {k: v[c : c + 1] for k, v in batch.items()}
        out_alone = run(keys, alone, rate[:1])
        for field, value in out_alone._asdict().items():
            if value is not None:
                np.testing.assert_array_equal(
                    np.asarray(getattr(out_batch, field))[c], np.asarray(value)[0], err_msg=field
                )
    selected = np.asarray(out_batch.selected)
    assert not np.array_equal(selected[1], selected[2])  # the configurations do differ
