"""Every figure of jfl.plots from a small hand-made dataset, and no global matplotlib state."""

from __future__ import annotations

import importlib

import matplotlib
import numpy as np
import pytest
import xarray as xr

from jfl import plots
from jfl.results import summarize

CONFIGS, SEEDS, ROUNDS, CLIENTS = 3, 4, 8, 3


@pytest.fixture(scope="module")
def ds():
    rng = np.random.default_rng(0)
    shape = (CONFIGS, SEEDS)
    selected = rng.random((*shape, ROUNDS, CLIENTS)) < 0.5
    evals = [0, 4, 8]
    return xr.Dataset(
        {
            "round_time": (("config", "seed", "round"), rng.random((*shape, ROUNDS))),
            "num_selected": (("config", "seed", "round"), selected.sum(-1)),
            "selection_count": (("config", "seed", "client"), selected.sum(-2)),
            "final_queue": (("config", "seed", "client"), rng.random((*shape, CLIENTS))),
            "selected": (("config", "seed", "round", "client"), selected),
            "queue_rate": (("config", "client"), np.full((CONFIGS, CLIENTS), 0.4)),
            "accuracy": (("config", "seed", "eval"), rng.random((*shape, len(evals)))),
            "wall_clock": (
                ("config", "seed", "round"),
                np.cumsum(rng.random((*shape, ROUNDS)), -1),
            ),
        },
        coords={
            "config": np.arange(CONFIGS),
            "seed": np.arange(SEEDS),
            "round": np.arange(1, ROUNDS + 1),
            "client": np.arange(CLIENTS),
            "eval": evals,
            "policy": ("config", np.array(["rbcsf", "rbcsf", "random"])),
            "V": ("config", [1.0, 10.0, np.nan]),
            "beta": ("config", [0.1, 0.2, np.nan]),
        },
        attrs={"target_accuracy": 0.5},
    )


def _png(path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 1000


def test_over_rounds_pull_record_selection_fraction_and_accuracy(ds, tmp_path):
    figures = {
        "rounds.png": lambda p: plots.plot_over_rounds(
            ds, "round_time", "time (s)", p, "title", cumulative=True
        ),
        "pull.png": lambda p: plots.plot_pull_record(ds, p, configs=[0, 2]),
        "fraction.png": lambda p: plots.plot_selection_fraction(ds, p),
        "accuracy_round.png": lambda p: plots.plot_accuracy(ds, p),
        "accuracy_time.png": lambda p: plots.plot_accuracy(ds, p, against="time", title="t"),
    }
    for name, draw in figures.items():
        draw(tmp_path / name)
        assert _png(tmp_path / name), name


def test_summary_figures(ds, tmp_path):
    summary = summarize(ds)
    plots.plot_heatmap(summary.iloc[:2], "mean_round_time", "V", "beta", tmp_path / "heat.png")
    plots.plot_metric_vs(summary, "jain_index", "V", tmp_path / "vs.png", "Jain", "title")
    assert _png(tmp_path / "heat.png") and _png(tmp_path / "vs.png")


def test_labels_name_only_what_varies(ds):
    assert plots.varying_hparams(ds) == ["V", "beta"]
    assert plots.config_label(ds, 1, ["V", "beta"]) == "rbcsf V=10 beta=0.2"
    assert plots.config_label(ds, 2, ["V", "beta"]) == "random"


def test_import_and_plotting_leave_the_backend_alone(ds, tmp_path):
    backend = matplotlib.get_backend()
    importlib.reload(plots)
    plots.plot_pull_record(ds, tmp_path / "pull.png")
    assert matplotlib.get_backend() == backend
