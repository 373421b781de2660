"""The experiments' figures of a grid, from hand-made results (nothing here compiles or runs).

A V × β × α grid's per-round figures draw one line per V at one (β, α), named under the title
(the defaults, ``--plot-at``'s, or the middle of the grid), the baselines beside them; its
heatmaps say what they average over or fix. ``--plot-at`` is checked against the grid before
anything runs.
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from jfl import plots, results
from jfl.envs import RbcsfEnv
from jfl.experiments import CsUcbQFairness, VBetaGrid
from jfl.outputs import output_metrics
from jfl.results import summary_table
from jfl.sweep import config_table
from jfl.trackers import fairness_queue
from tests.helpers import axes_summary, cli_fails, read_back_png, record_figures

GRID = {"V": [0.0, 25.0, 50.0], "beta": [0.0, 0.15, 0.3], "alpha": [0.05, 0.1, 0.2]}
SEEDS, ROUNDS, CLIENTS = 2, 6, 4


def reduced(grid, seed=0) -> xr.Dataset:
    """What a reduced V × β × α sweep of RBCS-F, Random and FedCS(3) holds: per-run metrics
    and bands; each configuration's queue band is its config index (to find the lines)."""
    configs = config_table(
        ["rbcsf", "random", "fedcs"], {**grid, "deadline": [3.0], "gamma2": [1.0]}
    )
    count = len(configs)
    rng = np.random.default_rng(seed)

    def band(size, mean):
        return np.stack([mean, np.full((count, size), 25.0)], axis=1)  # wide: var 25

    index = np.arange(count, dtype=float)[:, None]
    data = {
        "queue_mean_band": (("config", "stat", "round"), band(ROUNDS, index + np.zeros(ROUNDS))),
        "cumulative_time_band": (
            ("config", "stat", "round"),
            band(ROUNDS, np.cumsum(rng.random((count, ROUNDS)), -1)),
        ),
        "pull_record_band": (("config", "stat", "client"), band(CLIENTS, rng.random((count, 4)))),
        "mean_round_time": (("config", "seed"), rng.random((count, SEEDS))),
        "min_selection_rate": (("config", "seed"), rng.random((count, SEEDS))),
    }
    coords = {
        "config": np.arange(count),
        "seed": np.arange(SEEDS),
        "round": np.arange(1, ROUNDS + 1),
        "client": np.arange(CLIENTS),
        "stat": ["mean", "var"],
        "policy": ("config", configs["policy"].to_numpy().astype(str)),
    }
    for name in configs.columns[1:]:
        coords[name] = ("config", configs[name].to_numpy(float))
    # Declared as the driver's runs declare them: the fairness queue's and the runner's outputs.
    declared = output_metrics(RbcsfEnv(), trackers=(fairness_queue(),))
    return results.declare(xr.Dataset(data, coords=coords), declared)


def draw(config, ds, tmp_path) -> dict:
    summary = summary_table(ds, ["mean_round_time", "min_selection_rate"])
    with record_figures() as figures:
        config.figures(ds, summary, tmp_path)
    for name, figure in figures.items():
        read_back_png(tmp_path / name, figure)
    return figures


def _legend(figure) -> list[str]:
    return [t.get_text() for t in figure.axes[0].get_legend().get_texts()]


def _slice_of(ds, figure) -> list[int]:
    """The configurations whose queue band a figure drew (their index is their band)."""
    return [int(line.get_ydata()[0]) for line in figure.axes[0].get_lines()]


def test_per_round_figures_draw_the_default_slice_and_name_it(tmp_path):
    """The README's V × β × α grid: Figs. 2–4 at β = 0.15, α = 0.1 (the defaults), one line
    per V and the baselines, told apart by colour and legend; nothing of another β or α."""
    ds = reduced(GRID)
    config = VBetaGrid(**{k: tuple(v) for k, v in GRID.items()}, seeds=SEEDS)
    figures = draw(config, ds, tmp_path)
    subtitle = "β = 0.15, α = 0.1 (the defaults); --plot-at beta=0 for another"
    queue = figures["queue_vs_round.png"]
    assert queue.axes[0].get_title() == f"RBCS-F mean queue backlog (paper Fig. 2)\n{subtitle}"
    assert _legend(queue) == ["rbcsf V=0", "rbcsf V=25", "rbcsf V=50"]
    drawn = ds.isel(config=_slice_of(ds, queue))
    assert (drawn["beta"] == 0.15).all() and (drawn["alpha"] == 0.1).all()
    assert list(drawn["V"].to_numpy()) == GRID["V"]
    legend_title = queue.axes[0].get_legend().get_title().get_text()
    assert legend_title == f"95% Student-t bands, {SEEDS} seeds"
    for name, title in (
        ("cumulative_time", "Training time (paper Fig. 3)"),
        ("pull_record", "Pull record"),
    ):
        figure = figures[f"{name}.png"]
        assert figure.axes[0].get_title() == f"{title}\n{subtitle}"
        assert _legend(figure) == ["rbcsf V=0", "rbcsf V=25", "rbcsf V=50", "random", "fedcs"]
        colours = {tuple(line.get_color()) for line in figure.axes[0].get_lines()}
        assert len(colours) == 5


def test_heatmaps_say_they_average_over_alpha(tmp_path):
    ds = reduced(GRID)
    config = VBetaGrid(**{k: tuple(v) for k, v in GRID.items()}, seeds=SEEDS)
    figures = draw(config, ds, tmp_path)
    summary = summary_table(ds, ["mean_round_time", "min_selection_rate"])
    rbcsf = summary[summary.policy == "rbcsf"]
    for metric, title in (
        ("mean_round_time", "RBCS-F mean round time (s)"),
        ("min_selection_rate", "RBCS-F minimum selection rate"),
    ):
        figure = figures[f"heatmap_{metric}.png"]
        over = "mean over α ∈ {0.05, 0.1, 0.2}"
        assert figure.axes[0].get_title() == f"{title}\n{over}"
        assert figure.axes[1].get_ylabel() == f"{metric}, {over}"
        (image,) = figure.axes[0].get_images()
        want = rbcsf.pivot_table(index="beta", columns="V", values=metric, aggfunc="mean")
        np.testing.assert_allclose(image.get_array(), want.to_numpy())


def test_plot_at_picks_the_slice_and_fixes_the_heatmaps(tmp_path):
    ds = reduced(GRID)
    config = VBetaGrid(
        **{k: tuple(v) for k, v in GRID.items()}, seeds=SEEDS, plot_at=("beta=0.3,alpha=0.2",)
    )
    figures = draw(config, ds, tmp_path)
    queue = figures["queue_vs_round.png"]
    assert queue.axes[0].get_title().endswith("\nβ = 0.3, α = 0.2 (--plot-at)")
    drawn = ds.isel(config=_slice_of(ds, queue))
    assert (drawn["beta"] == 0.3).all() and (drawn["alpha"] == 0.2).all()
    heatmap = figures["heatmap_mean_round_time.png"]
    assert heatmap.axes[0].get_title() == "RBCS-F mean round time (s)\nat α = 0.2 (--plot-at)"
    assert heatmap.axes[1].get_ylabel() == "mean_round_time"
    summary = summary_table(ds, ["mean_round_time"])
    at = summary[(summary.policy == "rbcsf") & (summary.alpha == 0.2)]
    (image,) = heatmap.axes[0].get_images()
    want = at.pivot_table(index="beta", columns="V", values="mean_round_time")
    np.testing.assert_allclose(image.get_array(), want.to_numpy())


def test_without_the_default_the_middle_of_the_grid_and_why(tmp_path):
    grid = {**GRID, "beta": [0.0, 0.2, 0.4, 0.6], "alpha": [0.1]}
    ds = reduced(grid)
    figures = draw(VBetaGrid(**{k: tuple(v) for k, v in grid.items()}), ds, tmp_path)
    title = figures["queue_vs_round.png"].axes[0].get_title()
    assert title.splitlines()[1:] == [
        "β = 0.2 (the middle of the grid; the default is not in it)",
        "--plot-at beta=0 for another",
    ]


def test_bootstrap_asked_of_reduced_bands_draws_clipped_student_t_and_says_so(tmp_path):
    """--ci bootstrap: the reduced bands hold no runs, so the figures draw Student-t bands and
    say so; the queue's band (variance 25 over 2 seeds: ±45) is clipped at 0."""
    ds = reduced(GRID)
    config = VBetaGrid(**{k: tuple(v) for k, v in GRID.items()}, seeds=SEEDS, ci="bootstrap")
    figures = draw(config, ds, tmp_path)
    for name in ("queue_vs_round", "cumulative_time", "pull_record"):
        ax = figures[f"{name}.png"].axes[0]
        title = ax.get_legend().get_title().get_text()
        assert title.startswith(f"95% Student-t bands, {SEEDS} seeds") and "not bootstrap" in title
        for collection in ax.collections:
            assert min(path.vertices[:, 1].min() for path in collection.get_paths()) >= 0.0
    assert [p["title"] for p in axes_summary(figures["queue_vs_round.png"])]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--plot-at", "gamma=1"], "--plot-at: unknown axis 'gamma'; choose from beta, alpha"),
        (["--plot-at", "beta=0.3"], "--plot-at: beta=0.3 is not in the grid; beta is one of 0.15"),
        (
            ["--beta", "0:0.3:7", "--plot-at", "beta=0.17"],
            "beta is one of 0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3",
        ),
        (["--plot-at", "beta"], "--plot-at: expected AXIS=VALUE (e.g. beta=0.2), got 'beta'"),
        (["--plot-at", "beta=x"], "--plot-at: beta='x' is not a number"),
        (["--plot-at", "alpha=0.1,alpha=0.1"], "--plot-at: axis 'alpha' given twice"),
        (["--plot-at", "V=1"], "--plot-at: unknown axis 'V'; choose from beta, alpha"),
        (["--policies", "random", "--plot-at", "beta=0.15"], "no slice"),
    ],
)
def test_bad_plot_at_fails_early_with_one_line(argv, message, capsys, tmp_path):
    line = cli_fails(VBetaGrid, argv, capsys, tmp_path, prog="v_beta_grid.py")
    assert message in line, line


def test_plot_at_takes_repeated_flags_and_commas(capsys, tmp_path):
    from jfl import cli
    from jfl.experiments.common import plot_point

    argv = ["--beta", "0:0.3:7", "--alpha", "0.1,0.2"]
    for flags in (
        ["--plot-at", "beta=0.15", "--plot-at", "alpha=0.2"],
        ["--plot-at", "beta=0.15,alpha=0.2"],
    ):
        config = cli.parse(VBetaGrid, [*argv, *flags], prog="v_beta_grid.py")
        config.check()
        assert plot_point(config) == {"beta": np.linspace(0, 0.3, 7)[3], "alpha": 0.2}
    assert "plot_at" not in config.settings()  # where to look, not what is computed
    line = cli_fails(CsUcbQFairness, ["--plot-at", "beta=0.1"], capsys, tmp_path)
    assert "--plot-at: these figures draw every configuration, no slice" in line


def test_symbols_and_values_as_titles_write_them():
    assert plots.symbol("beta") == "β" and plots.symbol("V") == "V"
    assert plots.symbol("gamma2") == "γ₂" and plots.symbol("lambda") == "λ"
    assert plots.symbol("h_T") == "h_T" and plots.symbol("lam") == "lam"  # not a letter's name
    assert plots.format_values([0.05, 0.1, 0.2]) == "{0.05, 0.1, 0.2}"
    assert plots.format_values(range(11)) == "{0, 1, …, 10} (11 values)"
