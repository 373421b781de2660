"""What a client computes on its own samples: local SGD and the signals of a model.

* ``local_training`` (``local_sgd``: its model only) — a client's update: E epochs of minibatch
  SGD (optax) over its own samples in a fresh random order each epoch (COCS eq. 2; FedAvg's
  ClientUpdate), or a fixed number of SGD steps, each on one minibatch drawn afresh (Xia §V-A:
  "mini-batch size ρ is 2").
* ``local_signals``, ``minibatch_loss``, ``gradient_sketches`` — per-client measurements of a
  model on each client's own samples, which the runner hands to policies that read them
  (``jfl.policies.LEARNER_SIGNALS``).

``jfl.fl.train`` vmaps these over the clients of a round and aggregates what they give.

Clients' data are stacked and padded (``FederatedData``) and passed to the compiled program as
arguments, never closed over: closed-over arrays would be baked into the program as constants.
Minibatches are gathered from the stacked arrays step by step, so memory does not grow with the
number of slots times the client dataset size.

Results do not depend on padding: a client's sample order is drawn per position with a
prefix-consistent PRNG, padding sorts last (so a minibatch drawn for one step is the same real
samples however much padding follows them), and batches with no real sample leave the model
untouched. They do not depend on the slot a client trains in either: its randomness is derived
from its client index.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jfl.fl.sketch import flat_rows, sketch
from jfl.kernels.reduce import pairwise_sum
from jfl.prng import uniform

# The signals ``local_signals`` computes in one pass over every client's samples.
FULL_PASS_SIGNALS = frozenset({"local_accuracy", "local_loss", "local_loss_sq", "data_size"})
EVAL_BATCH = 1024  # samples per forward pass when evaluating (test set, clients' samples)
GRADIENT_BATCH = 16  # clients per backward pass of ``gradient_sketches``


class FederatedData(NamedTuple):
    """Everything a federated run reads, passed to the compiled program as arguments.

    The leading axis P holds alternative partitions of the same training set (e.g. γ₁ = 1, 10
    and IID), padded to one size, so that one compiled program runs every scenario: a
    configuration picks its partition with the traced hyperparameter ``partition``.
    """

    x: jax.Array  # u8 or f32[P, N, S, *sample_shape]  clients' samples, zero padding after count
    y: jax.Array  # i[P, N, S]
    mask: jax.Array  # bool[P, N, S]  True for real samples (each client's come first)
    count: jax.Array  # i[P, N]  samples per client
    x_test: jax.Array  # u8 or f32[n_test, *sample_shape]  (``jfl.fl.train.pixels``: f32)
    y_test: jax.Array  # i[n_test]


class LocalResult(NamedTuple):
    """What one client's local training gives (``local_training``)."""

    params: Any  # pytree: the client's model after local SGD
    train_loss: jax.Array  # f[]  mean minibatch loss over the steps that moved the model
    grad_var: jax.Array  # f[]  mean_b ‖g_b‖² − ‖mean_b g_b‖² over those steps' gradients
    steps: jax.Array  # f[]  the steps that moved the model (K_i)


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


def shuffled_positions(key, mask):
    """A client's positions (``mask`` bool[S]): its real samples in uniformly random order,
    then the padding.

    Per-position uniforms are prefix-consistent (threefry is partitionable), so the order of the
    real samples does not depend on how much padding follows them.
    """
    u = uniform(key, mask.shape)
    return jnp.argsort(jnp.where(mask, u, 2.0))


def local_sgd(apply_fn, params, data: FederatedData, client, key, learning_rate, **options):
    """Client ``client``'s model after local SGD from ``params`` (``local_training``'s model;
    keyword ``options``: ``epochs``, ``batch_size``, ``partition``, ``steps``)."""
    return local_training(apply_fn, params, data, client, key, learning_rate, **options).params


def local_training(
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
    steps: int | None = None,
) -> LocalResult:
    """Client ``client``'s model after local SGD from ``params`` (``LocalResult``), with two
    by-products of the steps that moved it: the mean of each step's minibatch loss before the
    step (``train_loss``; Power-of-Choice's rpow-d ranks clients by it) and the variance of the
    minibatch gradients g_b, ``grad_var`` = mean_b ‖g_b‖² − ‖mean_b g_b‖² (σ_i², the local
    variance of DELTA, Wang et al. 2023), both 0 for a client without samples. XLA drops them
    when the caller does not use them.

    ``steps=None``: E epochs of minibatch SGD (COCS eq. 2; FedAvg). Each epoch visits the
    client's ``count`` samples once in a random order, in batches of ``batch_size`` (the last one
    smaller); a batch size at least the client's data size is full-batch gradient descent.

    ``steps=J``: J SGD steps, each on one minibatch of ``batch_size`` samples drawn uniformly
    without replacement from the client's samples, afresh every step (the paper's protocol in
    Xia §V-A is one step on ρ = 2 samples, the ρ of τ_LU = ρ/φ in eq. 36). A client with fewer
    samples than the batch uses all of them. ``epochs`` is then not used.

    Either way a client without samples keeps ``params``. ``client``, ``partition`` and
    ``learning_rate`` may be traced.
    """
    mask = data.mask[partition, client]
    optimizer = optax.sgd(learning_rate)
    descend = _sgd_step(apply_fn, optimizer, data, client, partition)
    zeros = jax.tree.map(jnp.zeros_like, params)
    start = (params, optimizer.init(params), zeros)
    if steps is None:
        carry, per_step = _epochs(descend, start, key, mask, epochs, batch_size)
    else:
        carry, per_step = _fresh_minibatches(descend, start, key, mask, steps, batch_size)
    return _local_result(carry, *per_step)


def _sgd_step(apply_fn, optimizer, data: FederatedData, client, partition):
    """``descend(carry, positions, valid)``: one SGD step of client ``client`` on its samples
    at ``positions`` (``valid``: which are real), scanned over by both schedules. The carry is
    (params, optimizer state, Σ of the gradients of the steps that moved the model); each step
    gives (its loss before the step, whether it moved the model, ‖g‖²)."""

    def descend(carry, positions, valid):
        params, opt_state, grad_sum = carry
        x = data.x[partition, client, positions]
        y = data.y[partition, client, positions]
        loss, grads = jax.value_and_grad(lambda p: masked_loss(apply_fn, p, x, y, valid))(params)
        updates, new_opt_state = optimizer.update(grads, opt_state, params)
        new_params = optax.apply_updates(params, updates)
        # A batch of padding only (clients with little data) leaves the model untouched.
        keep = jnp.any(valid)
        params = jax.tree.map(lambda n, o: jnp.where(keep, n, o), new_params, params)
        opt_state = jax.tree.map(lambda n, o: jnp.where(keep, n, o), new_opt_state, opt_state)
        grad_sum = jax.tree.map(lambda s, g: s + jnp.where(keep, g, 0.0), grad_sum, grads)
        return (params, opt_state, grad_sum), (loss, keep, _squared_norm(grads))

    return descend


def _fresh_minibatches(descend, start, key, mask, steps: int, batch_size: int):
    """``steps`` scanned steps of ``descend``, each on a minibatch drawn afresh: the first
    min(B, S) positions of a fresh order, B real samples, or all of them (and padding, masked
    out) when the client holds fewer."""
    width = min(batch_size, mask.shape[0])

    def one_step(carry, k_step):
        positions = shuffled_positions(k_step, mask)[:width]
        return descend(carry, positions, mask[positions])

    return jax.lax.scan(one_step, start, jax.random.split(key, steps))


def _epochs(descend, start, key, mask, epochs: int, batch_size: int):
    """``epochs`` epochs of ``descend``, each over every position in a fresh order, in batches
    of ``batch_size`` (``batch_plan``; slots past the positions are not valid)."""
    num_positions = mask.shape[0]
    num_batches, padded = batch_plan(num_positions, batch_size)

    def epoch(carry, k_epoch):
        order = shuffled_positions(k_epoch, mask)
        order = jnp.concatenate([order, jnp.full(padded - num_positions, order[-1])])
        slots_valid = jnp.concatenate(
            [mask[order[:num_positions]], jnp.zeros(padded - num_positions, bool)]
        )

        def minibatch(carry, b):
            positions = jax.lax.dynamic_slice_in_dim(order, b * batch_size, batch_size)
            valid = jax.lax.dynamic_slice_in_dim(slots_valid, b * batch_size, batch_size)
            return descend(carry, positions, valid)

        return jax.lax.scan(minibatch, carry, jnp.arange(num_batches))

    return jax.lax.scan(epoch, start, jax.random.split(key, epochs))


def _squared_norm(tree) -> jax.Array:
    """‖v‖² of the vector a pytree stands for (elementwise halvings: batch-invariant)."""
    return sum(pairwise_sum(leaf.reshape(-1) ** 2) for leaf in jax.tree.leaves(tree))


def _local_result(carry, losses, moved, grad_sq) -> LocalResult:
    """``LocalResult`` of the final carry and the per-step (loss, moved, ‖g‖²) of the steps."""
    params, _, grad_sum = carry
    losses, moved, grad_sq = losses.reshape(-1), moved.reshape(-1), grad_sq.reshape(-1)
    count = jnp.maximum(jnp.sum(moved), 1)
    loss = pairwise_sum(jnp.where(moved, losses, 0.0)) / count
    mean_sq = pairwise_sum(jnp.where(moved, grad_sq, 0.0)) / count
    # Rounding can take the difference of two close values below 0.
    variance = jnp.maximum(mean_sq - _squared_norm(grad_sum) / count**2, 0.0)
    return LocalResult(params, loss, variance, jnp.sum(moved).astype(jnp.float32))


def minibatch_loss(apply_fn, params, data: FederatedData, key, batch_size: int, partition=0):
    """f[N]: each client's mean loss of ``params`` on ``batch_size`` of its samples drawn
    uniformly without replacement (all of them when it holds fewer; 0 without samples): the
    cheap estimate of ``local_loss`` that Power-of-Choice's cpow-d ranks by. Client n's draw
    comes from ``fold_in(key, n)``, so it does not depend on the other clients."""
    _, num_clients, num_positions = data.mask.shape
    width = min(batch_size, num_positions)

    def one(client):
        mask = data.mask[partition, client]
        positions = shuffled_positions(jax.random.fold_in(key, client), mask)[:width]
        x, y = data.x[partition, client, positions], data.y[partition, client, positions]
        return masked_loss(apply_fn, params, x, y, mask[positions])

    return jax.vmap(one)(jnp.arange(num_clients))


def full_gradient(apply_fn, params, data: FederatedData, client, partition=0):
    """The gradient at ``params`` of client ``client``'s mean loss over all its samples (its
    full-batch gradient ∇F_i(w); 0 for a client without samples)."""
    mask = data.mask[partition, client]
    x, y = data.x[partition, client], data.y[partition, client]
    return jax.grad(lambda p: masked_loss(apply_fn, p, x, y, mask))(params)


def gradient_sketches(apply_fn, params, data: FederatedData, key, dim: int, partition=0):
    """f[N, dim]: every client's ``full_gradient`` at ``params``, sketched by the projection of
    ``key`` (``jfl.fl.sketch``). Clients go through the backward pass ``GRADIENT_BATCH`` at a
    time; the N gradients are then sketched together, so the projection is drawn once."""
    num_clients = data.mask.shape[1]
    size = min(num_clients, GRADIENT_BATCH)
    num_batches = math.ceil(num_clients / size)
    clients = jnp.minimum(jnp.arange(num_batches * size), num_clients - 1)

    def one_batch(batch):
        grads = jax.vmap(lambda c: full_gradient(apply_fn, params, data, c, partition))(batch)
        return flat_rows(grads)

    rows = jax.lax.map(one_batch, clients.reshape(num_batches, size))
    return sketch(key, rows.reshape(num_batches * size, -1)[:num_clients], dim)


def local_signals(apply_fn, params, data: FederatedData, partition=0) -> dict:
    """Per-client signals of the model ``params`` on each client's own samples.

    ``local_accuracy`` f[N]: the fraction of client n's samples the model classifies correctly;
    ``local_loss`` f[N]: their mean softmax cross-entropy; ``local_loss_sq`` f[N]: the mean of
    its square (Oort's statistical utility, from the same forward pass); ``data_size`` f[N]: how
    many samples client n holds (n_i, the p_i ∝ n_i of the sampling-based methods). This is
    what a client can measure when it receives the global model (it holds no other data):
    Xia §V-B's "local test accuracy" of the local-accuracy baseline. A client without samples
    gets accuracy 1 and losses 0 (nothing left to learn there), so policies that favour low
    accuracy or high loss rank it last.

    The samples of all clients go through the model in batches of at most ``EVAL_BATCH``;
    padding is excluded, and the per-client sums are elementwise halvings, so the values do not
    depend on the batch of runs or on the padding width (zeros appended to a halving add 0).
    ``partition`` may be traced.
    """
    _, num_clients, num_positions = data.mask.shape
    total = num_clients * num_positions
    size = min(total, EVAL_BATCH)
    num_batches = math.ceil(total / size)
    flat = jnp.arange(num_batches * size).reshape(num_batches, size)

    def one_batch(index):
        # Samples are gathered per batch: the padded [N, S, ...] partition is never copied.
        client = jnp.minimum(index // num_positions, num_clients - 1)
        position = index % num_positions
        valid = data.mask[partition, client, position] & (index < total)
        y = data.y[partition, client, position]
        logits = apply_fn(params, data.x[partition, client, position])
        losses = optax.softmax_cross_entropy_with_integer_labels(logits, y)
        correct = (jnp.argmax(logits, -1) == y) & valid
        losses = jnp.where(valid, losses, 0.0)
        # Squared here, apart from the sums: fused into them, the products would be contracted
        # into multiply-adds whose pairing depends on the padding width.
        return correct.astype(jnp.float32), losses, losses**2

    correct, losses, squares = jax.lax.map(one_batch, flat)
    correct, losses, squares = (
        v.reshape(-1)[:total].reshape(num_clients, num_positions)
        for v in (correct, losses, squares)
    )
    count = data.count[partition]
    has_data = count > 0
    denominator = jnp.maximum(count, 1).astype(jnp.float32)
    return {
        "local_accuracy": jnp.where(has_data, pairwise_sum(correct) / denominator, 1.0),
        "local_loss": jnp.where(has_data, pairwise_sum(losses) / denominator, 0.0),
        "local_loss_sq": jnp.where(has_data, pairwise_sum(squares) / denominator, 0.0),
        "data_size": count.astype(jnp.float32),
    }
