"""Every notebook under ``notebooks/`` runs end to end, shows what the library computes, and is
stored clean.

Notebooks are executed with nbclient in a fresh kernel whose working directory is a temporary
folder, so whatever they write (``runs/…``) stays out of the repository, at small sizes
(``tests.helpers.NOTEBOOK_SIZES``: a cell after the settings cell; the notebooks keep their own
defaults). A failing cell fails the test with the cell's traceback; the summaries and values
they show are then checked against the library (``tests.helpers.check_notebook_results``).
The executions are marked ``notebooks``: out of the default run, run by ``pytest -m notebooks``
(and by CI); the static checks of the stored files run by default.
"""

from __future__ import annotations

import json

import nbformat
import pytest

from tests.helpers import (
    NOTEBOOK_RESULTS,
    NOTEBOOK_SIZES,
    NOTEBOOKS,
    NOTEBOOKS_LATER,
    assigned_names,
    run_notebook_and_check,
)


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 6, [p.name for p in NOTEBOOKS]
    assert sorted(NOTEBOOK_SIZES) == sorted(NOTEBOOK_RESULTS) == [p.stem for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs(path):
    """Reviewable: no outputs, execution counts or embedded data in the committed file."""
    notebook = json.loads(path.read_text())
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [], f"{path.name} cell {index} has stored outputs"
            assert cell.get("execution_count") is None, f"{path.name} cell {index} was executed"
    assert path.stat().st_size < 60_000, f"{path.name} is larger than a clean notebook should be"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_states_what_it_shows_and_how_to_scale_up(path):
    """A title, a cell marked for scaling up, and one settings cell with the sizes the test
    makes small (so that the test runs what a user runs, only shorter)."""
    notebook = nbformat.read(path, as_version=4)
    first = notebook.cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("# ")
    assert any("scale up" in cell.source.lower() for cell in notebook.cells), (
        f"{path.name}: no cell marked for scaling up on an accelerator"
    )
    sizes = set(NOTEBOOK_SIZES[path.stem])
    settings = [
        cell
        for cell in notebook.cells
        if cell.cell_type == "code" and sizes <= assigned_names(cell.source)
    ]
    assert settings, f"{path.name}: no settings cell defines {sorted(sizes)}"


FIRST = [p for p in NOTEBOOKS if p.stem not in NOTEBOOKS_LATER]


@pytest.mark.notebooks
@pytest.mark.parametrize("path", FIRST, ids=lambda p: p.stem)
def test_notebook_runs_end_to_end(path, tmp_path):
    run_notebook_and_check(path, tmp_path)
