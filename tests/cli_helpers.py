"""Loading and driving the sweep scripts from tests (they live outside the package)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SWEEPS = Path(__file__).resolve().parents[1] / "sweeps"


def load_script(name: str):
    """The module ``sweeps/<name>.py``."""
    spec = importlib.util.spec_from_file_location(name, SWEEPS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_cli(script, argv, capsys) -> tuple[int, str]:
    """Run ``script.main(argv)`` expecting it to exit; returns (exit code, stderr)."""
    with pytest.raises(SystemExit) as exc:
        script.main(argv)
    return exc.value.code, capsys.readouterr().err
