"""jfl.sweep.run_policy_grid's checks, made before anything compiles."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from jfl.envs import WirelessEnv
from jfl.envs.wireless import make_params
from jfl.sweep import ChunkStore, Plan, PolicyGrid, run_policy_grid
from jfl.trackers import fairness_queue


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
