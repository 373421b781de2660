"""The other half of the notebook executions (see ``tests/test_notebooks.py``)."""

from __future__ import annotations

import pytest

from tests.test_notebooks import LATER, NOTEBOOKS, execute


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.stem in LATER], ids=lambda p: p.stem)
def test_notebook_runs_end_to_end(path, tmp_path):
    execute(path, tmp_path)
