"""The policy registry and host-side validation of hyperparameters and sizes (selection size,
number of channels or of edge servers)."""

from __future__ import annotations

import inspect
import re

import jax
import numpy as np
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
        ("rbcsf", "beta", 1.5, "[0, 1]"),
        ("rbcsf", "beta", -0.1, "[0, 1]"),
        ("rbcsf", "V", -1.0, "[0, inf"),
        ("rbcsf", "V", float("nan"), "[0, inf"),
        ("rbcsf", "alpha", -0.5, "[0, inf"),
        ("rbcsf", "lam", 0.0, "(0, inf"),
        ("rbcsf", "delta", 1.0, "(0, 1)"),
        ("dirichlet_random", "gamma2", 0.0, "(0, inf"),
        ("fedcs", "deadline", 0.0, "(0, inf"),
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


SIZE_NAMES = {
    "rbcsf": "selection_size",
    "random": "selection_size",
    "dirichlet_random": "selection_size",
    "fedcs": "selection_size",
    "cs_ucb": "selection_size",
    "cs_ucb_q": "selection_size",
    "modified_cs_ucb": "selection_size",
    "round_robin": "selection_size",
    "local_accuracy": "selection_size",
    "cocs": "num_servers",
    "oracle": "num_servers",
    "linucb": "num_servers",
    "cucb": "num_servers",
    "random_budget": "num_servers",
}


def test_size_names():
    """A builder's second parameter is the selection size, except for the COCS family's number
    of edge servers."""
    for name, size_name in SIZE_NAMES.items():
        params = list(inspect.signature(get(name).build).parameters)
        assert params[:2] == ["num_clients", size_name], name


def test_every_builder_is_exported_under_its_registry_name():
    """jfl.policies.<name> is the builder the registry builds ``name`` with, documented."""
    for name, spec in jfl.policies.REGISTRY.items():
        assert getattr(jfl.policies, name) is spec.build, name
        assert name in jfl.policies.__all__, name
        assert spec.build.__doc__, name


@pytest.mark.parametrize("policy", sorted(SIZE_NAMES))
@pytest.mark.parametrize("size", [11, 0, -1, 2.5])
def test_build_rejects_bad_size(policy, size):
    """build(num_clients=10, size) with size outside [1, 10] (or not an int) raises naming the
    size's parameter (selection_size or num_servers)."""
    size_name = SIZE_NAMES[policy]
    message = rf"\b{size_name} must be an integer in \[1, num_clients=10\]"
    with pytest.raises(ValueError, match=message):
        get(policy).build(10, size)
    with pytest.raises(ValueError, match=rf"\b{size_name} must"):
        get(policy).build(num_clients=10, **{size_name: size})


@pytest.mark.parametrize("policy", sorted(SIZE_NAMES))
def test_build_rejects_bad_num_clients(policy):
    """num_clients = 0 raises ValueError naming num_clients."""
    with pytest.raises(ValueError, match="num_clients"):
        get(policy).build(0, 1)


def test_build_accepts_size_equal_to_num_clients():
    """size = num_clients is allowed (select everyone available; as many channels or servers as
    clients); numpy integers too."""
    for name in SIZE_NAMES:
        for size in (10, np.int64(10)):
            policy = get(name).build(num_clients=10, **{SIZE_NAMES[name]: size})
            assert isinstance(policy, jfl.policies.Policy)


def test_stateless_helpers():
    """EmptyState, stateless_init/stateless_update and stateless(select), shared by the stateless
    policies of every family."""
    select = object()
    policy = jfl.policies.stateless(select)
    assert policy.select is select
    assert policy.init(None, {}) == jfl.policies.EmptyState()
    state = jfl.policies.EmptyState()
    assert jfl.policies.stateless_update(state, None, None, None, {}) is state
    for name in ("fedcs", "oracle", "random_budget"):
        policy = get(name).build(10, 3)
        assert policy.init is jfl.policies.stateless_init
        assert policy.update is jfl.policies.stateless_update
    # Random keeps only its per-run tie-breaking order: a random permutation of the clients.
    for name in ("random", "dirichlet_random"):
        assert get(name).build(10, 3).update is jfl.policies.stateless_update
    state = get("random").build(10, 3).init(jax.random.key(0), {})
    assert isinstance(state, jfl.policies.TieBreakState)
    assert sorted(np.asarray(state.priority).tolist()) == list(range(10))


def test_check_selection_size_names_its_parameter():
    """check_selection_size is exported and names the parameter it checks."""
    jfl.policies.check_selection_size(4, 4)
    with pytest.raises(ValueError, match=r"^selection_size must"):
        jfl.policies.check_selection_size(4, 5)
    with pytest.raises(ValueError, match=r"^num_servers must"):
        jfl.policies.check_selection_size(4, 0, "num_servers")
    with pytest.raises(ValueError, match=r"^num_clients must"):
        jfl.policies.check_selection_size(0, 1, "num_servers")


def test_rbcsf_rejects_unknown_alpha_schedule():
    """An unknown alpha_schedule option raises ValueError naming it."""
    with pytest.raises(ValueError, match="alpha_schedule"):
        get("rbcsf").build(num_clients=10, selection_size=3, alpha_schedule="sometimes")


def test_max_selected_is_the_size_except_where_a_policy_declares_more():
    """FedCS takes every client that meets its deadline; the others select at most their size."""
    assert get("fedcs").max_selected(40, 8) == 40
    for name in ("rbcsf", "random", "cs_ucb_q", "round_robin"):
        assert get(name).max_selected(40, 8) == 8


def test_readers_are_the_policies_whose_spec_reads_a_hyperparameter():
    from jfl.policies import readers

    assert set(readers("d")) == {"pow_d", "cpow_d", "rpow_d"}
    assert set(readers("beta")) == {"rbcsf", "cs_ucb_q"} and readers("sigma") == ["e3cs"]
    assert readers("no_such_hparam") == []
