"""Every figure of jfl.plots from a small hand-made dataset, and no global matplotlib state."""

from __future__ import annotations

import importlib

import matplotlib
import numpy as np
import pytest
import xarray as xr

from jfl import plots, results
from jfl.results import summarize
from jfl.trackers import fairness_queue
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
    check_figure(fig, "mean_round_time", "V", "β")
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


def test_a_metric_against_values_swept_over_decades_has_a_log_axis(tmp_path):
    """β ∈ {1e-05, 0.001, 0.1} on a log x axis named β, at their own values; N ∈ {1, …, 8} (or
    values with 0) on a linear one."""
    import pandas as pd

    def summary(x, values):
        gap = np.arange(len(values), dtype=float)
        return pd.DataFrame({"policy": "p", x: values, "n_seeds": 2, "gap": gap,
                             "gap_lo": gap - 1, "gap_hi": gap + 1})  # fmt: skip

    fig = plots.plot_metric_vs(
        summary("beta", [1e-5, 1e-3, 0.1]), "gap", "beta", tmp_path / "b.png"
    )
    ax = fig.axes[0]
    assert (ax.get_xscale(), ax.get_xlabel()) == ("log", "β")
    x = np.asarray(ax.containers[0].lines[0].get_xdata(), float)
    np.testing.assert_allclose(x, [1e-5, 1e-3, 0.1])
    for x, values in (("N", [1.0, 2.0, 4.0, 8.0]), ("beta", [0.0, 0.01, 1.0])):
        fig = plots.plot_metric_vs(summary(x, values), "gap", x, tmp_path / "n.png")
        assert fig.axes[0].get_xscale() == "linear", x


def test_a_figure_labels_configurations_as_asked(ds, tmp_path):
    """``labels``, a mapping or a function of the configuration, names the lines and legend
    entries of every figure drawn from a dataset, in place of the hyperparameters."""
    names = {0: "slow", 1: "fast", 2: "baseline"}
    for labels in (names, names.get):
        figures = (
            plots.plot_over_rounds(ds, "round_time", "s", tmp_path / "r.png", "T", labels=labels),
            plots.plot_pull_record(ds, tmp_path / "p.png", labels=labels),
            plots.plot_accuracy(ds, tmp_path / "a.png", labels=labels),
            plots.plot_selection_fraction(ds, tmp_path / "f.png", labels=labels),
        )
        for fig in figures:
            legend = fig.axes[-1].get_legend()
            assert [t.get_text() for t in legend.get_texts()] == list(names.values())
            assert [line.get_label() for line in _labelled_lines(fig)][:3] == list(names.values())


def _notes(ax) -> list[str]:
    return [text.get_text() for text in ax.texts]


def test_lines_without_a_finite_value_say_so(ds, tmp_path):
    """A configuration whose runs diverged (every value NaN) keeps its legend entry, marked
    "(no finite values)", and an axes where nothing finite could be drawn says why instead of
    standing empty; in every figure that draws lines, from runs or from reduced bands."""
    diverged = ds.assign(
        round_time=ds["round_time"].where(ds["config"] != 0),
        accuracy=ds["accuracy"].where(ds["config"] != 0),
    )
    for fig, legend in (
        (plots.plot_over_rounds(diverged, "round_time", "s", tmp_path / "r.png", "T"), LABELS),
        (plots.plot_accuracy(diverged, tmp_path / "a.png"), LABELS),
        (
            plots.plot_metric_vs(summarize(diverged), "final_accuracy", "V", tmp_path / "v.png"),
            ["rbcsf beta=0.1", "rbcsf beta=0.2", "random"],
        ),
    ):
        marked = f"{legend[0]} (no finite values)"
        assert _legend_texts(fig) == [marked, *legend[1:]]
        assert _notes(fig.axes[0]) == []
    nothing = ds.assign(round_time=ds["round_time"] * np.nan)
    reduced = xr.Dataset(
        {"queue_mean_band": (("config", "stat", "round"), np.full((1, 2, 3), np.nan))},
        coords={"config": [0], "seed": [0, 1], "round": [1, 2, 3], "stat": ["mean", "var"]},
    ).assign_coords(policy=("config", ["rbcsf"]))
    for name, fig in (
        ("n.png", plots.plot_over_rounds(nothing, "round_time", "s", tmp_path / "n.png", "T")),
        ("q.png", plots.plot_over_rounds(reduced, "queue_mean", "Z", tmp_path / "q.png", "Z")),
    ):
        read_back_png(tmp_path / name, fig)
        (ax,) = fig.axes
        assert _notes(ax) == [plots.NO_FINITE_NOTE]
        assert all(text.endswith(" (no finite values)") for text in _legend_texts(fig))
    assert "the runs diverged" in plots.NO_FINITE_NOTE


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
    # The fairness queue's outputs, declared as a run that keeps it declares them.
    ds = results.declare(ds, fairness_queue().outputs)
    fig = plots.plot_over_rounds(ds, "queue_mean", "Z", tmp_path / "q.png", "q", method="bootstrap")
    title = fig.axes[0].get_legend().get_title().get_text()
    assert title.startswith("95% Student-t bands, 3 seeds") and "not bootstrap" in title
    _, lo, hi = stats_ci(mean[0], var[0], 3)
    assert lo.min() < 0  # unclipped
    assert _band_extent(fig.axes[0])[0] == pytest.approx((0.0, hi.max()))


def _many_methods(count: int, variants: int = 2) -> xr.Dataset:
    """``count`` methods ``m00``, ``m01``, …, the last one (``m_last``) at ``variants`` values of
    V (the others without V): ``count - 1 + variants`` configurations, 2 seeds, 4 rounds, 2
    clients, 3 evaluations."""
    rng = np.random.default_rng(2)
    policies = [f"m{i:02d}" for i in range(count - 1)] + ["m_last"] * variants
    lines = len(policies)
    selected = rng.random((lines, 2, 4, 2)) < 0.5
    return xr.Dataset(
        {
            "round_time": (("config", "seed", "round"), rng.random((lines, 2, 4))),
            "num_selected": (("config", "seed", "round"), selected.sum(-1)),
            "selection_count": (("config", "seed", "client"), selected.sum(-2)),
            "final_queue": (("config", "seed", "client"), rng.random((lines, 2, 2))),
            "selected": (("config", "seed", "round", "client"), selected),
            "accuracy": (("config", "seed", "eval"), rng.random((lines, 2, 3))),
            "wall_clock": (("config", "seed", "round"), np.cumsum(rng.random((lines, 2, 4)), -1)),
        },
        coords={
            "config": np.arange(lines),
            "seed": [0, 1],
            "round": np.arange(1, 5),
            "client": [0, 1],
            "eval": [0, 2, 4],
            "policy": ("config", policies),
            "V": ("config", [np.nan] * (count - 1) + [float(10**v) for v in range(variants)]),
        },
    )


def _labelled_lines(fig) -> list:
    """The lines with a legend label (not the bands' or the targets') across every axes."""
    lines = [line for ax in fig.axes for line in ax.get_lines()]
    return [line for line in lines if not line.get_label().startswith("_")]


def _legend_texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]


def test_every_configuration_is_drawn_in_panels_of_at_most_max_lines(tmp_path):
    """More lines than the old cap of 16 (and than :data:`MAX_LINES`): none left out, split
    into panels that share their axes, each of at most ``MAX_LINES`` lines with its legend,
    the title saying so; a method's lines (m_last at two V) in one panel."""
    ds = _many_methods(20)
    labels = [plots.config_label(ds, c, ["V"]) for c in range(21)]
    figures = {
        "accuracy": plots.plot_accuracy(ds, tmp_path / "a.png", against="time"),
        "rounds": plots.plot_over_rounds(ds, "round_time", "s", tmp_path / "r.png", "T"),
        "pull": plots.plot_pull_record(ds, tmp_path / "p.png"),
    }
    for name, fig in figures.items():
        read_back_png(tmp_path / f"{name[0]}.png", fig)
        assert len(fig.axes) == 2, name
        assert sorted(line.get_label() for line in _labelled_lines(fig)) == sorted(labels)
        assert sorted(_legend_texts(fig)) == sorted(labels), name
        assert all(len(ax.get_legend().get_texts()) <= plots.MAX_LINES for ax in fig.axes)
        first, second = fig.axes
        assert first.get_shared_x_axes().joined(first, second)
        assert first.get_shared_y_axes().joined(first, second)
        assert first.get_title().endswith("\n21 lines in 2 panels (shared axes)"), name
        assert second.get_xlabel() != "" and all(ax.get_ylabel() for ax in fig.axes)
        texts = [t.get_text() for t in second.get_legend().get_texts()]
        assert texts[-2:] == ["m_last V=1", "m_last V=10"], name
    # one panel per client in each row, every configuration in one row
    fig = plots.plot_selection_fraction(ds, tmp_path / "f.png", max_lines=8)
    assert len(fig.axes) == 3 * 2  # 21 lines in rows of at most 8, times 2 clients
    lines = [line.get_label() for line in _labelled_lines(fig)]
    assert sorted(lines) == sorted(labels * 2)
    assert sorted(_legend_texts(fig)) == sorted(labels)
    summary = summarize(ds)
    fig = plots.plot_metric_vs(summary, "jain_index", "V", tmp_path / "v.png", "Jain", "J")
    assert len(fig.axes) == 2 and sorted(_legend_texts(fig)) == sorted(
        {label.split()[0] for label in labels}
    )


def test_panels_group_a_method_and_keep_every_line_once():
    assert plots.panel_groups(["a", "b", "a"], max_lines=3) == [[0, 1, 2]]  # as given
    policies = [f"m{i}" for i in range(17)]
    assert [len(p) for p in plots.panel_groups(policies, 12)] == [9, 8]  # balanced
    policies = ["a", "b", "a", "c", "b", "a"] + [f"m{i}" for i in range(8)]
    panels = plots.panel_groups(policies, max_lines=6)
    assert sorted(i for panel in panels for i in panel) == list(range(len(policies)))
    assert panels[0] == [0, 2, 5, 1, 4] and all(len(p) <= 6 for p in panels)
    panels = plots.panel_groups(["a"] * 30, max_lines=12)
    assert panels == [list(range(10)), list(range(10, 20)), list(range(20, 30))]
    with pytest.raises(ValueError, match="max_lines"):
        plots.panel_groups(["a"], 0)


def test_a_method_has_one_colour_in_every_figure_of_a_dataset(ds, tmp_path):
    """The colour follows the method through the sorted names of the dataset's policies,
    whatever subset a figure draws, and the summary figure of the same results."""
    many = _many_methods(20)

    def colours(fig):
        return {line.get_label(): line.get_color() for line in _labelled_lines(fig)}

    every = colours(plots.plot_accuracy(many, tmp_path / "a.png"))
    some = colours(plots.plot_accuracy(many, tmp_path / "b.png", configs=[19, 3, 8]))
    other = colours(plots.plot_over_rounds(many, "round_time", "s", tmp_path / "c.png", "T",
                                           configs=[8, 0]))  # fmt: skip
    assert some["m03"] == every["m03"] == plots.policy_colors(many["policy"])["m03"]
    assert some["m08"] == every["m08"] == other["m08"] and other["m00"] == every["m00"]
    assert some["m03"] != some["m08"]
    # a policy's lines share its hue, shaded, and differ in style; in the summary too
    rbcsf = plots.policy_colors(ds["policy"])["rbcsf"]
    full = colours(plots.plot_accuracy(ds, tmp_path / "d.png"))
    assert full["rbcsf V=1 beta=0.1"] != full["rbcsf V=10 beta=0.2"]
    hue = matplotlib.colors.rgb_to_hsv
    for label in ("rbcsf V=1 beta=0.1", "rbcsf V=10 beta=0.2"):
        assert hue(full[label][:3])[0] == pytest.approx(hue(rbcsf[:3])[0], abs=0.01)
    fig = plots.plot_metric_vs(summarize(ds), "jain_index", "V", tmp_path / "e.png")
    errorbars = {c.get_label(): c.lines[0].get_color() for c in fig.axes[0].containers}
    assert errorbars["random"] == full["random"] == plots.policy_colors(ds["policy"])["random"]


def test_bars_take_their_lines_colours_and_hatch_for_styles():
    policies = ["a", "a", "b"]
    bars, lines = plots.bar_styles(policies), plots.line_styles(policies)
    assert [bar["color"] for bar in bars] == [line["color"] for line in lines]
    assert [bar["hatch"] for bar in bars] == ["", "//", ""]


def test_twenty_and_more_methods_get_distinct_colours():
    """No two of 30 methods share a colour; the palette's 24 are far apart (no light/dark pairs
    of one hue: at least 0.2 apart in RGB); variants of one method differ in colour and style."""
    names = [f"method{i}" for i in range(30)]
    colours = plots.policy_colors(names[::-1] + names[:5])  # order and repeats don't matter
    assert list(colours) == sorted(names)
    rgb = np.array([c[:3] for c in colours.values()])
    gaps = np.linalg.norm(rgb[:, None] - rgb[None], axis=-1) + np.eye(len(rgb))
    assert gaps.min() > 0.01
    assert gaps[:24, :24].min() >= 0.2
    styles = plots.line_styles(["a"] * 14 + ["b"])
    assert len({(s["color"], s["linestyle"]) for s in styles}) == 15
    assert len({s["color"] for s in styles}) == 15
    with pytest.raises(ValueError, match="no colour"):
        plots.line_styles(["a", "z"], plots.policy_colors(["a"]))


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_legends_stand_outside_the_data_and_inside_the_figure(ds, tmp_path):
    """Every legend's box is off its axes' data area (and any other axes'), and whole on the
    figure (not clipped), for few and for many lines (every figure places its legends with
    the same helper and sizes itself from them)."""
    many = _many_methods(20)
    for fig in (
        plots.plot_accuracy(ds, tmp_path / "a.png"),
        plots.plot_accuracy(many, tmp_path / "b.png"),
        plots.plot_metric_vs(summarize(many), "jain_index", "V", tmp_path / "e.png"),
    ):
        fig.draw_without_rendering()  # lays it out as savefig does (a bare canvas.draw() does not)
        page = fig.bbox
        legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
        assert legends
        for legend in legends:
            box = legend.get_window_extent()
            assert not any(_overlaps(box, ax.get_window_extent()) for ax in fig.axes)
            assert page.x0 <= box.x0 and box.x1 <= page.x1
            assert page.y0 <= box.y0 and box.y1 <= page.y1


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


def test_heatmap_cells_without_a_value_are_marked_not_coloured():
    """A cell whose value is NaN (a censored metric that no run met) is masked out of the colour
    scale and drawn hatched grey, saying ``missing`` ("n/a" by default); a column of such cells
    keeps its place."""
    import pandas as pd

    summary = pd.DataFrame(
        {
            "policy": ["cs_ucb_q"] * 4,
            "V": [1.0, 10.0, 1.0, 10.0],
            "beta": [0.1, 0.1, 0.2, 0.2],
            "n_seeds": 2,
            "rounds_to_target": [5.0, np.nan, 7.0, np.nan],
        }
    )
    for missing, text in ((None, "n/a"), ("never met", "never met")):
        options = {} if missing is None else {"missing": missing}
        fig = plots.plot_heatmap(summary, "rounds_to_target", "V", "beta", "/dev/null", **options)
        ax = fig.axes[0]
        (image,) = ax.get_images()
        cells = image.get_array()
        assert np.ma.getmaskarray(cells).tolist() == [[False, True], [False, True]]
        np.testing.assert_array_equal(np.ma.filled(cells, 0.0), [[5.0, 0.0], [7.0, 0.0]])
        assert sorted((t.get_position(), t.get_text()) for t in ax.texts) == [
            ((1, 0), text), ((1, 1), text)
        ]  # fmt: skip
        hatched = [p.get_xy() for p in ax.patches if p.get_hatch()]
        assert sorted(map(tuple, hatched)) == [(0.5, -0.5), (0.5, 0.5)]
