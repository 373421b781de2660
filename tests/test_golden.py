"""The selection experiments reproduce their golden summaries bit for bit (see tests/golden.py)."""

from __future__ import annotations

import pytest

from tests.golden import check_golden


@pytest.mark.parametrize(
    "name", ["v_beta_grid", "cs_ucb_ideal", "cs_ucb_q_fairness", "beta_rho_grid", "cocs_hfl"]
)
def test_experiment_reproduces_its_golden_summary(name, tmp_path):
    check_golden(name, tmp_path / name)
