"""Golden runs: every experiment reproduces, bit for bit, the summary stored before a refactor.

``tests/golden/argv.json`` holds, per experiment, the flags of a small run (a few seeds and
rounds, every policy the experiment's environment accepts); ``tests/golden/<name>/summary.csv``
is what that run wrote. A change that moves code around must leave every value unchanged.
``SUBSET`` narrows a run to some of its stored rows (configurations are independent of what
else runs beside them), where the full run would only repeat the same programs at other sizes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from jfl import driver
from jfl.cli import parse
from jfl.experiments import EXPERIMENTS

GOLDEN = Path(__file__).resolve().parent / "golden"
ARGV = json.loads((GOLDEN / "argv.json").read_text())
# Experiment -> (flags replacing the stored ones, the stored rows they select).
SUBSET = {"cs_ucb_ideal": (["--N", "5"], lambda summary: summary["N"] == 5)}


def assert_same_summary(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    assert list(got.columns) == list(expected.columns)
    assert len(got) == len(expected)
    for column in expected.columns:
        a, b = got[column].to_numpy(), expected[column].to_numpy()
        if b.dtype == object:
            assert list(a) == list(b), column
        else:
            np.testing.assert_array_equal(a.astype(float), b.astype(float), err_msg=column)


def check_golden(name: str, out: Path) -> None:
    """Run experiment ``name`` on its golden flags into ``out`` and compare the summary."""
    argv = list(ARGV[name])
    expected = pd.read_csv(GOLDEN / name / "summary.csv")
    if name in SUBSET:
        flags, rows = SUBSET[name]
        for flag, value in zip(flags[::2], flags[1::2], strict=True):
            argv[argv.index(flag) + 1] = value
        expected = expected[rows(expected)].reset_index(drop=True)
    config = parse(EXPERIMENTS[name], [*argv, "--out", str(out), "--quiet", "--no-plots"])
    driver.run(config)
    assert_same_summary(pd.read_csv(out / "summary.csv"), expected)
