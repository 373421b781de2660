"""Clustered sampling by model similarity (Fraboni et al., ICML 2021, Algorithm 2) as plain
float64 loops, fed the draws the JAX policy makes (``jfl.policies._clustered_similarity``), so
that both select the same clients.

Written from the authors' ``get_clusters_with_alg2`` (Accenture/Labs-Federated-Learning, branch
``clustered_sampling``, ``py_func/clustering.py``) rather than from the JAX code: Ward's
clustering is the textbook loop over a dictionary of clusters (the closest pair merged, the
Lance–Williams update), the cut walks the tree from the root, the buckets are filled one client
at a time. Shared with the policy are only its documented rules: Ward's ties go to the pair of
clusters whose smallest slots come first, the slots being a given order of the clients; a
client whose share exceeds 1/m seeds its bucket with mass 1 and pours the rest last.
"""

from __future__ import annotations

import math

import numpy as np

from jfl.reference.numpy_sampling import draw_counts

CUT_RTOL = 1e-6  # as the policy's: a cluster within this of 1/m counts as ≤ 1/m
ANGLE_ATOL = 1e-5  # as the policy's: angles (and rows of angles, ×√N) this close are 0


def angle_numpy(u, v) -> float:
    """The angle between two vectors, 0 if either is 0 (the authors' ``get_similarity``,
    "cosine"), as 2·atan2(‖û − v̂‖, ‖û + v̂‖): arccos of the cosine without its rounding near 0;
    0 up to ``ANGLE_ATOL``."""
    nu, nv = math.sqrt(sum(x * x for x in u)), math.sqrt(sum(x * x for x in v))
    if nu == 0.0 or nv == 0.0:
        return 0.0
    minus = math.sqrt(sum((a / nu - b / nv) ** 2 for a, b in zip(u, v, strict=True)))
    plus = math.sqrt(sum((a / nu + b / nv) ** 2 for a, b in zip(u, v, strict=True)))
    angle = 2.0 * math.atan2(minus, plus)
    return 0.0 if angle <= ANGLE_ATOL else angle


def distance_matrix_numpy(updates, available, ward_input: str = "distances") -> np.ndarray:
    """f64[N, N]: the angles between the rows of ``updates``; with ``ward_input="rows"`` the
    Euclidean distances between the rows of that angle matrix over the available columns."""
    n = len(updates)
    rows = np.asarray(updates, np.float64)
    angle = np.array([[angle_numpy(rows[i], rows[j]) for j in range(n)] for i in range(n)])
    if ward_input == "distances":
        return angle
    cols = [c for c in range(n) if available[c]]
    out = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            d = math.sqrt(sum((angle[i, c] - angle[j, c]) ** 2 for c in cols))
            out[i, j] = 0.0 if d <= ANGLE_ATOL * math.sqrt(n) else d
    return out


def ward_numpy(distances, points):
    """Ward's agglomerative clustering of ``points`` (a list of indices into ``distances``):
    the list of merges ``(id_a, id_b, height, size)`` with scipy's ids (a point's index below N,
    N + t for the t-th merge), the closest pair first; among equally close pairs, the one whose
    clusters' smallest points come first."""
    n = len(distances)
    d2 = {}
    for a in points:
        for b in points:
            if a < b:
                d2[a, b] = float(distances[a][b]) ** 2
    slot_id = {p: p for p in points}  # a cluster lives in the slot of its smallest point
    slot_size = {p: 1 for p in points}
    merges = []
    while len(slot_id) > 1:
        best = None
        for a in sorted(slot_id):
            for b in sorted(slot_id):
                if a < b and (best is None or d2[a, b] < d2[best]):
                    best = (a, b)
        a, b = best
        na, nb = slot_size[a], slot_size[b]
        height = math.sqrt(d2[a, b])
        for k in slot_id:
            if k in (a, b):
                continue
            nk = slot_size[k]
            dka, dkb = d2[min(a, k), max(a, k)], d2[min(b, k), max(b, k)]
            value = ((na + nk) * dka + (nb + nk) * dkb - nk * d2[a, b]) / (na + nb + nk)
            d2[min(a, k), max(a, k)] = max(value, 0.0)
        ids = sorted((slot_id[a], slot_id[b]))
        merges.append((ids[0], ids[1], height, na + nb))
        slot_id[a] = n + len(merges) - 1
        slot_size[a] = na + nb
        del slot_id[b], slot_size[b]
    return merges


def cut_numpy(merges, weights, limit) -> list[int]:
    """Each point's cluster: the highest node above it (itself included) whose total weight is
    at most ``limit``, walking down from the roots (the cut of ``fcluster(·, "distance")`` on the
    tree whose heights are the merged weights)."""
    n = len(weights)
    weight = list(map(float, weights)) + [0.0] * len(merges)
    children = {}
    for t, (a, b, _, _) in enumerate(merges):
        weight[n + t] = weight[a] + weight[b]
        children[n + t] = (a, b)
    label = list(range(n))
    parents = {c for pair in children.values() for c in pair}
    roots = [v for v in range(n + len(merges)) if v not in parents]

    def assign(node, cluster):
        if cluster is None and weight[node] <= limit:
            cluster = node
        if node < n:
            label[node] = node if cluster is None else cluster
            return
        for child in children[node]:
            assign(child, cluster)

    for root in roots:
        assign(root, None)
    return label


def buckets_numpy(labels, sizes, available, tie, shuffle, m: int) -> np.ndarray:
    """Algorithm 2's m distributions (``get_clusters_with_alg2`` l. 158–207): the clusters in
    increasing (data size, tie); the m largest seed buckets 0..m−1 in that order (the largest
    the last bucket; missing ones, with fewer than m clusters, start empty); every other
    cluster's clients, in increasing order of ``shuffle``, then the excess of the clients whose
    mass m·p_i exceeds 1, fill the buckets' room one after the other. Rows normalised."""
    n = len(sizes)
    total = sum(float(sizes[i]) for i in range(n) if available[i])
    mass = [m * float(sizes[i]) / total if available[i] else 0.0 for i in range(n)]
    clusters = {}
    for i in range(n):
        if available[i]:
            clusters.setdefault(labels[i], []).append(i)
    size_of = {c: sum(float(sizes[i]) for i in members) for c, members in clusters.items()}
    ascending = sorted(clusters, key=lambda c: (size_of[c], tie[c]))
    kept = ascending[-m:]
    buckets = np.zeros((m, n))
    first = m - len(kept)  # with fewer than m clusters the first buckets start empty
    excess = []
    for b, c in enumerate(kept, start=first):
        for i in clusters[c]:
            buckets[b, i] = min(mass[i], 1.0)
            if mass[i] > 1.0:
                excess.append((i, mass[i] - 1.0))
    pour = [(i, mass[i]) for c in ascending[: len(ascending) - len(kept)]
            for i in sorted(clusters[c], key=lambda i: shuffle[i])]  # fmt: skip
    k = 0
    for i, left in pour + excess:
        while left > 1e-12 and k < m:
            room = 1.0 - buckets[k].sum()
            put = min(left, room)
            if put > 0:
                buckets[k, i] += put
                left -= put
            if 1.0 - buckets[k].sum() <= 1e-12:
                k += 1
    return buckets / buckets.sum(axis=1, keepdims=True)


def clustered_similarity_numpy(updates, available, sizes, m: int, order, tie, shuffle, gumbel,
                               ward_input: str = "distances"):  # fmt: skip
    """One round's selection: ``(buckets f64[m, N], count int[N])``, the clients ordered into
    slots by ``order`` (slot s holds client order[s]; Ward's ties go by slot), clusters of equal
    size by ``tie`` (per node id in slot numbering), pouring within a cluster by ``shuffle``
    (per client), and the draw from bucket k the argmax of log r_k + ``gumbel[k]``. Nobody
    when no available client has data."""
    n = len(sizes)
    available = np.asarray(available, bool)
    sizes = np.where(available, np.asarray(sizes, np.float64), 0.0)
    if sizes.sum() <= 0:
        return np.zeros((m, n)), np.zeros(n, int)
    distance = distance_matrix_numpy(updates, available, ward_input)
    slot_distance = distance[np.ix_(order, order)]
    slot_points = [s for s in range(n) if available[order[s]]]
    merges = ward_numpy(slot_distance, slot_points)
    slot_sizes = sizes[order]
    labels = cut_numpy(merges, slot_sizes, slot_sizes.sum() / m * (1.0 + CUT_RTOL))
    slot_buckets = buckets_numpy(labels, slot_sizes, available[order], tie,
                                 np.asarray(shuffle)[order], m)  # fmt: skip
    buckets = np.zeros((m, n))
    buckets[:, order] = slot_buckets
    return buckets, draw_counts(buckets, np.asarray(gumbel, np.float64))


def clustered_similarity_numpy_loop(update_rows, available, sizes, m: int, draws,
                                    ward_input: str = "distances"):  # fmt: skip
    """T rounds from all-zero rows: round t selects with ``draws[t]`` = (order, tie, shuffle,
    gumbel), then every selected client's row becomes ``update_rows[t, i]`` (its update of that
    round). Returns the counts, int[T, N]."""
    rows = np.zeros(np.asarray(update_rows).shape[1:])
    counts = []
    for t in range(len(available)):
        _, count = clustered_similarity_numpy(rows, available[t], sizes, m, *draws[t],
                                              ward_input=ward_input)  # fmt: skip
        counts.append(count)
        rows[count > 0] = np.asarray(update_rows[t], np.float64)[count > 0]
    return np.array(counts)
