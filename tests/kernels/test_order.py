"""``jfl.kernels.order`` against a plain NumPy lexicographic sort.

The four orderings (counting rank and order, sorting rank and order) run with and without
``jax.jit`` (chex variants) on batches of random keys with many ties, signed zeros and infinities,
with and without an availability mask, and must equal ``np.lexsort`` on (unavailable, key, index).
One batch shape per width keeps the compiled programs few.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from jfl.kernels import order

BATCH = 64
WIDTHS = (1, 40)


def reference_order(key, unavailable=None):
    """Available first, ascending key, lower index first (NumPy's lexsort: last key primary)."""
    key = np.asarray(key, np.float64)
    unavailable = np.zeros(key.shape, bool) if unavailable is None else np.asarray(unavailable)
    return np.lexsort((np.arange(key.shape[0]), key, unavailable))


def reference_rank(key, unavailable=None):
    perm = reference_order(key, unavailable)
    rank = np.empty_like(perm)
    rank[perm] = np.arange(perm.shape[0])
    return rank


def reference_outputs(key, unavailable):
    """What ``_all_orders`` must return. The counting versions order the unavailable entries by
    key, the sorting ones by index (both after every available entry)."""
    by_index = np.where(unavailable, 0, key)  # the unavailable entries: one tie, index order
    return (
        reference_rank(key),
        reference_rank(key, unavailable),
        reference_order(key),
        reference_order(key, unavailable),
        reference_rank(key),
        reference_rank(by_index, unavailable),
        reference_order(key),
        reference_order(by_index, unavailable),
    )


def random_keys(rng, width, count=BATCH):
    """float32 keys: a third small integers (ties), a third continuous, a third mixed with ±inf,
    ±0.0 and the extreme finite values; availability with probability 0, 0.5 or 1 per row."""
    kind = rng.integers(0, 3, count)[:, None]
    ties = rng.integers(-2, 3, (count, width)).astype(float)
    smooth = rng.normal(size=(count, width))
    big = np.finfo(np.float32).max
    special = rng.choice([-np.inf, -big, -1.0, -0.0, 0.0, 1.0, big, np.inf], (count, width))
    key = np.choose(kind, [ties, smooth, special]).astype(np.float32)
    p_available = rng.choice([0.0, 0.5, 1.0], count)[:, None]
    unavailable = rng.random((count, width)) >= p_available
    return key, unavailable


def _all_orders(key, unavailable):
    """The four orderings, with and without the mask, in one program (one compilation)."""
    return (
        order.counting_rank(key),
        order.counting_rank(key, unavailable),
        order.counting_order(key),
        order.counting_order(key, unavailable),
        order.sorting_rank(key),
        order.sorting_rank(key, unavailable),
        order.sort_order(key),
        order.sort_order(key, unavailable),
    )


all_orders = jax.vmap(_all_orders)  # one function object: jit reuses its compilation
materialise = jax.vmap(order.materialise)


def _orders_with_priority(key, unavailable, priority):
    return (
        order.counting_rank(key, unavailable, priority),
        order.counting_order(key, unavailable, priority),
        order.sorting_rank(key, unavailable, priority),
        order.sort_order(key, unavailable, priority),
    )


def test_priority_breaks_ties_like_lexsort():
    """With ``priority`` (a permutation), ties go to the lower priority instead of the lower
    index: the four orderings equal ``np.lexsort`` on (unavailable, key, priority); the sorting
    ones list the unavailable entries by priority."""
    rng = np.random.default_rng(5)
    key, unavailable = random_keys(rng, 40)
    priority = np.stack([rng.permutation(40) for _ in range(BATCH)]).astype(np.int32)
    got = jax.jit(jax.vmap(_orders_with_priority))(key, unavailable, priority)
    got = [np.asarray(x) for x in got]
    for i in range(BATCH):
        by_key = np.lexsort((priority[i], key[i].astype(float), unavailable[i]))
        tail = np.where(unavailable[i], 0.0, key[i].astype(float))
        by_priority = np.lexsort((priority[i], tail, unavailable[i]))
        for j, want_order in enumerate((by_key, by_key, by_priority, by_priority)):
            want = want_order
            if j % 2 == 0:  # a rank: the inverse permutation
                want = np.empty_like(want_order)
                want[want_order] = np.arange(40)
            np.testing.assert_array_equal(got[j][i], want, err_msg=f"output {j}, row {i}")


class OrderTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters(*WIDTHS)
    def test_matches_lexsort(self, width):
        rng = np.random.default_rng(width)
        key, unavailable = random_keys(rng, width)
        got = [np.asarray(x) for x in self.variant(all_orders)(key, unavailable)]
        for x in got:
            assert x.dtype == np.int32 and x.shape == (BATCH, width)
        for i in range(BATCH):
            want = reference_outputs(key[i], unavailable[i])
            for j, (g, w) in enumerate(zip(got, want, strict=True)):
                np.testing.assert_array_equal(g[i], w, err_msg=f"output {j}, row {i}")

    @chex.variants(with_jit=True, without_jit=True)
    def test_materialise_is_clip(self):
        """Finite values pass unchanged (-0.0 == 0.0), ±inf become ±max; a NaN spreads."""
        rng = np.random.default_rng(0)
        key, _ = random_keys(rng, 40)
        key[0, 3] = np.nan
        got = np.asarray(self.variant(materialise)(key))
        big = np.finfo(np.float32).max
        np.testing.assert_array_equal(got[1:], np.clip(key[1:], -big, big))
        assert got.dtype == np.float32 and np.isfinite(got[1:]).all()
        assert np.isnan(got[0]).all()
        # the order of the materialised keys is the order of the clipped ones
        np.testing.assert_array_equal(
            np.argsort(got[1:], axis=1, kind="stable"),
            np.argsort(np.clip(key[1:], -big, big), axis=1, kind="stable"),
        )

    @chex.variants(with_jit=True, without_jit=True)
    def test_edge_cases(self):
        """Equal keys keep the index order; everyone unavailable is the plain order; -0.0 ties
        with 0.0; integer keys are accepted; an unavailable entry goes last whatever its key."""
        fn = self.variant(_all_orders)
        cases = [
            (np.zeros(5, np.float32), np.zeros(5, bool)),
            (np.float32([3, 1, 2, 1, 0]), np.ones(5, bool)),
            (np.float32([-0.0, 0.0, -0.0, 0.0, 0.0]), np.zeros(5, bool)),
            (np.float32([-np.inf, 5, np.inf, -np.inf, 0]), np.array([0, 0, 0, 1, 0], bool)),
            (np.int32([4, -1, 4, 2, -1]), np.array([1, 0, 0, 0, 1], bool)),
        ]
        for key, unavailable in cases:
            got = fn(key, unavailable)
            for g, w in zip(got, reference_outputs(key, unavailable), strict=True):
                np.testing.assert_array_equal(np.asarray(g), w, err_msg=str((key, unavailable)))

    @chex.variants(with_jit=True, without_jit=True)
    def test_asserts_reject_bad_inputs(self):
        with pytest.raises(AssertionError):
            self.variant(order.counting_rank)(jnp.zeros((2, 3)))
        with pytest.raises(AssertionError):
            self.variant(order.sort_order)(jnp.zeros(3), jnp.zeros(4, bool))
        with pytest.raises(AssertionError):
            self.variant(order.counting_order)(jnp.zeros(3), jnp.zeros(3))  # mask not bool
        with pytest.raises(AssertionError):
            self.variant(order.materialise)(jnp.zeros(3, jnp.int32))


def test_shared_by_selection_and_assignment():
    """The selection and assignment kernels rank through this module (one implementation)."""
    from jfl.kernels import assignment, selection

    assert selection.counting_rank is order.counting_rank
    assert selection.sort_order is order.sort_order
    assert assignment.counting_order is order.counting_order
    assert assignment.sort_order is order.sort_order
