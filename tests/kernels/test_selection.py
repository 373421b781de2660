"""Selection kernels against the NumPy references of ``jfl.reference``.

``divide_and_conquer`` (both its small-pool and its large-pool code path) and ``topk_mask`` are run
under ``jit(vmap(...))`` on batches of random instances and compared with brute force / a plain
NumPy top-k. Integer-valued inputs create ties in τ̄ and Z and make every objective exact in float32,
so those comparisons are exact; float inputs are compared with a rounding tolerance.
"""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from jfl.kernels import divide_and_conquer, p4_objective, selection, selection_count, topk_mask
from jfl.reference import p4_algorithm1, p4_bruteforce, p4_prefix_heap
from jfl.reference import p4_objective as ref_objective

EPS32 = float(np.finfo(np.float32).eps)
PAD_N = 9  # small instances (1..9 real clients) are padded with unavailable clients to this width
V_CHOICES = (0.0, 0.25, 1.0, 1e6)


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def random_instances(rng, count, width, *, integer, n_real_low=1):
    """``count`` P4 instances of ``width`` clients, float32.

    Each instance has ``n_real`` in [n_real_low, width] real clients; the others are padding that is
    never available (with random, attractive τ̄ and Z, so that selecting one would show).
    Availability probabilities include 0 (nobody available) and 1 (everyone available).
    Integer inputs take values in 0..4 (many ties); float inputs are continuous.
    """
    n_real = rng.integers(n_real_low, width + 1, count)
    p_available = rng.choice([0.0, 0.3, 0.7, 1.0], count)
    available = rng.random((count, width)) < p_available[:, None]
    available &= np.arange(width) < n_real[:, None]
    if integer:
        tau_bar = rng.integers(0, 5, (count, width))
        queue = rng.integers(0, 5, (count, width))
        V = rng.choice(V_CHOICES, count)
    else:
        tau_bar = rng.exponential(3.0, (count, width))
        tau_bar[rng.random((count, width)) < 0.2] = 0.0  # τ̄ is clamped at 0: exact zeros occur
        queue = rng.uniform(0.0, 5.0, (count, width))
        V = np.where(
            rng.random(count) < 0.5, rng.choice(V_CHOICES, count), rng.uniform(0, 20, count)
        )
    f32 = np.float32
    return tau_bar.astype(f32), queue.astype(f32), available, V.astype(f32)


def objective_tolerance(tau_bar, queue, V, m):
    """Bound on how far a float32 P4 solver may land from the optimum through rounding alone.

    The solver compares prefix objectives V·τ̄ − (sum of up to m queues) computed in float32; each
    carries an error of at most a few eps32 times |V·τ̄| + Σ|Z|, and a wrong decision costs at most
    twice that error. 4·eps32·(V·max τ̄ + m·max Z) covers it with room.
    """
    scale = V * np.max(np.abs(tau_bar), axis=-1) + m * np.max(np.abs(queue), axis=-1)
    return 4.0 * EPS32 * scale


def primitive_names(jaxpr) -> set[str]:
    """Names of the primitives in a jaxpr, sub-jaxprs (scan bodies...) included."""
    names = set()
    for eqn in jaxpr.eqns:
        names.add(eqn.primitive.name)
        for value in eqn.params.values():
            for sub in value if isinstance(value, tuple | list) else (value,):
                sub = getattr(sub, "jaxpr", sub)  # ClosedJaxpr -> Jaxpr
                if hasattr(sub, "eqns"):
                    names |= primitive_names(sub)
    return names


def _large_path(tau_bar, queue, available, V, priority=None, *, m):
    """``divide_and_conquer`` forced onto its large-pool (sort + associative scan) path."""
    available = jnp.asarray(available, bool)
    k = selection.selection_count(available, m)
    return selection._dnc_large(
        jnp.asarray(tau_bar), jnp.asarray(queue), available, k, m, V, priority
    )


def _small_path(tau_bar, queue, available, V, priority=None, *, m):
    return divide_and_conquer(tau_bar, queue, available, m, V, priority)


PATHS = {"small": _small_path, "large": _large_path}
# The m of the batched tests at width PAD_N: every m on the small path (the runner's), a spread on
# the large one; the priority test takes a few of them.
PADDED_MS = {"small": tuple(range(1, 11)), "large": (1, 2, 3, 5, 8, 10)}
PRIORITY_MS = (1, 3, 8)


@functools.cache
def batched_solver(path: str, m: int):
    """jit(vmap(solver)) for one static m, compiled once per (path, m) and reused."""
    return jax.jit(jax.vmap(functools.partial(PATHS[path], m=m)))


@functools.cache
def _padded_program(path: str):
    """jit(vmap(...)) of one code path for every m of PADDED_MS without a priority and every m of
    PRIORITY_MS with one: ({m: mask}, {m: mask}).

    Each (path, m) on its own is a compilation of about a second; one program holding them all
    compiles once per path (XLA's fixed cost per program is paid once) and serves every batched
    test at the padded width below.
    """
    solver = PATHS[path]

    def solve(tau_bar, queue, available, V, priority):
        plain = {m: solver(tau_bar, queue, available, V, m=m) for m in PADDED_MS[path]}
        ranked = {m: solver(tau_bar, queue, available, V, priority, m=m) for m in PRIORITY_MS}
        return plain, ranked

    return jax.jit(jax.vmap(solve))


def padded_solve(path, m, tau_bar, queue, available, V, priority=None):
    """divide_and_conquer on one code path, ``[1000, PAD_N]`` instances, with ``priority`` if
    given (else ties by index): the mask for one m, from the path's single program."""
    ranked = priority is not None
    if not ranked:  # the priority input of the program, unused by the masks returned here
        priority = np.broadcast_to(np.arange(PAD_N, dtype=np.int32), tau_bar.shape)
    plain_masks, ranked_masks = _padded_program(path)(tau_bar, queue, available, V, priority)
    return np.asarray((ranked_masks if ranked else plain_masks)[m])


def check_selection(selected, tau_bar, queue, available, V, m, reference, tol=None):
    """Feasibility (k selected, all available) and optimality against ``reference`` per instance.

    ``reference(tau_bar, queue, available, m, V) -> (objective, mask)``; objectives are evaluated in
    float64 on the float32 inputs. ``tol`` None means exact comparison.
    """
    selected = np.asarray(selected)
    k = np.minimum(m, available.sum(axis=1))
    assert not np.any(selected & ~available), "selected an unavailable client"
    np.testing.assert_array_equal(selected.sum(axis=1), k, err_msg="wrong number selected")
    for i in range(selected.shape[0]):
        v = float(V[i])
        best, _ = reference(tau_bar[i], queue[i], available[i], m, v)
        got = ref_objective(selected[i], tau_bar[i], queue[i], v)
        if tol is None:
            assert got == best, (i, got, best, tau_bar[i], queue[i], available[i], v)
        else:
            assert got <= best + tol[i], (i, got, best, tol[i])


# --------------------------------------------------------------------------------------------
# the references themselves
# --------------------------------------------------------------------------------------------


def test_bruteforce_hand_examples():
    """p4_bruteforce on instances solved by hand (including k = 0 and m > #available)."""
    tau, z = [1.0, 2.0, 3.0], [0.0, 5.0, 10.0]
    # m = 1: the objectives are V·τ̄_n − Z_n.
    value, mask = p4_bruteforce(tau, z, [True] * 3, 1, 1.0)
    assert value == -7.0 and mask.tolist() == [False, False, True]
    value, mask = p4_bruteforce(tau, z, [True] * 3, 1, 10.0)
    assert value == 10.0 and mask.tolist() == [True, False, False]
    # Client 2 unavailable: best single client among {0, 1} with V = 1 is client 1 (2 - 5).
    value, mask = p4_bruteforce(tau, z, [True, True, False], 1, 1.0)
    assert value == -3.0 and mask.tolist() == [False, True, False]
    # m = 5 > 2 available: both available clients, objective 2·1 − 5.
    value, mask = p4_bruteforce(tau, z, [True, True, False], 5, 1.0)
    assert value == -3.0 and mask.tolist() == [True, True, False]
    # Nobody available: the empty set, objective 0.
    value, mask = p4_bruteforce(tau, z, [False] * 3, 2, 1.0)
    assert value == 0.0 and not mask.any()
    # Tie rule: all equal, pick the lowest positions (indices).
    value, mask = p4_bruteforce([1.0] * 4, [2.0] * 4, [True] * 4, 2, 1.0)
    assert value == -3.0 and mask.tolist() == [True, True, False, False]


@pytest.mark.parametrize("integer", [True, False])
def test_algorithm1_and_prefix_heap_match_bruteforce(integer):
    """p4_algorithm1 and p4_prefix_heap vs p4_bruteforce: same objective and same set (tie rule)."""
    rng = np.random.default_rng(101 if integer else 102)
    for _ in range(1500):
        n = int(rng.integers(1, 10))
        m = int(rng.integers(1, 11))
        tau, queue, available, V = (a[0] for a in random_instances(rng, 1, n, integer=integer))
        tau, queue, V = tau.astype(float), queue.astype(float), float(V)
        best, best_set = p4_bruteforce(tau, queue, available, m, V)
        for solver in (p4_algorithm1, p4_prefix_heap):
            value, chosen = solver(tau, queue, available, m, V)
            assert value == pytest.approx(best, rel=1e-12, abs=1e-12), solver.__name__
            assert ref_objective(chosen, tau, queue, V) == pytest.approx(value, rel=1e-12)
            assert chosen.sum() == min(m, available.sum()) and not np.any(chosen & ~available)
            if integer:  # exact objectives, so the tie rule decides the set uniquely
                np.testing.assert_array_equal(chosen, best_set, err_msg=solver.__name__)


def test_prefix_heap_matches_algorithm1_on_medium_pools():
    """p4_prefix_heap vs p4_algorithm1 (both exact, O(N log N) vs O(N²)) on 150-client pools."""
    rng = np.random.default_rng(103)
    for integer in (True, False):
        tau, queue, available, V = random_instances(rng, 20, 150, integer=integer, n_real_low=100)
        for i in range(20):
            args = (tau[i].astype(float), queue[i].astype(float), available[i], 8, float(V[i]))
            a_value, a_set = p4_algorithm1(*args)
            h_value, h_set = p4_prefix_heap(*args)
            assert h_value == pytest.approx(a_value, rel=1e-12, abs=1e-12)
            if integer:
                np.testing.assert_array_equal(h_set, a_set)


# --------------------------------------------------------------------------------------------
# divide_and_conquer
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["small", "large"])
def test_divide_and_conquer_integer_instances(path):
    """jit(vmap(divide_and_conquer)) vs p4_bruteforce, exact objectives, 1000 instances per m.

    Instances have 1..9 real clients (padded to 9 with unavailable ones), m = 1..10 (so m often
    exceeds the number available), V in {0, 0.25, 1, 1e6}, τ̄ and Z integers in 0..4 (ties
    everywhere), nobody / everybody available included. Integer inputs keep every float32 objective
    exact (|V·τ̄| ≤ 4e6 < 2^24), so the comparison is exact.
    """
    rng = np.random.default_rng(7 if path == "small" else 8)
    # every m on the small path (the runner's); a spread of m on the large one (compile time)
    for m in PADDED_MS[path]:
        tau, queue, available, V = random_instances(rng, 1000, PAD_N, integer=True)
        selected = padded_solve(path, m, tau, queue, available, V)
        check_selection(selected, tau, queue, available, V, m, p4_bruteforce)


@pytest.mark.parametrize("path", ["small", "large"])
def test_divide_and_conquer_float_instances(path):
    """jit(vmap(divide_and_conquer)) vs p4_bruteforce on continuous inputs, rounding tolerance."""
    rng = np.random.default_rng(9 if path == "small" else 10)
    for m in (1, 3, 8):
        tau, queue, available, V = random_instances(rng, 1000, PAD_N, integer=False)
        selected = padded_solve(path, m, tau, queue, available, V)
        tol = objective_tolerance(tau, queue, V, m)
        check_selection(selected, tau, queue, available, V, m, p4_bruteforce, tol)


@pytest.mark.parametrize("num_clients", [1, 2, 5])
def test_divide_and_conquer_unpadded_small_shapes(num_clients):
    """Both paths on native tiny shapes (N = 1, 2, 5) vs p4_bruteforce (exact, integer inputs)."""
    rng = np.random.default_rng(11 + num_clients)
    m = 2

    def both_paths(*args):  # one compilation per shape for both paths
        return {path: PATHS[path](*args, m=m) for path in ("small", "large")}

    tau, queue, available, V = random_instances(rng, 300, num_clients, integer=True)
    for selected in jax.jit(jax.vmap(both_paths))(tau, queue, available, V).values():
        check_selection(selected, tau, queue, available, V, m, p4_bruteforce)


def test_small_pool_max_dispatch(monkeypatch):
    """SMALL_POOL_MAX selects the code path: 0 forces the sort-based large path for any N."""

    def primitives(n):
        args = (jnp.zeros(n), jnp.zeros(n), jnp.ones(n, bool), 3, 1.0)
        # a fresh wrapper each time: JAX caches traces per function object
        fresh = functools.partial(divide_and_conquer)
        jaxpr = jax.make_jaxpr(fresh, static_argnums=3)(*args).jaxpr
        return primitive_names(jaxpr)

    assert "sort" not in primitives(9)
    monkeypatch.setattr(selection, "SMALL_POOL_MAX", 0)
    assert "sort" in primitives(9)
    # and the forced path still solves P4 exactly
    # 1000 instances of width PAD_N and m = 3: the shapes of the large-path integer test
    rng = np.random.default_rng(13)
    tau, queue, available, V = random_instances(rng, 1000, PAD_N, integer=True)
    fn = jax.jit(jax.vmap(functools.partial(divide_and_conquer, m=3)))
    check_selection(fn(tau, queue, available, V=V), tau, queue, available, V, 3, p4_bruteforce)


@pytest.mark.parametrize("path", ["small", "large"])
def test_divide_and_conquer_runner_size(path):
    """N = 40, m = 8 (the paper's setting) vs p4_prefix_heap, float and integer inputs."""
    rng = np.random.default_rng(14 if path == "small" else 15)
    for integer in (True, False):
        tau, queue, available, V = random_instances(rng, 200, 40, integer=integer, n_real_low=20)
        selected = batched_solver(path, 8)(tau, queue, available, V)
        tol = None if integer else objective_tolerance(tau, queue, V, 8)
        check_selection(selected, tau, queue, available, V, 8, p4_prefix_heap, tol)


@pytest.mark.parametrize("num_clients", [600, 2000])
def test_divide_and_conquer_medium_pools(num_clients):
    """N = 600 and 2000 (above SMALL_POOL_MAX: large path), m = 8, vs p4_prefix_heap."""
    rng = np.random.default_rng(num_clients)
    fn = jax.jit(jax.vmap(functools.partial(divide_and_conquer, m=8)))
    for integer in (True, False):
        tau, queue, available, V = random_instances(
            rng, 6, num_clients, integer=integer, n_real_low=num_clients
        )
        available[0] = False  # nobody available
        available[1] = True  # everybody available
        available[2] = False
        available[2, :5] = True  # fewer available than m
        selected = fn(tau, queue, available, V=V)
        tol = None if integer else objective_tolerance(tau, queue, V, 8)
        check_selection(selected, tau, queue, available, V, 8, p4_prefix_heap, tol)


@pytest.mark.parametrize("path", ["small", "large"])
def test_divide_and_conquer_priority_breaks_ties_like_the_reference(path):
    """With a random tie-breaking order, both paths pick the *same set* as p4_bruteforce and
    p4_algorithm1 fed the same order (integer inputs: exact objectives, ties everywhere), and the
    order matters: with the index order some sets differ."""
    rng = np.random.default_rng(31 if path == "small" else 32)
    differ = 0
    # 1000 instances: the batch of the padded program (no compilation of its own)
    for m in PRIORITY_MS:
        tau, queue, available, V = random_instances(rng, 1000, PAD_N, integer=True)
        priority = np.stack([rng.permutation(PAD_N) for _ in range(1000)]).astype(np.int32)
        got = padded_solve(path, m, tau, queue, available, V, priority)
        by_index = padded_solve(path, m, tau, queue, available, V)
        for i in range(1000):
            args = (tau[i].astype(float), queue[i].astype(float), available[i], m, float(V[i]))
            for reference in (p4_bruteforce, p4_algorithm1, p4_prefix_heap):
                _, want = reference(*args, priority=priority[i])
                np.testing.assert_array_equal(got[i], want, err_msg=(reference.__name__, i))
        differ += int((got != by_index).any(axis=1).sum())
    assert differ >= 10  # the order is not ignored


# --------------------------------------------------------------------------------------------
# divide_and_conquer schedules: the sequential scan and the associative scan
# --------------------------------------------------------------------------------------------
# Each schedule costs its own compilation (about a second here), so the tests below compile each
# program once: the prefix lists for every m in one program, and one program per code path
# returning both schedules' masks. Everything after the prefix lists is shared by the schedules.


def prefix_top_reference(queue, m):
    """[count, N, m]: descending top-m of every prefix of each row, padded with -inf."""
    count, n = queue.shape
    pad = np.full((count, m), -np.inf, queue.dtype)
    lists = [-np.sort(-np.concatenate([queue[:, : i + 1], pad], 1))[:, :m] for i in range(n)]
    return np.stack(lists, axis=1)


def test_prefix_top_lists_identical_across_schedules():
    """Both schedules build the same prefix top-m lists, bit for bit, equal to sorted prefixes.

    m = 1, 3, 5, 8 (3 and 5 are padded to 4 and 8 inside the merge); N = 13 (odd levels in the
    associative scan); integer queues in 0..4 (ties everywhere), some +inf.
    """
    ms, schedules = (1, 3, 5, 8), ("sequential", "parallel")

    def all_lists(queue):
        return {(m, s): selection._prefix_top_lists(queue, m, s) for m in ms for s in schedules}

    rng = np.random.default_rng(50)
    queue = rng.integers(0, 5, (64, 13)).astype(np.float32)
    queue[rng.random(queue.shape) < 0.05] = np.inf
    got = jax.jit(jax.vmap(all_lists))(queue)
    for (m, schedule), lists in got.items():
        want = prefix_top_reference(queue, m).view(np.uint32)
        np.testing.assert_array_equal(np.asarray(lists).view(np.uint32), want, (m, schedule))


@functools.cache
def both_schedules(path: str, m: int):
    """jit(vmap(...)) of divide_and_conquer with a priority on one code path: (sequential mask,
    parallel mask)."""

    def solve(tau_bar, queue, available, V, priority):
        tau_bar, queue = jnp.asarray(tau_bar), jnp.asarray(queue)
        available = jnp.asarray(available, bool)
        k = selection.selection_count(available, m)
        solver = selection._dnc_small if path == "small" else selection._dnc_large
        return tuple(
            solver(tau_bar, queue, available, k, m, V, priority, schedule)
            for schedule in ("sequential", "parallel")
        )

    return jax.jit(jax.vmap(solve))


@pytest.mark.parametrize("path, m", [("small", 5), ("large", 3)])
def test_divide_and_conquer_schedules_identical_and_exact(path, m):
    """Both schedules, the parallel one forced on CPU, with a random priority: the same masks bit
    for bit, on integer inputs the set p4_bruteforce picks with that priority (exact objectives),
    on float inputs an optimum up to rounding. 1000 + 1000 instances of 1..9 clients."""
    rng = np.random.default_rng(60 + m)
    solve = both_schedules(path, m)
    for integer in (True, False):
        tau, queue, available, V = random_instances(rng, 1000, PAD_N, integer=integer)
        priority = np.stack([rng.permutation(PAD_N) for _ in range(1000)]).astype(np.int32)
        sequential, parallel = map(np.asarray, solve(tau, queue, available, V, priority))
        np.testing.assert_array_equal(parallel, sequential)
        if not integer:
            tol = objective_tolerance(tau, queue, V, m)
            check_selection(parallel, tau, queue, available, V, m, p4_bruteforce, tol)
            continue
        for i in range(1000):
            args = (tau[i].astype(float), queue[i].astype(float), available[i], m, float(V[i]))
            _, want = p4_bruteforce(*args, priority=priority[i])
            np.testing.assert_array_equal(parallel[i], want, err_msg=str(i))


def test_parallel_schedule_has_no_sequential_loop(monkeypatch):
    """The parallel schedule has no scan or while loop; auto traces the sequential one alone on a
    CPU host and defers the choice to lowering on an accelerator host, where the CPU still gets
    the sequential schedule's selections."""
    args = (jnp.asarray([3.0, 1.0, 2.0, 0.0]), jnp.asarray([1.0, 4.0, 4.0, 2.0]), jnp.ones(4, bool))

    def primitives(schedule):
        fn = functools.partial(divide_and_conquer, m=3, V=1.0, schedule=schedule)
        return primitive_names(jax.make_jaxpr(fn)(*args).jaxpr)

    assert not primitives("parallel") & {"scan", "while"}
    assert "scan" in primitives("sequential")
    assert primitives("auto") == primitives("sequential")  # the tests run on a CPU host
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert "platform_index" in primitives("auto")
    auto = jax.jit(functools.partial(divide_and_conquer, m=3, V=1.0))(*args)
    # the sequential schedule's mask, jitted too (op by op it would compile each primitive)
    sequential = jax.jit(functools.partial(divide_and_conquer, m=3, V=1.0, schedule="sequential"))
    np.testing.assert_array_equal(auto, sequential(*args))


def test_divide_and_conquer_rejects_bad_schedule():
    """An unknown schedule is refused with a ValueError naming the parameter and the choices."""
    with pytest.raises(ValueError, match=r"schedule must be one of.*sequential.*parallel"):
        divide_and_conquer(jnp.zeros(3), jnp.zeros(3), jnp.ones(3, bool), 2, 1.0, schedule="bogus")


def test_p4_objective_kernel():
    """jfl.kernels.p4_objective vs the NumPy objective (0 for the empty set)."""
    rng = np.random.default_rng(16)
    tau, queue, _, V = random_instances(rng, 200, PAD_N, integer=True)
    masks = rng.random((200, PAD_N)) < 0.4
    got = jax.jit(jax.vmap(p4_objective))(masks, tau, queue, V)
    want = [ref_objective(masks[i], tau[i], queue[i], float(V[i])) for i in range(200)]
    np.testing.assert_array_equal(np.asarray(got, float), want)


def test_divide_and_conquer_rejects_bad_m():
    """m < 1 is refused with a ValueError naming m."""
    with pytest.raises(ValueError, match="m must"):
        divide_and_conquer(jnp.zeros(3), jnp.zeros(3), jnp.ones(3, bool), 0, 1.0)


# --------------------------------------------------------------------------------------------
# topk_mask
# --------------------------------------------------------------------------------------------


def topk_reference(scores, available, k):
    """The k highest scores among available clients; ties to the lower index (stable argsort)."""
    index = np.flatnonzero(available)
    order = index[np.argsort(-scores[index], kind="stable")]
    mask = np.zeros(scores.shape[0], bool)
    mask[order[: max(int(k), 0)]] = True
    return mask


@functools.cache
def batched_topk():
    return jax.jit(jax.vmap(topk_mask))


@pytest.mark.parametrize("force_sort", [False, True])
def test_topk_mask_priority_breaks_ties(monkeypatch, force_sort):
    """With ``priority``, equal scores go to the lower priority (lexsort reference), on both rank
    paths; integer scores in 0..2 tie everywhere."""
    if force_sort:
        monkeypatch.setattr(selection, "SMALL_POOL_MAX", 0)
    rng = np.random.default_rng(40 + force_sort)
    count, n = 200, 12
    scores = rng.integers(0, 3, (count, n)).astype(np.float32)
    available = rng.random((count, n)) < 0.7
    k = rng.integers(0, n + 2, count).astype(np.int32)
    priority = np.stack([rng.permutation(n) for _ in range(count)]).astype(np.int32)
    got = np.asarray(jax.jit(jax.vmap(topk_mask))(scores, available, k, priority))
    for i in range(count):
        index = np.flatnonzero(available[i])
        order = index[np.lexsort((priority[i][index], -scores[i][index]))]
        want = np.zeros(n, bool)
        want[order[: k[i]]] = True
        np.testing.assert_array_equal(got[i], want)


@pytest.mark.parametrize("num_clients", [1, 9, 40, 600])
def test_topk_mask_against_numpy(num_clients):
    """jit(vmap(topk_mask)) with a traced k vs stable-argsort top-k among the available.

    Integer scores in 0..3 give many ties; k ranges over 0..N+2 (k = 0 and k > #available);
    N = 600 exercises the sort-based rank (N > SMALL_POOL_MAX).
    """
    rng = np.random.default_rng(20 + num_clients)
    count = 300
    scores = rng.integers(0, 4, (count, num_clients)).astype(np.float32)
    p_available = rng.choice([0.0, 0.5, 1.0], count)
    available = rng.random((count, num_clients)) < p_available[:, None]
    k = rng.integers(0, num_clients + 3, count).astype(np.int32)
    got = np.asarray(batched_topk()(scores, available, k))
    for i in range(count):
        np.testing.assert_array_equal(got[i], topk_reference(scores[i], available[i], k[i]))
    np.testing.assert_array_equal(got.sum(axis=1), np.minimum(k, available.sum(axis=1)))


@pytest.mark.parametrize("force_sort", [False, True])
def test_topk_mask_signed_zero_ties(monkeypatch, force_sort):
    """0.0 and -0.0 are equal scores: the tie goes to the lower index on both rank paths."""
    if force_sort:
        monkeypatch.setattr(selection, "SMALL_POOL_MAX", 0)
    scores = jnp.asarray([-0.0, 0.0, -0.0, 0.0])
    for k in range(5):
        got = np.asarray(topk_mask(scores, jnp.ones(4, bool), k))
        assert got.tolist() == [i < k for i in range(4)]


def test_topk_mask_exact_count_when_scores_are_fused_arithmetic():
    """A computed score fused into the ranking still selects exactly k (regression: CS-UCB-Q).

    XLA:CPU once evaluated ``(1 - β)·ŷ + β·D`` separately for each side of the pairwise
    comparison; the two differed in the last bit and the best client ranked behind itself.
    """
    from jfl.kernels import ArmStats, ucb_index

    count = jnp.array([13.0, 5.0, 11.0, 6.0, 12.0], jnp.float32)
    mean = jnp.array([0.26055583, 0.45993233, 0.14168535, 0.21171775, 0.75194764], jnp.float32)
    queue = jnp.array([0.19343619, 0.34899053, 0.598904, 0.0, 0.42233258], jnp.float32)
    available = jnp.array([True, True, False, False, True])

    def select(count, mean, queue, available, beta, t):
        score = (1 - beta) * ucb_index(ArmStats(count, mean), t, 2.0, cap=1.0) + beta * queue
        return topk_mask(score, available, 1)

    rng = np.random.default_rng(11)
    betas = jnp.asarray(np.r_[0.1, rng.uniform(0, 1, 63)], jnp.float32)
    batch = len(betas)

    def tile(x):
        return jnp.broadcast_to(x, (batch, *jnp.shape(x)))

    masks = jax.jit(jax.vmap(select))(
        tile(count), tile(mean), tile(queue), tile(available), betas, tile(jnp.int32(52))
    )
    np.testing.assert_array_equal(np.asarray(masks).sum(axis=1), 1)
    assert not np.asarray(masks)[:, ~np.asarray(available)].any()


# --------------------------------------------------------------------------------------------
# unbatched calls with and without jit; the chex asserts at the boundary
# --------------------------------------------------------------------------------------------


class UnbatchedTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_divide_and_conquer_unbatched_matches_vmap(self):
        """An unbatched call returns the same mask as the jitted vmapped batch (per instance)."""
        rng = np.random.default_rng(12)
        # a batch of 1000 reuses the compiled program of the integer-instance test (same shapes)
        tau, queue, available, V = random_instances(rng, 1000, PAD_N, integer=True)
        batched = padded_solve("small", 3, tau, queue, available, V)
        single = self.variant(divide_and_conquer, static_argnums=3)
        # op-by-op execution retraces the scan at every call: a few instances suffice there
        count = 20 if self.variant.type == chex.ChexVariantType.WITH_JIT else 3
        for i in range(count):
            got = single(tau[i], queue[i], available[i], 3, V[i])
            np.testing.assert_array_equal(got, batched[i])

    @chex.variants(with_jit=True, without_jit=True)
    def test_topk_mask_traced_k(self):
        """k passed as a jnp int (traced under jit: one compilation serves every k)."""
        scores = jnp.asarray([3.0, 1.0, 2.0, 2.0, 5.0, -1.0])
        available = jnp.asarray([True, True, True, True, False, True])
        fn = self.variant(topk_mask)
        for k in range(0, 8):
            got = np.asarray(fn(scores, available, jnp.asarray(k)))
            want = topk_reference(np.asarray(scores), np.asarray(available), k)
            np.testing.assert_array_equal(got, want)
        # 0 selects nothing; 2 selects 0 and the lower-index of the tie at 2.0
        assert not np.asarray(fn(scores, available, jnp.asarray(0))).any()
        got = np.asarray(fn(scores, available, jnp.asarray(2)))
        assert got.tolist() == [True, False, True, False, False, False]
        # integer scores (round robin ranks by -distance) are accepted
        int_scores = np.int32([0, 2, 1, 2, 0, 1])
        got = np.asarray(fn(jnp.asarray(int_scores), available, jnp.asarray(3)))
        np.testing.assert_array_equal(got, topk_reference(int_scores, np.asarray(available), 3))

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters("small", "large")
    def test_divide_and_conquer_infinite_V_still_selects_k(self, path):
        """Even for V = +inf (accepted by the rbcsf hyperparameter check) exactly k are selected."""
        solver = PATHS[path]
        fn = self.variant(functools.partial(solver, m=2))
        tau, queue = jnp.asarray([1.0, 2.0, 3.0, 4.0]), jnp.asarray([0.0, 5.0, 1.0, 2.0])
        selected = fn(tau, queue, jnp.ones(4, bool), jnp.inf)
        assert int(np.sum(selected)) == 2

    @chex.variants(with_jit=True, without_jit=True)
    def test_infinite_scores_and_times_keep_their_order(self):
        """±inf scores (an unplayed arm's UCB index) rank first/last; an infinite τ̄ is never
        chosen over finite ones when enough finite clients are available (the largest queue
        notwithstanding). Four clients and m = 2, the shapes of the infinite-V test, whose
        op-by-op compilations the un-jitted variant then reuses."""
        scores = jnp.array([1.0, jnp.inf, -jnp.inf, jnp.inf])
        mask = np.asarray(self.variant(topk_mask)(scores, jnp.ones(4, bool), 3))
        np.testing.assert_array_equal(mask, [True, True, False, True])
        tau_bar = jnp.array([1.0, jnp.inf, 2.0, 0.5])
        queue = jnp.array([1.0, 5.0, 0.0, 0.0])
        dnc = self.variant(divide_and_conquer, static_argnums=3)
        chosen = np.asarray(dnc(tau_bar, queue, jnp.ones(4, bool), 2, 1.0))
        np.testing.assert_array_equal(chosen, [True, False, False, True])

    @chex.variants(with_jit=True, without_jit=True)
    def test_asserts_reject_bad_shapes(self):
        """Wrong ranks, mismatched lengths, non-scalar k / m / V and an integer τ̄ are refused."""
        z, ones = jnp.zeros(4), jnp.ones(4, bool)
        topk = self.variant(topk_mask)
        for args in [
            (jnp.zeros((2, 4)), jnp.ones((2, 4), bool), 1),  # a batch axis: vmap instead
            (z, jnp.ones(5, bool), 1),  # lengths differ
            (z, ones, jnp.ones(2, jnp.int32)),  # k not a scalar
            (z, ones, 1.5),  # k not an integer
        ]:
            with pytest.raises(AssertionError):
                topk(*args)
        dnc = self.variant(divide_and_conquer, static_argnums=3)
        for args in [
            (z, jnp.zeros(5), ones, 2, 1.0),  # queue of another length
            (z, z, jnp.ones(3, bool), 2, 1.0),  # availability of another length
            (z, z, ones, 2, jnp.ones(4)),  # V not a scalar
            (jnp.zeros(4, jnp.int32), z, ones, 2, 1.0),  # integer τ̄
            (jnp.zeros((1, 4)), jnp.zeros((1, 4)), jnp.ones((1, 4), bool), 2, 1.0),
        ]:
            with pytest.raises(AssertionError):
                dnc(*args)
        count = self.variant(selection_count)
        with pytest.raises(AssertionError):
            count(jnp.ones((2, 4), bool), 2)
        with pytest.raises(AssertionError):
            count(ones, jnp.ones(2, jnp.int32))
        with pytest.raises(AssertionError):
            self.variant(p4_objective)(ones, z, jnp.zeros(3), 1.0)
