"""jfl.results on hand-made arrays: labelled datasets, per-run metrics and summaries (no runs)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from jfl.envs import RbcsfEnv
from jfl.outputs import Outputs, output_dims, output_metrics
from jfl.results import (
    accuracy_metrics,
    bounds_of,
    run_metrics,
    summarize,
    summary_table,
    to_dataset,
)
from jfl.stats import NONNEGATIVE, UNBOUNDED, UNIT_INTERVAL, interval, jain_index
from jfl.trackers import fairness_queue

CONFIGS, SEEDS, ROUNDS, CLIENTS = 3, 4, 6, 5
# The dims of a federated RBCS-F run's outputs with the fairness queue (jfl.outputs).
DIMS = output_dims(RbcsfEnv(), learner=True, trackers=(fairness_queue(),))


def _configs() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "policy": ["rbcsf", "rbcsf", "random"],
            "V": [1.0, 10.0, np.nan],
            "queue_rate": [0.2, 0.2, 0.2],
        }
    )


def _outputs(seed=0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (CONFIGS, SEEDS)
    return {
        "round_time": rng.random((*shape, ROUNDS), np.float32),
        "num_selected": rng.integers(0, CLIENTS, (*shape, ROUNDS)).astype(np.int32),
        "queue_mean": rng.random((*shape, ROUNDS), np.float32),
        "queue_max": rng.random((*shape, ROUNDS), np.float32),
        "selection_count": rng.integers(0, ROUNDS + 1, (*shape, CLIENTS)).astype(np.int32),
        "final_queue": rng.random((*shape, CLIENTS), np.float32),
        "last_unmet_round": rng.integers(0, ROUNDS + 1, shape).astype(np.int32),
    }


@pytest.fixture
def ds():
    return to_dataset(_outputs(), _configs(), seeds=[10, 11, 12, 13], dims=DIMS)


def test_to_dataset_labels_dims_and_coordinates(ds):
    assert ds.sizes == {"config": CONFIGS, "seed": SEEDS, "round": ROUNDS, "client": CLIENTS}
    assert ds["round_time"].dims == ("config", "seed", "round")
    assert ds["selection_count"].dims == ("config", "seed", "client")
    assert ds["last_unmet_round"].dims == ("config", "seed")
    assert list(ds["seed"].to_numpy()) == [10, 11, 12, 13]
    assert list(ds["round"].to_numpy()) == list(range(1, ROUNDS + 1))
    assert list(ds["policy"].to_numpy()) == ["rbcsf", "rbcsf", "random"]
    assert ds["V"].dims == ("config",) and np.isnan(ds["V"].to_numpy()[2])
    np.testing.assert_array_equal(ds["round_time"], _outputs()["round_time"])


def test_to_dataset_evaluations_and_explicit_dims():
    """Learner outputs: evaluations at rounds 0, k, …, T; ``dims`` replaces the declared ones."""
    outputs = {
        "round_time": np.zeros((1, 2, 10)),
        "accuracy": np.zeros((1, 2, 3)),
        "wall_clock": np.zeros((1, 2, 10)),
    }
    configs = pd.DataFrame({"policy": ["random"]})
    ds = to_dataset(outputs, configs, [0, 1], dims=DIMS)
    assert ds["accuracy"].dims == ("config", "seed", "eval")
    assert list(ds["eval"].to_numpy()) == [0, 5, 10]
    with pytest.raises(ValueError, match="unknown output 'accuracy'"):
        to_dataset(outputs, configs, [0, 1], dims={"round_time": ("round",)})
    mine = to_dataset({"score": np.ones((1, 2, 4))}, configs, [0, 1], dims={"score": ("step",)})
    assert mine["score"].dims == ("config", "seed", "step")


def test_run_metrics_by_hand_and_with_extra(ds):
    rate = ds["selection_count"].to_numpy() / ROUNDS
    metrics = run_metrics(ds, extra=lambda d: {"busiest": d["selection_count"].max("client")})
    assert metrics["mean_round_time"].dims == ("config", "seed")
    np.testing.assert_allclose(metrics["mean_round_time"], ds["round_time"].mean("round"))
    np.testing.assert_allclose(metrics["total_time"], ds["round_time"].sum("round"))
    np.testing.assert_allclose(metrics["min_selection_rate"], rate.min(-1))
    np.testing.assert_allclose(metrics["max_rate_violation"], np.maximum(0.2 - rate, 0).max(-1))
    np.testing.assert_allclose(metrics["jain_index"], jain_index(rate))
    # Met at the end: no client behind its rate in round T; the rounds to it censored (NaN)
    # for the runs that do not meet it.
    last = ds["last_unmet_round"].to_numpy()
    np.testing.assert_array_equal(metrics["target_met"], last < ROUNDS)
    np.testing.assert_array_equal(
        metrics["rounds_to_target"], np.where(last < ROUNDS, last + 1, np.nan)
    )
    assert 0 < np.isnan(metrics["rounds_to_target"]).mean() < 1  # both kinds of runs
    np.testing.assert_array_equal(metrics["busiest"], ds["selection_count"].max("client"))
    assert list(metrics.data_vars)[-1] == "busiest"  # the experiment's metrics come last
    assert "final_accuracy" not in metrics


def test_per_client_queue_rate_variable_is_the_target(ds):
    target = np.linspace(0.0, 0.8, CLIENTS)
    ds["queue_rate"] = (("config", "client"), np.tile(target, (CONFIGS, 1)))
    rate = ds["selection_count"].to_numpy() / ROUNDS
    metrics = run_metrics(ds)
    np.testing.assert_allclose(metrics["max_rate_violation"], np.maximum(target - rate, 0).max(-1))


def test_without_the_fairness_queue_only_the_selection_metrics():
    """Runs without the fairness queue (no tracker) have no queue or rate-target metrics."""
    outputs = _outputs()
    plain = {k: outputs[k] for k in ("round_time", "num_selected", "selection_count")}
    ds = to_dataset(plain, _configs().drop(columns="queue_rate"), np.arange(SEEDS), dims=DIMS)
    metrics = run_metrics(ds)
    assert list(metrics.data_vars) == [
        "mean_round_time",
        "total_time",
        "min_selection_rate",
        "jain_index",
        "selected_per_round",
    ]


def test_accuracy_metrics_from_curves():
    """Rounds and clock time to the target: the first evaluation at or above it, NaN if none."""
    accuracy = np.array([[[0.1, 0.5, 0.9], [0.1, 0.2, 0.3], [0.95, 0.9, 0.9]]])  # [1, 3, 3]
    clock = np.cumsum(np.ones((1, 3, 4)), -1)  # 1, 2, 3, 4 seconds after rounds 1..4
    ds = xr.Dataset(
        {
            "accuracy": (("config", "seed", "eval"), accuracy),
            "wall_clock": (("config", "seed", "round"), clock),
        },
        coords={"eval": [0, 2, 4], "round": [1, 2, 3, 4]},
        attrs={"target_accuracy": 0.5},
    )
    metrics = accuracy_metrics(ds)
    np.testing.assert_array_equal(metrics["final_accuracy"], [[0.9, 0.3, 0.9]])
    np.testing.assert_array_equal(metrics["rounds_to_accuracy"], [[2, np.nan, 0]])
    np.testing.assert_array_equal(metrics["time_to_accuracy"], [[2.0, np.nan, 0.0]])
    np.testing.assert_array_equal(metrics["reached_accuracy"], [[1.0, 0.0, 1.0]])
    del ds.attrs["target_accuracy"]
    assert set(accuracy_metrics(ds)) == {"final_accuracy"}


@pytest.mark.parametrize("method", ["t", "bootstrap"])
def test_summarize_columns_and_intervals(ds, method):
    summary = summarize(
        ds, level=0.9, method=method, metrics=lambda d: {"unmet": d["last_unmet_round"] * 1.0}
    )
    assert list(summary.columns[:4]) == ["policy", "V", "queue_rate", "n_seeds"]
    assert list(summary.columns[4:7]) == [
        "mean_round_time",
        "mean_round_time_lo",
        "mean_round_time_hi",
    ]
    assert list(summary.columns[-3:]) == ["unmet", "unmet_lo", "unmet_hi"]
    assert list(summary["policy"]) == ["rbcsf", "rbcsf", "random"]
    assert (summary["n_seeds"] == SEEDS).all()
    per_seed = ds["round_time"].mean("round").to_numpy()
    mean, lo, hi = interval(per_seed, axis=1, level=0.9, method=method)
    np.testing.assert_allclose(summary["mean_round_time"], mean)
    np.testing.assert_allclose(summary["mean_round_time_lo"], lo)
    np.testing.assert_allclose(summary["mean_round_time_hi"], hi)
    assert (lo < mean).all() and (mean < hi).all()
    wider = summarize(ds, level=0.99, method=method)
    assert (wider["mean_round_time_lo"] <= summary["mean_round_time_lo"]).all()


@pytest.mark.parametrize("method", ["t", "bootstrap"])
def test_two_seed_intervals_stay_within_each_metric_bounds(method):
    """With two seeds far apart a Student-t interval spans ±6 half-ranges: a rate's, index's and
    accuracy's ``_lo``/``_hi`` are clipped to [0, 1], a time's ``_lo`` to 0; the means are as
    before. An experiment's own metric is clipped to the bounds it declares, and not at all
    without (a difference of times inherits nothing from them)."""
    rng = np.random.default_rng(3)
    outputs = {k: v[:, :2] for k, v in _outputs().items()}
    times = np.stack([np.full(ROUNDS, 0.01), np.full(ROUNDS, 5.0)])  # two seeds
    outputs["round_time"] = np.repeat(times[None], CONFIGS, 0).astype(np.float32)
    counts = np.stack([np.zeros(CLIENTS), np.full(CLIENTS, ROUNDS)])  # rates 0 and 1
    outputs["selection_count"] = np.repeat(counts[None], CONFIGS, 0).astype(np.int32)
    outputs["accuracy"] = np.repeat([[[0.1, 0.02], [0.1, 0.99]]], CONFIGS, 0)
    outputs["wall_clock"] = np.cumsum(rng.random((CONFIGS, 2, ROUNDS)), -1)
    ds = to_dataset(outputs, _configs(), seeds=[0, 1], dims=DIMS)

    def extra(d):
        time = d["round_time"].mean("round")
        return {"gap": time - 2.0, "share": time / 5.0}

    summary = summarize(ds, method=method, metrics=extra, bounds={"share": UNIT_INTERVAL})
    for name in ("min_selection_rate", "jain_index", "final_accuracy", "target_met", "share"):
        assert (summary[f"{name}_lo"] >= 0).all() and (summary[f"{name}_hi"] <= 1).all(), name
    for name in ("mean_round_time", "total_time", "final_queue_mean"):
        assert (summary[f"{name}_lo"] >= 0).all(), name
    per_seed = ds["accuracy"].isel(eval=-1).to_numpy()
    np.testing.assert_allclose(summary["final_accuracy"], per_seed.mean(1))
    if method == "t":
        _, lo, hi = interval(per_seed, axis=1)
        assert (lo < 0).all() and (hi > 1).all()  # what the clipping took away
        gap = extra(ds)["gap"].to_numpy()
        np.testing.assert_allclose(summary["gap_lo"], interval(gap, axis=1)[1])
        assert (summary["gap_lo"] < -2).all()  # unbounded: not clipped


def test_bounds_are_declared_by_name():
    """Outputs, per-run metrics, curves and their bands carry the bounds they are declared with
    (``Metric``, ``RunMetric``, ``CURVES``, ``ACCURACY_METRICS``); an unknown name has none."""
    assert bounds_of("accuracy") == UNIT_INTERVAL and bounds_of("final_accuracy") == UNIT_INTERVAL
    assert bounds_of("round_time") == NONNEGATIVE
    # A tracker's outputs, as the runs that keep it declare them (jfl.outputs.Outputs).
    queue = output_metrics(RbcsfEnv(), trackers=(fairness_queue(),))
    ds = to_dataset(Outputs({}, queue), _configs(), [0])
    assert bounds_of("queue_mean_band", ds=ds) == NONNEGATIVE
    assert bounds_of("queue_mean_band") == UNBOUNDED  # undeclared without them
    assert bounds_of("jain_index") == UNIT_INTERVAL and bounds_of("pull_record") == NONNEGATIVE
    from jfl.envs import HflEnv, WirelessEnv

    for env, name, bounds in [
        (HflEnv(), "utility", NONNEGATIVE),
        (WirelessEnv(), "set_reward", UNIT_INTERVAL),
    ]:
        ds = to_dataset(Outputs({}, output_metrics(env)), _configs(), [0])
        assert bounds_of(name, ds=ds) == bounds and bounds_of(f"{name}_band", ds=ds) == bounds
    assert bounds_of("pseudo_regret") == UNBOUNDED and bounds_of("anything") == UNBOUNDED
    assert bounds_of("anything", {"anything": NONNEGATIVE}) == NONNEGATIVE


def test_summary_table_clips_reduced_metrics_to_their_bounds():
    """The per-run metrics of a sweep reduced on the device get their declared bounds."""
    values = np.array([[0.05, 0.95], [0.05, 0.95]])  # [config, seed]
    ds = to_dataset(
        {"jain_index": values, "other": values},
        pd.DataFrame({"policy": ["random", "rbcsf"]}),
        seeds=[0, 1],
        dims={"jain_index": (), "other": ()},
    )
    table = summary_table(ds, ["jain_index", "other"])
    assert (table["jain_index_lo"] == 0).all() and (table["jain_index_hi"] == 1).all()
    assert (table["other_lo"] < 0).all() and (table["other_hi"] > 1).all()


def test_strict_json_writes_non_finite_numbers_as_strings():
    import json
    import math

    from jfl.results import strict_json

    value = {"a": math.inf, "b": [-math.inf, math.nan, 1.5], "c": np.float32(2.0), "d": None}
    text = strict_json(value)
    assert "Infinity" not in text and "NaN" not in text
    assert json.loads(text) == {"a": "inf", "b": ["-inf", "nan", 1.5], "c": "2.0", "d": None}


def test_bounds_come_from_the_runs_own_declarations():
    """An environment no registry knows clips its intervals to the ranges it declares, even
    where a registered environment declares the same name with another range; a dataset
    without declarations clips only the library's own outputs and metrics, and without dims
    or declarations nothing is labelled."""
    from jfl.outputs import Metric
    from jfl.stats import Bounds

    narrow = {"num_success": Metric((), "successes of a run", Bounds(0.0, 1.0))}  # hfl: ≥ 0
    values = np.array([[0.05, 0.95, 0.5]])  # [config, seed]: a t interval wider than [0, 1]
    configs = pd.DataFrame({"policy": ["random"]})
    ds = to_dataset(Outputs({"num_success": values}, narrow), configs, [0, 1, 2])
    table = summary_table(ds, ["num_success"])
    assert table["num_success_lo"][0] == 0.0 and table["num_success_hi"][0] == 1.0
    bare = to_dataset({"num_success": values}, configs, [0, 1, 2], dims={"num_success": ()})
    table = summary_table(bare, ["num_success"])
    assert table["num_success_lo"][0] < 0.0 and table["num_success_hi"][0] > 1.0
    with pytest.raises(ValueError, match="to_dataset needs the outputs' declarations"):
        to_dataset({"num_success": values}, configs, [0, 1, 2])
