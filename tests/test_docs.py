"""The documentation's Python examples, executed at small sizes, so that none drifts from the API.

Each fenced ``python`` block of the sections below runs as written but for the sizes (rounds,
seeds), which are cut by textual replacements that must each apply once: an example that
changes its sizes fails here until this file follows. The experiment of docs/extending.md is
written to a module of its own and run through its script, as a user would. Those run in the
``notebooks`` group (out of the default run; CI runs it after it); the checks that the docs name
every experiment script and every notebook read files only and run by default.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def blocks(page: str, section: str) -> list[str]:
    """The fenced python blocks of ``section`` (a ``## `` heading) of ``docs/<page>``."""
    text = (DOCS / page).read_text()
    start = re.search(rf"^## {re.escape(section)}\b.*$", text, re.M)
    assert start, f"{page} has no section {section!r}"
    end = re.search(r"^## ", text[start.end() :], re.M)
    body = text[start.end() : start.end() + end.start()] if end else text[start.end() :]
    return re.findall(r"^```python\n(.*?)^```", body, re.S | re.M)


def smaller(code: str, replacements: dict[str, str]) -> str:
    for old, new in replacements.items():
        assert code.count(old) == 1, f"the example no longer holds {old!r}"
        code = code.replace(old, new)
    return code


@pytest.mark.notebooks
def test_from_python(tmp_path):
    """getting-started.md, "From Python": the runner on RBCS-F, CS-UCB-Q with traced β, c and
    availability, and a whole experiment."""
    first, second, third = blocks("getting-started.md", "From Python")
    namespace: dict = {}
    exec(smaller(first, {"num_rounds=500": "num_rounds=20", "np.arange(64)": "np.arange(2)"}),
         namespace)  # fmt: skip
    out = namespace["out"]
    assert out.round_time.shape == (3, 2, 20)
    cut = {"build(3, 2), 5000": "build(3, 2), 20", "np.arange(32)": "np.arange(2)"}
    exec(smaller(second, cut), namespace)
    assert namespace["out"].set_reward.shape == (2, 2, 20)
    cut = {"seeds=16": "seeds=2, rounds=20, plots=False", '"runs/grid"': repr(str(tmp_path))}
    exec(smaller(third, cut), namespace)
    result = namespace["result"]
    assert list(result.summary["V"].dropna()) == [1.0, 10.0]
    assert "mean_round_time_band" not in result.dataset or result.dataset.sizes["seed"] == 2
    assert result.out == tmp_path and (tmp_path / "results.nc").is_file()


@pytest.mark.notebooks
def test_adding_an_experiment(tmp_path, monkeypatch, capsys):
    """extending.md, "An experiment": the module, its script and the call from Python."""
    module, script, call = blocks("extending.md", "An experiment")
    (tmp_path / "my_experiments.py").write_text(module)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_experiments", raising=False)
    out = tmp_path / "late"
    flags = ["--seeds", "2", "--rounds", "20", "--quiet", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", ["late_rounds.py", *flags, "--V", "1,10"])
    with pytest.raises(SystemExit) as exit:
        exec(script, {"__name__": "__main__"})
    assert exit.value.code == 0
    printed = capsys.readouterr().out
    assert "Empty DataFrame" not in printed
    table = printed.splitlines()[1:]
    assert table[0].split()[:2] == ["policy", "V"] and "late_rounds" in table[0]
    assert len(table) == 1 + 3  # RBCS-F at two V, Random
    assert (out / "figures" / "late_rounds.png").is_file()

    namespace: dict = {}
    cut = {"seeds=16": "seeds=2, rounds=20, quiet=True", '"runs/late_rounds"': repr(str(out))}
    exec(smaller(call, cut), namespace)
    result = namespace["result"]
    assert (result.chunks_computed, result.chunks_reused) == (0, 2)  # the script's, read back
    assert "late_rounds" in result.summary and "round_time" in result.dataset
    assert result.dataset["round_time"].dims == ("config", "seed", "round")


def test_reproductions_index_names_every_experiment_script():
    """docs/reproductions/index.md lists every script of sweeps/ (with its page)."""
    index = (DOCS / "reproductions" / "index.md").read_text()
    scripts = sorted(p.name for p in (ROOT / "sweeps").glob("*.py"))
    assert scripts
    missing = [name for name in scripts if f"sweeps/{name}" not in index]
    assert not missing, f"docs/reproductions/index.md does not name {missing}"


def test_getting_started_lists_every_notebook():
    """Getting started's table of notebooks names every notebook of notebooks/."""
    text = (DOCS / "getting-started.md").read_text()
    notebooks = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert notebooks
    missing = [name for name in notebooks if f"notebooks/{name}" not in text]
    assert not missing, f"docs/getting-started.md does not list {missing}"


def test_an_experiments_own_reductions():
    """extending.md, "An experiment reduced on the device": the example's metric and curve, on
    one run's outputs, against their plain definitions."""
    import jax.numpy as jnp
    import numpy as np

    from jfl.reduction import RunView

    (code,) = blocks("extending.md", "An experiment reduced on the device")
    namespace: dict = {}
    exec(code, namespace)
    late = namespace["LATE"]
    times = np.array([1.0, 6.0, 7.0, 2.0, 5.5], np.float32)
    run = RunView({"round_time": jnp.asarray(times)}, {}, len(times), "queue_rate")
    assert late.metrics["late_rounds"].fn(run) == np.float32(3 / 5)
    np.testing.assert_array_equal(late.curves["late_so_far"].fn(run), np.cumsum(times > 5.0))
