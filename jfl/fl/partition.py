"""Split a labelled training set into per-client datasets (host side, NumPy).

The three papers train on MNIST-like data spread over the clients in different ways, and the
spread decides how much a selection policy matters: with IID data any client is as good as any
other, with label-skewed data the selected set decides which classes the global model sees.

* ``iid``: a shuffled, equal split (baseline of every paper).
* ``dirichlet``: RBCS-F §6.2.1, per-client class proportions ``q ~ Dir(γ·1)``; small ``γ`` gives
  clients of nearly one class, large ``γ`` clients with the uniform class mix.
* ``two_labels``: COCS §VI-A, every client holds samples of exactly two labels.
* ``heterogeneous``: CS-UCB-Q §V-B, a few "rich" clients hold five labels each, the others one.
* ``dirichlet_by_class``: Yurochkin et al. 2019, each class split over the clients in
  ``Dir(α·1)`` proportions (label and quantity skew).
* ``shards``: McMahan et al. 2017 §3 (and FedCor's 1SPC/2SPC), label-sorted data cut into equal
  shards, ``shards_per_client`` random shards per client.
* ``natural``: LEAF's FEMNIST, one client per group (writer) id given per sample.

A partition is only a table of indices into the training set (``Partition``), so that it can be
drawn once and the samples gathered later for any array of the same length (``stack_clients``
builds the padded, masked per-client arrays that a ``vmap`` over clients needs). Every sample is
used by at most one client, and all the randomness comes from the ``numpy.random.Generator``
passed in (``make_partition`` builds one from a seed).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from jfl.fl.local import FederatedData

if TYPE_CHECKING:
    from jfl.fl.data import Dataset
    from jfl.fl.local import FederatedData


class Partition(NamedTuple):
    indices: np.ndarray  # i64[N, S_max]  indices into the training set, -1 = padding, valid first
    count: np.ndarray  # i32[N]  samples per client


class ClientData(NamedTuple):
    x: np.ndarray  # u8 (uint8 images) or f32[N, S, *sample_shape]  zero padding after count
    y: np.ndarray  # i32[N, S]  0 padding
    mask: np.ndarray  # bool[N, S]  True for real samples
    count: np.ndarray  # i32[N]


# ---------------------------------------------------------------------------------------------
# Validation


def _is_int(value) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def _check_labels(labels) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0:
        raise ValueError(f"labels must be a non-empty 1-D array, got shape {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be integers, got dtype {labels.dtype}")
    if labels.min() < 0:
        raise ValueError(f"labels must be non-negative, got min {labels.min()}")
    return labels.astype(np.int64)


def _check_num_clients(num_clients, n: int) -> int:
    if not _is_int(num_clients) or not 1 <= num_clients <= n:
        raise ValueError(
            f"num_clients must be an integer in [1, n] = [1, {n}] (n = number of samples), "
            f"got {num_clients!r}"
        )
    return int(num_clients)


def _checked_classes(labels, num_clients) -> tuple[np.ndarray, int, np.ndarray]:
    """Checked labels and client count, and the distinct classes."""
    labels = _check_labels(labels)
    num_clients = _check_num_clients(num_clients, labels.size)
    return labels, num_clients, np.unique(labels)


def _check_per_client(name: str, value, num_clients: int, n: int, why: str = "") -> int:
    """``value`` of the option ``name``, an integer in [1, n // num_clients] (``why``: what else
    bounds it, for the error)."""
    high = n // num_clients
    if not _is_int(value) or not 1 <= value <= high:
        raise ValueError(
            f"{name} must be an integer in [1, n // num_clients] = [1, {high}] "
            f"(num_clients · {name} <= n = {n}{why}), got {value!r}"
        )
    return int(value)


def _check_concentration(concentration) -> None:
    if not (
        isinstance(concentration, int | float | np.integer | np.floating)
        and math.isfinite(concentration)
        and concentration > 0
    ):
        raise ValueError(f"concentration must be in (0, inf), got {concentration!r}")


def _check_int(name: str, value, low: int, high: int | None = None) -> int:
    if not _is_int(value) or value < low or (high is not None and value > high):
        allowed = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be an integer {allowed}, got {value!r}")
    return int(value)


# ---------------------------------------------------------------------------------------------
# Helpers


def _pack(clients: list[np.ndarray]) -> Partition:
    """Partition from one index array per client (padded with -1 to the longest, at least 1)."""
    count = np.array([len(c) for c in clients], np.int32)
    width = max(int(count.max(initial=0)), 1)
    indices = np.full((len(clients), width), -1, np.int64)
    for i, c in enumerate(clients):
        indices[i, : len(c)] = c
    return Partition(indices=indices, count=count)


def _split_classes(labels, classes, holders, num_clients, rng) -> list[list[np.ndarray]]:
    """Shuffle each class's samples and split them evenly among the clients holding it.

    ``holders[k]`` lists the clients holding ``classes[k]`` (empty: the class is unused). Returns
    per client the list of its index arrays. ``np.array_split`` gives the first holders one
    extra sample when the class does not divide evenly.
    """
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c, who in zip(classes, holders, strict=True):
        if not len(who):
            continue
        pool = rng.permutation(np.flatnonzero(labels == c))
        for client, share in zip(who, np.array_split(pool, len(who)), strict=True):
            parts[client].append(share)
    return parts


def _gather(parts: list[list[np.ndarray]], rng) -> Partition:
    """Concatenate and shuffle each client's shares (the classes interleaved)."""
    return _pack([_shuffled(own, rng) for own in parts])


def _shuffled(shares: list[np.ndarray], rng) -> np.ndarray:
    """One client's index arrays concatenated, in a random order."""
    merged = np.concatenate(shares) if shares else np.zeros(0, np.int64)
    return rng.permutation(merged)


# ---------------------------------------------------------------------------------------------
# Partitions


def iid(labels, num_clients: int, rng: np.random.Generator, samples_per_client=None) -> Partition:
    """Shuffle the samples and deal them out in equal shares.

    With ``samples_per_client = None`` all ``n`` samples are used: every client gets ``n // N``
    and the first ``n mod N`` clients one more. Otherwise every client gets exactly
    ``samples_per_client`` (``N · samples_per_client <= n``) and the rest is unused.
    """
    labels = _check_labels(labels)
    n = labels.size
    num_clients = _check_num_clients(num_clients, n)
    if samples_per_client is None:
        sizes = np.full(num_clients, n // num_clients)
        sizes[: n % num_clients] += 1
    else:
        spc = _check_per_client("samples_per_client", samples_per_client, num_clients, n)
        sizes = np.full(num_clients, spc)
    perm = rng.permutation(n)
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    return _pack([perm[bounds[i] : bounds[i + 1]] for i in range(num_clients)])


def dirichlet(
    labels,
    num_clients: int,
    concentration: float,
    rng: np.random.Generator,
    samples_per_client=None,
) -> Partition:
    """Label skew with Dirichlet class proportions (RBCS-F §6.2.1).

    The paper: "uniformly sample q_i × 500 items from each class, q ~ Dir(γ₁·1)". Per client,
    ``q ~ Dir(concentration · 1_C)`` over the ``C = labels.max() + 1`` classes; the client asks
    for ``multinomial(s, q)`` samples per class (``s = samples_per_client``, default ``n // N``),
    drawn without replacement from per-class pools of samples no earlier client took. Small
    ``concentration`` makes each client nearly one class; large ``concentration`` gives every
    client the uniform class mix (the global mix for balanced data such as MNIST).

    Decision (not in the paper, which has enough data per class): when a class pool runs out,
    the shortfall is drawn from the classes that still have samples, proportionally to ``q``
    restricted to them (uniformly if ``q`` puts no mass there), repeated until the client has
    ``s`` samples. Since ``N · s <= n``, every client therefore gets exactly ``s`` samples; late
    clients of a heavily skewed partition may be less skewed than ``q`` asks for.
    """
    labels = _check_labels(labels)
    n = labels.size
    num_clients = _check_num_clients(num_clients, n)
    _check_concentration(concentration)
    if samples_per_client is None:
        s = n // num_clients
    else:
        s = _check_per_client("samples_per_client", samples_per_client, num_clients, n)
    num_classes = int(labels.max()) + 1
    pools = [rng.permutation(np.flatnonzero(labels == c)) for c in range(num_classes)]
    left = np.array([len(p) for p in pools], np.int64)  # samples not yet used, per class
    alpha = np.full(num_classes, float(concentration))
    clients = []
    for _ in range(num_clients):
        q = rng.dirichlet(alpha)
        q = q / q.sum()
        take = np.minimum(rng.multinomial(s, q), left)
        short = s - int(take.sum())
        while short > 0 and (left - take).sum() > 0:
            room = left - take
            weights = np.where(room > 0, q, 0.0)
            if weights.sum() <= 0:
                weights = (room > 0).astype(float)
            extra = np.minimum(rng.multinomial(short, weights / weights.sum()), room)
            take += extra
            short -= int(extra.sum())
        mine = []
        for c in np.flatnonzero(take):
            start = len(pools[c]) - left[c]
            mine.append(pools[c][start : start + take[c]])
        left -= take
        clients.append(_shuffled(mine, rng))
    return _pack(clients)


def two_labels(
    labels, num_clients: int, rng: np.random.Generator, labels_per_client: int = 2
) -> Partition:
    """Every client holds samples of exactly ``labels_per_client`` labels (COCS §VI-A).

    The paper: "each client only contains samples of only two labels". The ``C`` classes are
    the distinct values of ``labels``. With ``L = labels_per_client``, the ``N·L`` label slots
    cycle through a random permutation of the classes, and client-slot groups of ``L`` consecutive
    slots (distinct since ``L <= C``) go to the clients in a random order: every class is held by
    ⌊N·L/C⌋ or ⌈N·L/C⌉ clients. Each class's samples are shuffled and split evenly among its
    holders; classes held by nobody (only when ``N·L < C``) are unused. A client whose class has
    fewer samples than holders may get fewer than ``L`` labels (or none): no data is left for it.
    """
    labels, num_clients, classes = _checked_classes(labels, num_clients)
    num_classes = classes.size
    per = _check_int("labels_per_client", labels_per_client, 1, num_classes)
    perm = rng.permutation(num_classes)
    order = rng.permutation(num_clients)
    holders: list[list[int]] = [[] for _ in range(num_classes)]
    for slot in range(num_clients * per):
        holders[perm[slot % num_classes]].append(int(order[slot // per]))
    holders = [sorted(h) for h in holders]
    return _gather(_split_classes(labels, classes, holders, num_clients, rng), rng)


def heterogeneous(
    labels,
    num_clients: int,
    rng: np.random.Generator,
    rich_clients: int = 2,
    labels_per_rich: int = 5,
) -> Partition:
    """A few clients with many labels, the others with one (CS-UCB-Q §V-B).

    The paper (K = 10 clients): "two clients have samples of 5 digits and the other clients have
    samples of only 1 digit". ``rich_clients`` clients, at random positions, get disjoint groups
    of ``labels_per_rich`` labels from a random permutation of the ``C`` distinct labels; each of
    the other clients gets one label, round-robin over a second random permutation (so a poor
    client may share a label with a rich one). Each class's samples are shuffled and split evenly
    among the clients holding it; classes held by nobody are unused.
    """
    labels, num_clients, classes = _checked_classes(labels, num_clients)
    num_classes = classes.size
    rich = _check_int("rich_clients", rich_clients, 0, num_clients)
    per = _check_int("labels_per_rich", labels_per_rich, 1)
    if rich * per > num_classes:
        raise ValueError(
            f"rich_clients · labels_per_rich must be <= C = {num_classes} (the number of "
            f"distinct labels), got rich_clients={rich}, labels_per_rich={per}"
        )
    order = rng.permutation(num_clients)
    rich_ids, poor_ids = order[:rich], np.sort(order[rich:])
    holders: list[list[int]] = [[] for _ in range(num_classes)]
    perm = rng.permutation(num_classes)
    for r, client in enumerate(rich_ids):
        for k in perm[r * per : (r + 1) * per]:
            holders[k].append(int(client))
    perm = rng.permutation(num_classes)
    for j, client in enumerate(poor_ids):
        holders[perm[j % num_classes]].append(int(client))
    holders = [sorted(h) for h in holders]
    return _gather(_split_classes(labels, classes, holders, num_clients, rng), rng)


# The most draws of the whole split that ``dirichlet_by_class`` makes to meet ``min_samples``.
MAX_REDRAWS = 1000


def _check_min_samples(min_samples, num_clients: int, n: int) -> int:
    if not _is_int(min_samples) or min_samples < 0:
        raise ValueError(f"min_samples must be a non-negative integer, got {min_samples!r}")
    if num_clients * min_samples > n:
        raise ValueError(
            f"min_samples = {min_samples} cannot be met: num_clients · min_samples = "
            f"{num_clients} · {min_samples} = {num_clients * min_samples} > n = {n} samples"
        )
    return int(min_samples)


def dirichlet_by_class(
    labels,
    num_clients: int,
    concentration: float,
    rng: np.random.Generator,
    min_samples: int = 0,
) -> Partition:
    """Label and quantity skew: each class split over the clients in Dirichlet proportions.

    Yurochkin et al., ICML 2019, §5 (and FedMA, Wang et al., ICLR 2020): "we sample
    p_k ~ Dir_J(α) and allocate a p_{k,j} proportion of the instances of class k to local user j".
    Per class, its shuffled samples are cut at the rounded cumulative proportions, so every
    sample is used once; clients' sizes differ (the data shares p_i of the sampling-based
    selection methods), and with small α many clients hold few classes or no sample at all
    (a client without data is a legitimate case everywhere in jfl). This is the "Dirichlet α"
    partition FL selection papers sweep at α ∈ {0.1, 0.3, 1}; ``dirichlet`` is RBCS-F's
    equal-size one.

    ``min_samples = k >= 1`` redraws the whole split (every class's shuffle and proportions,
    from ``rng``, continuing its stream) until every client holds at least ``k`` samples, as
    NIID-Bench does (Li et al., ICDE 2022, ``partition_data``: "min_require_size = 10",
    "while min_size < min_require_size:" around the draw of every class's proportions) and
    Flower Datasets' ``DirichletPartitioner`` ("the sampling process is repeated if any
    partition is too small"). The redraw conditions the split: the clients' sizes and class
    mixes are those of the Dirichlet split conditioned on every client holding ``>= k``, not
    the unconditioned one. At most ``MAX_REDRAWS`` draws are made, then a ``ValueError`` says
    how close the best draw came; ``N · k > n`` is refused at once. ``k = 0`` (the default)
    keeps the first draw: the same indices for the same ``rng`` as without the option.
    """
    labels = _check_labels(labels)
    n = labels.size
    num_clients = _check_num_clients(num_clients, n)
    _check_concentration(concentration)
    min_samples = _check_min_samples(min_samples, num_clients, n)
    classes = [np.flatnonzero(labels == c) for c in np.unique(labels)]
    alpha = np.full(num_clients, float(concentration))
    best = -1  # the largest smallest-client size over the draws so far
    for _ in range(MAX_REDRAWS):
        pools, edges = [], []
        sizes = np.zeros(num_clients, np.int64)
        for members in classes:
            pool = rng.permutation(members)
            share = rng.dirichlet(alpha)
            cuts = np.round(np.cumsum(share)[:-1] * pool.size).astype(np.int64)
            pools.append(pool)
            edges.append(cuts)
            sizes += np.diff(cuts, prepend=0, append=pool.size)
        smallest = int(np.min(sizes))
        if smallest >= min_samples:
            break
        best = max(best, smallest)
    else:
        raise ValueError(
            f"dirichlet_by_class: no split with every client holding >= min_samples = "
            f"{min_samples} samples in MAX_REDRAWS = {MAX_REDRAWS} draws (concentration = "
            f"{concentration}, num_clients = {num_clients}, n = {n} samples); the best draw's "
            f"smallest client held {best}: lower min_samples or num_clients, or raise "
            f"concentration"
        )
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for pool, cuts in zip(pools, edges, strict=True):
        for client, piece in enumerate(np.split(pool, cuts)):
            parts[client].append(piece)
    return _gather(parts, rng)


def shards(
    labels, num_clients: int, rng: np.random.Generator, shards_per_client: int = 2
) -> Partition:
    """Label-sorted shards, ``shards_per_client`` of them per client (McMahan et al. 2017, §3).

    The paper (MNIST, 100 clients): "we sort the data by digit label, divide it into 200 shards
    of size 300, and assign each of 100 clients 2 shards". FedCor (Tang et al., CVPR 2022) runs
    it with 2 or 1 shards per client ("2SPC or 1SPC"); its authors' code (Yoruko-Tang/FedCor at
    d941083, ``src/sampling.py``, ``mnist_noniid`` lines 37-64, ``cifar_noniid`` 174-202) takes
    ``num_shards = shards_per_client*num_users`` shards of ``num_imgs = len(dataset)//num_shards``
    samples (lines 45-46), sorts the indices by label
    (``idxs_labels = idxs_labels[:, idxs_labels[1, :].argsort()]``, line 53), gives each client
    in turn ``rs.choice(idx_shard, shards_per_client, replace=False)`` of the shards left
    (lines 58-59) and shuffles the client's samples (line 63).

    Here, with ``s = shards_per_client``, ``S = N · s`` shards of ``m = n // S`` samples: a
    random permutation of the ``n`` samples is drawn, its last ``n mod S`` samples are unused,
    the other ``S · m`` are sorted by label with a stable sort (ties in the permutation's order)
    and cut into ``S`` contiguous shards; client ``i`` gets the shards ``deal[i·s : (i+1)·s]`` of
    a random permutation ``deal`` of the shard ids, and its ``s · m`` samples are shuffled. Every
    client holds exactly ``s · m`` samples; a shard holds two labels (or more, when ``m``
    exceeds a class's size) where a class boundary of the sorted order falls inside it.

    Decisions (neither source says): ties within a label follow a random permutation, so which
    samples of a label share a shard changes with the seed and never depends on the order the
    data set is stored in (FedCor's ``argsort()`` is NumPy's unstable quicksort: ties in an
    order fixed by the data but unspecified). The ``n mod S`` unused samples are a uniform random
    subset, dropped before the sort, so that no class in particular loses them (cutting the tail
    of the sorted order would take them all from the largest labels); FedCor's code keeps
    ``np.arange(num_shards*num_imgs)`` (line 49), which its ``np.vstack`` with all ``n`` labels
    (line 52) refuses unless ``S`` divides ``n``. Dealing one permutation gives every client a
    uniformly random set of ``s`` shards, as FedCor's client-by-client draws without replacement
    do (the same distribution, not the same draws). ``shards_per_client`` must be in
    ``[1, n // N]`` (every shard at least one sample).
    """
    labels = _check_labels(labels)
    n = labels.size
    num_clients = _check_num_clients(num_clients, n)
    why = ", a shard holds at least one sample"
    per = _check_per_client("shards_per_client", shards_per_client, num_clients, n, why)
    total = num_clients * per
    size = n // total
    kept = rng.permutation(n)[: total * size]
    order = kept[np.argsort(labels[kept], kind="stable")]
    deal = rng.permutation(total)
    parts = [
        [order[j * size : (j + 1) * size] for j in deal[i * per : (i + 1) * per]]
        for i in range(num_clients)
    ]
    return _gather(parts, rng)


def _check_groups(groups, n: int) -> np.ndarray:
    groups = np.asarray(groups)
    if groups.shape != (n,) or not np.issubdtype(groups.dtype, np.integer):
        raise ValueError(
            f"groups must be an integer array of shape ({n},) (a group id per sample, as labels), "
            f"got shape {groups.shape} and dtype {groups.dtype}"
        )
    return groups.astype(np.int64)


def natural(labels, num_clients: int, rng: np.random.Generator, groups) -> Partition:
    """One client per group id, holding all of the group's samples (LEAF's FEMNIST).

    LEAF (Caldas et al. 2018): "Federated Extended MNIST (FEMNIST), which is built by
    partitioning the data in Extended MNIST based on the writer of the digit/character".
    ``groups[k]`` is the group (writer) id of sample ``k``; the ``G`` distinct ids are the
    candidate clients. ``num_clients = N`` in ``[1, G]`` of them are drawn uniformly without
    replacement (``rng.choice(G, N, replace=False)`` over the sorted ids) and the clients are
    ordered by group id, so ``N = G`` is every group in id order. Each client holds all the
    samples of its group, shuffled; the other groups' samples are unused. Sizes follow the
    groups (a ragged split). LEAF's own subsampling (TalwalkarLab/leaf, ``data/utils/sample.py``
    lines 2-5, at 21f185e) "randomly selects users from raw data until their cumulative amount
    of data exceeds the given number of datapoints": users at random too, but counted by data
    and the last user cut; here whole groups are kept and counted by ``N``. The draw is made
    also for ``N = G`` (a permutation, sorted back to id order): one stream for every ``N``.
    """
    labels = _check_labels(labels)
    groups = _check_groups(groups, labels.size)
    order = np.argsort(groups, kind="stable")  # each group's samples in index order
    ids, starts, sizes = np.unique(groups[order], return_index=True, return_counts=True)
    num_groups = ids.size
    if not _is_int(num_clients) or not 1 <= num_clients <= num_groups:
        raise ValueError(
            f"num_clients must be an integer in [1, G] = [1, {num_groups}] (G = number of "
            f"distinct groups), got {num_clients!r}"
        )
    chosen = np.sort(rng.choice(num_groups, size=int(num_clients), replace=False))
    parts = [[order[starts[g] : starts[g] + sizes[g]]] for g in chosen]
    return _gather(parts, rng)


PARTITIONS = {
    "iid": iid,
    "dirichlet": dirichlet,
    "dirichlet_by_class": dirichlet_by_class,
    "two_labels": two_labels,
    "heterogeneous": heterogeneous,
    "shards": shards,
    "natural": natural,
}


def make_partition(name: str, labels, num_clients: int, seed, **options) -> Partition:
    """Validated partition ``name`` of ``labels`` over ``num_clients`` clients.

    ``options`` are the partition's keyword parameters (e.g. ``concentration`` for
    ``dirichlet``); the randomness comes from ``np.random.default_rng(seed)``.
    """
    if name not in PARTITIONS:
        raise ValueError(f"unknown partition {name!r}; choose from {sorted(PARTITIONS)}")
    fn = PARTITIONS[name]
    params = inspect.signature(fn).parameters
    allowed = [p for p in params if p not in ("labels", "num_clients", "rng")]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"unknown options {unknown} for partition {name!r}; it takes {allowed}")
    missing = [p for p in allowed if params[p].default is inspect.Parameter.empty]
    missing = [p for p in missing if p not in options]
    if missing:
        raise ValueError(f"partition {name!r} needs the options {missing}")
    labels = _check_labels(labels)
    num_clients = _check_num_clients(num_clients, labels.size)
    return fn(labels, num_clients, rng=np.random.default_rng(seed), **options)


def stack_clients(x, y, partition: Partition, pad_to: int | None = None) -> ClientData:
    """Gather every client's samples into padded arrays of ``S`` samples per client.

    ``x`` is [n, *sample_shape] and ``y`` [n]; ``S = pad_to`` (at least the largest count),
    by default the largest count (at least 1). Padding is zero in ``x`` and ``y`` and False in
    ``mask``; a client without samples has an all-False mask.
    """
    x = np.asarray(x)
    y = np.asarray(y)
    if x.ndim < 1 or y.ndim != 1 or x.shape[0] != y.shape[0]:
        raise ValueError(
            f"x must be [n, ...] and y [n] with the same n, got shapes {x.shape} and {y.shape}"
        )
    indices = np.asarray(partition.indices)
    count = np.asarray(partition.count, np.int32)
    if indices.ndim != 2 or count.shape != indices.shape[:1]:
        raise ValueError(
            f"partition.indices must be [N, S_max] and count [N], got {indices.shape}, "
            f"{count.shape}"
        )
    largest = int(count.max(initial=0))
    if pad_to is None:
        width = max(largest, 1)
    else:
        width = _check_int("pad_to", pad_to, max(largest, 1))
    valid = np.arange(indices.shape[1]) < count[:, None]
    if np.any(indices[valid] >= x.shape[0]) or np.any(indices[valid] < 0):
        raise ValueError(f"partition.indices must be in [0, n) = [0, {x.shape[0]})")
    padded = np.full((indices.shape[0], width), -1, np.int64)
    keep = min(width, indices.shape[1])
    padded[:, :keep] = indices[:, :keep]
    mask = np.arange(width) < count[:, None]
    safe = np.where(mask, padded, 0)
    sample_mask = mask.reshape(mask.shape + (1,) * (x.ndim - 1))
    # uint8 images stay uint8 (the training step scales them); anything else becomes float32.
    dtype = np.uint8 if x.dtype == np.uint8 else np.float32
    xs = np.where(sample_mask, x[safe].astype(dtype), np.zeros((), dtype))
    ys = np.where(mask, y[safe].astype(np.int32), np.int32(0))
    return ClientData(x=xs, y=ys, mask=mask, count=count)


def federated_data(dataset: Dataset, partitions: Sequence[Partition]) -> FederatedData:
    """Stack the clients' data of every partition, padded to one size, as device arrays."""
    import jax.numpy as jnp

    if not partitions:
        raise ValueError("give at least one partition")
    width = max(max(int(np.max(p.count, initial=0)) for p in partitions), 1)
    stacked = [stack_clients(dataset.x_train, dataset.y_train, p, pad_to=width) for p in partitions]
    return FederatedData(
        x=jnp.asarray(np.stack([c.x for c in stacked])),
        y=jnp.asarray(np.stack([c.y for c in stacked])),
        mask=jnp.asarray(np.stack([c.mask for c in stacked])),
        count=jnp.asarray(np.stack([c.count for c in stacked])),
        x_test=jnp.asarray(dataset.x_test),
        y_test=jnp.asarray(dataset.y_test),
    )
