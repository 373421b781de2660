"""jfl.sweep.run_policy_grid's checks, made before anything compiles, and a plan's reference
configurations (``jfl.reduction.Reference``) on a tiny wireless grid."""

from __future__ import annotations

import logging

import jax
import numpy as np
import pandas as pd
import pytest

from jfl import reduction
from jfl.envs import WirelessEnv
from jfl.envs.wireless import make_params
from jfl.kernels.reduce import doubling_cumsum
from jfl.sweep import ChunkStore, Plan, PolicyGrid, run_policy_grid
from jfl.trackers import fairness_queue
from tests.helpers import no_compilation


def test_run_policy_grid_checks_groups_and_per_config_rows_first(tmp_path):
    """Non-contiguous (policy, m) groups, per_config / per_seed arrays of the wrong shape and
    policies the environment cannot serve are refused before anything compiles."""
    env = WirelessEnv()
    params = make_params(3)
    configs = pd.DataFrame({"policy": ["random"] * 3, "N": [1, 2, 1]})
    common = dict(rounds=5, seeds=[0], chunk_size=1, show_progress=False)

    def plan(configs, **fields):
        return Plan(env, params, configs, selection_size="N", **fields)

    with pytest.raises(ValueError, match="contiguously"):
        run_policy_grid(plan(configs), **common)
    with pytest.raises(ValueError, match="contiguously"):
        PolicyGrid(plan(configs))  # when the groups are made, before any other check
    configs = pd.DataFrame({"policy": ["random"] * 3, "N": [1, 1, 2]})
    with pytest.raises(ValueError, match=r"per_config\['fairness'\] needs 3 rows"):
        run_policy_grid(plan(configs, per_config={"fairness": np.zeros((2, 3))}), **common)
    with pytest.raises(ValueError, match=r"per_seed\['mean_reward'\] needs 3 rows of 1 seeds"):
        run_policy_grid(plan(configs, per_seed={"mean_reward": np.zeros((3, 2, 3))}), **common)
    with pytest.raises(ValueError, match="a tracker reads 'queue_rate'"):
        run_policy_grid(plan(configs.iloc[:1], trackers=(fairness_queue(),)), **common)
    configs = pd.DataFrame({"policy": ["rbcsf"], "N": [1]})
    with pytest.raises(ValueError, match="'rbcsf' reads"):
        run_policy_grid(plan(configs), **common)
    # A later group that cannot run stops the grid before the first group computes anything.
    store = ChunkStore(tmp_path)
    configs = pd.DataFrame({"policy": ["random", "local_accuracy"], "N": [1, 1]})
    with pytest.raises(ValueError, match="'local_accuracy' reads"):
        run_policy_grid(plan(configs), store=store, **common)
    assert not (tmp_path / "chunks").exists()


def test_the_grid_names_its_groups_and_dims_once():
    """One group per (policy, selection size), labelled by both where the size varies; the
    outputs' dims are those of the plan's own environment."""
    env = WirelessEnv()
    configs = pd.DataFrame({"policy": ["random", "random", "round_robin"], "N": [1, 2, 2]})
    grid = PolicyGrid(Plan(env, make_params(3), configs, selection_size="N"))
    assert [(g.label, g.start, g.stop) for g in grid.groups] == [
        ("random-m1", 0, 1),
        ("random-m2", 1, 2),
        ("round_robin-m2", 2, 3),
    ]
    assert grid.learners == [None, None, None] and not grid.exact
    assert grid.dims["round_time"] == ("round",)
    assert "selected" not in grid.dims
    assert PolicyGrid(grid.plan, trajectories=True).dims["selected"] == ("round", "client")


def _paired_plan(rows, outputs=("set_reward",), order=(0, 1, 2, 3)) -> Plan:
    """Random and round robin on 3 wireless clients, 2 deadlines each (in ``order``), each
    paired with the configuration in ``rows`` by a running difference of the set reward."""
    curve = reduction.Curve(
        ("round",),
        lambda r: doubling_cumsum(r.reference["set_reward"] - r.outputs["set_reward"]),
        reads=("set_reward",),
    )
    configs = pd.DataFrame(
        {"policy": ["random"] * 2 + ["round_robin"] * 2, "tau_max": [0.2, 2.0] * 2}
    ).iloc[list(order)]
    return Plan(
        WirelessEnv(),
        make_params(3),
        configs.reset_index(drop=True),
        selection_size=1,
        per_config={"tau_max": configs["tau_max"].to_numpy()},
        env_hparams=("tau_max",),
        reductions=reduction.Reductions(curves={"paired": curve}),
        reference=reduction.Reference(np.asarray(rows), outputs),
    )


def test_a_reference_is_checked_before_anything_compiles():
    for rows, outputs, message in (
        ([0, 0, 0], ("set_reward",), "reference rows: 4 integers needed"),
        ([0.0, 0, 0, 0], ("set_reward",), "reference rows: 4 integers needed"),
        ([0, 4, 0, 0], ("set_reward",), r"must be -1 or rows of the table \[0, 4\)"),
        ([0, -2, 0, 0], ("set_reward",), "must be -1 or rows"),
        ([0, 0, 0, 0], ("nope",), r"reference outputs \['nope'\]"),
    ):
        with pytest.raises(ValueError, match=message), no_compilation():
            PolicyGrid(_paired_plan(rows, outputs))


def test_runs_read_their_reference_configuration_on_their_own_seed(caplog):
    """Each run reads its reference configuration's set reward on its own seed (a row of -1:
    NaN): the band of the paired running difference equals NumPy's on every run's rounds; the
    reference rows are computed by their group's own compiled runs (one compilation of each
    group's runs), and a configuration's band does not depend on its neighbours or its place
    in its chunk (the table's order, the rows reversed within each group: the same shapes)."""
    rows = np.array([2, -1, 0, 3])  # round robin's first, none, random's first, itself
    plan = _paired_plan(rows)
    common = dict(rounds=6, seeds=[0, 1, 2], chunk_size=2, show_progress=False, on_device=True)
    with caplog.at_level(logging.WARNING, logger="jax"), jax.log_compiles():
        pairs = run_policy_grid(plan, per_run=("set_reward",), **common)
    compiled = [
        r.getMessage() for r in caplog.records if "Compiling jit(over_configs)" in r.getMessage()
    ]
    assert len(compiled) == 2, compiled  # random's and round robin's, each once
    reward = pairs["set_reward"].astype(np.float64)  # [config, seed, round]
    assert (reward[0] != reward[1]).any() and (reward[0] != reward[2]).any()
    for config, row in enumerate(rows):
        band = pairs["paired_band"][config]
        if row < 0:
            assert np.isnan(band).all()
            continue
        paired = np.cumsum(reward[row] - reward[config], -1)
        scale = np.abs(paired).max() + 1.0
        np.testing.assert_allclose(band[0], paired.mean(0), atol=1e-6 * scale)
        np.testing.assert_allclose(band[1], paired.var(0, ddof=1), atol=1e-6 * scale**2)
    assert (pairs["paired_band"][3] == 0).all() and (pairs["paired_band"][0, 1] > 0).any()
    order = [1, 0, 3, 2]  # its own inverse: the rows of the reversed table
    swapped = run_policy_grid(_paired_plan([-1, 3, 2, 1], order=order), **common)
    np.testing.assert_array_equal(swapped["paired_band"], pairs["paired_band"][order])
