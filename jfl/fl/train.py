"""FedAvg on padded per-client data, written for one instance and vmapped by the callers.

* ``local_sgd`` — a client's update: E epochs of minibatch SGD (optax) over its own samples in a
  fresh random order each epoch (COCS eq. 2; FedAvg's ClientUpdate).
* ``weighted_average`` — FedAvg aggregation of the trained models, weighted by data size or
  uniformly (COCS eq. 3 within an edge server).
* ``make_learner`` — the learner the runner drives: each round the policy's selected clients
  train from their server's model, vmapped over a fixed number of training *slots*; the models
  that arrive (deadline-based dropping, COCS §III-A) are averaged per edge server, and every
  ``global_every`` rounds the edge models are averaged into the global one (COCS eq. 6). A flat
  FL run is the case of one server aggregated every round.

Clients' data are stacked and padded (``jfl.fl.partition.ClientData``) and passed to the compiled
program as arguments, never closed over: closed-over arrays would be baked into the program as
constants. Minibatches are gathered from the stacked arrays step by step, so memory does not grow
with the number of slots times the client dataset size.

Results do not depend on padding: a client's sample order is drawn per position with a
prefix-consistent PRNG, padding sorts last, and batches with no real sample leave the model
untouched. They do not depend on the slot a client trains in either: its randomness is derived
from its client index.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jfl.kernels.reduce import pairwise_sum

AGGREGATIONS = ("data_size", "uniform")
EVAL_BATCH = 1024  # test samples per forward pass when evaluating


class FederatedData(NamedTuple):
    """Everything a federated run reads, passed to the compiled program as arguments.

    The leading axis P holds alternative partitions of the same training set (e.g. γ₁ = 1, 10
    and IID), padded to one size, so that one compiled program runs every scenario: a
    configuration picks its partition with the traced hyperparameter ``partition``.
    """

    x: jax.Array  # f[P, N, S, *sample_shape]  clients' samples, zero padding after count
    y: jax.Array  # i[P, N, S]
    mask: jax.Array  # bool[P, N, S]  True for real samples (each client's come first)
    count: jax.Array  # i[P, N]  samples per client
    x_test: jax.Array  # f[n_test, *sample_shape]
    y_test: jax.Array  # i[n_test]


class LearnerState(NamedTuple):
    edge_params: Any  # pytree, leaves [M, ...]: each edge server's model (M = 1 for flat FL)


class Learner(NamedTuple):
    """Pure functions the runner calls (optax style); see ``make_learner``."""

    init: Callable[..., LearnerState]  # init(key, data, hparams)
    step: Callable[..., tuple[LearnerState, dict]]  # step(key, state, action, delivered, t, ...)
    evaluate: Callable[..., dict]  # evaluate(state, data) -> {"accuracy", "test_loss"}
    num_servers: int


def masked_loss(apply_fn, params, x, y, valid):
    """Mean softmax cross-entropy over the valid samples (0 when there are none)."""
    logits = apply_fn(params, x)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    num_valid = jnp.sum(valid)
    return jnp.sum(jnp.where(valid, losses, 0.0)) / jnp.maximum(num_valid, 1)


def batch_plan(num_positions: int, batch_size: int) -> tuple[int, int]:
    """(batches per epoch, padded length): epochs cover every position in fixed-size batches."""
    num_batches = max(1, math.ceil(num_positions / batch_size))
    return num_batches, num_batches * batch_size


def local_sgd(
    apply_fn,
    params,
    data: FederatedData,
    client,
    key,
    learning_rate,
    *,
    epochs: int,
    batch_size: int,
    partition=0,
):
    """Client ``client``'s model after E epochs of minibatch SGD from ``params`` (COCS eq. 2).

    Each epoch visits the client's ``count`` samples once in a random order, in batches of
    ``batch_size`` (the last one smaller); a batch size at least the client's data size is
    full-batch gradient descent. ``client``, ``partition`` and ``learning_rate`` may be traced.
    """
    num_positions = data.mask.shape[2]
    num_batches, padded = batch_plan(num_positions, batch_size)
    mask = data.mask[partition, client]
    optimizer = optax.sgd(learning_rate)

    def epoch(carry, k_epoch):
        # Per-position uniforms are prefix-consistent (threefry is partitionable), so the order
        # of the real samples does not depend on how much padding follows them.
        u = jax.random.uniform(k_epoch, (num_positions,))
        order = jnp.argsort(jnp.where(mask, u, 2.0))
        order = jnp.concatenate([order, jnp.full(padded - num_positions, order[-1])])
        slots_valid = jnp.concatenate(
            [mask[order[:num_positions]], jnp.zeros(padded - num_positions, bool)]
        )

        def minibatch(carry, b):
            params, opt_state = carry
            positions = jax.lax.dynamic_slice_in_dim(order, b * batch_size, batch_size)
            valid = jax.lax.dynamic_slice_in_dim(slots_valid, b * batch_size, batch_size)
            x = data.x[partition, client, positions]
            y = data.y[partition, client, positions]
            grads = jax.grad(lambda p: masked_loss(apply_fn, p, x, y, valid))(params)
            updates, new_opt_state = optimizer.update(grads, opt_state, params)
            new_params = optax.apply_updates(params, updates)
            # A batch of padding only (clients with little data) leaves the model untouched.
            keep = jnp.any(valid)
            params = jax.tree.map(lambda n, o: jnp.where(keep, n, o), new_params, params)
            opt_state = jax.tree.map(lambda n, o: jnp.where(keep, n, o), new_opt_state, opt_state)
            return (params, opt_state), None

        carry, _ = jax.lax.scan(minibatch, carry, jnp.arange(num_batches))
        return carry, None

    (params, _), _ = jax.lax.scan(
        epoch, (params, optimizer.init(params)), jax.random.split(key, epochs)
    )
    return params


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


def partition_index(hparams):
    """The configuration's partition (hyperparameter ``partition``, default 0) as an integer."""
    return jnp.asarray(hparams.get("partition", 0)).astype(jnp.int32)


def check_learner_options(
    *, epochs, batch_size, slots, num_clients, num_servers, aggregation, global_every
) -> None:
    """Static options, checked before anything compiles (ValueError naming the option)."""
    for name, value, low in (
        ("epochs", epochs, 1),
        ("batch_size", batch_size, 1),
        ("num_servers", num_servers, 1),
        ("global_every", global_every, 1),
    ):
        if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
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
) -> Learner:
    """FedAvg (or hierarchical FedAvg with ``num_servers`` edge servers) for the runner.

    ``slots`` is the most clients trained in one round (default: all N). Selected clients beyond
    it are not trained and are counted in ``untrained``, so a sweep can refuse such a run; set
    it to the policy's largest possible selection (m for top-m policies) to avoid training empty
    slots. Traced hyperparameters: ``learning_rate``, and ``partition`` (index into the data's
    leading axis, default 0).
    """
    slots = num_clients if slots is None else slots
    check_learner_options(
        epochs=epochs,
        batch_size=batch_size,
        slots=slots,
        num_clients=num_clients,
        num_servers=num_servers,
        aggregation=aggregation,
        global_every=global_every,
    )

    def apply_fn(params, x):
        return model.apply({"params": params}, x)

    def init(key, data: FederatedData, hparams) -> LearnerState:
        del data, hparams
        params = model.init(key, jnp.zeros((1, *sample_shape), jnp.float32))["params"]
        edge = jax.tree.map(lambda p: jnp.broadcast_to(p, (num_servers, *p.shape)), params)
        return LearnerState(edge_params=edge)

    train = jax.vmap(
        lambda params, client, key, lr, partition, data: local_sgd(
            apply_fn,
            params,
            data,
            client,
            key,
            lr,
            epochs=epochs,
            batch_size=batch_size,
            partition=partition,
        ),
        in_axes=(0, 0, 0, None, None, None),
    )

    def step(key, state: LearnerState, action, delivered, t, data: FederatedData, hparams):
        """One round: train the selected clients, aggregate the delivered models.

        ``action`` bool[N] or bool[N, M] (client → edge server), ``delivered`` bool[N] (the
        client's model reached its server before the deadline), ``t`` the 1-based round.
        """
        selected = action if action.ndim == 1 else jnp.any(action, axis=-1)
        server = jnp.zeros(num_clients, jnp.int32) if action.ndim == 1 else jnp.argmax(action, -1)
        num_selected = jnp.sum(selected, dtype=jnp.int32)
        (clients,) = jnp.nonzero(selected, size=slots, fill_value=0)
        in_use = jnp.arange(slots) < num_selected
        keys = jax.vmap(lambda c: jax.random.fold_in(key, c))(clients)
        start = jax.tree.map(lambda p: p[server[clients]], state.edge_params)
        partition = partition_index(hparams)
        trained = train(start, clients, keys, hparams["learning_rate"], partition, data)
        if aggregation == "data_size":
            weight = data.count[partition, clients].astype(jnp.float32)
        else:
            weight = jnp.ones(slots, jnp.float32)
        weight = jnp.where(in_use & delivered[clients], weight, 0.0)
        edge = [
            weighted_average(
                trained,
                jnp.where(server[clients] == m, weight, 0.0),
                jax.tree.map(lambda p, m=m: p[m], state.edge_params),
            )
            for m in range(num_servers)
        ]
        edge = jax.tree.map(lambda *leaves: jnp.stack(leaves), *edge)
        if num_servers > 1:
            merged = server_mean(edge)
            is_global = (t % global_every) == 0
            edge = jax.tree.map(
                lambda e, g: jnp.where(is_global, jnp.broadcast_to(g, e.shape), e), edge, merged
            )
        metrics = {
            "num_delivered": jnp.sum(in_use & delivered[clients], dtype=jnp.int32),
            "untrained": jnp.maximum(num_selected - slots, 0),
        }
        return LearnerState(edge_params=edge), metrics

    def evaluate(state: LearnerState, data: FederatedData) -> dict:
        """Test accuracy and loss of the global model (the mean of the edge models).

        The test set goes through the model in batches of at most ``EVAL_BATCH`` samples, so
        the memory of a large batch of runs does not grow with the test-set size.
        """
        params = server_mean(state.edge_params)
        num_test = data.y_test.shape[0]
        size = min(num_test, EVAL_BATCH)
        num_batches = math.ceil(num_test / size)
        padding = num_batches * size - num_test
        x = jnp.concatenate([data.x_test, jnp.zeros((padding, *data.x_test.shape[1:]))])
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

    return Learner(init=init, step=step, evaluate=evaluate, num_servers=num_servers)
