"""The code fingerprint that a sweep's manifest stores (jfl.provenance)."""

from __future__ import annotations

import functools

from jfl import provenance
from jfl.envs import RbcsfEnv
from jfl.policies import random


class Outside:
    """A class defined outside the package."""


def outside(x):
    return x


def test_objects_of_the_package_are_not_external_and_others_are():
    assert not provenance.is_external(random)
    assert not provenance.is_external(RbcsfEnv())  # an instance: by its class
    assert not provenance.is_external(functools.partial(random, 4))
    assert provenance.is_external(outside)
    assert provenance.is_external(Outside())
    assert provenance.qualified_name(Outside()) == "tests.test_provenance.Outside"


def test_source_hash_follows_the_source():
    assert provenance.source_hash(Outside()) == provenance.source_hash(Outside)
    assert provenance.source_hash(outside) != provenance.source_hash(Outside)
    # Without a readable source (typed into a console): the qualified name.
    typed = type("Typed", (), {"__module__": "__main__"})
    assert provenance.source_hash(typed) == provenance.source_hash(typed)


def test_fingerprint_lists_only_external_objects():
    code = provenance.code_fingerprint({"policy random": random, "mine": outside, "none": None})
    assert set(code["external"]) == {"mine"}
    assert code["external"]["mine"]["name"] == "tests.test_provenance.outside"
    assert len(code["package_source"]) == 16
    assert provenance.code_changes(code, code) == []


def test_code_changes_name_what_changed():
    old = provenance.code_fingerprint({"policy a": outside, "env": Outside})
    new = {**old, "jax": "9.9", "package_source": "x", "git_commit": "abcdef1234567"}
    new["external"] = {"policy a": {"name": "m.f", "source": "y"}, "learner": {"name": "m.g"}}
    changes = provenance.code_changes(old, new)
    assert changes[0] == f"jax {old['jax']} → 9.9"
    assert changes[1].startswith("the jfl package's source changed")
    assert "env (tests.test_provenance.Outside) is no longer used" in changes
    assert "learner (m.g) is new" in changes
    assert "the source of policy a (m.f) changed" in changes
    # A new commit that leaves the package's source alone changes no number.
    assert provenance.code_changes(old, {**old, "git_commit": "0" * 40}) == []
    assert provenance.code_changes(None, old) == [
        "the stored sweep records no code fingerprint (made by an older jfl)"
    ]


def test_user_files_follow_the_imports_of_the_users_modules(tmp_path, monkeypatch):
    """The module defining an object and every user module its source imports, whole; not
    jfl's own modules nor installed ones (numpy)."""
    import importlib
    import sys

    (tmp_path / "uf_policy.py").write_text(
        "import numpy\nfrom jfl.policies import random\nfrom uf_consts import SCALE\n"
        "import uf_helpers as helpers\n\ndef build(n, m):\n    return random(n, m)\n"
    )
    (tmp_path / "uf_consts.py").write_text("SCALE = 2.0\n")
    (tmp_path / "uf_helpers.py").write_text("from uf_consts import SCALE\n")
    (tmp_path / "uf_unrelated.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("uf_policy", "uf_consts", "uf_helpers", "uf_unrelated"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    importlib.import_module("uf_unrelated")
    module = importlib.import_module("uf_policy")

    files = provenance.user_files([module.build])
    assert list(files) == ["uf_consts", "uf_helpers", "uf_policy"]
    assert files["uf_consts"]["file"] == str(tmp_path / "uf_consts.py")
    assert provenance.user_files([random, RbcsfEnv(), sys.modules["numpy"].mean]) == {}

    old = provenance.code_fingerprint({"policy uf": module.build})
    (tmp_path / "uf_consts.py").write_text("SCALE = 3.0\n")
    new = provenance.code_fingerprint({"policy uf": module.build})
    assert provenance.code_changes(old, new) == [f"{tmp_path / 'uf_consts.py'} changed"]


def test_another_snapshot_of_the_dataset_is_a_change():
    """Federated sweeps record where their data came from (a Hub snapshot's commit): another
    snapshot is named as a change; fingerprints without it (selection-only sweeps, older
    manifests) compare as before."""
    code = provenance.code_fingerprint({})
    old, new = {**code, "data": "hf://datasets/r@aaa"}, {**code, "data": "hf://datasets/r@bbb"}
    assert provenance.code_changes(old, new) == [
        "the dataset changed (hf://datasets/r@aaa → hf://datasets/r@bbb)"
    ]
    assert provenance.code_changes(old, old) == [] == provenance.code_changes(code, new)
