"""The federated-sweep pieces (jfl.fl, jfl.experiments.training): stacked data, memory
estimates, the training settings and their plan (no training runs here: the experiments' tests
run them)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from jfl.envs import RbcsfEnv
from jfl.experiments.training import FederatedTraining, scenario_label, write_figures
from jfl.fl.data import Dataset, load_digits
from jfl.fl.models import make_model
from jfl.fl.partition import federated_data, make_partition
from jfl.fl.train import EVAL_BATCH
from jfl.sweep import Plan, bytes_per_fl_run, model_footprint

ROUNDS = 10


def _dataset(n=40, n_test=10, shape=(4, 4, 1), classes=4) -> Dataset:
    rng = np.random.default_rng(0)
    return Dataset(
        "digits",
        rng.random((n, *shape), np.float32),
        np.arange(n, dtype=np.int32) % classes,
        rng.random((n_test, *shape), np.float32),
        np.arange(n_test, dtype=np.int32) % classes,
        classes,
    )


# --------------------------------------------------------------------------- data and model


def test_federated_data_stacks_partitions_padded_to_one_size():
    dataset = _dataset()
    iid = make_partition("iid", dataset.y_train, 4, 0)
    skewed = make_partition("dirichlet", dataset.y_train, 4, 0, concentration=0.3)
    data = federated_data(dataset, [iid, skewed])
    width = max(iid.count.max(), skewed.count.max())
    assert data.x.shape == (2, 4, width, 4, 4, 1)
    assert data.y.shape == data.mask.shape == (2, 4, width)
    np.testing.assert_array_equal(data.count, np.stack([iid.count, skewed.count]))
    np.testing.assert_array_equal(np.asarray(data.mask).sum(-1), data.count)
    np.testing.assert_array_equal(data.x_test, dataset.x_test)
    for p, partition in enumerate((iid, skewed)):
        for k in range(4):
            rows = partition.indices[k, : partition.count[k]]
            np.testing.assert_array_equal(data.x[p, k, : len(rows)], dataset.x_train[rows])
            np.testing.assert_array_equal(data.y[p, k, : len(rows)], dataset.y_train[rows])
            assert not np.asarray(data.x[p, k, len(rows) :]).any()  # zero padding
    with pytest.raises(ValueError, match="at least one partition"):
        federated_data(dataset, [])


def test_model_footprint_of_logistic_regression():
    """Logistic regression on 8×8 images: 64·10 weights + 10 biases; activations ≥ inputs."""
    params, activations = model_footprint(make_model("logistic", 10), (8, 8, 1))
    assert params == 64 * 10 + 10
    assert activations >= 64


def test_bytes_per_fl_run_grows_with_slots_batch_and_model():
    base = dict(
        slots=2, batch_size=10, num_servers=1, num_rounds=10, num_clients=8, eval_batch=EVAL_BATCH
    )
    small = bytes_per_fl_run(650, 64, **base)
    assert small > 0
    assert bytes_per_fl_run(650, 64, **{**base, "slots": 4}) > small
    assert bytes_per_fl_run(65_000, 64, **base) > small
    # Training activations count once the batch exceeds the evaluation batch.
    training = bytes_per_fl_run(650, 64, **{**base, "batch_size": 2 * EVAL_BATCH})
    assert training > small


# --------------------------------------------------------------------------- FederatedTraining


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"dataset": "imagenet"}, "--dataset must be one of"),
        ({"model": "resnet"}, "--model must be one of"),
        ({"aggregation": ("magic",)}, "--aggregation must be one of"),
        ({"aggregation": ("uniform", "uniform")}, "--aggregation: duplicate values"),
        ({"epochs": 0}, "--epochs must be an integer >= 1"),
        ({"batch_size": 0}, "--batch-size must be an integer >= 1"),
        ({"eval_every": 0}, "--eval-every must be an integer >= 1"),
        ({"eval_every": 3}, "--eval-every must divide --rounds=10, got 3"),
        ({"partition_seed": -1}, "--partition-seed must be an integer >= 0"),
        ({"target_accuracy": 0.0}, "--target-accuracy must be in (0, 1]"),
        ({"target_accuracy": float("nan")}, "--target-accuracy must be in (0, 1]"),
        ({"lr": (0.1, 0.0)}, "--lr must be in (0, inf)"),
        ({"lr": (float("inf"),)}, "--lr must be in (0, inf)"),
    ],
)
def test_training_checks_name_the_flag(changes, message):
    FederatedTraining().check(ROUNDS)
    with pytest.raises(ValueError) as err:
        dataclasses.replace(FederatedTraining(), **changes).check(ROUNDS)
    assert message in str(err.value)


def test_federated_plan_adds_learner_data_memory_and_accuracy_attributes():
    """The plan gets a learner per (policy, size) with its slots, the stacked partitions, the
    per-configuration learning rate and partition, and a finish that labels the dataset."""
    dataset = load_digits()
    partitions = [make_partition("iid", dataset.y_train, 6, seed) for seed in (0, 1)]
    configs = pd.DataFrame(
        {"policy": "random", "partition": [0, 1], "learning_rate": [0.1, 0.3], "queue_rate": 0.1}
    )
    with pytest.raises(ValueError, match="aggregation column"):
        FederatedTraining().federated_plan(
            Plan(RbcsfEnv(), RbcsfEnv().default_params(num_clients=6), configs, 2, 0),
            dataset,
            partitions,
            lambda policy, size: size,
            rounds=ROUNDS,
        )
    configs = FederatedTraining(aggregation=("uniform", "data_size")).with_aggregation(configs)
    assert list(configs["aggregation"]) == ["uniform", "data_size"] * 2
    env = RbcsfEnv()
    selection = Plan(env, env.default_params(num_clients=6), configs, 2, per_run_bytes=0)
    asked = []

    def slots(policy, size):
        asked.append((policy, size))
        return size + 1

    training = FederatedTraining(target_accuracy=0.5, eval_every=5)
    plan = training.federated_plan(selection, dataset, partitions, slots, rounds=ROUNDS)
    assert plan.per_run_bytes > 0 and plan.eval_every == 5
    np.testing.assert_array_equal(plan.per_config["learning_rate"], [0.1, 0.1, 0.3, 0.3])
    np.testing.assert_array_equal(plan.per_config["partition"], [0, 0, 1, 1])
    np.testing.assert_array_equal(plan.per_config["aggregation"], [1, 0, 1, 0])
    assert plan.data.x.shape[:2] == (2, 6)
    assert plan.metadata["model"] == {"name": "logistic", "parameters": 64 * 10 + 10}
    assert plan.metadata["data"]["train"] == 1437 and plan.metadata["data"]["test"] == 360
    assert plan.learner("random", 2).num_servers == 1
    assert ("random", 2) in asked

    ds = xr.Dataset(coords={"config": np.arange(4), "client": np.arange(6)})
    ds = plan.finish(ds)
    assert ds.attrs["target_accuracy"] == 0.5
    np.testing.assert_array_equal(ds["data_size"], np.stack([p.count for p in partitions]))


# The aggregation each method's authors' code uses (``--aggregation paper``), written from the
# sources that docs/decisions.md#aggregation-protocols quotes; "own" marks a method that returns
# its own weights (a Selection), which every aggregation keeps.
AUTHORS = {
    "random": "data_size",  # McMahan et al.'s FedAvg, the seed papers' protocol
    "rbcsf": "data_size",
    "fedcs": "data_size",
    "proportional": "own",  # Cho et al.'s rand: m draws with replacement, 1/m each
    "clustered_size": "own",  # Fraboni et al.: 1/m per drawn client
    "clustered_similarity": "own",
    "pow_d": "uniform",  # Power-of-Choice's code: weight = 1/size
    "cpow_d": "uniform",
    "rpow_d": "uniform",
    "afl": "data_size",
    "oort": "uniform",  # Oort's harness: --is_even_avg, default True
    "e3cs": "data_size",
    "fedis": "own",  # d_i/π_i
    "delta": "own",
    "ocs": "own",
    "fedcor": "uniform",  # FedCor's code: average_weights(..., omega=None)
    "divfl": "data_size",  # DivFL's code: aggregate weighted by the number of samples
    "cocs": "uniform",  # Qu et al. eq. 3
    "oracle": "uniform",
}


def _aggregations(policies, asked):
    configs = pd.DataFrame({"policy": list(policies), "learning_rate": 0.1})
    table = FederatedTraining(aggregation=asked).with_aggregation(configs)
    return list(zip(table["policy"], table["aggregation"], strict=True))


def test_paper_aggregation_is_each_method_authors():
    got = dict(_aggregations(AUTHORS, ("paper",)))
    own = {p: ("policy_weights" if a == "own" else a) for p, a in AUTHORS.items()}
    assert got == own


def test_aggregation_list_crosses_plain_selections_and_keeps_own_weights_once():
    """A policy with its own weights gets one row whatever is asked; the others one per
    distinct resolved aggregation (pow-d's paper protocol is uniform: one row)."""
    got = _aggregations(["random", "pow_d", "delta"], ("paper", "data_size", "uniform"))
    assert got == [
        ("random", "data_size"),
        ("random", "uniform"),
        ("pow_d", "uniform"),
        ("pow_d", "data_size"),
        ("delta", "policy_weights"),
    ]


# --------------------------------------------------------------------------- figures


def _accuracy_dataset():
    rng = np.random.default_rng(0)
    configs, seeds, rounds, evals = 4, 3, 10, [0, 5, 10]
    return xr.Dataset(
        {
            "accuracy": (("config", "seed", "eval"), rng.random((configs, seeds, len(evals)))),
            "wall_clock": (
                ("config", "seed", "round"),
                np.cumsum(rng.random((configs, seeds, rounds)), -1),
            ),
        },
        coords={
            "config": np.arange(configs),
            "seed": np.arange(seeds),
            "round": np.arange(1, rounds + 1),
            "eval": evals,
            "policy": ("config", np.array(["rbcsf", "random"] * 2)),
            "partition": ("config", [0.0, 0.0, 1.0, 1.0]),
            "gamma1": ("config", [1.0, 1.0, np.inf, np.inf]),
            "learning_rate": ("config", [0.1] * 4),
        },
        attrs={"target_accuracy": 0.5},
    )


def test_scenario_label_names_only_varying_columns():
    ds = _accuracy_dataset()
    assert scenario_label(ds, 0, ("gamma1", "learning_rate")) == "gamma1=1"
    assert scenario_label(ds, 2, ("gamma1", "learning_rate")) == "gamma1=iid"
    assert scenario_label(ds, 2) == ""


def test_write_figures_one_pair_per_scenario(tmp_path):
    write_figures(_accuracy_dataset(), tmp_path, "title", ("gamma1", "learning_rate"))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        f"accuracy_vs_{against}_gamma1-{g}.png"
        for against in ("round", "time")
        for g in ("1", "iid")
    ]
