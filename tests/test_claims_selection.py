"""What the selection methods show on ``fl_selection``'s task, each under its authors'
protocol, beside what their papers report.

The setting is ``FlSelection``'s default (N = 100 clients of the ``rbcsf`` environment, m = 10,
logistic regression, one FedAvg epoch at lr 0.3, every client holding at least one sample) at its
most skewed split, Dirichlet α = 0.1, 60 rounds, 16 seeds. Each claim is a paired comparison of
the final test loss over the seeds (common random numbers: for a seed every policy sees the same
clients, availability and latencies) whose 95% Student-t interval must exclude 0, or, where the
runs show no difference, contain it. Both arms run under the protocol of the paper the claim
comes from (docs/decisions.md#aggregation-protocols): FedCor's code averages every method
uniformly, DivFL's by data size, and the unbiased samplers keep their own weights d_i/π_i.

* FedCor (Tang et al. 2022): lower loss than random selection, both averaged uniformly
  (``-m paper``, in CI); averaged by data size the runs show no difference.
* FedIS, DELTA (Wang et al. 2023), optimal client sampling (Chen et al. 2022) and clustered
  sampling, Algorithm 2 (Fraboni et al. 2021): lower loss than Random (FedAvg by data size);
  against rand (∝ data share, unbiased too) FedIS and clustered sampling are ahead, DELTA and
  OCS level.
* DivFL (Balakrishnan et al. 2022): level with Random, not faster.

With ``JFL_FASHION_MNIST`` naming a directory of Fashion-MNIST's files the same comparison runs
on Fashion-MNIST (logistic regression, 8 seeds, about 12 minutes on 2 cores); the claims it
checks are what such a run shows (docs/reproductions/federated-training.md).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from jfl.driver import run
from jfl.experiments import FlSelection
from jfl.stats import mean_ci

POLICIES = ("random", "proportional", "fedis", "delta", "ocs", "fedcor", "divfl",
            "clustered_similarity")  # fmt: skip
# (policy, aggregation) pairs; better: lower final loss than the baseline; worse: higher; same:
# the interval holds 0. "own" is a policy's own weights (its only row).
RANDOM, RAND = ("random", "data_size"), ("proportional", "own")
CLAIMS = {
    "digits": {
        "better": [(("fedcor", "uniform"), ("random", "uniform"))]
        + [((p, "own"), RANDOM) for p in ("fedis", "delta", "ocs", "clustered_similarity")]
        + [((p, "own"), RAND) for p in ("fedis", "clustered_similarity")],
        "same": [
            (("fedcor", "data_size"), RANDOM),
            (("divfl", "data_size"), RANDOM),
            (("delta", "own"), RAND),
            (("ocs", "own"), RAND),
        ],
    },
    # Logistic regression at lr 0.3 on Fashion-MNIST: final losses spread widely over seeds,
    # and with 8 seeds no difference resolves.
    "fashion_mnist": {
        "same": [((p, "own"), RANDOM) for p in ("fedis", "delta", "ocs")]
        + [(("fedcor", "uniform"), ("random", "uniform")), (("divfl", "data_size"), RANDOM)]
        + [((p, "own"), RAND) for p in ("fedis", "delta", "ocs", "clustered_similarity")],
    },
}
AGGREGATIONS = ("paper", "data_size", "uniform")
SEEDS = {"digits": 16, "fashion_mnist": 8}


def final_losses(tmp_path, dataset, policies=POLICIES, aggregation=AGGREGATIONS):
    """Each (policy, aggregation)'s final test loss f[seed] at α = 0.1 on ``dataset``."""
    experiment = FlSelection(policies=policies, dirichlet=(0.1,), seeds=SEEDS[dataset],
                             quiet=True, plots=False, out=str(tmp_path / dataset))  # fmt: skip
    training = dataclasses.replace(experiment.training, aggregation=aggregation)
    if dataset == "fashion_mnist":
        training = dataclasses.replace(training, dataset="fashion_mnist",
                                       data_dir=os.environ["JFL_FASHION_MNIST"])  # fmt: skip
    ds = run(dataclasses.replace(experiment, training=training)).dataset
    loss = ds["final_test_loss"].to_numpy()  # [config, seed], reduced on the device
    labels = zip(ds["policy"].to_numpy(), ds["aggregation"].to_numpy(), strict=True)
    own = {"policy_weights": "own"}
    return {(str(p), own.get(str(a), str(a))): loss[i] for i, (p, a) in enumerate(labels)}


def check_claims(losses, claims):
    failures = []
    for kind, pairs in claims.items():
        for a, b in pairs:
            mean, lo, hi = mean_ci(np.asarray(losses[a] - losses[b], float))
            held = {"better": hi < 0, "worse": lo > 0, "same": lo <= 0 <= hi}[kind]
            if not held:
                failures.append(f"{a} − {b} ({kind}): {mean:+.4f} [{lo:+.4f}, {hi:+.4f}]")
    assert not failures, "; ".join(failures)


@pytest.mark.paper
def test_fedcor_beats_random_under_its_authors_uniform_average(tmp_path):
    """FedCor's claim under its code's protocol, both arms averaged uniformly (about a minute
    on 2 cores): the final test loss is lower than Random's, the paired interval below 0."""
    losses = final_losses(tmp_path, "digits", ("fedcor", "random"), ("uniform",))
    check_claims(losses, {"better": [(("fedcor", "uniform"), ("random", "uniform"))]})


@pytest.mark.slow
def test_digits(tmp_path):
    check_claims(final_losses(tmp_path, "digits"), CLAIMS["digits"])


@pytest.mark.slow
@pytest.mark.skipif("JFL_FASHION_MNIST" not in os.environ, reason="JFL_FASHION_MNIST not set")
def test_fashion_mnist(tmp_path):
    check_claims(final_losses(tmp_path, "fashion_mnist"), CLAIMS["fashion_mnist"])
