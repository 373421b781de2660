"""Golden runs: each experiment reproduces, bit for bit, the summary written before a refactor.

``tests/golden/argv.json`` holds, per experiment, the flags of a small run (a few seeds and
rounds, every policy of the selection experiments); ``tests/golden/<name>/summary.csv`` is what
that run wrote with the code before the experiments moved into ``jfl/experiments`` (commit
b560b20, ``python sweeps/<name>.py <flags> --quiet --no-plots --out …``). A change that moves
code around must leave every value unchanged; a change that means to change results (a fidelity
fix) regenerates the files it changes and says so. Regenerated so far: ``cocs_hfl`` and
``fl_cocs`` when the COCS family took the paper's baselines and its selections a random
tie-break, ``cocs_hfl`` again when the assignment solver became exact-quality (issue 12), and
the three CS-UCB selection experiments and ``fl_cs_ucb_q`` when τ_max became 0.5 s and the gaps
the pseudo-regret (issue 13; ``fl_cs_ucb_q``'s flags pin FedAvg's epoch protocol, which its
default no longer is), and ``v_beta_grid`` and ``fl_rbcsf`` when RBCS-F's η took log₂, its ties
(and Random's) a per-run random order and §6.2's clients equal sizes (issue 14), and
``v_beta_grid`` again when its per-run metrics moved onto the device (issue 25: float32 pairwise
sums in ``jfl.reduction`` instead of NumPy's float32 means on the host, so last bits moved; every
value was checked against the previous file: means within 1.1e-7 relative, below float32's
epsilon, interval bounds within the same absolute difference). ``cocs_hfl`` and ``fl_cocs`` lost
the columns of the fairness queue when it became a tracker that only the RBCS-F and CS-UCB
experiments keep (``final_queue_*``, ``max_rate_violation``, ``target_met``,
``rounds_to_target`` and ``fl_cocs``'s ``queue_rate``: all 0 or 1 at a rate of 0); the other
columns were cut out of the stored files unchanged, and the runs reproduce them bit for bit.
Every file but ``fl_cocs``'s was regenerated when intervals were clipped to each metric's
declared range (issue 27: rates, indices and accuracies to [0, 1], times and counts to ≥ 0):
only ``_lo``/``_hi`` columns changed, each to the previous value clipped to its metric's bounds
(checked column by column), and every mean and other column is bit for bit the previous one.
``cs_ucb_ideal``, ``cs_ucb_q_fairness``, ``beta_rho_grid`` and ``fl_cs_ucb_q`` were regenerated
when the CS-UCB family's ties took a per-run random order (issue 27): only the CS-UCB-Q and
modified CS-UCB rows moved; CS-UCB's, Random's and Round-robin's are bit for bit the same.
``fl_rbcsf``, ``fl_cs_ucb_q`` and ``fl_cocs`` gained the ``aggregation`` column when the
aggregation became part of each method's protocol (issue 38: ``data_size`` for RBCS-F, FedCS and
CS-UCB-Q, ``uniform`` for COCS, as their runs averaged before); the column was inserted into the
stored files and every other value reproduces bit for bit. Every file gained the
``nonfinite_runs`` column (issue 40: runs with a NaN or ±inf output, 0 in every golden run) after
``n_seeds``, and ``rounds_to_target`` became censored (NaN for a run that does not meet its rate
at T, instead of T + 1): only the ``rounds_to_target`` columns of the rows with ``target_met``
below 1 changed (``v_beta_grid`` 4 rows, ``fl_rbcsf`` 2, ``cs_ucb_q_fairness`` and
``fl_cs_ucb_q`` 1 each; checked row by row), every other value is bit for bit the previous one.
``cocs_hfl`` was regenerated when its metrics moved onto the device (issue 42: float32 pairwise
sums in ``jfl.reduction`` instead of float64 on the host, the regrets paired by seed from the
per-run totals): checked column by column, ``cumulative_utility`` and ``regret_vs_oracle`` are
bit for bit the previous values, the other means within 1.6e-7 relative (float32's epsilon is
1.2e-7) and ``regret_vs_oracle_sqrt`` within 1.3e-6 absolute (3.9e-8 of the totals it is the
difference of), interval bounds within 1.2e-5 absolute.
``cs_ucb_ideal``, ``cs_ucb_q_fairness`` and ``beta_rho_grid`` were regenerated when their metrics
moved onto the device (issue 42: float32 pairwise sums of per-round differences against each
run's float32 hi + lo benchmark in ``jfl.reduction``, instead of float64 sums on the host):
checked column by column against the previous files, means within 1.4e-7 relative (the regrets
and gaps within 5.4e-8; ``realised_regret`` 3.1e-7 relative, 6.6e-9 absolute, on a value of 0.02
from sums of 12), ``max_rate_violation`` 7.5e-9 where it was 0 (c_k in float32), interval bounds
within 6.1e-6 absolute; ``mean_set_reward`` became ``average_set_reward`` (the same values: a
reduced dataset holds the per-run metrics beside the runs' per-round ``mean_set_reward``,
μ(S(t))), and the gaps, derived on the host from the device's regrets, now follow the device's
metrics: ``cumulative_gap``, ``average_gap`` and ``realised_gap`` come after ``failed_clients``.
``fl_rbcsf``, ``fl_cs_ucb_q`` and ``fl_cocs`` were regenerated when the federated experiments'
metrics moved onto the device (issue 42: float32 pairwise sums in ``jfl.reduction`` instead of
float64 on the host): checked column by column, the accuracy metrics, the utilities and the set
reward are bit for bit the previous values (picks of float32 values, sums of exact ones), the
other means within 4.0e-8 relative (``max_rate_violation`` at a float32 β), interval bounds
within 3.3e-6 absolute (8.2e-7 relative: two seeds' Student-t half-width magnifies the float32
rounding of each run's value); ``fl_cs_ucb_q``'s ``mean_set_reward`` became
``average_set_reward``, as the CS-UCB experiments' did (the same values).

The flags are those of the end-to-end runs in ``tests/experiments/`` (same shapes, same
programs), so each experiment's golden check shares its compiled programs with those tests: the
federated runs and ``cocs_hfl``'s *are* the golden runs, and the other selection experiments'
golden runs add only the policies their end-to-end runs leave out. ``{mnist_dir}`` stands for
the fake MNIST that ``tests/experiments/test_fl.py`` writes in the real IDX format.
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


def golden_argv(name: str, **placeholders: str) -> list[str]:
    """The stored flags of experiment ``name``, with ``{placeholder}`` values filled in."""
    return [flag.format(**placeholders) for flag in ARGV[name]]


def assert_same_summary(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    assert list(got.columns) == list(expected.columns)
    assert len(got) == len(expected)
    for column in expected.columns:
        a, b = got[column].to_numpy(), expected[column].to_numpy()
        if b.dtype == object:
            assert list(a) == list(b), column
        else:
            np.testing.assert_array_equal(a.astype(float), b.astype(float), err_msg=column)


def assert_golden_summary(name: str, summary: pd.DataFrame) -> None:
    """``summary`` (a run of ``golden_argv(name)``) equals the stored one, bit for bit."""
    assert_same_summary(summary, pd.read_csv(GOLDEN / name / "summary.csv"))


def check_golden(name: str, out: Path) -> None:
    """Run experiment ``name`` on its golden flags into ``out`` and compare the summary."""
    config = parse(
        EXPERIMENTS[name], [*golden_argv(name), "--out", str(out), "--quiet", "--no-plots"]
    )
    driver.run(config)
    assert_golden_summary(name, pd.read_csv(out / "summary.csv"))
