"""Golden runs: every experiment reproduces, bit for bit, the summary stored before a refactor.

``tests/golden/argv.json`` holds, per experiment, the flags of a small run (a few seeds and
rounds, every policy the experiment's environment accepts); ``tests/golden/<name>/summary.csv``
is what that run wrote. A change that moves code around must leave every value unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jfl import driver
from jfl.cli import parse
from jfl.experiments import EXPERIMENTS

GOLDEN = Path(__file__).resolve().parent / "golden"
ARGV = json.loads((GOLDEN / "argv.json").read_text())


def assert_same_summary(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    assert list(got.columns) == list(expected.columns)
    assert len(got) == len(expected)
    for column in expected.columns:
        a, b = got[column].to_numpy(), expected[column].to_numpy()
        if b.dtype == object:
            assert list(a) == list(b), column
        else:
            np.testing.assert_array_equal(a.astype(float), b.astype(float), err_msg=column)


@pytest.mark.parametrize("name", sorted(ARGV))
def test_experiment_reproduces_its_golden_summary(name, tmp_path):
    out = tmp_path / name
    config = parse(EXPERIMENTS[name], [*ARGV[name], "--out", str(out), "--quiet", "--no-plots"])
    driver.run(config)
    got = pd.read_csv(out / "summary.csv")
    assert_same_summary(got, pd.read_csv(GOLDEN / name / "summary.csv"))
