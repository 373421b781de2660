"""The policy registry and host-side validation of hyperparameters and selection sizes."""

from __future__ import annotations

import re

import pytest

import jfl.policies
from jfl.policies import REGISTRY, get

PAPER_POLICIES = ("rbcsf", "random", "dirichlet_random", "fedcs")


def test_paper_policies_are_registered():
    """RBCS-F and its three baselines are in the registry under their names."""
    for name in PAPER_POLICIES:
        assert get(name).name == name


def test_unknown_policy_lists_known_ones():
    """get() of an unknown name raises ValueError naming it and listing every registered policy."""
    with pytest.raises(ValueError, match="no_such_policy") as info:
        get("no_such_policy")
    for name in REGISTRY:
        assert name in str(info.value)


@pytest.mark.parametrize(
    ("policy", "name", "value", "interval"),
    [
        # the interval as printed; for an infinite upper end only its opening part is matched
        ("rbcsf", "beta", 1.5, "[0.0, 1.0]"),
        ("rbcsf", "beta", -0.1, "[0.0, 1.0]"),
        ("rbcsf", "V", -1.0, "[0.0, inf"),
        ("rbcsf", "V", float("nan"), "[0.0, inf"),
        ("rbcsf", "alpha", -0.5, "[0.0, inf"),
        ("rbcsf", "lam", 0.0, "(0.0, inf"),
        ("rbcsf", "delta", 1.0, "(0.0, 1.0)"),
        ("dirichlet_random", "gamma2", 0.0, "(0.0, inf"),
        ("fedcs", "deadline", 0.0, "(0.0, inf"),
    ],
)
def test_hparam_validation_names_parameter_and_range(policy, name, value, interval):
    """validate()/complete() raise ValueError with the parameter's name and its allowed range."""
    spec = get(policy)
    pattern = rf"{re.escape(name)} must be in {re.escape(interval)}"
    with pytest.raises(ValueError, match=pattern):
        spec.validate({name: value})
    with pytest.raises(ValueError, match=pattern):
        spec.complete({name: [spec.hparams[name].default, value]})  # array-valued grids too


@pytest.mark.parametrize(
    ("policy", "name"), [("rbcsf", "V"), ("rbcsf", "lam"), ("dirichlet_random", "gamma2")]
)
def test_hparam_validation_rejects_infinity(policy, name):
    """+inf is not a usable value for V (inf·0 in P4), lam (H = inf·I) or gamma2 (NaN weights)."""
    with pytest.raises(ValueError, match=name):
        get(policy).validate({name: float("inf")})


def test_hparam_validation_accepts_defaults_and_grids():
    """Defaults and in-range grids pass; complete() fills in the defaults."""
    spec = get("rbcsf")
    spec.validate(spec.defaults())
    full = spec.complete({"V": [0.0, 1.0, 100.0], "beta": [0.0, 1.0]})
    assert full["alpha"] == spec.hparams["alpha"].default
    assert full["V"] == [0.0, 1.0, 100.0]


def test_unknown_hparam_is_rejected():
    """A hyperparameter the policy does not take raises ValueError listing the ones it takes."""
    with pytest.raises(ValueError, match="gamma2") as info:
        get("rbcsf").validate({"gamma2": 1.0})
    assert "beta" in str(info.value)


@pytest.mark.parametrize("policy", PAPER_POLICIES)
@pytest.mark.parametrize("m", [11, 0, -1, 2.5])
def test_build_rejects_bad_m(policy, m):
    """build(num_clients=10, m) with m outside [1, 10] (or not an int) raises naming m."""
    with pytest.raises(ValueError, match=r"\bm must"):
        get(policy).build(num_clients=10, m=m)


@pytest.mark.parametrize("policy", PAPER_POLICIES)
def test_build_rejects_bad_num_clients(policy):
    """num_clients = 0 raises ValueError naming num_clients."""
    with pytest.raises(ValueError, match="num_clients"):
        get(policy).build(num_clients=0, m=1)


def test_build_accepts_m_equal_to_num_clients():
    """m = num_clients is allowed (select everyone available)."""
    for name in PAPER_POLICIES:
        policy = get(name).build(num_clients=10, m=10)
        assert isinstance(policy, jfl.policies.Policy)


def test_rbcsf_rejects_unknown_alpha_schedule():
    """An unknown alpha_schedule option raises ValueError naming it."""
    with pytest.raises(ValueError, match="alpha_schedule"):
        get("rbcsf").build(num_clients=10, m=3, alpha_schedule="sometimes")
