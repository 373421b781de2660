"""Clustered sampling based on model similarity (Fraboni, Vidal, Kameni and Lorenzi, "Clustered
sampling: low-variance and improved representativity for clients selection in federated
learning", ICML 2021, Algorithm 2; code: Accenture/Labs-Federated-Learning, branch
``clustered_sampling``, ``py_func/clustering.py`` and ``py_func/FedProx.py``).

The server keeps each client's last model update θ_i − w, its "representative gradient"
(``FedProx.py`` l. 451–456: the sampled clients' rows are replaced after each round; every row is
0 at the start, l. 344), here the learner's ``update_sketch``. Each round:

1. the distance between clients i and j is the angle between their updates,
   arccos(⟨u_i, u_j⟩/‖u_i‖‖u_j‖), and 0 when either update is 0, a client never seen
   (``get_similarity``, "cosine", l. 60–72);
2. Ward's hierarchical clustering of those distances (``FedProx.py`` l. 396,
   ``jfl.kernels.ward_linkage``);
3. the tree is cut into the largest subtrees whose data share is at most 1/m
   (``get_clusters_with_alg2`` l. 145–156: the merge heights are replaced by the merged
   cluster's weight and ``fcluster(·, 1/m, "distance")``; ``jfl.kernels.cut_by_weight``);
4. the m clusters of largest share each seed one of m buckets with mass m·p_i per client, the
   smallest of them bucket 0 (l. 167–178); the other clusters, in increasing share, their
   clients in a random order (l. 181–184), pour their mass m·p_i into the buckets' remaining room
   in turn, each bucket filled to 1 before the next (l. 186–201), as in Algorithm 1;
5. one client is drawn from each bucket (``sample_clients``) and the new model is
   Σ_k (1/m)·θ_{l_k} (``FedProx.py`` l. 428–430; ``draws_selection``).

Every bucket has mass 1 and each client m·p_i over the buckets, so the aggregation is unbiased
as in Algorithm 1. Where the authors' code and the paper part, and what is added for
shapes that the code does not handle (docs/decisions.md#clustered-similarity-ward-input and the
entries after it):

* ``ward_input="distances"`` (default): Ward on the angles as dissimilarities (the
  paper's method). The code passes the square N × N matrix to ``scipy.cluster.hierarchy.linkage``,
  which takes a 2-D array as N observations: Ward on the Euclidean distances between the rows of
  the angle matrix (scipy warns "looks suspiciously like an uncondensed distance matrix").
  ``ward_input="rows"`` is that computation.
* A client whose share exceeds 1/m (the code loops forever or loses the bias guarantee) seeds
  its bucket with mass 1 and pours the excess with the others, after them; with fewer than m
  clusters the missing buckets start empty (filled first). With every share at most 1/m this
  is the code's algorithm.
* Ties: a cluster's share decides its rank, equal shares go by a random draw per round (the
  code's ``argsort`` order); Ward's ties (all rows 0 at the start) follow the kernel's rule on a
  random order of the clients drawn each round, so no client index is favoured.
* The paper's clients are all available. A round runs Algorithm 2 on its available clients:
  the tree over them, shares p_i of their data renormalised (``clustered_size``'s rule).
* Rows: every selected client's row is replaced by its update (the learner reports the update
  of every client it trained, also one that missed a deadline).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jfl import checks
from jfl.kernels import draw_per_bucket
from jfl.kernels.linkage import cut_by_weight, node_weights, pairwise_distances, ward_linkage
from jfl.kernels.reduce import pairwise_norm
from jfl.policies.base import (
    SKETCH_DIM,
    Policy,
    PolicySpec,
    check_selection_size,
    check_sketch,
    draws_selection,
    register,
)

WARD_INPUTS = ("distances", "rows")
# A cluster whose share exceeds 1/m by at most this relative amount still counts as ≤ 1/m: the
# float error of a sum of shares (the code's integer scaling by 1e10 makes a similar allowance).
CUT_RTOL = 1e-6
# Angles (radians) up to this are 0: parallel updates, whose computed angle is rounding noise
# (~1e-7, 0 or not depending on how XLA fuses the arithmetic), are the same direction, so that
# Ward's tie rule, not rounding, orders them among the exact zeros of never-seen clients. The
# rows of the angle matrix (``ward_input="rows"``) are that close when at most ANGLE_ATOL·√N apart.
ANGLE_ATOL = 1e-5


class ClusteredSimilarityState(NamedTuple):
    updates: jax.Array  # f[N, K]  each client's last update sketch θ_i − w (0: never selected)


class Draws(NamedTuple):
    """One round's random draws (``round_draws``), from the select key."""

    order: jax.Array  # i32[N]  the clients in the order Ward's ties are broken in (slot → client)
    tie: jax.Array  # f[2N-1]  per tree node (slot ids): ranks clusters of equal share
    shuffle: jax.Array  # f[N]  per client: its place among its cluster's clients when poured
    key: jax.Array  # the key of the per-bucket draws (``draw_per_bucket``)


def round_draws(key: jax.Array, num_clients: int) -> Draws:
    """The round's draws, in the order ``select`` makes them."""
    k_order, k_tie, k_shuffle, k_draw = jax.random.split(key, 4)
    return Draws(
        jax.random.permutation(k_order, num_clients).astype(jnp.int32),
        jax.random.uniform(k_tie, (2 * num_clients - 1,)),
        jax.random.uniform(k_shuffle, (num_clients,)),
        k_draw,
    )


def angles(updates: jax.Array) -> jax.Array:
    """f[N, N]: the angle between every two rows, arccos of their cosine, and 0 where a row is
    0 (``get_similarity``, "cosine"). Computed as 2·atan2(‖û_i − û_j‖, ‖û_i + û_j‖) on the unit
    rows û, which is exact for equal rows and stable for nearly parallel ones (arccos of a
    rounded cosine is not: arccos(1 − 6e-8) ≈ 3e-4 in float32); angles up to ``ANGLE_ATOL``
    are 0."""
    norm = pairwise_norm(updates, axis=1)
    zero = norm == 0
    unit = updates / jnp.where(zero, 1.0, norm)[:, None]
    theta = 2.0 * jnp.arctan2(pairwise_distances(unit), pairwise_distances(unit, -unit))
    return jnp.where(zero[:, None] | zero[None, :] | (theta <= ANGLE_ATOL), 0.0, theta)


def row_distances(matrix: jax.Array, columns: jax.Array) -> jax.Array:
    """f[N, N]: Euclidean distances between the rows of ``matrix`` over the ``columns`` (bool[N])
    only: what ``scipy.cluster.hierarchy.linkage`` computes from a square matrix it is given;
    rows within ``ANGLE_ATOL``·√N are at 0."""
    distance = pairwise_distances(jnp.where(columns[None, :], matrix, 0.0))
    return jnp.where(distance <= ANGLE_ATOL * math.sqrt(matrix.shape[1]), 0.0, distance)


def similarity_buckets(labels, cluster_size, size, available, tie, shuffle, m: int):
    """Algorithm 2's m distributions (``get_clusters_with_alg2`` l. 158–207), f[m, N], each row
    summing to 1 (all zero when no available client has data).

    Args:
      labels: i32[N] each client's cluster, a node id of the tree (``cut_by_weight``).
      cluster_size: f[2N-1] each node's data size (``node_weights``).
      size: f[N] the clients' data sizes, 0 for the unavailable ones.
      available: bool[N].
      tie: f[2N-1] per node: of two clusters of equal size, the larger ``tie`` ranks first.
      shuffle: f[N] per client, its place among its cluster's clients when poured.
      m: number of buckets (static).
    """
    num_nodes = cluster_size.shape[0]
    total = jnp.sum(size)
    mass = m * size / jnp.where(total > 0, total, 1.0)  # m·p_i
    root = jnp.zeros(num_nodes, bool).at[labels].max(available)
    # rank[c]: clusters of larger (size, tie) than node c's; the m first are kept.
    bigger = (cluster_size[None, :] > cluster_size[:, None]) | (
        (cluster_size[None, :] == cluster_size[:, None]) & (tie[None, :] > tie[:, None])
    )
    rank = jnp.sum(root[None, :] & bigger, axis=1, dtype=jnp.int32)[labels]
    kept = available & (rank < m)
    bucket = m - 1 - rank  # the largest kept cluster seeds the last bucket
    seed = jnp.where(kept, jnp.minimum(mass, 1.0), 0.0)  # a share above 1/m: its excess pours
    seeds = jnp.where(jnp.arange(m)[:, None] == bucket[None, :], seed[None, :], 0.0)
    room = jnp.maximum(1.0 - jnp.sum(seeds, axis=1), 0.0)
    rest = mass - seed
    # Pour order: smaller clusters first (larger rank), a random order within a cluster.
    order = jnp.lexsort((shuffle, -rank))
    poured = _pour(rest[order], room)
    buckets = seeds + jnp.zeros_like(poured).at[:, order].set(poured)
    totals = jnp.sum(buckets, axis=1, keepdims=True)
    return jnp.where(totals > 0, buckets / jnp.where(totals > 0, totals, 1.0), 0.0)


def _pour(mass, room):
    """f[m, N]: items of ``mass`` (f[N], in order) poured into buckets with ``room`` (f[m]),
    each filled before the next: the overlap of item i's interval [M_{<i}, M_{≤i}) with bucket
    b's [R_{<b}, R_{≤b}) (Algorithm 1's pouring, with uneven room)."""
    end = jnp.cumsum(mass)
    capacity = jnp.sum(room)
    end = end * jnp.where(end[-1] > 0, capacity / jnp.where(end[-1] > 0, end[-1], 1.0), 0.0)
    start = jnp.concatenate([jnp.zeros(1, end.dtype), end[:-1]])
    top = jnp.cumsum(room)[:, None]
    bottom = top - room[:, None]
    return jnp.clip(jnp.minimum(end, top) - jnp.maximum(start, bottom), 0.0, None)


def round_buckets(updates, available, size, draws: Draws, m: int, ward_input: str = "distances"):
    """f[m, N]: one round's buckets (Alg. 2) from the clients' last ``updates`` (f[N, K]), over
    the ``available`` clients with data sizes ``size`` (0 for the unavailable ones)."""
    distance = angles(updates)
    if ward_input == "rows":
        distance = row_distances(distance, available)
    slot = draws.order  # slot s holds client order[s]: Ward's ties go by slot
    tree = ward_linkage(distance[slot][:, slot], available[slot])
    limit = jnp.sum(size) / m * (1.0 + CUT_RTOL)
    labels = cut_by_weight(tree, size[slot], limit)
    cluster_size = node_weights(tree, size[slot])
    buckets = similarity_buckets(labels, cluster_size, size[slot], available[slot], draws.tie,
                                 draws.shuffle[slot], m)  # fmt: skip
    return jnp.zeros_like(buckets).at[:, slot].set(buckets)


def clustered_similarity(
    num_clients: int,
    selection_size: int,
    *,
    ward_input: str = "distances",
    sketch_dim: int = SKETCH_DIM,
) -> Policy:
    """Clustered sampling by model similarity (Fraboni et al. 2021, Alg. 2): Ward's tree of the
    angles between the available clients' last updates, cut into clusters of data share ≤ 1/m,
    the m largest seeding m buckets and the rest poured into them; one client drawn from each
    bucket, each draw weighing 1/m.

    Args:
      num_clients: N.
      selection_size: m, the number of buckets (draws).
      ward_input: ``"distances"`` (Ward on the angles) or ``"rows"`` (the authors' code: Ward on
        the Euclidean distances between rows of the angle matrix).
      sketch_dim: K of the learner's ``update_sketch`` (``jfl.fl.make_learner``'s
        ``sketch_dim``; its default is 128).
    """
    check_selection_size(num_clients, selection_size)
    checks.choice("ward_input", ward_input, WARD_INPUTS)
    sketch_dim = checks.integer("sketch_dim", sketch_dim)
    m = selection_size

    def init(key, hparams):
        del key, hparams
        return ClusteredSimilarityState(jnp.zeros((num_clients, sketch_dim), jnp.float32))

    def select(key, state, obs, hparams):
        del hparams
        draws = round_draws(key, num_clients)
        size = jnp.where(obs.available, obs.data_size.astype(jnp.float32), 0.0)
        buckets = round_buckets(state.updates, obs.available, size, draws, m, ward_input)
        count = jnp.where(jnp.sum(size) > 0, draw_per_bucket(draws.key, buckets), 0)
        return draws_selection(count, m)

    def update(state, obs, action, feedback, hparams):
        del feedback, hparams
        check_sketch(obs.update_sketch, sketch_dim, "update_sketch")
        rows = jnp.where(action[:, None], obs.update_sketch, state.updates)
        return ClusteredSimilarityState(rows)

    return Policy(init, select, update, signals=("data_size", "update_sketch"))


register(
    PolicySpec(
        "clustered_similarity",
        clustered_similarity,
        {},
        "Clustered sampling (Alg. 2): Ward's tree of the angles between the clients' last "
        "updates, cut at share 1/m, one client from each of m buckets",
        requires=("available", "data_size", "update_sketch"),
        aggregation="policy_weights",
    )
)
