"""jfl.checks: every check accepts good values and names the parameter and range of a bad one."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from jfl import checks

# --------------------------------------------------------------------------- integer


@pytest.mark.parametrize(
    ("value", "low", "high", "expected"),
    [
        (1, 1, None, 1),
        (40, 1, None, 40),
        (0, 0, None, 0),
        (np.int64(7), 1, None, 7),
        (3.0, 1, None, 3),  # an integral float (a value read as a number) is accepted
        (8, 1, 8, 8),
        (1, 1, 8, 1),
    ],
)
def test_integer_accepts_integers_in_range_and_returns_an_int(value, low, high, expected):
    got = checks.integer("--n", value, low, high)
    assert got == expected and type(got) is int


@pytest.mark.parametrize(
    ("value", "low", "message"),
    [
        (0, 1, "--seeds must be an integer >= 1, got 0"),
        (-3, 0, "--seeds must be an integer >= 0, got -3"),
        (2.5, 1, "--seeds must be an integer >= 1, got 2.5"),
        (math.nan, 1, "--seeds must be an integer >= 1, got nan"),
        ("4", 1, "--seeds must be an integer >= 1, got 4"),
        (True, 1, "--seeds must be an integer >= 1, got True"),
    ],
)
def test_integer_rejects_non_integers_and_values_below_the_bound(value, low, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        checks.integer("--seeds", value, low)


def test_integer_upper_bound_names_where_it_comes_from():
    with pytest.raises(
        ValueError, match=re.escape("--m must be an integer in [1, --clients=40], got 41")
    ):
        checks.integer("--m", 41, 1, 40, "--clients")
    with pytest.raises(
        ValueError, match=re.escape("--m must be an integer in [1, --clients=40], got 0")
    ):
        checks.integer("--m", 0, 1, 40, "--clients")
    with pytest.raises(ValueError, match=re.escape("--m must be an integer in [2, 5], got 6")):
        checks.integer("--m", 6, 2, 5)
    with pytest.raises(ValueError, match=re.escape("--m must be an integer in [1, 5], got 2.5")):
        checks.integer("--m", 2.5, 1, 5)


# --------------------------------------------------------------------------- in_range, positive


@pytest.mark.parametrize(
    ("value", "kwargs"),
    [
        (0.0, {"low": 0.0, "high": 1.0}),
        (1.0, {"low": 0.0, "high": 1.0}),
        (0.5, {"low": 0.0, "high": 1.0, "low_open": True, "high_open": True}),
        ([0.0, 0.3, 0.99], {"low": 0.0, "high": 1.0, "high_open": True}),
        ((1.0, 2.0), {"low": 0.0}),
        (np.array([5.0, 6.0]), {}),
        (-1e9, {}),
    ],
)
def test_in_range_accepts_finite_values_within_bounds(value, kwargs):
    checks.in_range("--x", value, **kwargs)


@pytest.mark.parametrize(
    ("value", "kwargs", "message"),
    [
        (1.5, {"low": 0.0, "high": 1.0}, "--p-available must be in [0, 1], got 1.5"),
        (-0.1, {"low": 0.0, "high": 1.0}, "--p-available must be in [0, 1], got -0.1"),
        (1.0, {"low": 0.0, "high": 1.0, "high_open": True}, "must be in [0, 1), got 1.0"),
        (0.0, {"low": 0.0, "high": 1.0, "low_open": True}, "must be in (0, 1], got 0.0"),
        ([-1.0], {"low": 0.0}, "--p-available must be in [0, inf), got [-1.0]"),
        ([0.2, 1.0, 0.4], {"low": 0.0, "high": 1.0, "high_open": True}, "got [1.0]"),  # the bad one
        (math.nan, {}, "--p-available must be in (-inf, inf), got nan"),
        (math.inf, {"low": 0.0}, "--p-available must be in [0, inf), got inf"),
        ([1.0, math.inf], {}, "got [inf]"),
        ([-1.0, 5.0, -2.0, -3.0, -4.0], {"low": 0.0}, "got [-1.0, -2.0, -3.0]"),  # the first three
    ],
)
def test_in_range_names_the_parameter_range_and_value(value, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        checks.in_range("--p-available", value, **kwargs)
    assert str(err.value).startswith("--p-available must be in ")


def test_positive_is_finite_and_strictly_positive():
    checks.positive("--lam", 1e-9)
    checks.positive("--samples", [1500.0, 1000.0, 500.0])
    for bad, shown in ((0.0, "0.0"), (-1.0, "-1.0"), (math.inf, "inf"), ([1.0, 0.0], "[0.0]")):
        with pytest.raises(ValueError, match=re.escape(f"--lam must be in (0, inf), got {shown}")):
            checks.positive("--lam", bad)


# --------------------------------------------------------------------------- choice, per_client


def test_choice():
    checks.choice("--ci", "t", ("t", "bootstrap"))
    checks.choice("--ci", "bootstrap", iter(["t", "bootstrap"]))  # any iterable of choices
    with pytest.raises(
        ValueError, match=re.escape("--ci must be one of ['t', 'bootstrap'], got 'z'")
    ):
        checks.choice("--ci", "z", ("t", "bootstrap"))


def test_per_client_repeats_one_value_or_takes_one_per_client():
    assert checks.per_client("--distance", [300], 3) == [300.0, 300.0, 300.0]
    assert checks.per_client("--distance", (1, 2, 3), 3) == [1.0, 2.0, 3.0]
    assert checks.per_client("--distance", [7.0], 1) == [7.0]
    for values in ([1.0, 2.0], [1.0, 2.0, 3.0, 4.0], []):
        message = f"--distance: expected 1 or --clients=3 values, got {len(values)}"
        with pytest.raises(ValueError, match=re.escape(message)):
            checks.per_client("--distance", values, 3)


def test_distinct():
    checks.distinct("--policies", ["rbcsf", "random"])
    checks.distinct("--policies", [])
    with pytest.raises(
        ValueError, match=re.escape("--policies: duplicate values in ['a', 'b', 'a']")
    ):
        checks.distinct("--policies", ("a", "b", "a"))


@pytest.mark.parametrize(
    ("words", "message", "expected"),
    [
        # A command line's refusal in the Python API's words: switches as name=True/False,
        # other flags as their (nested) field; unknown flags and other text left alone.
        (
            "python",
            "--overwrite recomputes them, --reuse-stale keeps them",
            "overwrite=True recomputes them, reuse_stale=True keeps them",
        ),
        (
            "python",
            "--no-plots; --rounds must be ≥ 1; --lr > 0",
            "plots=False; rounds must be ≥ 1; training.lr > 0",
        ),
        ("python", "--bogus and x--rounds", "--bogus and x--rounds"),
        # The library names parameters in Python's terms, in backticks; the command line reads
        # them as its flags (nested fields by their own flag, switches by their sense); names
        # that are no field of the experiment, and other text, are left alone.
        (
            "flags",
            "`out` x holds a sweep; `overwrite=True` replaces it",
            "--out x holds a sweep; --overwrite replaces it",
        ),
        (
            "flags",
            "`reuse_stale=True`, `plots=False`, `training.lr`, `seeds`",
            "--reuse-stale, --no-plots, --lr, --seeds",
        ),
        ("flags", "`bogus`, `policies` and out", "`bogus`, --policies and out"),
    ],
)
def test_refusals_read_in_the_callers_terms(words, message, expected):
    """Refusals read in Python's terms from Python and in flags from the command line."""
    from jfl.experiments import FlSelection

    convert = checks.in_python_terms if words == "python" else checks.in_flag_terms
    assert convert(message, FlSelection()) == expected
