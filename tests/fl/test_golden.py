"""The federated experiments reproduce their golden summaries bit for bit (tests/golden.py)."""

from __future__ import annotations

import pytest

from tests.golden import check_golden


@pytest.mark.parametrize("name", ["fl_rbcsf", "fl_cs_ucb_q", "fl_cocs"])
def test_experiment_reproduces_its_golden_summary(name, tmp_path):
    check_golden(name, tmp_path / name)
