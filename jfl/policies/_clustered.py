"""Clustered sampling (Fraboni, Vidal, Kameni and Lorenzi, "Clustered sampling: low-variance and
improved representativity for clients selection in federated learning", ICML 2021).

Algorithm 1, sampling based on sample size (``clustered_size``): the clients, in decreasing data
share p_i, pour m·p_i of mass into m buckets of mass 1, each filled before the next
(``jfl.kernels.clustered_buckets``); every round one client is drawn from each bucket
(``draw_per_bucket``) and the new model is Σ_k (1/m)·θ_{l_k} (eq. 3 with weights 1/m), a client
drawn from two buckets counting twice. Each client is drawn m·p_i times in expectation, as with
m draws ∝ p with replacement (``proportional``), with a lower variance: a client whose share
exceeds 1/m fills whole buckets and is drawn every round.

The paper's clients are all available. Here the buckets are poured from the shares of the
round's available clients (renormalised), so no unavailable client is drawn and the scheme is
Algorithm 1 on the clients that can answer (docs/decisions.md#clustered-sampling-availability).
"""

from __future__ import annotations

import jax.numpy as jnp

from jfl.kernels import clustered_buckets, draw_per_bucket
from jfl.policies.base import (
    Policy,
    PolicySpec,
    check_selection_size,
    draws_selection,
    register,
    stateless,
)


def clustered_size(num_clients: int, selection_size: int) -> Policy:
    """Clustered sampling by data size (Fraboni et al. 2021, Alg. 1): one client from each of m
    buckets poured from the available clients' data shares, each draw weighing 1/m. No
    available client with data: nobody."""
    check_selection_size(num_clients, selection_size)

    def select(key, state, obs, hparams):
        del state, hparams
        size = jnp.where(obs.available, obs.data_size.astype(jnp.float32), 0.0)
        total = jnp.sum(size)
        buckets = clustered_buckets(size / jnp.where(total > 0, total, 1.0), selection_size)
        count = jnp.where(total > 0, draw_per_bucket(key, buckets), 0)
        return draws_selection(count, selection_size)

    return stateless(select)._replace(signals=("data_size",))


register(
    PolicySpec(
        "clustered_size",
        clustered_size,
        {},
        "Clustered sampling (Alg. 1): one client from each of m buckets poured by data share",
        requires=("available", "data_size"),
        aggregation="policy_weights",
    )
)
