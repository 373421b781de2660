"""Confidence intervals and fairness index against closed forms and scipy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from jfl.stats import (
    NONNEGATIVE,
    UNIT_INTERVAL,
    Bounds,
    bootstrap_ci,
    interval,
    jain_index,
    mean_ci,
)


def test_mean_ci_matches_scipy_t_interval():
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 2.0, size=(17, 5))
    mean, lo, hi = mean_ci(x, axis=0)
    for j in range(5):
        ref_lo, ref_hi = sps.t.interval(0.95, 16, loc=x[:, j].mean(), scale=sps.sem(x[:, j]))
        assert lo[j] == pytest.approx(ref_lo) and hi[j] == pytest.approx(ref_hi)
    np.testing.assert_allclose(mean, x.mean(axis=0))


def test_mean_ci_coverage_is_nominal():
    """Over 4000 normal samples of size 8 the 95% t-interval covers the mean 95% ± 4 SE."""
    rng = np.random.default_rng(1)
    trials = 4000
    x = rng.normal(1.0, 1.0, size=(8, trials))
    _, lo, hi = mean_ci(x, axis=0)
    coverage = np.mean((lo <= 1.0) & (1.0 <= hi))
    se = np.sqrt(0.95 * 0.05 / trials)
    assert abs(coverage - 0.95) < 4 * se


def test_single_seed_interval_is_nan_and_level_is_checked():
    mean, lo, hi = mean_ci(np.ones((1, 3)))
    assert np.all(mean == 1) and np.all(np.isnan(lo)) and np.all(np.isnan(hi))
    with pytest.raises(ValueError, match="level"):
        mean_ci(np.ones((3, 3)), level=1.5)
    with pytest.raises(ValueError, match="interval method"):
        interval(np.ones((3, 3)), method="magic")


def test_bootstrap_interval_brackets_the_mean_and_handles_constants():
    rng = np.random.default_rng(2)
    x = np.column_stack([rng.exponential(size=30), np.full(30, 2.0)])
    mean, lo, hi = bootstrap_ci(x, axis=0, n_resamples=500)
    assert lo[0] < mean[0] < hi[0]
    assert lo[1] == hi[1] == mean[1] == 2.0


@pytest.mark.parametrize("method", ["t", "bootstrap"])
def test_missing_values_are_left_out_alike_by_both_intervals(method):
    """NaN marks a missing value (a censored run): each slice's mean and interval are those of
    the values it has, as computed from them alone; a slice with none is NaN."""
    rng = np.random.default_rng(3)
    x = rng.exponential(size=(12, 5))
    x[rng.random(x.shape) < 0.3] = np.nan
    x[:, 4] = np.nan
    mean, lo, hi = interval(x, axis=0, method=method)
    for j in range(4):
        present = x[~np.isnan(x[:, j]), j]
        expected = interval(present, axis=0, method=method)
        np.testing.assert_allclose([mean[j], lo[j], hi[j]], expected, rtol=1e-12)
    assert np.isnan([mean[4], lo[4], hi[4]]).all()
    assert 0 < np.isnan(x[:, :4]).sum()  # the instance has missing values


@pytest.mark.parametrize("method", ["t", "bootstrap"])
def test_intervals_stay_within_the_quantity_bounds(method):
    """Two seeds of a fraction far apart: the t interval reaches −5 and 6, clipped to [0, 1]; a
    time's lower end to 0; the mean is left alone, NaN (one seed) stays NaN."""
    x = np.array([[0.05, 0.0, 0.5], [0.95, 1.0, 0.5]])
    _, raw_lo, raw_hi = interval(x, method="t")
    assert raw_lo[0] < -1 and raw_hi[0] > 2  # what an unclipped interval says
    mean, lo, hi = interval(x, method=method, bounds=UNIT_INTERVAL)
    np.testing.assert_allclose(mean, [0.5, 0.5, 0.5])
    assert (lo >= 0).all() and (hi <= 1).all() and (lo <= mean).all() and (mean <= hi).all()
    _, lo, hi = interval(x, bounds=NONNEGATIVE)
    assert (lo >= 0).all() and hi[0] == raw_hi[0]
    _, lo, hi = interval(x[:1], bounds=UNIT_INTERVAL)
    assert np.isnan(lo).all() and np.isnan(hi).all()
    assert Bounds(0.0, 1.0).cumulative() == NONNEGATIVE
    assert Bounds(-1.0, 1.0).cumulative() == Bounds()


def test_jain_index_closed_forms():
    assert jain_index(np.ones(10)) == pytest.approx(1.0)
    assert jain_index(np.eye(1, 10)[0]) == pytest.approx(0.1)
    assert jain_index(np.zeros(4)) == pytest.approx(1.0)
    x = np.array([1.0, 2.0, 3.0])
    assert jain_index(x) == pytest.approx(36 / (3 * 14))
