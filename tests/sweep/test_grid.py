"""jfl.sweep's configuration table and per-policy hyperparameter arrays."""

from __future__ import annotations

import numpy as np
import pytest

from jfl.sweep import config_table, policy_hparams


def test_config_table_grid_and_unused_hparams():
    """rbcsf gets the V×β×α product; baselines one row each with NaN for unused columns."""
    table = config_table(
        ["rbcsf", "random", "fedcs"],
        {"V": [1, 10], "beta": [0.1, 0.2], "alpha": [0.1], "deadline": [3, 4]},
    )
    assert list(table.columns) == ["policy", "V", "beta", "alpha", "deadline"]
    rb = table[table.policy == "rbcsf"]
    assert len(rb) == 4 and rb["deadline"].isna().all()
    rnd = table[table.policy == "random"]
    assert len(rnd) == 1 and rnd[["V", "beta", "alpha", "deadline"]].isna().all(axis=None)
    fed = table[table.policy == "fedcs"]
    assert sorted(fed["deadline"]) == [3, 4]


def test_config_table_crosses_shared_scenario_axes_with_every_policy():
    """``shared`` axes (N, ρ) multiply every policy's rows and come before the swept columns."""
    table = config_table(
        ["cs_ucb_q", "modified_cs_ucb"], {"beta": [0.1, 0.2]}, shared={"N": [2, 3], "rho": [0.5]}
    )
    assert list(table.columns) == ["policy", "N", "rho", "beta"]
    assert list(table["policy"]) == ["cs_ucb_q"] * 4 + ["modified_cs_ucb"] * 2
    assert list(table["N"]) == [2, 2, 3, 3, 2, 3]
    assert (table["rho"] == 0.5).all()
    assert table["beta"][:4].tolist() == [0.1, 0.2, 0.1, 0.2] and table["beta"][4:].isna().all()


@pytest.mark.parametrize(
    ("swept", "message"),
    [
        ({"beta": [1.5]}, r"beta must be in \[0, 1\], got \[1.5\]"),
        ({"V": [-1]}, r"V must be in \[0, inf\)"),
        ({"alpha": [-0.1]}, r"alpha must be in \[0, inf\)"),
    ],
)
def test_config_table_rejects_out_of_range(swept, message):
    with pytest.raises(ValueError, match=message):
        config_table(["rbcsf"], swept)


def test_config_table_rejects_out_of_range_fixed_values():
    with pytest.raises(ValueError, match="lam"):
        config_table(["rbcsf"], {"V": [1.0]}, fixed={"lam": -1.0})


@pytest.mark.parametrize(
    ("policies", "kwargs", "message"),
    [
        (["nope"], {}, "unknown policy 'nope'"),
        ([], {}, "`policies`: give at least one policy"),
        (["random", "random"], {}, r"`policies`: duplicate names in \['random', 'random'\]"),
    ],
)
def test_config_table_rejects_bad_policies(policies, kwargs, message):
    with pytest.raises(ValueError, match=message):
        config_table(policies, {"V": [1]}, **kwargs)


def test_policy_hparams_defaults_then_fixed_then_swept():
    table = config_table(["rbcsf", "random"], {"V": [1, 10], "beta": [0.1, 0.2]})
    rb = table[table.policy == "rbcsf"]
    hp = policy_hparams("rbcsf", rb, fixed={"lam": 2.0, "deadline": 9.0})
    assert set(hp) >= {"V", "beta", "alpha", "lam"} and "deadline" not in hp
    assert all(v.dtype == np.float32 and v.shape == (4,) for v in hp.values())
    np.testing.assert_allclose(hp["lam"], 2.0)  # fixed
    np.testing.assert_allclose(hp["V"], [1, 1, 10, 10])  # swept
    np.testing.assert_allclose(hp["beta"], [0.1, 0.2, 0.1, 0.2], rtol=1e-6)
    default = policy_hparams("rbcsf", rb)
    np.testing.assert_allclose(default["lam"], default["lam"][0])  # a default, per row
    assert policy_hparams("random", table[table.policy == "random"]) == {}
