"""FedAvg over the clients a policy selects, written for one instance and vmapped by the callers.

* ``make_learner`` — the learner the runner drives: each round the policy's selected clients
  train from their server's model (``jfl.fl.local.local_training``), vmapped over a fixed number
  of training *slots*; the models that arrive (deadline-based dropping, COCS §III-A) are
  averaged per edge server, and every ``global_every`` rounds the edge models are averaged into
  the global one (COCS eq. 6). A flat FL run is the case of one server aggregated every round.
  Its ``step`` goes through the stages of a round: ``assign_slots`` (who trains where, from
  which model), local training, aggregation (``average_edges``, ``move_edges``,
  ``global_average``) and ``round_metrics``.
* ``weighted_average`` — FedAvg aggregation of the trained models, weighted by data size or
  uniformly (COCS eq. 3 within an edge server).
* ``evaluate_model`` — test accuracy and loss of the global model.

What a client computes on its own samples (local SGD, the signals policies read, the data layout
``FederatedData``) is ``jfl.fl.local``; the names the learner's callers import stay importable
from here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jfl.fl.local import (
    EVAL_BATCH,
    FULL_PASS_SIGNALS,
    FederatedData,
    LocalResult,
    gradient_sketches,
    local_signals,
    local_training,
    minibatch_loss,
)
from jfl.fl.local import local_sgd as local_sgd  # re-exported: jfl.fl and the tests import it
from jfl.fl.sketch import flat_rows, sketch
from jfl.kernels.reduce import pairwise_norm, pairwise_sum
from jfl.policies.base import LEARNER_SIGNALS, SKETCH_DIM

AGGREGATIONS = ("data_size", "uniform")
# fold_in(init key, SKETCH_STREAM) keys the run's projection: the model's draws stay as they were.
SKETCH_STREAM = 0x5EC7


class LearnerState(NamedTuple):
    edge_params: Any  # pytree, leaves [M, ...]: each edge server's model (M = 1 for flat FL)
    # The run's sketch projection (``jfl.fl.sketch``), drawn once per run; None: no sketches.
    sketch_key: jax.Array | None = None


class Learner(NamedTuple):
    """Pure functions the runner calls (optax style); see ``make_learner``."""

    init: Callable[..., LearnerState]  # init(key, data, hparams)
    # step(key, state, action, delivered, t, data, hparams, weight=None) -> (state, metrics):
    # metrics hold num_delivered, untrained and the round signals (``ROUND_SIGNALS``, f[N]).
    step: Callable[..., tuple[LearnerState, dict]]
    evaluate: Callable[..., dict]  # evaluate(state, data) -> {"accuracy", "test_loss"}
    num_servers: int
    # signals(key, state, data, hparams, names) -> {name: f[N]}: the per-client signals
    # ``names`` of the current global model that policies may read (``Policy.signals``);
    # ``provides`` names every signal the learner computes, the round signals included.
    signals: Callable[..., dict] | None = None
    provides: tuple[str, ...] = ()
    # What ``evaluate`` returns, name -> ``jfl.outputs.Metric`` of dims ("eval",), which the
    # runner records (``jfl.outputs.learner_outputs``); None: test accuracy and loss.
    evaluations: Mapping[str, Any] | None = None
    # Whether a run's numbers are the same bits in a batch of any shape (elementwise sums only,
    # as the quadratic's); a model's matrix products are not, so a sweep of such a learner
    # computes every chunk at exactly its chunk size (docs/decisions.md#federated-chunks).
    batch_invariant: bool = False


class SlotPlan(NamedTuple):
    """Who trains in one round's K training slots, and from which model (``assign_slots``)."""

    clients: jax.Array  # i[K]  the selected clients in client order; client 0 fills unused slots
    server: jax.Array  # i[K]  each slot's edge server: its model is the slot's start
    in_use: jax.Array  # bool[K]  the slots that hold a selected client
    untrained: jax.Array  # i[]  selected clients beyond the K slots (not trained)


def weighted_average(stacked, weights, fallback):
    """Σ_k w_k θ_k / Σ_k w_k over the leading axis of ``stacked``; ``fallback`` if Σ w = 0.

    The sums are elementwise halvings (``pairwise_sum``), so a configuration's model does not
    depend on how many other configurations share its batch.
    """
    total = pairwise_sum(weights)
    share = weights / jnp.maximum(total, jnp.finfo(weights.dtype).tiny)

    def average(leaf, old):
        weighted = share.reshape(-1, *([1] * (leaf.ndim - 1))) * leaf
        return jnp.where(total > 0, pairwise_sum(weighted, axis=0), old)

    return jax.tree.map(average, stacked, fallback)


def server_mean(edge_params):
    """(1/M) Σ_m w_m: the global model of COCS eq. 6 (elementwise sums, batch-invariant)."""
    return jax.tree.map(lambda leaf: pairwise_sum(leaf, axis=0) / leaf.shape[0], edge_params)


def aggregation_index(hparams, default: str = "data_size"):
    """The configuration's aggregation of plain selections, an index into ``AGGREGATIONS``
    (traced hyperparameter ``aggregation``; without it, ``default``)."""
    return jnp.asarray(hparams.get("aggregation", AGGREGATIONS.index(default))).astype(jnp.int32)


def partition_index(hparams):
    """The configuration's partition (hyperparameter ``partition``, default 0) as an integer."""
    return jnp.asarray(hparams.get("partition", 0)).astype(jnp.int32)


def check_learner_options(
    *,
    epochs,
    batch_size,
    slots,
    num_clients,
    num_servers,
    aggregation,
    global_every,
    local_steps=None,
    probe_batch=1,
    sketch_dim=SKETCH_DIM,
) -> None:
    """Static options, checked before anything compiles (ValueError naming the option)."""
    for name, value, low in (
        ("epochs", epochs, 1),
        ("batch_size", batch_size, 1),
        ("num_servers", num_servers, 1),
        ("global_every", global_every, 1),
        ("probe_batch", probe_batch, 1),
        ("sketch_dim", sketch_dim, 1),
    ):
        if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if local_steps is not None and (
        not isinstance(local_steps, int | np.integer)
        or isinstance(local_steps, bool)
        or local_steps < 1
    ):
        raise ValueError(
            f"local_steps must be None (epochs) or an integer >= 1, got {local_steps!r}"
        )
    if not isinstance(slots, int | np.integer) or not 1 <= slots <= num_clients:
        raise ValueError(
            f"slots (clients trained per round) must be an integer in [1, num_clients="
            f"{num_clients}], got {slots!r}"
        )
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")


def make_learner(
    model,
    sample_shape: tuple[int, ...],
    num_clients: int,
    *,
    epochs: int = 1,
    batch_size: int = 10,
    slots: int | None = None,
    num_servers: int = 1,
    aggregation: str = "data_size",
    global_every: int = 1,
    local_steps: int | None = None,
    probe_batch: int | None = None,
    sketch_dim: int = SKETCH_DIM,
) -> Learner:
    """FedAvg (or hierarchical FedAvg with ``num_servers`` edge servers) for the runner.

    Each selected client trains ``epochs`` epochs in minibatches of ``batch_size``, or, with
    ``local_steps``, that many SGD steps on one fresh minibatch each (``local_sgd``).
    ``slots`` is the most clients trained in one round (default: all N). Selected clients beyond
    it are not trained and are counted in ``untrained``, so a sweep can refuse such a run; set
    it to the policy's largest possible selection (m for top-m policies) to avoid training empty
    slots. Traced hyperparameters: ``learning_rate``, ``partition`` (index into the data's
    leading axis, default 0) and ``aggregation`` (an index into ``AGGREGATIONS``, default the
    ``aggregation`` option): a plain selection's models are averaged by data size or uniformly.
    ``signals`` gives the global model's ``local_signals``, its
    ``minibatch_loss`` on ``probe_batch`` samples (default: ``batch_size``), every client's
    ``grad_sketch`` (``gradient_sketches``) and ``local_update_norm`` (the norm of the update
    each client would make this round: every client trains); ``step`` gives each participant's
    ``train_loss``, ``grad_var``, ``update_norm`` ‖θ_k − w‖ and ``update_sketch`` (θ_k − w
    sketched). Sketches have ``sketch_dim`` coordinates, by one projection drawn per run.
    """
    slots = num_clients if slots is None else slots
    probe_batch = batch_size if probe_batch is None else probe_batch
    options = dict(epochs=epochs, batch_size=batch_size, slots=slots, num_clients=num_clients)
    options.update(num_servers=num_servers, aggregation=aggregation, global_every=global_every)
    check_learner_options(
        **options, local_steps=local_steps, probe_batch=probe_batch, sketch_dim=sketch_dim
    )

    def apply_fn(params, x):
        return model.apply({"params": params}, pixels(x))

    def init(key, data: FederatedData, hparams) -> LearnerState:
        del data, hparams
        params = model.init(key, jnp.zeros((1, *sample_shape), jnp.float32))["params"]
        edge = jax.tree.map(lambda p: jnp.broadcast_to(p, (num_servers, *p.shape)), params)
        return LearnerState(edge, jax.random.fold_in(key, SKETCH_STREAM))

    train = slot_training(apply_fn, epochs=epochs, batch_size=batch_size, steps=local_steps)

    def step(
        key, state: LearnerState, action, delivered, t, data: FederatedData, hparams, weight=None
    ):
        """One round: train the selected clients, aggregate the delivered models.

        ``action`` bool[N] or bool[N, M] (client → edge server), ``delivered`` bool[N] (the
        client's model reached its server before the deadline), ``t`` the 1-based round.
        ``weight`` f[N] (a policy's ``jfl.policies.Selection``): each delivered client's update
        θ_k − w moves its server's model by that weight, unnormalised, instead of the
        ``aggregation`` average. Metrics: ``round_metrics``' (XLA drops what the run does not
        read).
        """
        plan = assign_slots(action, slots)
        clients = plan.clients
        keys = client_keys(key, clients)
        start = jax.tree.map(lambda p: p[plan.server], state.edge_params)
        partition = partition_index(hparams)
        learning_rate = hparams["learning_rate"]
        local = train(start, clients, keys, learning_rate, partition, data)
        arrived = plan.in_use & delivered[clients]
        if weight is not None:
            moved = jnp.where(arrived, weight[clients], 0.0)
            edge = move_edges(local.params, moved, plan.server, state.edge_params)
        else:
            size = fedavg_weights(hparams, aggregation, data.count[partition, clients], arrived)
            edge = average_edges(local.params, size, plan.server, state.edge_params)
        if num_servers > 1:
            edge = global_average(edge, t, global_every)
        metrics = round_metrics(
            local, start, plan, arrived, learning_rate, num_clients, state.sketch_key, sketch_dim
        )
        return state._replace(edge_params=edge), metrics

    def evaluate(state: LearnerState, data: FederatedData) -> dict:
        """Test accuracy and loss of the global model (the mean of the edge models)."""
        return evaluate_model(apply_fn, server_mean(state.edge_params), data)

    return Learner(
        init=init,
        step=step,
        evaluate=evaluate,
        num_servers=num_servers,
        signals=make_signals(apply_fn, train, num_clients, probe_batch, sketch_dim),
        provides=LEARNER_SIGNALS,
    )


def slot_training(apply_fn, **options):
    """``local_training`` vmapped over the slots: ``train(params, clients, keys, learning_rate,
    partition, data)``, the start models, clients and keys stacked [K, ...] (``options``:
    ``epochs``, ``batch_size``, ``steps``)."""

    def one(params, client, key, learning_rate, partition, data):
        return local_training(
            apply_fn, params, data, client, key, learning_rate, partition=partition, **options
        )

    return jax.vmap(one, in_axes=(0, 0, 0, None, None, None))


def assign_slots(action, num_slots: int) -> SlotPlan:
    """The selected clients of ``action`` (bool[N], or bool[N, M]: client → edge server) in
    the first of ``num_slots`` slots, each with its edge server (0 for a flat ``action``)."""
    num_clients = action.shape[0]
    selected = action if action.ndim == 1 else jnp.any(action, axis=-1)
    server = jnp.zeros(num_clients, jnp.int32) if action.ndim == 1 else jnp.argmax(action, -1)
    num_selected = jnp.sum(selected, dtype=jnp.int32)
    (clients,) = jnp.nonzero(selected, size=num_slots, fill_value=0)
    in_use = jnp.arange(num_slots) < num_selected
    return SlotPlan(clients, server[clients], in_use, jnp.maximum(num_selected - num_slots, 0))


def client_keys(key, clients):
    """key[K]: each client's training key, ``fold_in(key, client)``: the same in any slot."""
    return jax.vmap(lambda c: jax.random.fold_in(key, c))(clients)


def fedavg_weights(hparams, default: str, count, arrived):
    """f[K]: each slot's weight in its server's FedAvg, its client's data size ``count`` (i[K])
    or 1 as the configuration's ``aggregation`` (``aggregation_index``) says; 0 for a model
    that did not arrive."""
    uniform = aggregation_index(hparams, default) == AGGREGATIONS.index("uniform")
    size = jnp.where(uniform, 1.0, count.astype(jnp.float32))
    return jnp.where(arrived, size, 0.0)


def global_average(edge_params, t, global_every: int):
    """The edge models [M, ...] after round ``t``: every ``global_every`` rounds each replaced
    by the global model, their mean (COCS eq. 6); as they are otherwise."""
    merged = server_mean(edge_params)
    is_global = (t % global_every) == 0
    return jax.tree.map(
        lambda e, g: jnp.where(is_global, jnp.broadcast_to(g, e.shape), e), edge_params, merged
    )


def round_metrics(
    local: LocalResult,
    start,
    plan: SlotPlan,
    arrived,
    learning_rate,
    num_clients: int,
    sketch_key=None,
    sketch_dim: int = SKETCH_DIM,
) -> dict:
    """A round's metrics: ``num_delivered``, ``untrained``, and the round signals of the
    clients trained from ``start`` (0 for the others): ``train_loss`` and ``grad_var`` f[N]
    (``local_training``'s), ``update_norm`` f[N] and ``update_sketch`` f[N, sketch_dim] of
    θ_k − w (no sketch without ``sketch_key``: a state built by hand may have no projection),
    and ``update_scale`` f[N], η·K_k (the learning rate times the steps that moved the model:
    plain SGD's θ_k − w is −η·K_k times the mean of its minibatch gradients), which takes an
    update to the gradient scale."""
    # Unused slots (client 0 as filler) scatter out of range and are dropped.
    target = jnp.where(plan.in_use, plan.clients, num_clients)

    def per_client(values):
        blank = jnp.zeros((num_clients, *values.shape[1:]), values.dtype)
        return blank.at[target].set(values, mode="drop")

    updates = flat_rows(local.params) - flat_rows(start)
    metrics = {
        "num_delivered": jnp.sum(arrived, dtype=jnp.int32),
        "untrained": plan.untrained,
        "train_loss": per_client(local.train_loss),
        "grad_var": per_client(local.grad_var),
        "update_scale": per_client(learning_rate * local.steps),
        "update_norm": per_client(pairwise_norm(updates)),
    }
    if sketch_key is not None:
        metrics["update_sketch"] = per_client(sketch(sketch_key, updates, sketch_dim))
    return metrics


def make_signals(apply_fn, train, num_clients: int, probe_batch: int, sketch_dim: int):
    """The learner's ``signals``: the per-client signals of the global model that policies
    read before a round (``LEARNER_SIGNALS``); ``train`` is ``slot_training``'s."""

    def signals(key, state: LearnerState, data: FederatedData, hparams, names) -> dict:
        """The signals ``names`` of the global model (the mean of the edge models) on the
        configuration's partition, each computed only if asked for: ``local_signals`` (one
        pass over every client's samples), ``minibatch_loss`` on ``probe_batch`` samples drawn
        with ``key``, ``grad_sketch`` (a backward pass per client) and ``local_update_norm``
        (every client trains from the global model, its randomness from ``key`` as ``step``'s
        from the round's key)."""
        params = server_mean(state.edge_params)
        partition = partition_index(hparams)
        values = {}
        if set(names) & FULL_PASS_SIGNALS:
            values.update(local_signals(apply_fn, params, data, partition))
        if "minibatch_loss" in names:
            values["minibatch_loss"] = minibatch_loss(
                apply_fn, params, data, key, probe_batch, partition
            )
        if "grad_sketch" in names:
            values["grad_sketch"] = gradient_sketches(
                apply_fn, params, data, state.sketch_key, sketch_dim, partition
            )
        if "local_update_norm" in names:
            values["local_update_norm"] = every_update_norm(key, params, partition, hparams, data)
        return {name: values[name] for name in names}

    def every_update_norm(key, params, partition, hparams, data):
        """f[N]: ‖θ_i − w‖ of every client i trained from ``params`` (keys as ``step``'s)."""
        clients = jnp.arange(num_clients)
        keys = client_keys(key, clients)
        start = jax.tree.map(lambda p: jnp.broadcast_to(p, (num_clients, *p.shape)), params)
        local = train(start, clients, keys, hparams["learning_rate"], partition, data)
        return pairwise_norm(flat_rows(local.params) - flat_rows(start))

    return signals


def move_edges(trained, weight, server, edge_params):
    """Every edge server's model w moved to ``w + Σ_k weight_k (θ_k − w)`` over the slots
    trained for it (``server``: each slot's; unnormalised, so Σ weight < 1 keeps part of w):
    the edge models stacked [M, ...]."""

    def move(leaf, old):
        start = old[server]
        shaped = weight.reshape(-1, *([1] * (leaf.ndim - 1)))
        per_server = [
            pairwise_sum(jnp.where((server == m).reshape(shaped.shape), shaped * (leaf - start),
                                   0.0), axis=0)
            for m in range(old.shape[0])
        ]  # fmt: skip
        return old + jnp.stack(per_server)

    return jax.tree.map(move, trained, edge_params)


def average_edges(trained, weight, server, edge_params):
    """Every edge server's FedAvg of the models trained for it (``server``: each slot's), its
    previous model kept when none was delivered: the edge models stacked [M, ...]."""
    num_servers = jax.tree.leaves(edge_params)[0].shape[0]
    edge = [
        weighted_average(
            trained,
            jnp.where(server == m, weight, 0.0),
            jax.tree.map(lambda p, m=m: p[m], edge_params),
        )
        for m in range(num_servers)
    ]
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *edge)


def evaluate_model(apply_fn, params, data: FederatedData) -> dict:
    """Test accuracy and loss of ``params`` on ``data``'s test set.

    The test set goes through the model in batches of at most ``EVAL_BATCH`` samples, so the
    memory of a large batch of runs does not grow with the test-set size.
    """
    num_test = data.y_test.shape[0]
    size = min(num_test, EVAL_BATCH)
    num_batches = math.ceil(num_test / size)
    padding = num_batches * size - num_test
    filler = jnp.zeros((padding, *data.x_test.shape[1:]), data.x_test.dtype)
    x = jnp.concatenate([data.x_test, filler])
    y = jnp.concatenate([data.y_test, jnp.zeros(padding, data.y_test.dtype)])
    valid = jnp.arange(num_batches * size) < num_test

    def one_batch(batch):
        x, y, valid = batch
        logits = apply_fn(params, x)
        losses = optax.softmax_cross_entropy_with_integer_labels(logits, y)
        correct = (jnp.argmax(logits, -1) == y) & valid
        return correct.astype(jnp.float32), jnp.where(valid, losses, 0.0)

    batches = (
        x.reshape(num_batches, size, *x.shape[1:]),
        y.reshape(num_batches, size),
        valid.reshape(num_batches, size),
    )
    correct, losses = jax.lax.map(one_batch, batches)
    return {
        "accuracy": pairwise_sum(correct.reshape(-1)) / num_test,
        "test_loss": pairwise_sum(losses.reshape(-1)) / num_test,
    }


def pixels(x: jax.Array) -> jax.Array:
    """The model's f32 input: uint8 images (0–255, as ``jfl.fl.data`` keeps them) scaled to
    [0, 1] here, in the step, so the clients' data stay a quarter of their float32 size; float
    inputs pass unchanged."""
    if x.dtype == jnp.uint8:
        return x.astype(jnp.float32) / 255
    return x
