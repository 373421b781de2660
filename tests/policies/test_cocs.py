"""COCS, CUCB and LinUCB against the NumPy loops of ``jfl.reference.numpy_cocs``; invariants of
the five COCS-family policies; the hypercube index and K(t); batch invariance.

The jfl policies run (float32) under one jitted ``lax.scan`` of select/update per shape, vmapped
over random instances. An instance is T rounds of contexts, coverage (with gaps), costs, budgets
(tight, loose, per ES, exactly fillable) and the outcome X of every pair; the feedback of round t
is ``success = action & X[t]``. The reference (float64) recomputes every round's selection from
the state that jfl's own selections produced (teacher forcing, ``played=``), so that a float
near-tie, where the two precisions may order pairs differently, cannot make the trajectories
drift apart. A differing round must be explained by a near-tie of the round's assignment
problem (two solutions the precisions rank differently) and such rounds must be rare.

Compiling a program of the COCS family takes seconds (its assignment kernels), once per distinct
program (function and shapes): hence two shapes, each run in one program of the learners (the
invariants test reuses that of SHAPES[1]). (4, 1, 2) has a single edge server (M = 1) and D = 2;
(7, 3, 4) has several (M = 3: the per-ES budgets 2.5, 6 and 4 all in use), D = 4 (5^4 cubes per
pair at h_T = 5), and N, M and D all different, so that a mixed-up axis fails. Every policy thus
meets M = 1 and M > 1, D = 2 and D > 2 (no code path depends on D beyond its size).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfl.envs.hfl import Feedback
from jfl.kernels import ridge_estimate, ucb_bonus
from jfl.policies import (
    cocs,
    cucb_pairs,
    exploration_threshold,
    get,
    hypercube_index,
    linucb_pairs,
    oracle_state,
    random_budget,
)
from jfl.reference.milp_assignment import BUDGET_RTOL, budgeted_numpy
from jfl.reference.numpy_cocs import (
    cocs_numpy,
    cocs_numpy_loop,
    cucb_numpy,
    exploration_threshold_numpy,
    hypercube_index_numpy,
    linucb_numpy,
)
from tests.policies.cocs_inputs import observation

NUM_ROUNDS = 100
SHAPES = [(4, 1, 2), (7, 3, 4)]  # (N clients, M edge servers, context dimension D)
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
    per shape keeps the test fast). ``hparams`` maps policy names to batched hyperparameters."""
    runs = {name: jax.vmap(rollout(name, num_clients, num_servers, dim)) for name in policies}

    def all_policies(keys, inputs, hparams):
        return {name: run(keys, inputs, hparams[name]) for name, run in runs.items()}

    return jax.jit(all_policies)


def run_jfl(inputs, hparams, policies=LEARNERS, seed=0, keys=None):
    """``policies`` on ``inputs``: ``{name: (actions, final state, weights, under_explored,
    tie-breaks)}``, with a leading instance axis; each instance's key from ``keys``, else split
    from ``seed``."""
    if keys is None:
        keys = jax.random.split(jax.random.key(seed), inputs["available"].shape[0])
    hparams = {name: hparams.get(name, {}) for name in policies}
    out = rollout_fn(*shape_of(inputs), policies)(
        keys, {k: jnp.asarray(v) for k, v in inputs.items()}, hparams
    )
    return jax.tree.map(np.asarray, out)


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


def value_near_tie(w64, w32, cost, eligible, budget, ours, theirs, scale=None):
    """Whether jfl's selection ``ours`` and the reference's ``theirs`` are two solutions of one
    problem that the two precisions may rank differently.

    ``w64``: the reference's weights; ``w32``: the weights jfl's state implies (float32); ``cost``
    and ``budget`` the float32 values (in float64). Both solvers are exact on these small
    instances, so a differing round is explained when (a) the pairs that differ are ones whose
    weight one precision reads as positive and the other as 0, within NEAR_TIE; or (b) one of the
    two selections spends, on some ES, within BUDGET_NEAR_TIE of the budget (``scale``, default
    ``budget``), so that one precision may afford what the other does not; or (c) the two weigh
    the same in float64 up to the precisions' differences: |v64(ours) − v64(theirs)| ≤
    Σ_differing |w64 − w32| + NEAR_TIE·max(v64).
    """
    scale = budget if scale is None else scale
    pos = eligible & (w64 > 0)
    pos32 = eligible & (w32 > 0)
    differ = ours ^ theirs
    if np.any(differ & ~pos & ~pos32):
        return False  # a pair that neither precision may take
    if np.any(differ & (pos != pos32)):
        return bool(np.all(np.abs(w64[differ & (pos != pos32)]) <= NEAR_TIE))
    capacity = budget * (1 + BUDGET_RTOL)
    for mask in (ours, theirs):
        spent = cost @ mask
        if np.any(mask.any(axis=0) & (np.abs(capacity - spent) <= BUDGET_NEAR_TIE * scale)):
            return True
    v_ours, v_theirs = np.sum(w64[ours]), np.sum(w64[theirs])
    slack = np.sum(np.abs(w64 - w32)[differ]) + NEAR_TIE * max(v_ours, v_theirs)
    return bool(abs(v_ours - v_theirs) <= slack)


def cocs_near_tie(trace, t, ours, theirs, weight32, available, cost, budget):
    """Round t of COCS: the stage where the selections first differ has a near-tie (the
    under-explored pairs are the same in both, see the test)."""
    under = trace["under_explored"][t]
    if np.any((ours ^ theirs) & under):  # exploration differs: weights 1 in both
        one = under.astype(float)
        return value_near_tie(one, one, cost, under, budget, ours & under, theirs & under)
    explored = available & ~under.any(axis=1, keepdims=True)
    return value_near_tie(
        trace["estimate"][t],
        weight32,
        cost,
        explored,
        budget - trace["spent"][t],
        ours & ~under,
        theirs & ~under,
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
            trace, t, ours[t], theirs[t], weight32[t], available[t], cost[t], budget[t]
        )

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
        return value_near_tie(
            w64[t], weight32[t], cost[t], available[t], budget[t], ours[t], theirs[t]
        )

    return count_mismatches(ours, theirs, explain), trace


@functools.cache
def reference_runs(num_clients, num_servers, dim):
    """The learners on random instances of one shape, each instance with its own
    hyperparameters and key: ``(inputs, hparams, keys, outputs)`` (``run_jfl``'s)."""
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
    keys = jax.random.split(jax.random.key(0), len(INSTANCES))
    out = run_jfl(inputs, hparams, keys=keys)
    return inputs, hparams, keys, out


@pytest.mark.parametrize(("num_clients", "num_servers", "dim"), SHAPES)
def test_policies_match_numpy_reference(num_clients, num_servers, dim):
    """COCS, CUCB and LinUCB match their float64 loops round by round, up to rare near-ties."""
    # 6 instances (coverage gaps, tight/loose/per-ES/exactly fillable budgets, contexts on cell
    # boundaries, h_T ∈ {1, 2, 5}, z ∈ {0.1, 0.4}): the weights agree; differing rounds are
    # float32/float64 near-ties of the round's assignment problem, under 0.5% of the rounds;
    # final COCS counters equal, estimates within 1e-5; CUCB/LinUCB statistics agree; COCS meets
    # exploration-only, mixed and exploitation-only rounds.
    inputs, _, _, out = reference_runs(num_clients, num_servers, dim)
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
    """Every policy with its default hyperparameters on the instances of shape SHAPES[1] (the
    learners in the program that the reference test compiled for that shape)."""
    inputs = make_instances(np.random.default_rng(11), *SHAPES[1])
    hparams = {
        name: {k: np.full(len(INSTANCES), v, np.float32) for k, v in get(name).defaults().items()}
        for name in POLICIES
    }
    out = run_jfl(inputs, hparams, seed=3)  # the learners' compiled program
    others = run_jfl(inputs, hparams, ("oracle_state", "random_budget"), seed=3)
    return inputs, {**out, **others}


@pytest.mark.parametrize("name", POLICIES)
def test_policy_invariants(name):
    """Covered pairs only, one ES per client, budgets kept; oracle_state = budgeted_assignment
    on success_prob (its NumPy mirror, with the policy's tie-break)."""
    # Random observations: N = 7, M = 3, D = 4, 6 instances, 100 rounds, default hyperparameters;
    # budgets with the kernel's 1e-6 relative slack.
    inputs, out = default_runs()
    actions = out[name][0]
    check_feasible(actions, inputs)
    assert actions.any(axis=(2, 3)).mean() > 0.5  # it does select
    if name == "oracle_state":  # the mirror is exact here (no float near-tie on these rounds)
        fields = ("success_prob", "cost", "available", "budget")
        x = [inputs[f].reshape(-1, *inputs[f].shape[2:]) for f in fields]
        tiebreak = out[name][4].reshape(-1, *actions.shape[2:])
        mirror = [budgeted_numpy(*(a[r] for a in x), tiebreak[r])[0] for r in range(len(tiebreak))]
        np.testing.assert_array_equal(actions.reshape(tiebreak.shape), np.stack(mirror))
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
# batch invariance
# --------------------------------------------------------------------------------------------


def test_an_instance_is_the_same_bits_among_others_and_among_copies_of_itself():
    """COCS, CUCB and LinUCB: an instance (inputs, key and traced hyperparameters) gives the
    same outputs, bit for bit, in the reference test's batch of other instances and in a batch
    of copies of itself (the program the reference test compiled for SHAPES[1]; the runner's
    configuration axis is covered by its own tests and the cocs_hfl experiment's)."""
    inputs, hparams, keys, out = reference_runs(*SHAPES[1])
    for c in (1, 4):
        copies = np.full(len(INSTANCES), c)
        alone = run_jfl(
            {k: v[copies] for k, v in inputs.items()},
            jax.tree.map(lambda v, copies=copies: v[copies], hparams),
            keys=keys[copies],
        )
        for name in LEARNERS:
            pairs = zip(jax.tree.leaves(alone[name]), jax.tree.leaves(out[name]), strict=True)
            for got, want in pairs:
                np.testing.assert_array_equal(got[0], want[c], err_msg=name)
    assert not np.array_equal(out["cocs"][0][1], out["cocs"][0][4])  # the instances do differ
