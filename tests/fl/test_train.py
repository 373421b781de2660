"""FedAvg (jfl.fl.train) and the runner's federated mode, against plainly written references.

A linear softmax classifier on tiny random 4×4×1 images checks the learner's arithmetic (local
SGD by epochs or by steps, weighted averaging, padding, slots, hierarchical aggregation, the
per-client signals) against NumPy and against ``local_sgd`` called one client at a time;
scikit-learn's digits check that the runner actually learns, that federated runs keep the
runner's batching invariances, and that a policy reading learner signals gets those of the
current model.

Compilation dominates the runtime, so the shapes are few and the jitted functions are cached at
module level (``_step``, ``_local``) and shared by the tests.
"""

from __future__ import annotations

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfl.envs import RbcsfEnv, WirelessEnv, wireless
from jfl.envs.rbcsf import make_params
from jfl.fl.sketch import SKETCH_BLOCK, projection_block
from jfl.fl.train import (
    EVAL_BATCH,
    SKETCH_DIM,
    FederatedData,
    LearnerState,
    local_sgd,
    local_signals,
    make_learner,
    minibatch_loss,
    weighted_average,
)
from jfl.policies import LEARNER_SIGNALS, get
from jfl.runner import make_batched_run, make_run, run_keys, seed_keys

SHAPE = (4, 4, 1)
K = 3  # classes
N = 5  # clients
S = 8  # samples per client slot (padded)
COUNTS = (6, 3, 8, 0, 5)  # client 3 holds no data
LR = 0.5
STD = {"epochs": 3, "batch_size": 3}  # minibatch SGD for all clients but client 1 (3 samples)
# float32 results computed by differently shaped (vmapped / padded / NumPy float64) programs
# agree to rounding only: XLA may order the sums of a matmul differently per shape.
TOL = {"rtol": 1e-5, "atol": 1e-6}


class Linear(nn.Module):
    """Multinomial logistic regression: one dense layer on the flattened input."""

    num_classes: int = K

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.num_classes)(x.reshape(x.shape[0], -1))


MODEL = Linear()


def apply_fn(params, x):
    return MODEL.apply({"params": params}, x)


def make_data(counts, pad_to=S, seed=0) -> FederatedData:
    """Random data; ``counts`` is one tuple of client sizes per partition (leading axis P)."""
    counts = np.atleast_2d(np.asarray(counts, np.int32))
    rng = np.random.default_rng(seed)
    num_parts, num_clients = counts.shape
    x = np.zeros((num_parts, num_clients, pad_to, *SHAPE), np.float32)
    y = np.zeros((num_parts, num_clients, pad_to), np.int32)
    for p in range(num_parts):
        for c, n in enumerate(counts[p]):
            x[p, c, :n] = rng.normal(size=(n, *SHAPE))
            y[p, c, :n] = rng.integers(0, K, n)
    mask = np.arange(pad_to) < counts[..., None]
    x_test = rng.normal(size=(10, *SHAPE)).astype(np.float32)
    y_test = rng.integers(0, K, 10).astype(np.int32)
    return FederatedData(x, y, mask, counts, x_test, y_test)


def pad(data: FederatedData, pad_to: int) -> FederatedData:
    """The same clients with extra zero samples (mask False) up to ``pad_to`` per client."""
    extra = pad_to - data.mask.shape[2]
    widths = [(0, 0), (0, 0), (0, extra)]
    return data._replace(
        x=np.pad(data.x, widths + [(0, 0)] * len(SHAPE)),
        y=np.pad(data.y, widths),
        mask=np.pad(data.mask, widths),
    )


def random_params(seed):
    """Non-trivial parameters (random bias too) in the layout ``Linear`` uses."""
    rng = np.random.default_rng(seed)
    dim = int(np.prod(SHAPE))
    return {
        "Dense_0": {
            "kernel": (0.3 * rng.normal(size=(dim, K))).astype(np.float32),
            "bias": (0.1 * rng.normal(size=K)).astype(np.float32),
        }
    }


def as_state(*edges) -> LearnerState:
    """A learner state holding one model per edge server."""
    return LearnerState(edge_params=jax.tree.map(lambda *p: jnp.stack(p), *edges))


def edge(state: LearnerState, m=0):
    return jax.tree.map(lambda p: np.asarray(p[m]), state.edge_params)


def select(*clients, num_clients=N):
    action = np.zeros(num_clients, bool)
    action[list(clients)] = True
    return action


DATA = make_data(COUNTS)
PARAMS = random_params(1)
KEY = jax.random.key(42)  # the round key handed to ``step``


# make_learner's defaults, spelled out so that options equal to them share one compiled step.
DEFAULTS = {
    "epochs": 1,
    "batch_size": 10,
    "slots": N,
    "num_servers": 1,
    "aggregation": "data_size",
    "global_every": 1,
}


@functools.cache
def _learner(**options):
    return make_learner(MODEL, SHAPE, N, **options)


# The metrics a step program returns: the sketches and norms only where a test reads them, as
# the runner does (XLA drops what is not returned, and compiles faster).
BASIC = ("num_delivered", "untrained", "train_loss", "update_scale")
ROUND = (*BASIC, "grad_var", "update_norm", "update_sketch")


@functools.cache
def _jit_step(options, returned=BASIC):
    learner_step = _learner(**dict(options)).step

    def step(*args):
        state, metrics = learner_step(*args)
        return state, {name: metrics[name] for name in returned if name in metrics}

    return jax.jit(step)


def _step(returned=BASIC, **options):
    return _jit_step(tuple(sorted({**DEFAULTS, **options}.items())), returned)


def step(
    options, state, action, delivered=None, t=1, data=DATA, lr=LR, key=KEY, returned=BASIC, **more
):
    delivered = np.ones(N, bool) if delivered is None else delivered
    hparams = {"learning_rate": np.float32(lr), **more}
    return _step(returned, **options)(key, state, action, delivered, np.int32(t), data, hparams)


@functools.cache
def _local(epochs, batch_size):
    return jax.jit(functools.partial(local_sgd, apply_fn, epochs=epochs, batch_size=batch_size))


def local(options, params, client, key=KEY, data=DATA, lr=LR):
    """One client's update, exactly as the learner keys it: fold_in(round key, client index)."""
    trained = _local(options["epochs"], options["batch_size"])(
        params, data, client, jax.random.fold_in(key, client), np.float32(lr)
    )
    return jax.tree.map(np.asarray, trained)


def np_average(models, weights):
    """Σ w_k θ_k / Σ w_k in float64."""
    weights = np.asarray(weights, np.float64)
    return jax.tree.map(
        lambda *leaves: (
            np.tensordot(weights, np.stack(leaves).astype(np.float64), 1) / weights.sum()
        ),
        *models,
    )


def assert_tree_close(actual, expected, **tol):
    tol = tol or TOL
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), **tol)


def assert_tree_equal(actual, expected):
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(e))


# ---------------------------------------------------------------------------------------------
# 1. One client, full batch: FedAvg is gradient descent


def numpy_gradient_descent(params, x, y, lr, steps):
    """Multinomial logistic regression by hand: grad = Xᵀ(softmax(XW + b) − onehot)/n."""
    w = params["Dense_0"]["kernel"].astype(np.float64)
    b = params["Dense_0"]["bias"].astype(np.float64)
    x = x.reshape(len(x), -1).astype(np.float64)
    onehot = np.eye(K)[y]
    for _ in range(steps):
        z = x @ w + b
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
        g = (p - onehot) / len(x)
        w, b = w - lr * x.T @ g, b - lr * g.sum(axis=0)
    return {"Dense_0": {"bias": b, "kernel": w}}


FULL = {"epochs": 1, "batch_size": 16}  # one batch covers every client's data, padded or not
PADDED = pad(DATA, 12)


@pytest.mark.parametrize(
    "options, data, client",
    [
        # E = 1, batch 16 ≥ S = 12: client 0's 6 samples and 10 of padding in one batch.
        (FULL, PADDED, 0),
        # E = 3, batch 3 = client 1's count < S = 8: a real batch, then batches of padding.
        (STD, DATA, 1),
    ],
    ids=["E1", "E3"],
)
def test_single_client_full_batch_is_gradient_descent(options, data, client):
    epochs, n = options["epochs"], COUNTS[client]
    state, metrics = step(options, as_state(PARAMS), select(client), data=data)
    x, y = DATA.x[0, client, :n], DATA.y[0, client, :n]
    expected = numpy_gradient_descent(PARAMS, x, y, LR, epochs)
    assert_tree_close(edge(state), expected)
    assert int(metrics["num_delivered"]) == 1 and int(metrics["untrained"]) == 0
    # The comparison has teeth: a single step differs from E = 3 steps by far more than TOL.
    if epochs > 1:
        one = numpy_gradient_descent(PARAMS, x, y, LR, 1)
        assert np.abs(one["Dense_0"]["kernel"] - expected["Dense_0"]["kernel"]).max() > 1e-2


# ---------------------------------------------------------------------------------------------
# 2. The vmapped training equals local_sgd client by client, then a NumPy average


@pytest.mark.parametrize(
    ("option", "traced", "aggregation"),
    [
        ("data_size", None, "data_size"),
        ("uniform", None, "uniform"),
        # The traced hyperparameter (a sweep's --aggregation) overrides the option.
        ("data_size", 1, "uniform"),
        ("data_size", 0, "data_size"),
    ],
)
def test_learner_equals_loop_over_local_sgd(option, traced, aggregation):
    clients = [4, 0, 3, 2]  # any order: the average is a weighted mean
    options = {**STD, "aggregation": option}
    more = {} if traced is None else {"aggregation": np.int32(traced)}
    state, metrics = step(options, as_state(PARAMS), select(*clients), **more)
    models = [local(STD, PARAMS, c) for c in clients]
    weights = [COUNTS[c] if aggregation == "data_size" else 1.0 for c in clients]
    assert_tree_close(edge(state), np_average(models, weights))
    assert int(metrics["num_delivered"]) == len(clients)
    # The clients' models really differ, so a wrong weight would show.
    assert np.abs(models[0]["Dense_0"]["kernel"] - models[1]["Dense_0"]["kernel"]).max() > 1e-2


# ---------------------------------------------------------------------------------------------
# 3. Padding, empty clients, empty slots and undelivered models change nothing


def assert_padding_changes_nothing(options) -> list:
    """Every client trained (together, then each alone: the average could hide a difference)
    on ``DATA`` and on ``PADDED`` (S = 12 instead of 8) gives the same models. The programs
    differ in shape, hence a tolerance. Returns each client's model trained alone on ``DATA``."""
    everyone = select(0, 1, 2, 3, 4)
    short, _ = step(options, as_state(PARAMS), everyone)
    long, _ = step(options, as_state(PARAMS), everyone, data=PADDED)
    assert_tree_close(edge(long), edge(short))
    alone = []
    for c in range(N):
        short, _ = step(options, as_state(PARAMS), select(c))
        long, _ = step(options, as_state(PARAMS), select(c), data=PADDED)
        assert_tree_close(edge(long), edge(short))
        alone.append(edge(short))
    return alone


def test_padding_does_not_change_minibatch_training():
    """Batches of 3 over data padded to S = 12 instead of 8: the sample order is drawn per
    position, so the same real samples are visited in the same batches."""
    alone = assert_padding_changes_nothing(STD)
    # Shuffling matters here: another epoch order would give client 0 another model.
    other, _ = step(STD, as_state(PARAMS), select(0), key=jax.random.key(7))
    assert np.abs(edge(other)["Dense_0"]["kernel"] - alone[0]["Dense_0"]["kernel"]).max() > 0


def test_padding_does_not_change_full_batch_training():
    """Full batches on data padded to S = 12: every client's model is the unpadded NumPy GD."""
    for c in range(N):
        state, _ = step(FULL, as_state(PARAMS), select(c), data=PADDED)
        n = COUNTS[c]
        expected = (
            PARAMS
            if n == 0
            else numpy_gradient_descent(PARAMS, DATA.x[0, c, :n], DATA.y[0, c, :n], LR, 1)
        )
        assert_tree_close(edge(state), expected)


def test_client_without_data_leaves_model_unchanged():
    assert_tree_equal(local(STD, PARAMS, 3), PARAMS)
    state, metrics = step(STD, as_state(PARAMS), select(3))
    assert_tree_equal(edge(state), PARAMS)  # weight 0: the server keeps its model
    assert int(metrics["num_delivered"]) == 1


def test_empty_slots_and_undelivered_clients_do_not_count():
    two, metrics_two = step(STD, as_state(PARAMS), select(0, 2))  # three empty slots
    delivered = select(0, 1, 2)
    three, metrics_three = step(STD, as_state(PARAMS), select(0, 2, 4), delivered=delivered)
    assert_tree_equal(edge(three), edge(two))  # the undelivered client 4 has weight 0
    expected = np_average([local(STD, PARAMS, c) for c in (0, 2)], [COUNTS[0], COUNTS[2]])
    assert_tree_close(edge(two), expected)
    assert int(metrics_two["num_delivered"]) == 2 and int(metrics_three["num_delivered"]) == 2
    nobody, metrics = step(STD, as_state(PARAMS), select(0, 2), delivered=select(1, 4))
    assert_tree_equal(edge(nobody), PARAMS)
    assert int(metrics["num_delivered"]) == 0


# ---------------------------------------------------------------------------------------------
# 4. weighted_average


def test_weighted_average_matches_numpy():
    rng = np.random.default_rng(3)
    stacked = {"a": rng.normal(size=(5, 3)), "b": {"c": rng.normal(size=(5, 2, 2))}}
    stacked = jax.tree.map(lambda v: v.astype(np.float32), stacked)
    fallback = jax.tree.map(lambda v: v[0] + 100.0, stacked)
    weights = np.array([0.5, 2.0, 0.0, 1.5, 3.0], np.float32)
    result = jax.jit(weighted_average)(stacked, weights, fallback)
    expected = jax.tree.map(lambda v: np.average(v.astype(np.float64), 0, weights), stacked)
    assert_tree_close(result, expected)
    # One positive weight: that model itself (w/w = 1 exactly, the others times 0).
    one = jax.jit(weighted_average)(stacked, np.array([0, 0, 0, 7, 0], np.float32), fallback)
    assert_tree_equal(one, jax.tree.map(lambda v: v[3], stacked))


def test_weighted_average_all_zero_weights_returns_fallback():
    stacked = {"a": np.arange(12, dtype=np.float32).reshape(4, 3)}
    fallback = {"a": np.array([-1.0, 2.5, 7.0], np.float32)}
    result = jax.jit(weighted_average)(stacked, np.zeros(4, np.float32), fallback)
    assert_tree_equal(result, fallback)


# ---------------------------------------------------------------------------------------------
# 5. Slots


@pytest.mark.parametrize("clients, untrained", [((0, 1, 2, 3, 4), 2), ((0, 2, 3, 4), 1)])
def test_selections_beyond_slots_are_reported_untrained(clients, untrained):
    _, metrics = step({**STD, "slots": 3}, as_state(PARAMS), select(*clients))
    assert int(metrics["untrained"]) == untrained


def test_result_does_not_depend_on_slots_or_slot_position():
    clients = select(0, 2, 4)
    few, metrics = step({**STD, "slots": 3}, as_state(PARAMS), clients)
    everyone, _ = step(STD, as_state(PARAMS), clients)  # slots = N
    assert int(metrics["untrained"]) == 0
    # Same models up to rounding: the training is vmapped over 3 slots in one program and 5 in
    # the other, and XLA's CPU kernels do not give the same bits for both (measured: 1 ulp).
    assert_tree_close(edge(few), edge(everyone))
    # Client 4 trains in slot 0 when alone and in slot 2 behind two undelivered clients: its
    # randomness comes from its index, not its slot.
    alone, _ = step(STD, as_state(PARAMS), select(4))
    behind, _ = step(STD, as_state(PARAMS), clients, delivered=select(4))
    assert_tree_equal(edge(behind), edge(alone))
    assert_tree_close(edge(alone), local(STD, PARAMS, 4))


# ---------------------------------------------------------------------------------------------
# 6. Hierarchical FedAvg


def test_one_server_equals_flat_learner():
    clients = select(0, 1, 4)
    delivered = select(0, 4)
    flat, _ = step(STD, as_state(PARAMS), clients, delivered)
    # bool[N, 1] client → server assignments of the same selection, explicit options.
    options = {**STD, "num_servers": 1, "global_every": 1}
    tree, _ = step(options, as_state(PARAMS), clients[:, None], delivered)
    assert_tree_equal(edge(tree), edge(flat))


def reference_hierarchical_round(edges, action, delivered, t, global_every, key):
    """Edge m ← data-size average of its delivered clients (unchanged if none), then every
    ``global_every`` rounds both edges ← their mean; clients train from their edge's model."""
    new = []
    for m, params in enumerate(edges):
        members = [c for c in range(N) if action[c, m] and delivered[c]]
        weights = [COUNTS[c] for c in members]
        if sum(weights) == 0:
            new.append(params)
        else:
            models = [local(STD, params, c, key=key) for c in members]
            new.append(np_average(models, weights))
    if t % global_every == 0:
        mean = np_average(new, [1.0] * len(new))
        new = [mean] * len(new)
    return new


def test_hierarchical_edges_and_global_rounds():
    options = {**STD, "num_servers": 2, "global_every": 2}
    edges = [PARAMS, random_params(2)]  # the servers start from different models
    state = as_state(*edges)
    # Round 1: server 0 gets clients 0, 2 (1 is not delivered); server 1 only client 3, which
    # holds no data, and client 4, which is not delivered: server 1 keeps its model.
    action = np.zeros((N, 2), bool)
    action[[0, 1, 2], 0] = True
    action[[3, 4], 1] = True
    delivered = select(0, 2, 3)
    k1, k2 = jax.random.split(KEY)
    state, metrics = step(options, state, action, delivered, t=1, key=k1)
    expected = reference_hierarchical_round(edges, action, delivered, 1, 2, k1)
    assert int(metrics["num_delivered"]) == 3
    assert_tree_close(edge(state, 0), expected[0])
    assert_tree_equal(edge(state, 1), edges[1])
    assert np.abs(edge(state, 0)["Dense_0"]["bias"] - edges[1]["Dense_0"]["bias"]).max() > 1e-3
    # Round 2 (global): server 0 gets client 1, server 1 clients 0 and 4; then both ← the mean.
    action = np.zeros((N, 2), bool)
    action[1, 0] = True
    action[[0, 4], 1] = True
    delivered = select(0, 1, 4)
    state, _ = step(options, state, action, delivered, t=2, key=k2)
    expected = reference_hierarchical_round(expected, action, delivered, 2, 2, k2)
    assert_tree_equal(edge(state, 0), edge(state, 1))
    assert_tree_close(edge(state, 0), expected[0])


# ---------------------------------------------------------------------------------------------
# 7–10. Through the runner, on scikit-learn's digits
#
# One data set with two partitions of the same training samples (P = 2: IID, and sorted by
# label so that each client holds one or two digits) and one batch of three configurations over
# four seeds, shared by the runner tests: every program compiled here costs seconds.

DIGIT_CLIENTS, DIGIT_SAMPLES, DIGIT_M = 20, 60, 5
ROUNDS, EVAL_EVERY = 20, 5
DIGIT_SEEDS = [0, 1, 2, 3]
# Config 0 (IID, learning rate 0.5) is the one that must learn; config 2 reads partition 1.
DIGIT_HPARAMS = {
    "learning_rate": np.array([0.5, 0.1, 0.5], np.float32),
    "partition": np.array([0, 0, 1], np.int32),
}


def digit_partitions():
    from sklearn.datasets import load_digits

    raw = load_digits()
    x = (raw.images / 16.0).astype(np.float32)[..., None]
    y = raw.target.astype(np.int32)
    order = np.random.default_rng(0).permutation(len(y))
    train, test = order[: DIGIT_CLIENTS * DIGIT_SAMPLES], order[DIGIT_CLIENTS * DIGIT_SAMPLES :]
    by_label = train[np.argsort(y[train], kind="stable")]
    shape = (2, DIGIT_CLIENTS, DIGIT_SAMPLES)
    both = np.stack([train, by_label]).reshape(shape)
    return FederatedData(
        x=x[both],
        y=y[both],
        mask=np.ones(shape, bool),
        count=np.full(shape[:2], DIGIT_SAMPLES, np.int32),
        x_test=x[test],
        y_test=y[test],
    )


def only_partition(data: FederatedData, p: int) -> FederatedData:
    """Single-partition data (P = 1) holding partition ``p``."""
    return data._replace(**{f: getattr(data, f)[p : p + 1] for f in ("x", "y", "mask", "count")})


@pytest.fixture(scope="module")
def digits():
    data = digit_partitions()
    env = RbcsfEnv()
    env_params = make_params(DIGIT_CLIENTS)
    spec = get("random")
    policy = spec.build(DIGIT_CLIENTS, DIGIT_M)
    model = Linear(num_classes=10)
    learner = make_learner(model, (8, 8, 1), DIGIT_CLIENTS, epochs=1, batch_size=10, slots=DIGIT_M)
    run = make_run(env, env_params, policy, ROUNDS, learner=learner, eval_every=EVAL_EVERY)
    num_configs = len(DIGIT_HPARAMS["learning_rate"])
    hparams = {k: np.full(num_configs, v, np.float32) for k, v in spec.defaults().items()}
    hparams.update(DIGIT_HPARAMS)
    keys = seed_keys(0, DIGIT_SEEDS)
    batched = make_batched_run(run, data)
    return {
        "data": data,
        "model": model,
        "learner": learner,
        "env": env,
        "env_params": env_params,
        "policy": policy,
        "run": run,
        "batched": batched,
        "hparams": hparams,
        "keys": keys,
        "out": batched(keys, hparams),
    }


@pytest.fixture(scope="module")
def single_partition(digits):
    """{p: outputs} of configuration 0's learning rate on single-partition data (P = 1) holding
    partition p, over the four seeds, evaluated every 2·EVAL_EVERY rounds. The data is an
    argument of the one compiled program, so both partitions share it."""
    names = ("env", "env_params", "policy", "learner", "hparams", "keys", "data")
    env, env_params, policy, learner, hparams, keys, data = (digits[k] for k in names)
    run = make_run(env, env_params, policy, ROUNDS, learner=learner, eval_every=2 * EVAL_EVERY)
    over_seeds = jax.jit(jax.vmap(run, in_axes=(0, None, None)))
    config = {k: v[0] for k, v in hparams.items()}
    config["partition"] = np.int32(0)
    return {p: fields(over_seeds(keys, config, only_partition(data, p))) for p in (0, 1)}


def fields(out):
    return {k: np.asarray(v) for k, v in out.arrays().items() if v is not None}


def test_runner_learns_digits(digits):
    out = digits["out"]
    num_evals = ROUNDS // EVAL_EVERY + 1  # rounds 0, 5, 10, 15, 20
    assert out.accuracy.shape == (3, len(DIGIT_SEEDS), num_evals)
    assert out.test_loss.shape == out.accuracy.shape
    accuracy = np.asarray(out.accuracy[0])  # IID, learning rate 0.5, every seed
    assert np.all(accuracy[:, 0] <= 0.3), accuracy[:, 0]
    assert np.all(accuracy[:, -1] > 0.7), accuracy[:, -1]
    assert np.all(np.asarray(out.untrained) == 0)
    assert np.all(np.asarray(out.num_delivered) == np.asarray(out.num_selected))
    assert np.all(np.asarray(out.num_selected) == DIGIT_M)  # 16 of 20 available on average
    clock = np.cumsum(np.asarray(out.round_time, np.float64), axis=-1)
    np.testing.assert_allclose(np.asarray(out.wall_clock), clock, rtol=1e-5)


def test_round_zero_evaluates_the_initial_model(digits):
    """Evaluation 0 is the model ``init`` draws from the run's learner key, before training."""
    data, learner, model, out = (digits[k] for k in ("data", "learner", "model", "out"))
    for s, key in enumerate(digits["keys"]):
        k_model, _ = jax.random.split(run_keys(key, learner=True)[3])
        edges = learner.init(k_model, data, {}).edge_params
        params = jax.tree.map(lambda p: np.asarray(p[0]), edges)
        logits = np.asarray(model.apply({"params": params}, data.x_test), np.float64)
        z = logits - logits.max(axis=1, keepdims=True)
        log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        loss = -log_p[np.arange(len(data.y_test)), data.y_test].mean()
        accuracy = np.mean(logits.argmax(axis=1) == data.y_test)
        for c in range(3):
            np.testing.assert_allclose(out.test_loss[c, s, 0], loss, **TOL)
            # float32 vs float64 logits: at most a near-tie may flip.
            assert abs(float(out.accuracy[c, s, 0]) - accuracy) < 1.5 / len(logits)


def test_evaluations_are_at_multiples_of_eval_every(digits, single_partition):
    """Entry i is the evaluation after round i·eval_every: the same runs evaluated every 5 and
    every 10 rounds agree at rounds 0, 10 and 20 (the runs every 10 rounds are on
    single-partition data, see test_partition_hyperparameter_picks_the_partition)."""
    long = fields(digits["out"])
    for p, c in ((0, 0), (1, 2)):
        sparse = single_partition[p]
        assert sparse["accuracy"].shape == (len(DIGIT_SEEDS), ROUNDS // (2 * EVAL_EVERY) + 1)
        np.testing.assert_array_equal(sparse["accuracy"], long["accuracy"][c][:, ::2])
        # A tolerance for the loss: see assert_same_run.
        np.testing.assert_allclose(sparse["test_loss"], long["test_loss"][c][:, ::2], **TOL)
    # The model changes between evaluations, so matching entries is not trivial.
    assert np.all(np.diff(long["test_loss"][0], axis=-1) != 0)


def assert_same_run(actual: dict, expected: dict, label=""):
    """Bit-identical outputs, except ``test_loss`` to float32 rounding: the evaluation's logits
    are a matmul (Dense), which XLA sums in an order that depends on the vmapped batch shape
    (measured on these runs: 1-ulp differences in the loss, the training and the accuracy
    exact; other shapes can move the training too, docs/decisions.md#federated-chunks)."""
    assert actual.keys() == expected.keys()
    for name, value in expected.items():
        if name == "test_loss":
            np.testing.assert_allclose(actual[name], value, **TOL, err_msg=f"{label} {name}")
        else:
            np.testing.assert_array_equal(actual[name], value, f"{label} {name}")


def test_configuration_runs_do_not_depend_on_their_neighbours_in_the_batch(digits):
    """Configuration 0's runs are the same bits next to other learning rates and partitions in
    a batch of the same shape. Across batch shapes XLA may round the model's products and
    reductions differently (a softmax cross-entropy vmapped over 4 configurations differs in
    the last bit from the same over 3), which is why a federated sweep computes every chunk at
    one shape (docs/decisions.md#federated-chunks; tests/experiments/test_fl.py)."""
    batched, hparams, keys = (digits[k] for k in ("batched", "hparams", "keys"))
    together = fields(digits["out"])
    others = {
        **hparams,
        "learning_rate": np.array([0.5, 0.9, 0.05], np.float32),
        "partition": np.array([0, 1, 1], np.int32),
    }
    mixed = fields(batched(keys, others))
    for name, value in together.items():
        np.testing.assert_array_equal(mixed[name][0], value[0], name)
    assert not np.array_equal(together["accuracy"][1], mixed["accuracy"][1])


def test_learner_does_not_change_selections(digits):
    plain = make_batched_run(
        make_run(digits["env"], digits["env_params"], digits["policy"], ROUNDS)
    )
    without = fields(plain(digits["keys"], digits["hparams"]))
    with_fl = fields(digits["out"])
    assert {"selection_count", "round_time"} <= without.keys()
    for name, value in without.items():  # selections, round times: all of them
        np.testing.assert_array_equal(with_fl[name], value, name)


def test_partition_hyperparameter_picks_the_partition(digits, single_partition):
    """Configurations reading partitions 0 and 1 of the P = 2 data, in one batch, equal runs on
    single-partition data."""
    together = fields(digits["out"])
    for p, c in ((0, 0), (1, 2)):  # the configurations with learning rate 0.5
        expected = {k: v[c] for k, v in together.items()}
        for name in ("accuracy", "test_loss"):  # evaluated every 10 rounds there
            expected[name] = expected[name][:, ::2]
        assert_same_run(expected, single_partition[p], f"partition {p}")
    # The partitions train different models.
    assert not np.array_equal(together["accuracy"][0], together["accuracy"][2])


# ---------------------------------------------------------------------------------------------
# 11. Bad options


@pytest.mark.parametrize(
    "option, value",
    [
        ("epochs", 0),
        ("epochs", 1.5),
        ("local_steps", 0),
        ("local_steps", -1),
        ("local_steps", 2.0),
        ("local_steps", True),
        ("local_steps", "1"),
        ("batch_size", 0),
        ("batch_size", 2.5),
        ("batch_size", "10"),
        ("slots", 0),
        ("slots", N + 1),
        ("aggregation", "median"),
        ("num_servers", 0),
        ("global_every", 0),
    ],
)
def test_bad_learner_options_raise(option, value):
    with pytest.raises(ValueError, match=option):
        make_learner(MODEL, SHAPE, N, **{option: value})


@pytest.mark.parametrize("eval_every", [3, 0, 2.5])
def test_eval_every_must_divide_num_rounds(eval_every):
    learner = _learner(**STD)
    env = RbcsfEnv()
    with pytest.raises(ValueError, match="eval_every"):
        make_run(
            env,
            make_params(N),
            get("random").build(N, 2),
            10,
            learner=learner,
            eval_every=eval_every,
        )


# ---------------------------------------------------------------------------------------------
# 12. A fixed number of local steps, each on a fresh minibatch (Xia §V-A: one step on ρ = 2)


@functools.cache
def _local_steps(steps, batch_size):
    return jax.jit(
        functools.partial(local_sgd, apply_fn, epochs=1, batch_size=batch_size, steps=steps)
    )


def numpy_local_steps(params, x, y, key, lr, steps, batch_size):
    """``steps`` gradient steps, each on ``batch_size`` of the client's n samples drawn without
    replacement (all n when n ≤ batch_size); no samples: no change.

    The draw reuses the kernel's uniforms, one per sample from the step's key: the samples with
    the smallest ones are taken. Drawn for the n real samples only, they are the kernel's first
    n (threefry is prefix-consistent), whatever the padding."""
    n = len(y)
    params = jax.tree.map(lambda p: np.asarray(p, np.float64), params)
    if n == 0:
        return params
    for k in jax.random.split(key, steps):
        u = np.asarray(jax.random.uniform(k, (n,)))
        chosen = np.argsort(u, kind="stable")[:batch_size]
        params = numpy_gradient_descent(params, x[chosen], y[chosen], lr, 1)
    return params


def random_instance(seed, batch_size):
    """Data of N clients (padded to S) with random sizes, one client without samples and one
    with fewer than the batch; random parameters, learning rate and round key."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(batch_size + 1, S + 1, N)
    counts[seed % N] = 0
    counts[(seed + 1) % N] = rng.integers(1, batch_size)
    lr = float(rng.uniform(0.2, 1.0))
    return make_data(counts, seed=seed), random_params(100 + seed), lr, jax.random.key(seed)


@pytest.mark.parametrize("steps, batch_size", [(1, 2), (4, 3)], ids=["paper", "J4B3"])
@pytest.mark.parametrize("seed", range(3))
def test_local_steps_match_numpy_sgd(steps, batch_size, seed):
    data, params, lr, key = random_instance(seed, batch_size)
    train = _local_steps(steps, batch_size)
    for c in range(N):
        n = int(data.count[0, c])
        client_key = jax.random.fold_in(key, c)
        trained = train(params, data, c, client_key, np.float32(lr))
        x, y = data.x[0, c, :n], data.y[0, c, :n]
        expected = numpy_local_steps(params, x, y, client_key, lr, steps, batch_size)
        assert_tree_close(trained, expected)
        if n == 0:
            assert_tree_equal(trained, params)
        elif n > batch_size:
            # The comparison has teeth: the same steps on all samples give another model.
            full = numpy_gradient_descent(params, x, y, lr, steps)
            assert np.abs(full["Dense_0"]["kernel"] - expected["Dense_0"]["kernel"]).max() > 1e-4


STEPS = {"local_steps": 3, "batch_size": 4}  # client 1 holds 3 < 4 samples, client 3 none


def test_learner_with_local_steps_averages_numpy_sgd():
    """A round of the learner with local steps: each client's NumPy SGD from its own key
    (fold_in(round key, client index)), averaged by data size."""
    everyone = select(0, 1, 2, 3, 4)
    state, metrics = step(STEPS, as_state(PARAMS), everyone)
    models = [
        numpy_local_steps(
            PARAMS,
            DATA.x[0, c, : COUNTS[c]],
            DATA.y[0, c, : COUNTS[c]],
            jax.random.fold_in(KEY, c),
            LR,
            STEPS["local_steps"],
            STEPS["batch_size"],
        )
        for c in range(N)
    ]
    assert_tree_close(edge(state), np_average(models, COUNTS))
    assert int(metrics["num_delivered"]) == N


def test_local_steps_do_not_depend_on_padding_or_slot():
    """The steps protocol draws each minibatch per position, so padding (S = 12 instead of 8)
    leaves every client's model as it was, and a client's model does not depend on its slot."""
    assert_padding_changes_nothing(STEPS)
    # Client 4 trains in slot 0 alone and in slot 2 behind two undelivered clients.
    alone, _ = step(STEPS, as_state(PARAMS), select(4))
    behind, _ = step(STEPS, as_state(PARAMS), select(0, 2, 4), delivered=select(4))
    assert_tree_equal(edge(behind), edge(alone))


def test_local_steps_with_a_batch_beyond_the_data_are_gradient_descent():
    """A batch of 10 exceeds every client's data (and the padded width 8): each step uses all
    of a client's samples, so J steps are J steps of full-batch gradient descent, padded or not."""
    options = {"local_steps": 2, "batch_size": 10}
    for data in (DATA, PADDED):
        for c in range(N):
            state, _ = step(options, as_state(PARAMS), select(c), data=data)
            n = COUNTS[c]
            x, y = DATA.x[0, c, :n], DATA.y[0, c, :n]
            expected = PARAMS if n == 0 else numpy_gradient_descent(PARAMS, x, y, LR, 2)
            assert_tree_close(edge(state), expected)


def numpy_loss(params, x, y) -> float:
    """Mean cross-entropy of the linear model on (x, y) in float64 (0 without samples)."""
    if len(y) == 0:
        return 0.0
    w = np.asarray(params["Dense_0"]["kernel"], np.float64)
    b = np.asarray(params["Dense_0"]["bias"], np.float64)
    z = x.reshape(len(x), -1).astype(np.float64) @ w + b
    z -= z.max(axis=1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return float(-log_p[np.arange(len(y)), y].mean())


def numpy_train_loss(params, x, y, key, lr, steps, batch_size) -> float:
    """rpow-d's training loss: the mean over the ``steps`` SGD steps of each step's minibatch
    loss before the step (drawn as ``numpy_local_steps`` draws; 0 without samples)."""
    n = len(y)
    if n == 0:
        return 0.0
    params, losses = jax.tree.map(lambda p: np.asarray(p, np.float64), params), []
    for k in jax.random.split(key, steps):
        chosen = np.argsort(np.asarray(jax.random.uniform(k, (n,))), kind="stable")[:batch_size]
        losses.append(numpy_loss(params, x[chosen], y[chosen]))
        params = numpy_gradient_descent(params, x[chosen], y[chosen], lr, 1)
    return float(np.mean(losses))


@pytest.mark.parametrize("seed", range(2))
def test_train_loss_is_the_mean_minibatch_loss_over_local_steps(seed):
    """The learner's ``train_loss`` against NumPy SGD on random instances (a client without
    samples, one with fewer than the batch): each trained client's value at its own index
    (client 0 both trained and the filler of empty slots), 0 for the others. ``STEPS``'s
    options, so the step compiled for section 12 is reused."""
    steps, batch_size = STEPS["local_steps"], STEPS["batch_size"]
    data, params, lr, key = random_instance(seed, batch_size)
    want = []
    for c in range(N):
        n = int(data.count[0, c])
        x, y, k_c = data.x[0, c, :n], data.y[0, c, :n], jax.random.fold_in(key, c)
        want.append(numpy_train_loss(params, x, y, k_c, lr, steps, batch_size))
    assert min(want) == 0.0 and max(want) > 0.0  # the empty client, and real losses
    for clients in ((0, 2, 4), (1, 3), tuple(range(N))):
        _, metrics = step(STEPS, as_state(params), select(*clients), data=data, lr=lr, key=key)
        expected = [w if c in clients else 0.0 for c, w in enumerate(want)]
        np.testing.assert_allclose(np.asarray(metrics["train_loss"]), expected, **TOL)


def test_selection_weights_move_the_model_by_the_weighted_updates():
    """With a policy's weights a_k the model moves to w + Σ a_k (θ_k − w) over the delivered
    clients, unnormalised (Σ a < 1 keeps part of w); weights of clients not delivered or not
    selected count for nothing."""
    rng = np.random.default_rng(7)
    action, delivered = select(0, 2, 4), select(0, 4)
    weight = rng.uniform(0.1, 0.5, N).astype(np.float32)
    hparams = {"learning_rate": np.float32(LR)}
    learner_step = _learner(**DEFAULTS).step

    @jax.jit
    def move(*args):  # the model and the count only: less to compile
        state, metrics = learner_step(*args)
        return state, metrics["num_delivered"]

    state, count = move(KEY, as_state(PARAMS), action, delivered, 1, DATA, hparams, weight)
    models = {c: local(DEFAULTS, PARAMS, c) for c in (0, 4)}
    expected = jax.tree.map(
        lambda w, a, b: w.astype(np.float64) + weight[0] * (a - w) + weight[4] * (b - w),
        PARAMS, models[0], models[4],
    )  # fmt: skip
    assert_tree_close(edge(state), expected)
    assert int(count) == 2


def test_minibatch_loss_matches_numpy():
    """Each client's loss on ``batch_size`` samples drawn without replacement from its own key
    fold_in(key, n): all of them when it holds fewer, 0 without samples; padding changes
    nothing."""
    batch_size = 3
    data, params, _, key = random_instance(5, batch_size)
    probe = jax.jit(functools.partial(minibatch_loss, apply_fn, batch_size=batch_size))
    got = np.asarray(probe(params, data, key))
    assert got.shape == (N,)
    for c in range(N):
        n = int(data.count[0, c])
        u = np.asarray(jax.random.uniform(jax.random.fold_in(key, c), (n,)))
        chosen = np.argsort(u, kind="stable")[:batch_size]
        want = numpy_loss(params, data.x[0, c, :n][chosen], data.y[0, c, :n][chosen])
        np.testing.assert_allclose(got[c], want, **TOL)
    np.testing.assert_allclose(np.asarray(probe(params, pad(data, 12), key)), got, **TOL)


# ---------------------------------------------------------------------------------------------
# 13. Per-client signals of the global model on the clients' own data


def numpy_signals(params, x, y, counts, squares=False):
    """Accuracy and mean cross-entropy (with ``squares`` also the mean of its square) of the
    linear model on each client's real samples, in float64; a client without samples: accuracy
    1, losses 0."""
    w = np.asarray(params["Dense_0"]["kernel"], np.float64)
    b = np.asarray(params["Dense_0"]["bias"], np.float64)
    accuracy, loss, loss_sq = np.ones(len(counts)), np.zeros(len(counts)), np.zeros(len(counts))
    for c, n in enumerate(counts):
        if n == 0:
            continue
        z = x[c, :n].reshape(n, -1).astype(np.float64) @ w + b
        z -= z.max(axis=1, keepdims=True)
        log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        accuracy[c] = np.mean(z.argmax(axis=1) == y[c, :n])
        per_sample = -log_p[np.arange(n), y[c, :n]]
        loss[c], loss_sq[c] = per_sample.mean(), (per_sample**2).mean()
    return (accuracy, loss, loss_sq) if squares else (accuracy, loss)


def assert_signals_close(signals, accuracy, loss, counts, loss_sq=None):
    got_accuracy = np.asarray(signals["local_accuracy"])
    # float32 vs float64 logits: at most a near-tie may flip one sample.
    assert np.all(np.abs(got_accuracy - accuracy) < 1.5 / np.maximum(counts, 1)), got_accuracy
    np.testing.assert_allclose(np.asarray(signals["local_loss"]), loss, **TOL)
    np.testing.assert_array_equal(np.asarray(signals["data_size"]), counts)
    if loss_sq is not None:
        np.testing.assert_allclose(np.asarray(signals["local_loss_sq"]), loss_sq, **TOL)


@pytest.fixture(scope="module")
def signals_fn():
    return jax.jit(functools.partial(local_signals, apply_fn))


@pytest.mark.parametrize("seed", range(3))
def test_local_signals_match_numpy(signals_fn, seed):
    """Padded to 8, and to 300 (1500 positions: two evaluation batches of EVAL_BATCH, the second
    partly beyond the data), with a client without samples."""
    data, params, _, _ = random_instance(seed, 3)
    counts = np.asarray(data.count[0])
    accuracy, loss, loss_sq = numpy_signals(params, data.x[0], data.y[0], counts, squares=True)
    assert N * 300 > EVAL_BATCH
    for padded in (data, pad(data, 300)):
        signals = signals_fn(params, padded)
        assert_signals_close(signals, accuracy, loss, counts, loss_sq)
        assert float(signals["local_accuracy"][seed % N]) == 1.0
        assert float(signals["local_loss"][seed % N]) == 0.0
        assert float(signals["local_loss_sq"][seed % N]) == 0.0
    assert np.all(loss_sq >= loss**2)  # Jensen: the signal is not the square of the mean
    # The clients differ, so a value landing on the wrong client would show.
    assert len(np.unique(loss[counts > 0])) == np.sum(counts > 0)


def test_learner_signals_are_the_global_models_on_the_configurations_partition():
    """Two edge servers: the signals are those of their mean, on the partition ``hparams``
    picks."""
    counts = [COUNTS, (2, 8, 5, 1, 0)]
    data = make_data(counts, seed=5)
    learner = _learner(**{**DEFAULTS, "num_servers": 2})
    assert set(learner.provides) == set(LEARNER_SIGNALS)
    other = random_params(2)
    state = as_state(PARAMS, other)
    mean = jax.tree.map(lambda a, b: (a.astype(np.float64) + b) / 2, PARAMS, other)
    names = ("local_accuracy", "local_loss", "data_size")
    compute = jax.jit(learner.signals, static_argnums=4)
    for p in (0, 1):
        signals = compute(jax.random.key(0), state, data, {"partition": np.int32(p)}, names)
        assert set(signals) == set(names)
        accuracy, loss = numpy_signals(mean, data.x[p], data.y[p], np.asarray(counts[p]))
        assert_signals_close(signals, accuracy, loss, np.asarray(counts[p]))


# ---------------------------------------------------------------------------------------------
# 14. A policy that reads learner signals gets those of the current model


LA_ROUNDS, LA_CHANNELS = 6, 5


@pytest.fixture(scope="module")
def local_accuracy_run(digits):
    """local_accuracy on digits (IID partition, learning rate 0.5) in the wireless environment,
    always available and with a deadline no client reaches, so that every selected model
    arrives; per-round selections recorded."""
    learner = digits["learner"]
    env = WirelessEnv()
    env_params = wireless.make_params(DIGIT_CLIENTS, tau_max=100.0, availability=1.0)
    policy = get("local_accuracy").build(DIGIT_CLIENTS, LA_CHANNELS)
    run = make_run(env, env_params, policy, LA_ROUNDS, learner=learner, trajectories=True)
    hparams = {"learning_rate": np.float32(0.5), "partition": np.int32(0)}
    key = digits["keys"][0]
    out = fields(jax.jit(run)(key, hparams, digits["data"]))
    return {"out": out, "hparams": hparams, "key": key}


def is_lowest(selected, accuracy, k):
    """``selected`` is k clients, none more accurate than any client left out."""
    chosen, rest = accuracy[selected], accuracy[~selected]
    return selected.sum() == k and chosen.max() <= rest.min()


def test_runner_hands_current_local_accuracy_to_the_policy(digits, local_accuracy_run):
    """Replaying the run with the learner's own functions: each round's selection is the
    lowest-accuracy set of the model trained so far; the replay ends on the run's model."""
    learner, data = digits["learner"], digits["data"]
    out, hparams, key = (local_accuracy_run[k] for k in ("out", "hparams", "key"))
    assert np.all(out["num_failed"] == 0)
    k_model, k_train = jax.random.split(run_keys(key, learner=True)[3])
    state = learner.init(k_model, data, hparams)
    signals = jax.jit(learner.signals, static_argnums=4)
    train = jax.jit(lambda *args: learner.step(*args)[0])  # the model only: less to compile
    seen = []
    for t, k_t in enumerate(jax.random.split(k_train, LA_ROUNDS)):
        probe = jax.random.key(0)  # local_accuracy draws nothing
        accuracy = np.asarray(
            signals(probe, state, data, hparams, ("local_accuracy",))["local_accuracy"]
        )
        selected = out["selected"][t]
        assert is_lowest(selected, accuracy, LA_CHANNELS), (t, accuracy[selected])
        seen.append(accuracy)
        state = train(k_t, state, selected, selected, np.int32(t + 1), data, hparams)
    final = jax.jit(learner.evaluate)(state, data)
    np.testing.assert_array_equal(out["accuracy"][-1], np.asarray(final["accuracy"]))
    # The signals follow the model: some later selection is not a lowest set of round 1's.
    assert any(not is_lowest(out["selected"][t], seen[0], LA_CHANNELS) for t in range(1, LA_ROUNDS))


# ---------------------------------------------------------------------------------------------
# 15. The update- and gradient-aware signals: sketches, norms, the local gradient variance


def numpy_gradient(params, x, y):
    """(∂/∂kernel, ∂/∂bias) of the linear model's mean cross-entropy on (x, y), float64."""
    w = np.asarray(params["Dense_0"]["kernel"], np.float64)
    b = np.asarray(params["Dense_0"]["bias"], np.float64)
    x = x.reshape(len(x), -1).astype(np.float64)
    z = x @ w + b
    p = np.exp(z - z.max(axis=1, keepdims=True))
    g = (p / p.sum(axis=1, keepdims=True) - np.eye(K)[y]) / len(x)
    return x.T @ g, g.sum(axis=0)


def flat(kernel, bias) -> np.ndarray:
    """The vector the parameter pytree stands for, leaves in tree order (bias, kernel)."""
    return np.concatenate([np.ravel(bias), np.ravel(kernel)])


def projection(key, dim=SKETCH_DIM) -> np.ndarray:
    """The run's projection R, f64[D, dim], block by block from the sketch kernel's draws."""
    length = K + int(np.prod(SHAPE)) * K
    blocks = [np.asarray(projection_block(key, b, dim), np.float64)
              for b in range(-(-length // SKETCH_BLOCK))]  # fmt: skip
    return np.concatenate(blocks)[:length]


def numpy_steps_with_variance(params, x, y, key, lr, steps, batch_size):
    """``numpy_local_steps`` that also returns mean_b ‖g_b‖² − ‖mean_b g_b‖² over the steps'
    minibatch gradients (0 without samples): DELTA's local variance σ_i²."""
    n = len(y)
    params = jax.tree.map(lambda p: np.asarray(p, np.float64), params)
    if n == 0:
        return params, 0.0
    grads = []
    for k in jax.random.split(key, steps):
        chosen = np.argsort(np.asarray(jax.random.uniform(k, (n,))), kind="stable")[:batch_size]
        grads.append(flat(*numpy_gradient(params, x[chosen], y[chosen])))
        params = numpy_gradient_descent(params, x[chosen], y[chosen], lr, 1)
    grads = np.stack(grads)
    return params, float((grads**2).sum(1).mean() - (grads.mean(0) ** 2).sum())


SKETCH_KEY = jax.random.key(9)


@pytest.mark.parametrize("seed", range(2))
def test_round_signals_update_norm_sketch_and_gradient_variance_match_numpy(seed):
    """A round with ``STEPS``'s options, the round signals returned: each participant's
    ``update_norm`` ‖θ − w‖, ``update_sketch`` (θ − w)ᵀR and ``grad_var`` against NumPy SGD
    fed the same minibatches, 0 for the others; a client without samples has 0 throughout."""
    steps, batch_size = STEPS["local_steps"], STEPS["batch_size"]
    data, params, lr, key = random_instance(seed, batch_size)
    r = projection(SKETCH_KEY)
    w0 = flat(params["Dense_0"]["kernel"], params["Dense_0"]["bias"]).astype(np.float64)
    clients = (0, 2, 3, 4)
    state = LearnerState(as_state(params).edge_params, SKETCH_KEY)
    _, metrics = step(STEPS, state, select(*clients), data=data, lr=lr, key=key, returned=ROUND)
    for c in range(N):
        n = int(data.count[0, c])
        x, y, k_c = data.x[0, c, :n], data.y[0, c, :n], jax.random.fold_in(key, c)
        trained, variance = numpy_steps_with_variance(params, x, y, k_c, lr, steps, batch_size)
        update = flat(trained["Dense_0"]["kernel"], trained["Dense_0"]["bias"]) - w0
        if c not in clients:
            update, variance = 0 * update, 0.0
        np.testing.assert_allclose(float(metrics["update_norm"][c]), np.linalg.norm(update),
                                   rtol=1e-5, atol=1e-6)  # fmt: skip
        np.testing.assert_allclose(np.asarray(metrics["update_sketch"][c]), update @ r,
                                   rtol=1e-4, atol=1e-5)  # fmt: skip
        np.testing.assert_allclose(float(metrics["grad_var"][c]), variance, rtol=1e-4, atol=1e-6)
        # η·K: every step moves a client that holds data.
        scale = lr * steps if c in clients and n > 0 else 0.0
        np.testing.assert_allclose(float(metrics["update_scale"][c]), scale, rtol=1e-6)
    assert float(np.max(metrics["grad_var"])) > 0  # minibatches differ: a real variance


def test_update_scale_counts_the_epochs_batches_that_hold_data():
    """By epochs, K_k = E·⌈n_k/B⌉ (the batches of padding only do not move the model)."""
    clients = (0, 1, 2, 3, 4)
    _, metrics = step(STD, as_state(PARAMS), select(*clients))
    batches = [math.ceil(n / STD["batch_size"]) for n in COUNTS]
    want = [LR * STD["epochs"] * b for b in batches]
    np.testing.assert_allclose(np.asarray(metrics["update_scale"]), want, rtol=1e-6)


def test_signals_grad_sketch_and_local_update_norm_match_numpy():
    """Before a round: every client's full-batch gradient at the global model, sketched, and
    the norm of the update every client would make from the signals' key (``STEPS``)."""
    steps, batch_size = STEPS["local_steps"], STEPS["batch_size"]
    data, params, lr, key = random_instance(4, batch_size)
    learner = _learner(**{**DEFAULTS, **STEPS})
    state = LearnerState(as_state(params).edge_params, SKETCH_KEY)
    names = ("grad_sketch", "local_update_norm")
    hparams = {"learning_rate": np.float32(lr)}
    got = jax.jit(learner.signals, static_argnums=4)(key, state, data, hparams, names)
    r = projection(SKETCH_KEY)
    w0 = flat(params["Dense_0"]["kernel"], params["Dense_0"]["bias"]).astype(np.float64)
    assert got["grad_sketch"].shape == (N, SKETCH_DIM)
    for c in range(N):
        n = int(data.count[0, c])
        x, y = data.x[0, c, :n], data.y[0, c, :n]
        gradient = flat(*numpy_gradient(params, x, y)) if n else np.zeros_like(w0)
        np.testing.assert_allclose(np.asarray(got["grad_sketch"][c]), gradient @ r,
                                   rtol=1e-4, atol=1e-5)  # fmt: skip
        trained, _ = numpy_steps_with_variance(
            params, x, y, jax.random.fold_in(key, c), lr, steps, batch_size
        )
        update = flat(trained["Dense_0"]["kernel"], trained["Dense_0"]["bias"]) - w0
        np.testing.assert_allclose(float(got["local_update_norm"][c]), np.linalg.norm(update),
                                   rtol=1e-5, atol=1e-6)  # fmt: skip


def test_the_projection_is_drawn_once_per_run_from_the_init_key():
    learner = _learner(**DEFAULTS)
    a, b = (learner.init(jax.random.key(s), DATA, {}) for s in (0, 1))
    again = learner.init(jax.random.key(0), DATA, {})
    assert np.array_equal(jax.random.key_data(a.sketch_key), jax.random.key_data(again.sketch_key))
    assert not np.array_equal(jax.random.key_data(a.sketch_key), jax.random.key_data(b.sketch_key))


@pytest.mark.parametrize(
    "name", ["fedis", "delta", "ocs", "fedcor", "divfl", "clustered_similarity"]
)
def test_the_update_and_gradient_aware_policies_run_on_the_learners_signals(name):
    """A federated run of each policy that reads the sketches and norms traces with the real
    learner (``eval_shape``: nothing compiles): the runner computes its signals before the
    selection or after the training, in the shapes it keeps (sketches of ``sketch_dim``)."""

    env = RbcsfEnv()
    spec = get(name)
    learner = _learner(**{**DEFAULTS, **STEPS})
    spec.check_learner(learner)
    run = make_run(env, make_params(N), spec.build(N, 2), 3, learner=learner, trajectories=True)
    hparams = {**spec.defaults(), "learning_rate": LR, "partition": 0}
    out = jax.eval_shape(run, jax.random.key(0), hparams, DATA)
    assert out.arrays()["selected"].shape == (3, N)
