"""FedAvg on padded per-client data, written for one instance and vmapped by the callers.

* ``local_sgd`` — a client's update: E epochs of minibatch SGD (optax) over its own samples in a
  fresh random order each epoch (COCS eq. 2; FedAvg's ClientUpdate), or a fixed number of SGD
  steps, each on one minibatch drawn afresh (Xia §V-A: "mini-batch size ρ is 2").
* ``local_signals`` — per-client accuracy and loss of a model on each client's own samples,
  which the runner hands to policies that read them (``jfl.policies.LEARNER_SIGNALS``).
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
prefix-consistent PRNG, padding sorts last (so a minibatch drawn for one step is the same real
samples however much padding follows them), and batches with no real sample leave the model
untouched. They do not depend on the slot a client trains in either: its randomness is derived
from its client index.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jfl.fl.sketch import flat_rows, sketch
from jfl.kernels.reduce import pairwise_norm, pairwise_sum
from jfl.policies.base import LEARNER_SIGNALS, SKETCH_DIM

AGGREGATIONS = ("data_size", "uniform")
# The signals ``local_signals`` computes in one pass over every client's samples.
FULL_PASS_SIGNALS = frozenset({"local_accuracy", "local_loss", "local_loss_sq", "data_size"})
EVAL_BATCH = 1024  # test samples per forward pass when evaluating
GRADIENT_BATCH = 16  # clients per backward pass of ``gradient_sketches``
# fold_in(init key, SKETCH_STREAM) keys the run's projection: the model's draws stay as they were.
SKETCH_STREAM = 0x5EC7


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
    x_test: jax.Array  # u8 or f32[n_test, *sample_shape]  (``pixels`` makes both f32)
    y_test: jax.Array  # i[n_test]


class LearnerState(NamedTuple):
    edge_params: Any  # pytree, leaves [M, ...]: each edge server's model (M = 1 for flat FL)
    # The run's sketch projection (``jfl.fl.sketch``), drawn once per run; None: no sketches.
    sketch_key: jax.Array | None = None


class LocalResult(NamedTuple):
    """What one client's local training gives (``local_training``)."""

    params: Any  # pytree: the client's model after local SGD
    train_loss: jax.Array  # f[]  mean minibatch loss over the steps that moved the model
    grad_var: jax.Array  # f[]  mean_b ‖g_b‖² − ‖mean_b g_b‖² over those steps' gradients
    steps: jax.Array  # f[]  the steps that moved the model (K_i)


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
    # What ``evaluate`` returns, name -> ``jfl.envs.base.Metric`` of dims ("eval",), which the
    # runner records (``jfl.runner.learner_outputs``); None: test accuracy and loss.
    evaluations: Mapping[str, Any] | None = None
    # Whether a run's numbers are the same bits in a batch of any shape (elementwise sums only,
    # as the quadratic's); a model's matrix products are not, so a sweep of such a learner
    # computes every chunk at exactly its chunk size (docs/decisions.md#federated-chunks).
    batch_invariant: bool = False


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
    u = jax.random.uniform(key, mask.shape)
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
    num_positions = data.mask.shape[2]
    mask = data.mask[partition, client]
    optimizer = optax.sgd(learning_rate)

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

    zeros = jax.tree.map(jnp.zeros_like, params)
    start = (params, optimizer.init(params), zeros)
    if steps is not None:
        # The first min(B, S) positions of a fresh order: B real samples, or all of them (and
        # padding, masked out) when the client holds fewer.
        width = min(batch_size, num_positions)

        def one_step(carry, k_step):
            positions = shuffled_positions(k_step, mask)[:width]
            return descend(carry, positions, mask[positions])

        carry, losses = jax.lax.scan(one_step, start, jax.random.split(key, steps))
        return _local_result(carry, *losses)

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

    carry, losses = jax.lax.scan(epoch, start, jax.random.split(key, epochs))
    return _local_result(carry, *losses)


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

    train = jax.vmap(
        lambda params, client, key, lr, partition, data: local_training(
            apply_fn,
            params,
            data,
            client,
            key,
            lr,
            epochs=epochs,
            batch_size=batch_size,
            partition=partition,
            steps=local_steps,
        ),
        in_axes=(0, 0, 0, None, None, None),
    )

    def step(
        key, state: LearnerState, action, delivered, t, data: FederatedData, hparams, weight=None
    ):
        """One round: train the selected clients, aggregate the delivered models.

        ``action`` bool[N] or bool[N, M] (client → edge server), ``delivered`` bool[N] (the
        client's model reached its server before the deadline), ``t`` the 1-based round.
        ``weight`` f[N] (a policy's ``jfl.policies.Selection``): each delivered client's update
        θ_k − w moves its server's model by that weight, unnormalised, instead of the
        ``aggregation`` average. Metrics: ``num_delivered``, ``untrained``, and the round
        signals (0 for clients not trained this round): ``train_loss`` and ``grad_var`` f[N]
        (``local_training``'s), ``update_norm`` f[N] and ``update_sketch`` f[N, sketch_dim] of
        θ_k − w, and ``update_scale`` f[N], η·K_k (the learning rate times the steps that moved
        the model: plain SGD's θ_k − w is −η·K_k times the mean of its minibatch gradients),
        which takes an update to the gradient scale (XLA drops what the run does not read).
        """
        selected = action if action.ndim == 1 else jnp.any(action, axis=-1)
        server = jnp.zeros(num_clients, jnp.int32) if action.ndim == 1 else jnp.argmax(action, -1)
        num_selected = jnp.sum(selected, dtype=jnp.int32)
        (clients,) = jnp.nonzero(selected, size=slots, fill_value=0)
        in_use = jnp.arange(slots) < num_selected
        keys = jax.vmap(lambda c: jax.random.fold_in(key, c))(clients)
        start = jax.tree.map(lambda p: p[server[clients]], state.edge_params)
        partition = partition_index(hparams)
        local = train(start, clients, keys, hparams["learning_rate"], partition, data)
        trained = local.params
        arrived = in_use & delivered[clients]
        if weight is not None:
            edge = _move(trained, jnp.where(arrived, weight[clients], 0.0), server[clients],
                         state.edge_params, num_servers)  # fmt: skip
        else:
            uniform = aggregation_index(hparams, aggregation) == AGGREGATIONS.index("uniform")
            size = jnp.where(uniform, 1.0, data.count[partition, clients].astype(jnp.float32))
            size = jnp.where(arrived, size, 0.0)
            edge = _aggregate(trained, size, server[clients], state.edge_params, num_servers)
        if num_servers > 1:
            merged = server_mean(edge)
            is_global = (t % global_every) == 0
            edge = jax.tree.map(
                lambda e, g: jnp.where(is_global, jnp.broadcast_to(g, e.shape), e), edge, merged
            )
        # Unused slots (client 0 as filler) scatter out of range and are dropped.
        target = jnp.where(in_use, clients, num_clients)

        def per_client(values):
            blank = jnp.zeros((num_clients, *values.shape[1:]), values.dtype)
            return blank.at[target].set(values, mode="drop")

        updates = flat_rows(trained) - flat_rows(start)
        metrics = {
            "num_delivered": jnp.sum(arrived, dtype=jnp.int32),
            "untrained": jnp.maximum(num_selected - slots, 0),
            "train_loss": per_client(local.train_loss),
            "grad_var": per_client(local.grad_var),
            "update_scale": per_client(hparams["learning_rate"] * local.steps),
            "update_norm": per_client(pairwise_norm(updates)),
        }
        if state.sketch_key is not None:  # a state built by hand may have no projection
            metrics["update_sketch"] = per_client(sketch(state.sketch_key, updates, sketch_dim))
        return state._replace(edge_params=edge), metrics

    def evaluate(state: LearnerState, data: FederatedData) -> dict:
        """Test accuracy and loss of the global model (the mean of the edge models)."""
        return evaluate_model(apply_fn, server_mean(state.edge_params), data)

    def signals(key, state: LearnerState, data: FederatedData, hparams, names) -> dict:
        """The signals ``names`` (of ``LEARNER_SIGNALS`` before a round) of the global model
        (the mean of the edge models) on the configuration's partition, each computed only if
        asked for: ``local_signals`` (one pass over every client's samples), ``minibatch_loss``
        on ``probe_batch`` samples drawn with ``key``, ``grad_sketch`` (a backward pass per
        client) and ``local_update_norm`` (every client trains from the global model, its
        randomness from ``key`` as ``step``'s from the round's key)."""
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
        keys = jax.vmap(lambda c: jax.random.fold_in(key, c))(clients)
        start = jax.tree.map(lambda p: jnp.broadcast_to(p, (num_clients, *p.shape)), params)
        local = train(start, clients, keys, hparams["learning_rate"], partition, data)
        return pairwise_norm(flat_rows(local.params) - flat_rows(start))

    return Learner(
        init=init,
        step=step,
        evaluate=evaluate,
        num_servers=num_servers,
        signals=signals,
        provides=LEARNER_SIGNALS,
    )


def _move(trained, weight, server, edge_params, num_servers: int):
    """Every edge server's model w moved to ``w + Σ_k weight_k (θ_k − w)`` over the slots
    trained for it (``server``: each slot's; unnormalised, so Σ weight < 1 keeps part of w):
    the edge models stacked [M, ...]."""

    def move(leaf, old):
        start = old[server]
        shaped = weight.reshape(-1, *([1] * (leaf.ndim - 1)))
        per_server = [
            pairwise_sum(jnp.where((server == m).reshape(shaped.shape), shaped * (leaf - start),
                                   0.0), axis=0)
            for m in range(num_servers)
        ]  # fmt: skip
        return old + jnp.stack(per_server)

    return jax.tree.map(move, trained, edge_params)


def _aggregate(trained, weight, server, edge_params, num_servers: int):
    """Every edge server's FedAvg of the models trained for it (``server``: each slot's), its
    previous model kept when none was delivered: the edge models stacked [M, ...]."""
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


def model_footprint(model, sample_shape) -> tuple[int, int]:
    """(parameters, activation floats per sample) of ``model``, from shapes only."""

    def init(x):
        _, variables = model.init_with_output(jax.random.key(0), x, capture_intermediates=True)
        return variables

    variables = jax.eval_shape(init, jax.ShapeDtypeStruct((1, *sample_shape), jnp.float32))
    params = variables["params"]
    intermediates = variables.get("intermediates", {})
    num_params = sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(params))
    activations = sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(intermediates))
    return num_params, max(activations, int(np.prod(sample_shape)))


def bytes_per_fl_run(
    num_params: int,
    activations: int,
    *,
    slots: int,
    batch_size: int,
    num_servers: int,
    num_rounds: int,
    num_clients: int,
) -> int:
    """Rough upper bound of the memory one (configuration, seed) training run needs."""
    from jfl import sweep

    models = num_params * (4 * slots + 3 * num_servers + 4)  # start, trained, grads, averages
    training = 3 * activations * batch_size * slots  # forward and backward activations
    evaluation = activations * EVAL_BATCH
    selection = sweep.bytes_per_run(num_rounds, num_clients, slots, False)
    # float32, ×2 for XLA temporaries, plus the selection run's own footprint.
    return 2 * 4 * (models + max(training, evaluation)) + selection
