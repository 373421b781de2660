"""The public API: flat, documented, lazily loaded, and a generic layer that knows no paper."""

from __future__ import annotations

import ast
import importlib
import inspect
import io
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

import jfl

ROOT = Path(jfl.__file__).resolve().parent

# The generic layer: every top-level module and the federated-training package. The papers'
# components (environments, policies, their kernels) and experiments sit on top of it.
GENERIC = sorted([*ROOT.glob("*.py"), *(ROOT / "fl").glob("*.py")])
# Names that belong to one paper's experiments: hyperparameters, flags, policies.
PAPER_NAMES = {
    "beta",
    "gamma1",
    "gamma2",
    "fairness_target",
    "num_channels",
    "lam",
    "rho",
    "h_T",
    "V",
    "rbcsf",
    "cs_ucb",
    "cs_ucb_q",
    "modified_cs_ucb",
    "cocs",
    "fedcs",
    "PRESET_SETTINGS",
}


def _paper_names_in(path: Path) -> list[str]:
    """Identifiers and string literals of ``path`` that are paper-specific names (comments and
    docstrings, which cite the papers, are not code)."""
    found = []
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    for token in tokens:
        if token.type == tokenize.NAME and token.string in PAPER_NAMES:
            found.append(f"{path.name}:{token.start[0]}: {token.string}")
        elif token.type == tokenize.STRING:
            try:
                value = ast.literal_eval(token.string)
            except (ValueError, SyntaxError):
                continue
            if isinstance(value, str) and value.lstrip("-").replace("-", "_") in PAPER_NAMES:
                found.append(f"{path.name}:{token.start[0]}: {token.string}")
    return found


def test_the_generic_layer_names_no_paper():
    """No paper's parameter, flag or policy name in the code of the generic layer."""
    assert len(GENERIC) > 15
    found = [hit for path in GENERIC for hit in _paper_names_in(path)]
    assert not found, "\n".join(found)


def test_the_paper_name_check_finds_them(tmp_path):
    """The check above is not vacuous: it flags names and string literals, not comments."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Huang et al.\'s beta."""\n'
        "# the fairness_target of RBCS-F\n"
        "def f(beta, queue_rate):\n"
        '    return {"gamma1": 1, "V": 2}\n'
    )
    assert [hit.split(": ")[1] for hit in _paper_names_in(sample)] == [
        "beta",
        '"gamma1"',
        '"V"',
    ]


def _public_modules() -> list[str]:
    names = [f"jfl.{name}" for name in jfl._SUBMODULES]
    for package in ("envs", "fl", "kernels", "experiments"):
        folder = ROOT / package
        names += [f"jfl.{package}.{p.stem}" for p in folder.glob("*.py") if p.stem[0] != "_"]
    return sorted(set(names))


def _undocumented(module_name: str) -> list[str]:
    module = importlib.import_module(module_name)
    public = getattr(module, "__all__", None) or [n for n in vars(module) if n[0] != "_"]
    missing = []
    for name in public:
        value = getattr(module, name)
        if not (inspect.isfunction(value) or inspect.isclass(value)):
            continue
        if not value.__module__.startswith("jfl"):
            continue  # imported from elsewhere
        if not inspect.getdoc(value):
            missing.append(f"{value.__module__}.{value.__qualname__}")
        if inspect.isclass(value):
            for attr, member in vars(value).items():
                if attr[0] != "_" and inspect.isfunction(member):
                    if not inspect.getdoc(getattr(value, attr)):
                        missing.append(f"{value.__module__}.{value.__qualname__}.{attr}")
    return missing


def test_every_public_name_has_a_docstring():
    modules = _public_modules()
    assert {"jfl.runner", "jfl.sweep", "jfl.trackers", "jfl.envs.rbcsf"} <= set(modules)
    missing = sorted({name for module in modules for name in _undocumented(module)})
    assert not missing, missing


@pytest.mark.parametrize("name", jfl.__all__)
def test_every_name_of_jfl_loads(name):
    assert getattr(jfl, name) is not None


def test_top_level_names_are_the_modules_own():
    assert jfl.make_run is jfl.runner.make_run
    assert jfl.run_policy_grid is jfl.sweep.run_policy_grid
    assert jfl.Experiment is jfl.driver.Experiment
    assert jfl.fairness_queue is jfl.trackers.fairness_queue
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        jfl.nope  # noqa: B018


def test_import_jfl_is_light_and_loads_submodules_on_use():
    """``import jfl`` loads neither JAX nor the command line; ``jfl.runner`` loads on use."""
    code = (
        "import sys, jfl\n"
        "assert 'jax' not in sys.modules and 'tyro' not in sys.modules, 'eager'\n"
        "jfl.runner\n"
        "assert 'jfl.runner' in sys.modules and 'tyro' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_experiments_are_at_most_two_levels_deep():
    """Experiment → a scenario → the experiment, single inheritance; shared settings are fields
    (composed dataclasses), not base classes. (Experiment's own execution settings are its
    base, ``Execution``, so that their flags stay flat.)"""
    from jfl.driver import Execution, Experiment
    from jfl.experiments import EXPERIMENTS

    assert Experiment.__bases__ == (Execution,)
    for name, config in EXPERIMENTS.items():
        chain = [k for k in config.__mro__ if k not in (object, Execution)]
        assert len(chain) <= 3 and chain[-1] is Experiment, (name, chain)
        assert all(len(k.__bases__) == 1 for k in chain), (name, chain)
