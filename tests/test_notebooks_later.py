"""The longest notebook execution, 03_cocs, in a file of its own (``tests/helpers.py``, see
``tests/test_notebooks.py``)."""

from __future__ import annotations

import pytest

from tests.helpers import NOTEBOOKS, NOTEBOOKS_LATER, run_notebook_and_check

LATER = [p for p in NOTEBOOKS if p.stem in NOTEBOOKS_LATER]


@pytest.mark.notebooks
@pytest.mark.parametrize("path", LATER, ids=lambda p: p.stem)
def test_notebook_runs_end_to_end(path, tmp_path):
    run_notebook_and_check(path, tmp_path)
