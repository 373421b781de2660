"""``virtual_queue_update`` (RBCS-F eq. 6, CS-UCB-Q eq. 27) against plain NumPy float32 loops.

Z_t = max(Z_{t-1} + arrival − service, 0) is two IEEE additions and a maximum, so the float32
kernel must match the float32 NumPy computation bit for bit.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfl.kernels import virtual_queue_update

BATCH, N = 256, 12


def numpy_update(queue, arrival, service):
    f32 = np.float32
    return np.maximum(queue + np.asarray(arrival, f32) - np.asarray(service, f32), f32(0.0))


def random_queues(rng, count=BATCH, n=N):
    """float32 backlogs: zeros, small integers (exact sums) and continuous values; scalar and
    per-client arrival rates in [0, 1]; bool services (selections) and float services."""
    kind = rng.integers(0, 3, (count, 1))
    queue = np.choose(
        kind, [np.zeros((count, n)), rng.integers(0, 4, (count, n)), rng.exponential(2, (count, n))]
    ).astype(np.float32)
    rate = rng.choice([0.0, 0.15, 0.5, 1.0], count).astype(np.float32)
    rates = rng.uniform(0.0, 1.0, (count, n)).astype(np.float32)
    service = rng.random((count, n)) < rng.choice([0.0, 0.3, 1.0], (count, 1))
    return queue, rate, rates, service


scalar_rate = jax.vmap(virtual_queue_update)
per_client_rate = jax.vmap(virtual_queue_update)  # a separate object: its own cache entries


class QueueTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_matches_numpy_on_random_instances(self):
        rng = np.random.default_rng(33)
        queue, rate, rates, service = random_queues(rng)
        got = np.asarray(self.variant(scalar_rate)(queue, rate, service))
        want = numpy_update(queue, rate[:, None], service)
        np.testing.assert_array_equal(got, want)
        assert got.dtype == np.float32 and np.all(got >= 0)
        got = np.asarray(self.variant(per_client_rate)(queue, rates, service.astype(np.float32)))
        np.testing.assert_array_equal(got, numpy_update(queue, rates, service))

    @chex.variants(with_jit=True, without_jit=True)
    def test_edge_cases(self):
        """Served with an empty queue: 0, not negative; no arrivals, no service: unchanged; a
        Python float rate broadcasts; a service larger than the backlog clamps at 0."""
        fn = self.variant(virtual_queue_update)
        queue = jnp.asarray([0.0, 0.0, 2.5, 0.5, 3.0])
        service = jnp.asarray([True, False, False, True, True])
        np.testing.assert_array_equal(np.asarray(fn(queue, 0.0, service)), [0, 0, 2.5, 0, 2])
        np.testing.assert_array_equal(np.asarray(fn(queue, 0.0, jnp.zeros(5, bool))), queue)
        got = np.asarray(fn(queue, 0.25, service))
        np.testing.assert_array_equal(got, numpy_update(np.asarray(queue), 0.25, service))
        np.testing.assert_array_equal(
            np.asarray(fn(queue, jnp.float32(0.0), 4.0 * service)), [0, 0, 2.5, 0, 0]
        )

    @chex.variants(with_jit=True, without_jit=True)
    def test_asserts_reject_bad_shapes(self):
        """A batched or integer queue, a service of another length and a rate that does not
        broadcast to the queue are refused."""
        fn = self.variant(virtual_queue_update)
        queue, service = jnp.zeros(4), jnp.ones(4, bool)
        for args in [
            (jnp.zeros((2, 4)), 0.1, jnp.ones((2, 4), bool)),  # batch axis: vmap instead
            (queue, 0.1, jnp.ones(5, bool)),
            (queue, jnp.ones(3), service),
            (queue, jnp.ones((2, 4)), service),  # would broadcast the queue up to [2, 4]
            (jnp.zeros(4, jnp.int32), 1, service),
        ]:
            with pytest.raises(AssertionError):
                fn(*args)


@pytest.mark.parametrize("per_client", [False, True])
def test_virtual_queue_update_matches_numpy_loop(per_client):
    """Z_t over 500 rounds (``lax.scan``) vs a float32 NumPy loop, bit for bit."""
    rng = np.random.default_rng(33 + per_client)
    num_rounds, n = 500, 12
    rate = rng.uniform(0.0, 0.6, n) if per_client else np.asarray(0.15)
    rate = rate.astype(np.float32)
    service = rng.random((num_rounds, n)) < 0.3

    @jax.jit
    def run(rate, service):
        def body(q, s):
            q = virtual_queue_update(q, rate, s)
            return q, q

        return jax.lax.scan(body, jnp.zeros(n, jnp.float32), service)[1]

    got = np.asarray(run(rate, service))
    q = np.zeros(n, np.float32)
    want = np.empty((num_rounds, n), np.float32)
    for t in range(num_rounds):
        q = numpy_update(q, rate, service[t])
        want[t] = q
    np.testing.assert_array_equal(got, want)
    assert np.all(got >= 0.0)
