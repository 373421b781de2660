"""Client partitions (jfl.fl.partition): validity, the skew each partition promises, padding.

Every partition is checked on random labels of several sizes (one client, one sample per client,
classes with a single sample or none) for the invariants that training relies on: indices in
range, each sample used at most once, counts matching the valid entries, -1 padding after them.
Statistical checks use fixed seeds and tolerances of 5 standard deviations of the distribution
being tested.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from jfl.fl import partition as partition_module
from jfl.fl.partition import (
    PARTITIONS,
    ClientData,
    Partition,
    dirichlet,
    dirichlet_by_class,
    heterogeneous,
    iid,
    make_partition,
    natural,
    shards,
    stack_clients,
    two_labels,
)

SEEDS = (0, 1, 2)


def balanced_labels(per_class: int, num_classes: int, seed: int = 0) -> np.ndarray:
    labels = np.repeat(np.arange(num_classes), per_class)
    return np.random.default_rng(seed).permutation(labels)


def rare_labels() -> np.ndarray:
    """37 samples: class 9 has one sample, class 5 none, class 0 most of them."""
    labels = np.array([0] * 12 + [1] * 5 + [2] * 4 + [3] * 4 + [4] * 3 + [6] * 3 + [7] * 3)
    labels = np.concatenate([labels, [8, 8, 9]])
    return np.random.default_rng(3).permutation(labels)


# (labels, num_clients) cases: many clients, one client, one client per sample, rare classes.
CASES = {
    "balanced": (balanced_labels(20, 10), 7),
    "one_client": (balanced_labels(5, 4), 1),
    "n_clients": (balanced_labels(3, 10), 30),
    "rare": (rare_labels(), 6),
    "rare_n_clients": (rare_labels(), 37),
}


def options_for(name: str, labels: np.ndarray, num_clients: int) -> dict:
    if name in ("dirichlet", "dirichlet_by_class"):
        return {"concentration": 0.3}
    if name == "heterogeneous":
        rich = min(2, num_clients)
        return {"rich_clients": rich, "labels_per_rich": min(5, np.unique(labels).size // rich)}
    if name == "shards":
        return {"shards_per_client": min(2, labels.size // num_clients)}
    if name == "natural":  # at least num_clients groups (all n when num_clients + 2 > n)
        num_groups = min(labels.size, num_clients + 2)
        rng = np.random.default_rng(labels.size)
        return {"groups": rng.permutation(np.arange(labels.size) % num_groups)}
    return {}


def client_indices(p: Partition) -> list[np.ndarray]:
    return [row[:c] for row, c in zip(p.indices, p.count, strict=True)]


def client_labels(p: Partition, labels: np.ndarray) -> list[np.ndarray]:
    return [labels[idx] for idx in client_indices(p)]


def assert_valid(p: Partition, n: int, num_clients: int) -> None:
    assert p.indices.dtype == np.int64 and p.count.dtype == np.int32
    assert p.indices.ndim == 2 and p.indices.shape[0] == num_clients
    assert p.count.shape == (num_clients,)
    assert p.indices.shape[1] == max(int(p.count.max()), 1)
    assert np.all(p.count >= 0)
    for row, c in zip(p.indices, p.count, strict=True):
        assert np.all(row[c:] == -1)
        assert np.all((row[:c] >= 0) & (row[:c] < n))
    used = np.concatenate(client_indices(p))
    assert np.unique(used).size == used.size  # each sample at most once


def assert_is_the_loop(p: Partition, expected, n: int, num_clients: int) -> None:
    """``p`` is a valid partition whose clients hold ``expected``'s indices (a reference
    loop's), in its order."""
    assert_valid(p, n, num_clients)
    for got, want in zip(client_indices(p), expected, strict=True):
        np.testing.assert_array_equal(got, want)


def assert_partition_is_the_loop(name, expected, labels, num_clients, draw_seed, **options):
    """The partition ``name`` drawn from ``draw_seed``, by its function and by
    ``make_partition``, is the reference loop's ``expected`` (``assert_is_the_loop``)."""
    rng = np.random.default_rng(draw_seed)
    p = PARTITIONS[name](labels, num_clients, rng, **options)
    assert_is_the_loop(p, expected, labels.size, num_clients)
    q = make_partition(name, labels, num_clients, draw_seed, **options)
    np.testing.assert_array_equal(q.indices, p.indices)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", sorted(PARTITIONS))
def test_partitions_are_valid(name, case):
    labels, num_clients = CASES[case]
    for seed in SEEDS:
        p = make_partition(
            name, labels, num_clients, seed, **options_for(name, labels, num_clients)
        )
        assert_valid(p, labels.size, num_clients)
        if name in ("iid", "dirichlet", "shards", "natural"):
            assert np.all(p.count >= 1)  # data is left for every client


# --- iid ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("n, num_clients", [(100, 7), (10, 10), (11, 1), (53, 4)])
def test_iid_uses_all_samples_in_equal_shares(n, num_clients):
    labels = np.random.default_rng(n).integers(0, 5, n)
    p = iid(labels, num_clients, np.random.default_rng(0))
    assert_valid(p, n, num_clients)
    assert p.count.sum() == n
    assert p.count.max() - p.count.min() <= 1
    np.testing.assert_array_equal(
        p.count, [n // num_clients + (i < n % num_clients) for i in range(num_clients)]
    )


def test_iid_exact_samples_per_client():
    labels = balanced_labels(10, 10)
    p = iid(labels, 7, np.random.default_rng(0), samples_per_client=14)
    assert_valid(p, labels.size, 7)
    np.testing.assert_array_equal(p.count, 14)
    p = iid(labels, 10, np.random.default_rng(0), samples_per_client=10)  # N · spc = n
    assert np.unique(np.concatenate(client_indices(p))).size == labels.size


# --- dirichlet ---------------------------------------------------------------------------------


def test_dirichlet_small_concentration_gives_one_class_clients():
    labels = balanced_labels(200, 10)
    p = dirichlet(labels, 20, 1e-3, np.random.default_rng(0), samples_per_client=20)
    assert_valid(p, labels.size, 20)
    np.testing.assert_array_equal(p.count, 20)
    dominant = np.array([np.bincount(y).max() / y.size for y in client_labels(p, labels)])
    assert np.mean(dominant >= 0.95) >= 0.9


def test_dirichlet_large_concentration_gives_the_global_mix():
    """With q ~ Dir(γ·1) the mean class mix is uniform, the global mix of balanced labels.

    The per-class count of a client is Dirichlet-multinomial: variance
    s·p(1-p)·(s + α₀)/(1 + α₀) with p = 1/C and α₀ = C·γ (≈ the multinomial s·p(1-p) here).
    No pool runs out (each class is asked for ≈ N·s/C = 2000 of its 5000 samples).
    """
    num_classes, clients, s, gamma = 10, 10, 2000, 1e4
    labels = balanced_labels(5000, num_classes)
    p = dirichlet(labels, clients, gamma, np.random.default_rng(0), samples_per_client=s)
    assert_valid(p, labels.size, clients)
    mix = 1.0 / num_classes
    alpha0 = num_classes * gamma
    std = math.sqrt(s * mix * (1 - mix) * (s + alpha0) / (1 + alpha0))
    for y in client_labels(p, labels):
        hist = np.bincount(y, minlength=num_classes)
        assert np.all(np.abs(hist - s * mix) <= 5 * std), hist


@pytest.mark.parametrize("seed", SEEDS)
def test_dirichlet_keeps_client_totals_when_pools_run_out(seed):
    labels = rare_labels()  # 37 samples, very uneven classes, class 5 empty
    # N · s = n: every sample must be used, so later clients draw from leftover classes.
    p = dirichlet(labels, 37, 0.01, np.random.default_rng(seed), samples_per_client=1)
    np.testing.assert_array_equal(p.count, 1)
    p = dirichlet(labels, 6, 0.01, np.random.default_rng(seed), samples_per_client=6)
    assert_valid(p, labels.size, 6)
    np.testing.assert_array_equal(p.count, 6)
    p = dirichlet(labels, 5, 0.01, np.random.default_rng(seed))  # s = 37 // 5 = 7
    np.testing.assert_array_equal(p.count, 7)
    labels = balanced_labels(10, 4)
    p = dirichlet(labels, 4, 1e-3, np.random.default_rng(seed), samples_per_client=10)
    assert np.unique(np.concatenate(client_indices(p))).size == labels.size


class RecordingRng:
    """A generator that remembers the class mixes q that ``dirichlet`` draws."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.q = []

    def dirichlet(self, alpha):
        q = self.rng.dirichlet(alpha)
        self.q.append(q / q.sum())
        return q

    def __getattr__(self, name):
        return getattr(self.rng, name)


@pytest.mark.parametrize("gamma1", [1.0, 10.0])
def test_rbcsf_paper_size_500_per_client(gamma1):
    """RBCS-F §6.2.1: "we uniformly sample q_i × 500 items from each of the classifying class",
    q ~ Dir(γ₁·1), for 40 clients of a 60,000-sample, 10-class training set (Fashion-MNIST's
    size). Every client gets exactly 500 samples, disjoint, and its class counts are its
    multinomial(500, q) draw: within 5 standard deviations of 500·q. No pool runs out (each
    class is asked for ≈ 40·500/10 = 2000 of its 6000 samples)."""
    clients, s = 40, 500
    labels = balanced_labels(6000, 10)
    rng = RecordingRng(0)
    p = dirichlet(labels, clients, gamma1, rng, samples_per_client=s)
    assert_valid(p, labels.size, clients)
    np.testing.assert_array_equal(p.count, s)
    assert len(rng.q) == clients
    for q, y in zip(rng.q, client_labels(p, labels), strict=True):
        hist = np.bincount(y, minlength=10)
        std = np.sqrt(s * q * (1 - q))
        assert np.all(np.abs(hist - s * q) <= 5 * std + 1e-9), (hist, s * q)
    # The IID split of the same experiment gets the same client size.
    p = make_partition("iid", labels, clients, 0, samples_per_client=s)
    assert_valid(p, labels.size, clients)
    np.testing.assert_array_equal(p.count, s)


def test_digits_sized_data_gives_35_per_client():
    """scikit-learn digits has 1437 training samples: 40 clients get 1437 // 40 = 35 each (the
    cap FlRbcsf applies to --samples-per-client 500), in both partitions."""
    labels = np.random.default_rng(0).integers(0, 10, 1437)
    for name, options in (("dirichlet", {"concentration": 1.0}), ("iid", {})):
        p = make_partition(name, labels, 40, 0, samples_per_client=35, **options)
        assert_valid(p, labels.size, 40)
        np.testing.assert_array_equal(p.count, 35)
    # 500 per client is more than the data holds.
    with pytest.raises(ValueError, match=r"samples_per_client must be .* = \[1, 35\]"):
        make_partition("dirichlet", labels, 40, 0, concentration=1.0, samples_per_client=500)
    # No size: n // N for Dirichlet; IID deals out every sample.
    p = make_partition("dirichlet", labels, 40, 0, concentration=1.0)
    np.testing.assert_array_equal(p.count, 35)
    assert make_partition("iid", labels, 40, 0).count.sum() == 1437


# --- two_labels --------------------------------------------------------------------------------


def holders_per_label(p: Partition, labels: np.ndarray, num_classes: int) -> np.ndarray:
    held = np.zeros(num_classes, int)
    for y in client_labels(p, labels):
        held[np.unique(y)] += 1
    return held


@pytest.mark.parametrize("num_clients, per", [(20, 2), (7, 2), (10, 3), (5, 10), (1, 2)])
@pytest.mark.parametrize("seed", SEEDS)
def test_two_labels_distinct_labels_and_balance(num_clients, per, seed):
    labels = balanced_labels(100, 10)
    p = two_labels(labels, num_clients, np.random.default_rng(seed), labels_per_client=per)
    assert_valid(p, labels.size, num_clients)
    for y in client_labels(p, labels):
        assert np.unique(y).size == per
    held = holders_per_label(p, labels, 10)
    assert held.max() - held.min() <= 1
    assert held.sum() == num_clients * per
    used = np.concatenate(client_indices(p))
    if num_clients * per >= 10:
        assert used.size == labels.size
    else:  # exactly the samples of the held classes are used
        assert used.size == 100 * np.count_nonzero(held)


def test_two_labels_with_few_clients_leaves_classes_unused():
    labels = balanced_labels(30, 10)
    p = two_labels(labels, 3, np.random.default_rng(0))
    held = holders_per_label(p, labels, 10)
    np.testing.assert_array_equal(np.sort(held), [0, 0, 0, 0, 1, 1, 1, 1, 1, 1])
    np.testing.assert_array_equal(p.count, 60)


def test_two_labels_splits_each_class_evenly():
    labels = balanced_labels(101, 10)
    p = two_labels(labels, 10, np.random.default_rng(0))
    counts = {}
    for idx in client_indices(p):
        for c, k in zip(*np.unique(labels[idx], return_counts=True), strict=True):
            counts.setdefault(int(c), []).append(int(k))
    for shares in counts.values():
        assert sorted(shares) == [50, 51]


# --- heterogeneous -----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_heterogeneous_paper_setting(seed):
    labels = balanced_labels(50, 10)
    p = heterogeneous(labels, 10, np.random.default_rng(seed))
    assert_valid(p, labels.size, 10)
    sets = [set(np.unique(y).tolist()) for y in client_labels(p, labels)]
    assert sorted(len(s) for s in sets) == [1] * 8 + [5] * 2
    rich = [s for s in sets if len(s) == 5]
    assert not rich[0] & rich[1]
    assert set().union(*sets) == set(range(10))
    assert p.count.sum() == labels.size  # every class covered, so every sample used


def test_heterogeneous_other_settings():
    labels = balanced_labels(20, 6)
    p = heterogeneous(labels, 4, np.random.default_rng(0), rich_clients=1, labels_per_rich=6)
    sets = [set(np.unique(y).tolist()) for y in client_labels(p, labels)]
    assert sorted(len(s) for s in sets) == [1, 1, 1, 6]
    p = heterogeneous(labels, 3, np.random.default_rng(0), rich_clients=0)
    assert [np.unique(y).size for y in client_labels(p, labels)] == [1, 1, 1]
    assert len(set().union(*(set(y.tolist()) for y in client_labels(p, labels)))) == 3


# --- dirichlet_by_class -----------------------------------------------------------------------


def by_class_numpy(labels, num_clients, concentration, seed):
    """Yurochkin et al.'s split, plainly: per class, the shuffled samples dealt to the clients
    in runs of round(n_c · cumulative share) (the same generator calls, in the same order)."""
    rng = np.random.default_rng(seed)
    owner = np.full(labels.size, -1)
    for c in np.unique(labels):
        pool = rng.permutation(np.flatnonzero(labels == c))
        share = rng.dirichlet(np.full(num_clients, concentration))
        edges = [0, *np.round(np.cumsum(share)[:-1] * pool.size).astype(int), pool.size]
        for client in range(num_clients):
            owner[pool[edges[client] : edges[client + 1]]] = client
    return owner


@pytest.mark.parametrize("concentration", [0.1, 1.0, 100.0])
def test_dirichlet_by_class_deals_each_class_by_its_proportions(concentration):
    labels, num_clients = balanced_labels(40, 10, seed=4), 12
    p = make_partition("dirichlet_by_class", labels, num_clients, 9, concentration=concentration)
    assert_valid(p, labels.size, num_clients)
    assert p.count.sum() == labels.size  # every sample used once
    owner = by_class_numpy(labels, num_clients, concentration, 9)
    for client, idx in enumerate(client_indices(p)):
        np.testing.assert_array_equal(np.sort(idx), np.flatnonzero(owner == client))
    # Small α skews sizes and labels, large α neither.
    classes = [np.unique(y).size for y in client_labels(p, labels)]
    if concentration == 0.1:
        assert p.count.max() > 2 * labels.size / num_clients and min(classes) <= 3
    if concentration == 100.0:
        assert p.count.min() > 0.5 * labels.size / num_clients and min(classes) == 10


def by_class_min_numpy(labels, num_clients, concentration, min_samples, rng, max_draws):
    """The split with every client holding >= min_samples, plainly: draw the whole split as
    Yurochkin et al. define it (per class, shuffle, Dir(α) proportions, runs of
    round(n_c · cumulative share)) and draw it again while a client holds fewer than
    min_samples, at most max_draws times (None when none qualifies); then each client's samples,
    concatenated in class order, shuffled. The same generator calls, in the same order."""
    for _ in range(max_draws):
        pieces = [[] for _ in range(num_clients)]
        for c in np.unique(labels):
            pool = rng.permutation(np.flatnonzero(labels == c))
            share = rng.dirichlet(np.full(num_clients, float(concentration)))
            edges = [0, *np.round(np.cumsum(share)[:-1] * pool.size).astype(int), pool.size]
            for client in range(num_clients):
                pieces[client].append(pool[edges[client] : edges[client + 1]])
        if min(sum(len(p) for p in own) for own in pieces) >= min_samples:
            return [rng.permutation(np.concatenate(own)) for own in pieces]
    return None


def random_instance(rng):
    """Random labels (1 to 6 classes with gaps in their values, uneven sizes), a client count,
    a concentration and a min_samples that is feasible (N · k <= n)."""
    n = int(rng.integers(10, 120))
    values = np.sort(rng.choice(9, size=int(rng.integers(1, 7)), replace=False))
    labels = values[rng.integers(0, values.size, n)]
    num_clients = int(rng.integers(1, min(12, n + 1)))
    concentration = float(rng.choice([0.2, 1.0, 10.0]))
    min_samples = int(rng.integers(0, n // num_clients // 2 + 2))
    return labels, num_clients, concentration, min(min_samples, n // num_clients)


@pytest.mark.parametrize("seed", range(4))
def test_dirichlet_by_class_min_samples_is_the_plain_redraw_loop(seed, monkeypatch):
    """Index for index (each client's order included) the reference's split, or a ValueError
    where the reference finds no qualifying draw within MAX_REDRAWS (made 200 here, to keep the
    instances that reach it fast)."""
    monkeypatch.setattr(partition_module, "MAX_REDRAWS", 200)
    rng = np.random.default_rng(100 + seed)
    for _ in range(12):
        labels, num_clients, concentration, k = random_instance(rng)
        draw_seed = int(rng.integers(2**31))
        expected = by_class_min_numpy(
            labels,
            num_clients,
            concentration,
            k,
            np.random.default_rng(draw_seed),
            partition_module.MAX_REDRAWS,
        )
        args = (labels, num_clients, concentration, np.random.default_rng(draw_seed))
        if expected is None:
            with pytest.raises(ValueError, match="min_samples"):
                dirichlet_by_class(*args, min_samples=k)
            continue
        p = dirichlet_by_class(*args, min_samples=k)
        assert_is_the_loop(p, expected, labels.size, num_clients)


@pytest.mark.parametrize("seed", range(3))
def test_dirichlet_by_class_min_samples_gives_every_client_k(seed):
    rng = np.random.default_rng(200 + seed)
    for _ in range(15):
        labels, num_clients, concentration, k = random_instance(rng)
        k = max(k, 1)
        p = make_partition(
            "dirichlet_by_class",
            labels,
            num_clients,
            int(rng.integers(1000)),
            concentration=concentration,
            min_samples=k,
        )
        assert_valid(p, labels.size, num_clients)  # each sample at most once
        assert p.count.min() >= k
        assert p.count.sum() == labels.size  # every sample used, as without the option


def test_dirichlet_by_class_digits_sized_data_has_no_empty_client():
    """The case that motivated the option: 1,437 labels over 100 clients at α = 0.1 leave
    clients without data; min_samples = 1 redraws until none is left out."""
    labels = balanced_labels(144, 10, seed=7)[:1437]
    plain = make_partition("dirichlet_by_class", labels, 100, 0, concentration=0.1)
    assert plain.count.min() == 0
    p = make_partition("dirichlet_by_class", labels, 100, 0, concentration=0.1, min_samples=1)
    assert_valid(p, labels.size, 100)
    assert p.count.min() >= 1 and p.count.sum() == labels.size


def test_dirichlet_by_class_min_samples_zero_is_the_plain_split():
    labels = np.random.default_rng(1).permutation(np.repeat(np.arange(4), 6))
    # Pinned before the option existed (dirichlet_by_class(labels, 5, 0.5, default_rng(3))).
    pinned = [[13, 17, 6, 20, 19], [15, 1, 10, 2, 22], [5, 4], [7, 8, 23], [21, 16, 11, 0, 18]]
    pinned[4] += [14, 12, 3, 9]
    for p in (
        dirichlet_by_class(labels, 5, 0.5, np.random.default_rng(3)),
        dirichlet_by_class(labels, 5, 0.5, np.random.default_rng(3), min_samples=0),
        make_partition("dirichlet_by_class", labels, 5, 3, concentration=0.5, min_samples=0),
    ):
        assert [idx.tolist() for idx in client_indices(p)] == pinned
    rng = np.random.default_rng(300)
    for _ in range(10):
        labels, num_clients, concentration, _k = random_instance(rng)
        a = dirichlet_by_class(labels, num_clients, concentration, np.random.default_rng(5))
        b = dirichlet_by_class(
            labels, num_clients, concentration, np.random.default_rng(5), min_samples=0
        )
        np.testing.assert_array_equal(a.indices, b.indices)
        np.testing.assert_array_equal(a.count, b.count)


def test_dirichlet_by_class_min_samples_met_by_the_first_draw_changes_nothing():
    labels = balanced_labels(40, 10, seed=4)
    a = dirichlet_by_class(labels, 12, 100.0, np.random.default_rng(9))
    assert a.count.min() >= 5  # the first draw qualifies: it is kept
    b = dirichlet_by_class(labels, 12, 100.0, np.random.default_rng(9), min_samples=5)
    np.testing.assert_array_equal(a.indices, b.indices)


@pytest.mark.parametrize("bad", [-1, 1.0, 2.5, True, "2", None])
def test_dirichlet_by_class_refuses_a_min_samples_that_is_not_a_count(bad):
    with pytest.raises(ValueError, match=r"^min_samples must be a non-negative integer"):
        dirichlet_by_class(LABELS, 3, 1.0, np.random.default_rng(0), min_samples=bad)


def test_dirichlet_by_class_refuses_an_infeasible_min_samples_at_once():
    # n = 30, N = 7: 7 · 4 = 28 <= 30 may be met, 7 · 5 = 35 > 30 never.
    with pytest.raises(ValueError, match=r"min_samples = 5 cannot be met: .* = 35 > n = 30"):
        dirichlet_by_class(LABELS, 7, 1.0, np.random.default_rng(0), min_samples=5)
    with pytest.raises(ValueError, match="cannot be met"):
        make_partition("dirichlet_by_class", LABELS, 30, 0, concentration=1.0, min_samples=2)


def test_dirichlet_by_class_stops_at_the_cap(monkeypatch):
    """Every client exactly 3 of 30 samples is a negligible event at α = 0.1: past the cap, one
    ValueError with the settings and the best draw's smallest client."""
    assert partition_module.MAX_REDRAWS == 1000  # the documented cap
    monkeypatch.setattr(partition_module, "MAX_REDRAWS", 100)
    with pytest.raises(ValueError) as caught:
        dirichlet_by_class(LABELS, 10, 0.1, np.random.default_rng(0), min_samples=3)
    message = str(caught.value)
    assert "\n" not in message
    for part in (
        "min_samples = 3",
        "MAX_REDRAWS = 100 draws",
        "concentration = 0.1",
        "num_clients = 10",
        "n = 30 samples",
        "the best draw's smallest client held",
        "lower min_samples",
    ):
        assert part in message, (part, message)
    best = int(message.split("smallest client held ")[1].split(":")[0])
    assert 0 <= best < 3
    # A small cap is reached by an instance that a larger one would meet.
    labels = balanced_labels(144, 10, seed=7)[:1437]
    monkeypatch.setattr(partition_module, "MAX_REDRAWS", 2)
    with pytest.raises(ValueError, match=r"MAX_REDRAWS = 2 draws .* held 0: lower"):
        dirichlet_by_class(labels, 100, 0.1, np.random.default_rng(0), min_samples=1)
    monkeypatch.setattr(partition_module, "MAX_REDRAWS", 1000)
    p = dirichlet_by_class(labels, 100, 0.1, np.random.default_rng(0), min_samples=1)
    assert p.count.min() >= 1


# --- determinism -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PARTITIONS))
def test_fixed_seed_is_deterministic(name):
    labels, num_clients = CASES["balanced"]
    opts = options_for(name, labels, num_clients)
    a = make_partition(name, labels, num_clients, 5, **opts)
    b = make_partition(name, labels, num_clients, 5, **opts)
    c = make_partition(name, labels, num_clients, 6, **opts)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.count, b.count)
    assert a.indices.shape != c.indices.shape or np.any(a.indices != c.indices)


# --- stack_clients -----------------------------------------------------------------------------


def test_stack_clients_gathers_pads_and_masks():
    rng = np.random.default_rng(0)
    n = 40
    x = rng.normal(size=(n, 3, 2)).astype(np.float64)
    y = rng.integers(0, 5, n)
    part = Partition(
        indices=np.array([[3, 7, 1], [-1, -1, -1], [0, 39, -1]], np.int64),
        count=np.array([3, 0, 2], np.int32),
    )
    data = stack_clients(x, y, part)
    assert isinstance(data, ClientData)
    assert data.x.shape == (3, 3, 3, 2) and data.x.dtype == np.float32
    assert data.y.shape == (3, 3) and data.y.dtype == np.int32
    np.testing.assert_array_equal(data.mask, [[1, 1, 1], [0, 0, 0], [1, 1, 0]])
    np.testing.assert_array_equal(data.count, part.count)
    for i, c in enumerate(part.count):
        idx = part.indices[i, :c]
        np.testing.assert_array_equal(data.x[i, :c], x[idx].astype(np.float32))
        np.testing.assert_array_equal(data.y[i, :c], y[idx])
        assert np.all(data.x[i, c:] == 0) and np.all(data.y[i, c:] == 0)
    pixels = stack_clients((x * 100).astype(np.uint8), y, part)  # images stay uint8
    assert pixels.x.dtype == np.uint8
    np.testing.assert_array_equal(pixels.x[0, :3], (x[[3, 7, 1]] * 100).astype(np.uint8))
    wide = stack_clients(x, y, part, pad_to=5)
    assert wide.x.shape == (3, 5, 3, 2) and wide.mask.shape == (3, 5)
    np.testing.assert_array_equal(wide.x[:, :3], data.x)
    assert np.all(wide.x[:, 3:] == 0) and not wide.mask[:, 3:].any()
    with pytest.raises(ValueError, match="pad_to"):
        stack_clients(x, y, part, pad_to=2)


def test_stack_clients_on_a_partition():
    labels = balanced_labels(6, 5)
    x = np.arange(labels.size, dtype=np.float32)[:, None, None, None] * np.ones((1, 2, 2, 1))
    p = make_partition("two_labels", labels, 4, 0)
    data = stack_clients(x, labels, p)
    for i, c in enumerate(p.count):
        np.testing.assert_array_equal(data.x[i, :c, 0, 0, 0], p.indices[i, :c])
        np.testing.assert_array_equal(data.y[i, :c], labels[p.indices[i, :c]])
    assert data.mask.sum() == p.count.sum()


# --- errors ------------------------------------------------------------------------------------

LABELS = balanced_labels(3, 10)  # n = 30, C = 10


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: make_partition("nope", LABELS, 3, 0), r"unknown partition 'nope'.*'iid'"),
        (lambda: make_partition("iid", LABELS, 0, 0), "num_clients"),
        (lambda: make_partition("iid", LABELS, 31, 0), "num_clients"),
        (lambda: make_partition("iid", LABELS, 2.0, 0), "num_clients"),
        (lambda: make_partition("iid", LABELS, 3, 0, foo=1), r"unknown options \['foo'\]"),
        (lambda: make_partition("two_labels", LABELS, 3, 0, concentration=1.0), "concentration"),
        (lambda: make_partition("iid", LABELS, 3, 0, samples_per_client=0), "samples_per_client"),
        (lambda: make_partition("iid", LABELS, 3, 0, samples_per_client=11), "samples_per_client"),
        (lambda: make_partition("iid", LABELS, 3, 0, samples_per_client=2.0), "samples_per_client"),
        (lambda: dirichlet(LABELS, 3, 1.0, np.random.default_rng(), 11), "samples_per_client"),
        (lambda: make_partition("dirichlet", LABELS, 3, 0, concentration=0.0), "concentration"),
        (lambda: make_partition("dirichlet", LABELS, 3, 0, concentration=-1), "concentration"),
        (lambda: make_partition("dirichlet", LABELS, 3, 0, concentration=math.inf), "concentr"),
        (lambda: make_partition("dirichlet", LABELS, 3, 0, concentration=math.nan), "concentr"),
        (lambda: make_partition("dirichlet", LABELS, 3, 0), "concentration"),  # missing
        (lambda: make_partition("iid", LABELS.reshape(3, 10), 3, 0), "labels"),
        (lambda: make_partition("iid", LABELS - 1, 3, 0), "labels"),
        (lambda: make_partition("iid", LABELS.astype(float), 3, 0), "labels"),
        (lambda: iid(np.zeros(0, int), 1, np.random.default_rng()), "labels"),
        (lambda: iid(LABELS, 31, np.random.default_rng()), "num_clients"),
        (lambda: two_labels(LABELS, 3, np.random.default_rng(), 0), "labels_per_client"),
        (lambda: two_labels(LABELS, 3, np.random.default_rng(), 11), "labels_per_client"),
        (lambda: heterogeneous(LABELS, 10, np.random.default_rng(), 3, 5), "rich_clients · lab"),
        (lambda: heterogeneous(LABELS, 2, np.random.default_rng(), 3, 1), "rich_clients"),
        (lambda: heterogeneous(LABELS, 2, np.random.default_rng(), -1, 1), "rich_clients"),
        (lambda: heterogeneous(LABELS, 2, np.random.default_rng(), 1, 0), "labels_per_rich"),
        (
            lambda: stack_clients(
                np.zeros((3, 2)), np.zeros(4, int), iid(LABELS, 1, np.random.default_rng())
            ),
            "x must be",
        ),
    ],
)
def test_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --- shards ------------------------------------------------------------------------------------


def shards_loop(labels, num_clients, per, rng):
    """McMahan et al.'s shards, plainly: of a random order of the samples, the first S · m
    (S = N · per shards of m = n // S samples; the rest unused) sorted by label with Python's
    stable sort, cut into S runs of m; client i gets the runs deal[i·per : (i+1)·per] of a
    random order deal of the shards, its samples shuffled. The same generator calls, in the same
    order."""
    n = len(labels)
    total = num_clients * per
    size = n // total
    kept = [int(k) for k in rng.permutation(n)[: total * size]]
    ordered = sorted(kept, key=lambda k: labels[k])
    runs = [ordered[j * size : (j + 1) * size] for j in range(total)]
    deal = rng.permutation(total)
    clients = []
    for i in range(num_clients):
        mine = []
        for j in deal[i * per : (i + 1) * per]:
            mine += runs[j]
        clients.append(rng.permutation(np.array(mine, dtype=np.int64)))
    return clients


def random_shards_instance(rng):
    """Random labels (1 to 8 classes with gaps in their values, uneven sizes), a client count
    and a feasible shards_per_client (N · per <= n)."""
    n = int(rng.integers(1, 160))
    values = np.sort(rng.choice(12, size=int(rng.integers(1, 9)), replace=False))
    labels = values[rng.integers(0, values.size, n)]
    num_clients = int(rng.integers(1, min(n, 25) + 1))
    per = int(rng.integers(1, min(n // num_clients, 4) + 1))
    return labels, num_clients, per


def chunk_histograms(labels, used, size, num_classes):
    """Label histograms of the runs of ``size`` of the used samples' sorted labels."""
    ordered = np.sort(labels[used])
    return [
        np.bincount(ordered[j : j + size], minlength=num_classes)
        for j in range(0, len(ordered), size)
    ]


@pytest.mark.parametrize("seed", range(4))
def test_shards_is_the_plain_loop(seed):
    """Index for index (each client's order included) the reference's split, on random labels,
    client counts and shards per client."""
    rng = np.random.default_rng(400 + seed)
    for _ in range(25):
        labels, num_clients, per = random_shards_instance(rng)
        draw_seed = int(rng.integers(2**31))
        expected = shards_loop(labels, num_clients, per, np.random.default_rng(draw_seed))
        assert_partition_is_the_loop(
            "shards", expected, labels, num_clients, draw_seed, shards_per_client=per
        )


@pytest.mark.parametrize("seed", range(3))
def test_shards_sizes_and_label_contiguous_shards(seed):
    """Every client exactly per · m samples (m = n // S), n mod S unused; each client's label
    histogram is the sum of per histograms of the runs of m of the used samples' sorted labels
    (a shard is contiguous in label order; it may hold two labels or more); with one shard per
    client, the clients' sorted labels are those runs themselves."""
    rng = np.random.default_rng(500 + seed)
    for _ in range(25):
        labels, num_clients, per = random_shards_instance(rng)
        per = min(per, 3)
        p = shards(labels, num_clients, np.random.default_rng(seed), shards_per_client=per)
        assert_valid(p, labels.size, num_clients)
        total, n = num_clients * per, labels.size
        size = n // total
        np.testing.assert_array_equal(p.count, per * size)
        used = np.concatenate(client_indices(p))
        assert used.size == total * size == n - n % total
        num_classes = int(labels.max()) + 1
        runs = chunk_histograms(labels, used, size, num_classes)
        distinct = {tuple(h) for h in runs}
        for y in client_labels(p, labels):
            hist = tuple(np.bincount(y, minlength=num_classes))
            sums = {
                tuple(np.sum(combo, axis=0))
                for combo in itertools.combinations_with_replacement(sorted(distinct), per)
            }
            assert hist in sums
        if per == 1:
            blocks = sorted(np.sort(y).tolist() for y in client_labels(p, labels))
            assert list(itertools.chain(*blocks)) == np.sort(labels[used]).tolist()


@pytest.mark.parametrize("per", [1, 2])
def test_shards_paper_setting(per):
    """McMahan et al. §3: 60,000 MNIST-sized labels, "200 shards of size 300" over 100 clients
    with 2 shards each (FedCor's 2SPC), or 100 shards of 600 with 1 (1SPC). 6,000 samples per
    class make every shard a single label: a client holds 1 or 2 labels (exactly 1 with 1SPC),
    600 samples, and every sample is used once."""
    labels = balanced_labels(6000, 10)
    p = make_partition("shards", labels, 100, 0, shards_per_client=per)
    assert_valid(p, labels.size, 100)
    np.testing.assert_array_equal(p.count, 600)
    assert p.count.sum() == labels.size
    for y in client_labels(p, labels):
        classes, counts = np.unique(y, return_counts=True)
        assert 1 <= classes.size <= per
        assert np.all(counts % (600 // per) == 0)  # whole shards of one label


def test_shards_edge_cases():
    labels = rare_labels()  # n = 37
    # S = n: shards of one sample, every sample used.
    for num_clients, per in ((37, 1), (1, 37)):
        p = shards(labels, num_clients, np.random.default_rng(0), shards_per_client=per)
        assert_valid(p, labels.size, num_clients)
        np.testing.assert_array_equal(p.count, per)
        assert p.count.sum() == labels.size
    # One client with one shard: all but n mod 1 = 0 samples, i.e. everything.
    p = shards(labels, 1, np.random.default_rng(0), shards_per_client=1)
    assert p.count.tolist() == [37]
    # One client, 2 shards of 18: one sample unused.
    p = shards(labels, 1, np.random.default_rng(0))
    assert p.count.tolist() == [36]
    # The unused samples are a random subset, not the tail of the sorted order (the largest
    # labels): over seeds they come from several classes.
    labels = balanced_labels(10, 10)  # N = 7, per = 2: S = 14, m = 7, 2 of 100 unused
    unused = set()
    for seed in range(30):
        p = shards(labels, 7, np.random.default_rng(seed))
        used = np.concatenate(client_indices(p))
        assert used.size == 98
        unused |= set(labels[np.setdiff1d(np.arange(100), used)].tolist())
    assert len(unused) >= 5
    # Ties within a label follow the seed: shards of half a class hold other samples for another
    # seed (shards of a whole class, N = 10 here, could not differ).
    a = shards(labels, 20, np.random.default_rng(1), shards_per_client=1)
    b = shards(labels, 20, np.random.default_rng(2), shards_per_client=1)
    sets_a = {frozenset(idx.tolist()) for idx in client_indices(a)}
    sets_b = {frozenset(idx.tolist()) for idx in client_indices(b)}
    assert sets_a != sets_b


@pytest.mark.parametrize("bad", [0, -1, 11, 2.0, True, "2", None])
def test_shards_refuses_a_bad_shards_per_client(bad):
    # n = 30, N = 3: S = 3 · per <= 30 allows per in [1, 10].
    with pytest.raises(
        ValueError, match=r"^shards_per_client must be an integer in .* = \[1, 10\]"
    ):
        shards(LABELS, 3, np.random.default_rng(0), shards_per_client=bad)
    with pytest.raises(ValueError, match="shards_per_client"):
        make_partition("shards", LABELS, 3, 0, shards_per_client=bad)


def test_shards_error_is_one_line():
    with pytest.raises(ValueError) as caught:
        make_partition("shards", LABELS, 16, 0)  # 16 · 2 = 32 > 30
    message = str(caught.value)
    assert "\n" not in message
    assert "shards_per_client must be an integer in [1, n // num_clients] = [1, 1]" in message
    assert "n = 30" in message and message.endswith("got 2")


# --- natural -----------------------------------------------------------------------------------


def natural_loop(num_clients, groups, rng):
    """LEAF's natural split, plainly: of the distinct group ids in increasing order, num_clients
    drawn without replacement and put back in id order; each client all of its group's samples
    (found by a scan), shuffled. The same generator calls, in the same order."""
    ids = sorted(set(groups.tolist()))
    picked = sorted(rng.choice(len(ids), size=num_clients, replace=False).tolist())
    clients = []
    for g in picked:
        mine = [k for k in range(len(groups)) if groups[k] == ids[g]]
        clients.append(rng.permutation(np.array(mine, dtype=np.int64)))
    return clients


def random_groups_instance(rng):
    """Random labels and group ids (arbitrary integers, negative ones and gaps included) with
    ragged group sizes (Dirichlet(0.5) group weights), and a client count in [1, G]."""
    n = int(rng.integers(1, 200))
    num_ids = int(rng.integers(1, min(n, 30) + 1))
    ids = rng.choice(np.arange(-40, 1000), size=num_ids, replace=False)
    weights = rng.dirichlet(np.full(num_ids, 0.5))
    groups = ids[rng.choice(num_ids, size=n, p=weights)]
    labels = rng.integers(0, 6, n)
    num_clients = int(rng.integers(1, np.unique(groups).size + 1))
    return labels, groups, num_clients


@pytest.mark.parametrize("seed", range(4))
def test_natural_is_the_plain_loop(seed):
    rng = np.random.default_rng(600 + seed)
    for _ in range(25):
        labels, groups, num_clients = random_groups_instance(rng)
        draw_seed = int(rng.integers(2**31))
        expected = natural_loop(num_clients, groups, np.random.default_rng(draw_seed))
        assert_partition_is_the_loop(
            "natural", expected, labels, num_clients, draw_seed, groups=groups
        )


@pytest.mark.parametrize("seed", range(3))
def test_natural_clients_are_whole_groups(seed):
    """Each client's samples are all from one group and are all of that group's samples; the
    clients' groups are distinct and in increasing id order; with N = G every sample is used,
    each group once, in id order."""
    rng = np.random.default_rng(700 + seed)
    for _ in range(25):
        labels, groups, num_clients = random_groups_instance(rng)
        p = natural(labels, num_clients, np.random.default_rng(seed), groups)
        assert_valid(p, labels.size, num_clients)
        held = []
        for idx in client_indices(p):
            assert idx.size >= 1
            (g,) = np.unique(groups[idx])
            np.testing.assert_array_equal(np.sort(idx), np.flatnonzero(groups == g))
            held.append(int(g))
        assert held == sorted(set(held))
        ids = np.unique(groups)
        p = natural(labels, ids.size, np.random.default_rng(seed), groups)
        assert p.count.sum() == labels.size
        assert [int(groups[idx[0]]) for idx in client_indices(p)] == ids.tolist()


def test_natural_edge_cases():
    groups = np.array([5, 5, 2, 9, 2, 2, 5, 9, 9, 9], np.int32)
    labels = np.arange(10) % 3
    # N = G: every group, in id order 2, 5, 9.
    p = make_partition("natural", labels, 3, 0, groups=groups)
    assert p.count.tolist() == [3, 3, 4]
    assert [sorted(idx.tolist()) for idx in client_indices(p)] == [
        [2, 4, 5],
        [0, 1, 6],
        [3, 7, 8, 9],
    ]
    # N = 1: one whole group, and over seeds each group is drawn.
    seen = set()
    for seed in range(20):
        p = make_partition("natural", labels, 1, seed, groups=groups.astype(np.uint8))
        (g,) = np.unique(groups[client_indices(p)[0]])
        assert p.count[0] == np.count_nonzero(groups == g)
        seen.add(int(g))
    assert seen == {2, 5, 9}
    # One sample per group: each client one sample.
    p = natural(labels, 10, np.random.default_rng(0), np.arange(10))
    np.testing.assert_array_equal(p.indices[:, 0], np.arange(10))


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda: natural(LABELS, 3, np.random.default_rng(), np.zeros(29, int)),
            r"^groups must be an integer array of shape \(30,\) .* got shape \(29,\)",
        ),
        (
            lambda: natural(LABELS, 3, np.random.default_rng(), np.zeros((30, 1), int)),
            r"^groups must be .* got shape \(30, 1\)",
        ),
        (
            lambda: natural(LABELS, 3, np.random.default_rng(), np.zeros(30)),
            r"^groups must be .* dtype float64",
        ),
        (
            lambda: natural(LABELS, 3, np.random.default_rng(), np.zeros(30, bool)),
            r"^groups must be .* dtype bool",
        ),
        (
            lambda: natural(LABELS, 4, np.random.default_rng(), np.arange(30) % 3),
            r"^num_clients must be an integer in \[1, G\] = \[1, 3\] .* got 4$",
        ),
        (
            lambda: natural(LABELS, 0, np.random.default_rng(), np.arange(30) % 3),
            r"^num_clients must be an integer in \[1, G\]",
        ),
        (
            lambda: natural(LABELS, 2.0, np.random.default_rng(), np.arange(30) % 3),
            r"^num_clients must be an integer in \[1, G\]",
        ),
        (
            lambda: make_partition("natural", LABELS, 4, 0, groups=np.arange(30) % 3),
            r"\[1, G\] = \[1, 3\]",
        ),
        (
            lambda: make_partition("natural", LABELS, 31, 0, groups=np.arange(30)),
            r"num_clients must be an integer in \[1, n\] = \[1, 30\]",
        ),
        (lambda: make_partition("natural", LABELS, 3, 0), r"needs the options \['groups'\]"),
    ],
)
def test_natural_errors(call, match):
    with pytest.raises(ValueError, match=match) as caught:
        call()
    assert "\n" not in str(caught.value)
