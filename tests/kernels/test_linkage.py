"""Ward's linkage and the cut by weight (jfl.kernels.linkage) against scipy: the same merges,
merge order, heights and sizes as ``scipy.cluster.hierarchy.linkage(condensed, "ward")`` on
random instances without ties (points in the plane and space, angles between random vectors,
subsets of the points), the documented tie rule against the plain loop of
jfl.reference.numpy_clustered_similarity (all distances 0, repeated points), and the cut against
``fcluster(·, "distance")`` on the tree whose heights are the merged weights (the authors'
``get_clusters_with_alg2``). One compiled program per kernel."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import cdist, pdist, squareform

from jfl.kernels.linkage import Linkage, cut_by_weight, pairwise_distances, ward_linkage
from jfl.reference.numpy_clustered_similarity import angle_numpy, ward_numpy

N = 10
INSTANCES = 300


@pytest.fixture(scope="module")
def ward():
    jitted = jax.jit(jax.vmap(ward_linkage))
    return lambda d, a: tuple(np.asarray(x) for x in jitted(d, a))


def angle_matrix(vectors):
    return np.array([[angle_numpy(u, v) for v in vectors] for u in vectors])


def generic_instances(seed):
    """Distance matrices without ties: points in 2 and 3 dimensions, angles between vectors in
    4 dimensions; a quarter of them on a random subset of the points."""
    rng = np.random.default_rng(seed)
    dist = np.zeros((INSTANCES, N, N))
    for i in range(INSTANCES):
        kind = i % 3
        if kind == 2:
            dist[i] = angle_matrix(rng.normal(size=(N, 4)))
        else:
            dist[i] = squareform(pdist(rng.normal(size=(N, 2 + kind))))
    active = np.ones((INSTANCES, N), bool)
    active[::4] = rng.uniform(size=active[::4].shape) < 0.6
    active[4] = False  # nobody
    active[8] = np.arange(N) == 3  # one point
    active[12] = np.arange(N) < 2  # one merge
    return dist.astype(np.float32), active


def scipy_rows(dist, active):
    """scipy's linkage on the active points, with ids in the kernel's numbering (a point its
    index, the t-th merge N + t)."""
    points = np.flatnonzero(active)
    if len(points) < 2:
        return np.zeros((0, 4))
    z = linkage(squareform(dist[np.ix_(points, points)].astype(np.float64), checks=False), "ward")
    ids = np.concatenate([points, N + np.arange(len(points) - 1)])
    z[:, :2] = np.sort(ids[z[:, :2].astype(int)], axis=1)
    return z


@pytest.mark.parametrize("seed", range(2))
def test_ward_matches_scipy(ward, seed):
    dist, active = generic_instances(seed)
    pairs, height, size = ward(dist, active)
    for i in range(INSTANCES):
        z = scipy_rows(dist[i], active[i])
        merges = len(z)
        msg = f"instance {i}"
        np.testing.assert_array_equal(pairs[i, :merges], z[:, :2].astype(int), err_msg=msg)
        np.testing.assert_allclose(height[i, :merges], z[:, 2], rtol=2e-5, atol=1e-6, err_msg=msg)
        np.testing.assert_array_equal(size[i, :merges], z[:, 3].astype(int), err_msg=msg)
        # The steps past the active points' merges are padding.
        assert np.all(pairs[i, merges:] == -1) and np.all(size[i, merges:] == 0), msg
        assert np.all(np.diff(height[i, :merges]) >= -1e-6), msg  # Ward is monotone


def test_ward_ties_follow_the_documented_rule(ward):
    """Ties (all distances 0; repeated points; points at distance 0 from all others, as the
    never-seen clients of clustered sampling) go to the pair whose clusters' smallest points come
    first, as the plain loop does; without ties the loop is scipy's."""
    rng = np.random.default_rng(3)
    dist = np.zeros((INSTANCES, N, N))
    for i in range(INSTANCES):
        points = rng.normal(size=(N, 3))
        kind = i % 4
        if kind == 1:  # repeated points
            points[rng.integers(0, N, 4)] = points[rng.integers(0, N, 4)]
        dist[i] = squareform(pdist(points))
        if kind == 2:  # points at distance 0 from everyone
            zero = rng.uniform(size=N) < 0.3
            dist[i][zero, :] = 0.0
            dist[i][:, zero] = 0.0
        if kind == 3:
            dist[i] = 0.0
    dist = dist.astype(np.float32)
    active = rng.uniform(size=(INSTANCES, N)) < 0.9
    pairs, height, size = ward(dist, active)
    for i in range(INSTANCES):
        points = [int(p) for p in np.flatnonzero(active[i])]
        want = ward_numpy(dist[i].astype(np.float64), points)
        msg = f"instance {i}"
        np.testing.assert_array_equal(pairs[i, : len(want)], [w[:2] for w in want], err_msg=msg)
        np.testing.assert_allclose(height[i, : len(want)], [w[2] for w in want], atol=1e-5)
        np.testing.assert_array_equal(size[i, : len(want)], [w[3] for w in want], err_msg=msg)
    # All distances 0: each merge takes the cluster of the smallest points and the next point.
    i = 3 + 4 * next(j for j in range(INSTANCES // 4) if active[3 + 4 * j].all())
    np.testing.assert_array_equal(pairs[i, 1:, 0], np.arange(2, N))
    np.testing.assert_array_equal(pairs[i, 1:, 1], N + np.arange(N - 2))


def test_reference_ward_matches_scipy():
    """The plain loop the tie test trusts is scipy's linkage on generic instances."""
    dist, _ = generic_instances(7)
    for i in range(0, INSTANCES, 10):
        want = ward_numpy(dist[i].astype(np.float64), list(range(N)))
        z = linkage(squareform(dist[i].astype(np.float64), checks=False), "ward")
        np.testing.assert_array_equal([w[:2] for w in want], z[:, :2].astype(int))
        np.testing.assert_allclose([w[2] for w in want], z[:, 2], rtol=1e-12)


def test_cut_by_weight_matches_fcluster():
    """The cut is the authors' ``fcluster(Z′, ε/m, "distance")`` with Z′'s heights the merged
    clusters' weights (the same partition), on scipy's trees of random points with random
    weights, some clients heavier than the limit, and limits at an exact cluster weight."""
    rng = np.random.default_rng(5)
    trees, weights, limits, partitions = [], [], [], []
    for i in range(INSTANCES):
        z = linkage(rng.normal(size=(N, 2)), "ward")
        w = rng.integers(1, 20, N).astype(np.float64)
        if i % 3 == 0:
            w[rng.integers(0, N)] = 60.0  # a client above the limit
        m = int(rng.integers(2, 6))
        limit = w.sum() / m
        if i % 5 == 0:  # exactly the weight of the first merge
            limit = w[int(z[0, 0])] + w[int(z[0, 1])]
        node = np.concatenate([w, np.zeros(N - 1)])
        heights = z.copy()
        for t in range(N - 1):
            node[N + t] = node[int(z[t, 0])] + node[int(z[t, 1])]
            heights[t, 2] = node[N + t]
        partitions.append(fcluster(heights, limit, criterion="distance"))
        trees.append(z)
        weights.append(w)
        limits.append(limit)
    trees = np.array(trees)
    tree = Linkage(
        jnp.asarray(trees[:, :, :2], jnp.int32),
        jnp.asarray(trees[:, :, 2], jnp.float32),
        jnp.asarray(trees[:, :, 3], jnp.int32),
    )
    labels = np.asarray(
        jax.jit(jax.vmap(cut_by_weight))(tree, np.array(weights, np.float32), np.array(limits))
    )
    for i in range(INSTANCES):
        # The same partition: labels map one to one onto fcluster's cluster numbers.
        pairs = set(zip(labels[i], partitions[i], strict=True))
        assert len(pairs) == len(set(labels[i])) == len(set(partitions[i])), f"instance {i}"
        # Each label is a node whose weight is within the limit, or a single heavy client.
        for point, label in enumerate(labels[i]):
            members = np.flatnonzero(labels[i] == label)
            assert label == point or weights[i][members].sum() <= limits[i], f"instance {i}"


def test_pairwise_distances_match_cdist():
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(40, 7)), rng.normal(size=(40, 7))
    x[5] = x[9]
    got = np.asarray(jax.jit(pairwise_distances)(x.astype(np.float32), y.astype(np.float32)))
    np.testing.assert_allclose(got, cdist(x, y), rtol=1e-5, atol=1e-6)
    same = np.asarray(jax.jit(pairwise_distances)(x.astype(np.float32)))
    assert same[5, 9] == 0.0 and np.all(np.diag(same) == 0.0)
