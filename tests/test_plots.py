"""Every figure of jfl.plots from a small hand-made dataset, and no global matplotlib state."""

from __future__ import annotations

import importlib

import matplotlib
import numpy as np
import pytest
import xarray as xr

from jfl import plots
from jfl.results import summarize
from tests.helpers import axes_summary, check_figure, read_back_png

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


LABELS = ["rbcsf V=1 beta=0.1", "rbcsf V=10 beta=0.2", "random"]


def _band_means(ax):
    return [np.asarray(line.get_ydata()) for line in ax.get_lines()]


def test_over_rounds_and_pull_record(ds, tmp_path):
    """Cumulative round time per configuration (the mean over seeds of the cumulative sums) and
    the pull record (the mean over seeds of the sorted selection counts)."""
    fig = plots.plot_over_rounds(
        ds, "round_time", "time (s)", tmp_path / "rounds.png", "title", cumulative=True
    )
    read_back_png(tmp_path / "rounds.png", fig)
    check_figure(fig, "title", "round", "time (s)", lines=3, legend=LABELS)
    cumulative = ds["round_time"].cumsum("round").mean("seed").to_numpy()
    np.testing.assert_allclose(_band_means(fig.axes[0]), cumulative, rtol=1e-6)
    np.testing.assert_array_equal(fig.axes[0].get_lines()[0].get_xdata(), np.arange(1, ROUNDS + 1))

    fig = plots.plot_pull_record(ds, tmp_path / "pull.png", configs=[0, 2])
    read_back_png(tmp_path / "pull.png", fig)
    check_figure(
        fig,
        "Pull record",
        "client (sorted by pull count)",
        f"selections after {ROUNDS} rounds",
        lines=2,
        legend=[LABELS[0], LABELS[2]],
    )
    counts = np.sort(ds["selection_count"].isel(config=[0, 2]).to_numpy(), axis=-1).mean(1)
    np.testing.assert_allclose(_band_means(fig.axes[0]), counts)


def test_selection_fraction_has_a_panel_per_client_with_its_target(ds, tmp_path):
    fig = plots.plot_selection_fraction(ds, tmp_path / "fraction.png")
    read_back_png(tmp_path / "fraction.png", fig)
    panels = axes_summary(fig)
    assert [p["title"] for p in panels] == [f"client {k + 1}" for k in range(CLIENTS)]
    assert panels[0]["ylabel"] == "selection fraction"
    assert all(p["xlabel"] == "round" and p["lines"] == CONFIGS + 1 for p in panels)
    assert panels[-1]["legend"] == LABELS
    for k, ax in enumerate(fig.axes):
        *bands, target = ax.get_lines()
        np.testing.assert_array_equal(target.get_ydata(), [0.4, 0.4])  # the queue rate c_k
        running = ds["selected"].isel(client=k).cumsum("round") / ds["round"]
        np.testing.assert_allclose(
            [b.get_ydata() for b in bands], running.mean("seed").to_numpy(), rtol=1e-6
        )


def test_accuracy_against_rounds_and_time(ds, tmp_path):
    for against, given, title, xlabel in (
        ("round", None, "Test accuracy vs round", "round"),
        ("time", "t", "t", "simulated wall-clock time (s)"),
    ):
        path = tmp_path / f"accuracy_{against}.png"
        fig = plots.plot_accuracy(ds, path, against=against, title=given)
        read_back_png(path, fig)
        check_figure(fig, title, xlabel, "test accuracy", lines=CONFIGS + 1, legend=LABELS)
        *bands, target = fig.axes[0].get_lines()
        np.testing.assert_array_equal(target.get_ydata(), [0.5, 0.5])  # target_accuracy
        np.testing.assert_allclose(
            [b.get_ydata() for b in bands], ds["accuracy"].mean("seed").to_numpy()
        )
        x = bands[1].get_xdata()
        if against == "round":
            np.testing.assert_array_equal(x, [0, 4, 8])
        else:  # the seed-mean of the clock at each evaluation round
            clock = ds["wall_clock"].isel(config=1).mean("seed").to_numpy()
            np.testing.assert_allclose(x, np.concatenate([[0.0], clock])[[0, 4, 8]], rtol=1e-6)


def test_summary_figures(ds, tmp_path):
    summary = summarize(ds)
    fig = plots.plot_heatmap(
        summary.iloc[:2], "mean_round_time", "V", "beta", tmp_path / "heat.png"
    )
    read_back_png(tmp_path / "heat.png", fig)
    check_figure(fig, "mean_round_time", "V", "beta")
    (image,) = fig.axes[0].get_images()
    want = summary.iloc[:2].pivot_table(index="beta", columns="V", values="mean_round_time")
    np.testing.assert_array_equal(np.ma.filled(image.get_array(), np.nan), want.to_numpy())
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["1", "10"]
    assert fig.axes[1].get_label() == "<colorbar>"

    fig = plots.plot_metric_vs(summary, "jain_index", "V", tmp_path / "vs.png", "Jain", "title")
    read_back_png(tmp_path / "vs.png", fig)
    check_figure(fig, "title", "V", "Jain", legend=["rbcsf beta=0.1", "rbcsf beta=0.2", "random"])
    points = [c.lines[0].get_ydata() for c in fig.axes[0].containers]
    np.testing.assert_allclose(np.concatenate(points), summary["jain_index"])


def test_labels_name_only_what_varies(ds):
    assert plots.varying_hparams(ds) == ["V", "beta"]
    assert plots.config_label(ds, 1, ["V", "beta"]) == "rbcsf V=10 beta=0.2"
    assert plots.config_label(ds, 2, ["V", "beta"]) == "random"


def test_import_and_plotting_leave_the_backend_alone(ds, tmp_path):
    backend = matplotlib.get_backend()
    importlib.reload(plots)
    fig = plots.plot_pull_record(ds, tmp_path / "pull.png")
    assert matplotlib.get_backend() == backend
    assert fig.canvas.manager is None  # not one of pyplot's figures


def _band_extent(ax) -> list[tuple[float, float]]:
    """(lowest, highest) y of each shaded band of ``ax``."""
    out = []
    for collection in ax.collections:
        y = np.concatenate([path.vertices[:, 1] for path in collection.get_paths()])
        out.append((float(np.nanmin(y)), float(np.nanmax(y))))
    return out


@pytest.fixture(scope="module")
def two_seeds():
    """Two seeds far apart: a Student-t interval over them is 12.7 half-ranges wide."""
    ds = xr.Dataset(
        {
            "accuracy": (("config", "seed", "eval"), [[[0.05, 0.1, 0.1], [0.95, 0.9, 0.99]]]),
            "round_time": (("config", "seed", "round"), [[[0.1] * 4, [3.0] * 4]]),
            "selected": (
                ("config", "seed", "round", "client"),
                np.array([[[[1, 0]] * 4, [[0, 1]] * 4]], bool),
            ),
        },
        coords={
            "config": [0],
            "seed": [0, 1],
            "eval": [0, 2, 4],
            "round": [1, 2, 3, 4],
            "client": [0, 1],
            "policy": ("config", ["random"]),
        },
    )
    return ds.assign(wall_clock=ds["round_time"].cumsum("round"))


def test_bands_stay_within_the_quantity_bounds(two_seeds, tmp_path):
    """Accuracy and selection-fraction bands in [0, 1], a (cumulative) time's at or above 0,
    where the unclipped Student-t bands over two seeds reach −5 and 6."""
    fig = plots.plot_accuracy(two_seeds, tmp_path / "accuracy.png")
    ((low, high),) = _band_extent(fig.axes[0])
    assert low == 0.0 and high == 1.0
    fig = plots.plot_selection_fraction(two_seeds, tmp_path / "fraction.png")
    for ax in fig.axes:
        ((low, high),) = _band_extent(ax)
        assert low == 0.0 and high == 1.0
    for cumulative in (False, True):
        fig = plots.plot_over_rounds(
            two_seeds, "round_time", "s", tmp_path / "t.png", "t", cumulative=cumulative
        )
        ((low, high),) = _band_extent(fig.axes[0])
        assert low == 0.0 and high > 3.0


def test_bands_use_the_interval_asked_for_and_say_which(ds, tmp_path):
    """``method="bootstrap"`` draws the bootstrap interval of every run's values (not the
    Student-t one), and the legend's title names the interval and the seeds."""
    from jfl.stats import bootstrap_ci, mean_ci

    bands = {}
    for method in ("t", "bootstrap"):
        fig = plots.plot_over_rounds(
            ds, "round_time", "s", tmp_path / f"{method}.png", "t", configs=[0], method=method
        )
        name = {"t": "Student-t", "bootstrap": "bootstrap"}[method]
        legend = fig.axes[0].get_legend()
        assert legend.get_title().get_text() == f"95% {name} bands, {SEEDS} seeds"
        bands[method] = _band_extent(fig.axes[0])[0]
    samples = ds["round_time"].sel(config=0).transpose("seed", "round").to_numpy()
    for method, ci in (("t", mean_ci), ("bootstrap", bootstrap_ci)):
        _, lo, hi = ci(samples, axis=0)
        lo = np.maximum(lo, 0.0)  # a round time's bounds
        np.testing.assert_allclose(bands[method], (lo.min(), hi.max()), rtol=1e-6)
    assert bands["t"] != bands["bootstrap"]


def test_a_reduced_band_asked_for_a_bootstrap_says_it_is_student_t(tmp_path):
    """A band reduced on the device (mean and variance) can only give the Student-t interval:
    the figure draws it, clipped to the variable's bounds, and its legend says so."""
    from jfl.stats import stats_ci

    mean, var = np.array([[1.0, 2.0, 3.0]]), np.array([[30.0, 40.0, 50.0]])
    ds = xr.Dataset(
        {"queue_mean_band": (("config", "stat", "round"), np.stack([mean, var], 1))},
        coords={"config": [0], "seed": [0, 1, 2], "round": [1, 2, 3], "stat": ["mean", "var"]},
    ).assign_coords(policy=("config", ["rbcsf"]))
    fig = plots.plot_over_rounds(ds, "queue_mean", "Z", tmp_path / "q.png", "q", method="bootstrap")
    title = fig.axes[0].get_legend().get_title().get_text()
    assert title.startswith("95% Student-t bands, 3 seeds") and "not bootstrap" in title
    _, lo, hi = stats_ci(mean[0], var[0], 3)
    assert lo.min() < 0  # unclipped
    assert _band_extent(fig.axes[0])[0] == pytest.approx((0.0, hi.max()))


def test_many_lines_get_distinct_colours_and_a_cut_is_announced(tmp_path):
    """Up to ``MAX_LINES`` configurations each get a colour of their own; beyond, an evenly
    spaced selection whose title says how many of how many it draws."""
    count = 30
    rng = np.random.default_rng(1)
    ds = xr.Dataset(
        {"round_time": (("config", "seed", "round"), rng.random((count, 3, 4)))},
        coords={
            "config": np.arange(count),
            "seed": np.arange(3),
            "round": np.arange(1, 5),
            "policy": ("config", ["rbcsf"] * count),
            "V": ("config", np.arange(count, dtype=float)),
        },
    )
    fig = plots.plot_over_rounds(ds, "round_time", "s", tmp_path / "a.png", "T", configs=range(14))
    colours = [tuple(line.get_color()) for line in fig.axes[0].get_lines()]
    assert len(colours) == 14 and len(set(colours)) == 14
    assert fig.axes[0].get_title() == "T"
    fig = plots.plot_over_rounds(ds, "round_time", "s", tmp_path / "b.png", "T")
    assert fig.axes[0].get_title() == f"T\n{plots.MAX_LINES} of {count} configurations"
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend[0] == "rbcsf V=0" and legend[-1] == f"rbcsf V={count - 1}"


def test_heatmap_says_what_it_averages(ds):
    """Rows sharing a cell are averaged over the hyperparameters that tell them apart, and
    the title and colour bar say so; without any, neither does."""
    import pandas as pd

    summary = pd.DataFrame(
        {
            "policy": ["rbcsf"] * 8,
            "V": [1.0, 10.0] * 4,
            "beta": [0.1, 0.1, 0.2, 0.2] * 2,
            "alpha": [0.05] * 4 + [0.2] * 4,
            "queue_rate": [0.1, 0.1, 0.2, 0.2] * 2,
            "n_seeds": 2,
            "jain_index": np.arange(8.0),
        }
    )
    fig = plots.plot_heatmap(summary, "jain_index", "V", "beta", "/dev/null", "Jain")
    assert fig.axes[0].get_title() == "Jain\nmean over α ∈ {0.05, 0.2}"
    assert fig.axes[1].get_ylabel() == "jain_index, mean over α ∈ {0.05, 0.2}"
    (image,) = fig.axes[0].get_images()
    np.testing.assert_array_equal(image.get_array(), [[2.0, 3.0], [4.0, 5.0]])
    fig = plots.plot_heatmap(summary.iloc[:4], "jain_index", "V", "beta", "/dev/null", "Jain")
    assert fig.axes[0].get_title() == "Jain" and fig.axes[1].get_ylabel() == "jain_index"
