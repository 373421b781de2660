"""Every figure the 13 experiments write, drawn once from hand-made results in the shape each
experiment's runs produce (nothing compiles or runs), and what a reader must be able to trust
in each: no text cut off at the canvas's edges, no legend over the data.

The datasets hold random values of the outputs each experiment's runner records (its
environment's metrics, the fairness queue, a learner's evaluations) for the configurations it
builds, with what its ``finish`` adds (benchmarks), reduced over seeds as on the device where
the experiment reduces there (``as_reduced``); the summaries come from them as the driver
makes them. A few settings besides the defaults reach the figures that
only grids draw (heatmaps, metrics against a swept value) and the longest titles.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from matplotlib.figure import Figure

from jfl import results
from jfl.experiments import (
    BetaRhoGrid,
    CocsHfl,
    CsUcbIdeal,
    CsUcbQDelay,
    CsUcbQFairness,
    E3csClasses,
    FlCocs,
    FlCsUcbIdeal,
    FlCsUcbQ,
    FlRbcsf,
    FlSelection,
    PowDQuadratic,
    VBetaGrid,
)
from jfl.experiments.cocs import attach_oracle, utility_metrics
from jfl.experiments.common import with_queue_rate
from jfl.experiments.regret_curves import regret_metrics
from jfl.experiments.wireless import add_scenario, add_scenario_vectors
from jfl.sweep import config_table
from tests.experiments.test_figures import reduced

SEEDS, ROUNDS, EVALS = 3, 8, 3
# Pixels a text may reach past the canvas (antialiasing of its last glyph).
TOLERANCE = 1.0
# Per-run outputs by what records them, with their dims after [config, seed].
QUEUE = {"queue_mean": ("round",), "queue_max": ("round",), "final_queue": ("client",),
         "last_unmet_round": ()}  # fmt: skip
WIRELESS = {"set_reward": ("round",), "num_failed": ("round",), "mean_set_reward": ("round",)}
SUCCESS = {"num_success": ("round",)}
HFL = {"utility": ("round",), **SUCCESS}
LEARNER = {"wall_clock": ("round",), "num_delivered": ("round",), "accuracy": ("eval",),
           "test_loss": ("eval",)}  # fmt: skip


def runs(configs: pd.DataFrame, clients: int, outputs=(), seed=0, trajectories=False):
    """Random outputs of every run of ``configs`` (``SEEDS`` seeds, ``ROUNDS`` rounds, ``EVALS``
    evaluations): the runner's core outputs, ``outputs`` ({name: dims}) and, with
    ``trajectories``, the selections; labelled as ``jfl.results.to_dataset`` labels a sweep."""
    rng = np.random.default_rng(seed)
    lead = (len(configs), SEEDS)
    sizes = {"round": ROUNDS, "client": clients, "eval": EVALS}
    selected = rng.random((*lead, ROUNDS, clients)) < 0.5
    arrays = {
        "round_time": rng.random((*lead, ROUNDS)),
        "num_selected": selected.sum(-1),
        "selection_count": selected.sum(-2),
        "nonfinite_round": np.full(lead, -1),
    }
    for name, dims in dict(outputs).items():
        values = rng.random((*lead, *(sizes[d] for d in dims)))
        arrays[name] = np.cumsum(values, -1) if name == "wall_clock" else values
    if trajectories:
        arrays["selected"] = selected
    dims = {"round_time": ("round",), "num_selected": ("round",), "selection_count": ("client",)}
    dims.update({"nonfinite_round": (), **dict(outputs), "selected": ("round", "client")})
    return results.to_dataset(arrays, configs, np.arange(SEEDS), dims=dims)


def summarised(config, ds) -> tuple:
    """``(config, ds, summary)`` as the driver hands them to ``config.figures``."""
    summary = results.summarize(ds, metrics=config.metrics, bounds=config.metric_bounds)
    return config, ds, summary


def v_beta_grid(grid):
    ds = reduced(grid)
    config = VBetaGrid(**{k: tuple(v) for k, v in grid.items()}, seeds=ds.sizes["seed"])
    return config, ds, results.summary_table(ds, ["mean_round_time", "min_selection_rate"])


def regret_sweep(config, configs, starved=()):
    """A CS-UCB-family sweep with its regret benchmark (``regret_plan``'s ``finish``), reduced
    as on the device (``as_reduced``): the regret metrics (``regret_metrics``, the device's from
    every run's rounds; the gaps derived as the driver derives them) and the bands of the
    pseudo- and realised regrets, the failed clients and Fig. 5's selection fractions; the
    configurations ``starved`` never select anyone (no guaranteed rate met: rounds_to_target
    censored)."""
    rng = np.random.default_rng(1)
    fig5 = isinstance(config, CsUcbQFairness)  # its runs record selections for Fig. 5's band
    ds = runs(configs, config.clients, {**WIRELESS, **QUEUE}, trajectories=fig5)
    ds["selection_count"][list(starved)] = 0
    ds["last_unmet_round"][list(starved)] = ROUNDS  # unmet to the last round
    fairness, availability = config.fairness_vectors(configs)
    benchmark = 0.9 + 0.1 * rng.random((len(configs), SEEDS))
    mu = rng.random((SEEDS, config.clients))
    ds = add_scenario(ds, fairness=fairness, availability=availability, benchmark=benchmark,
                      mu=mu, tau_max=config.tau_max)  # fmt: skip
    metrics = results.run_metrics(ds, regret_metrics)
    metrics = metrics.drop_vars(["cumulative_gap", "average_gap", "realised_gap"])
    metrics = metrics.rename(mean_set_reward="average_set_reward")
    realised = ds["round"] * ds["benchmark_reward"] - ds["set_reward"].cumsum("round")
    curves = {"realised_regret_t": realised, "failed_clients_t": ds["num_failed"].cumsum("round")}
    if fig5:
        curves["selection_fraction"] = results.running_selection_fraction(ds)
        ds = ds.drop_vars("selected")
    ds = as_reduced(ds.assign(metrics), curves)
    ds = ds.assign(config.metrics(ds))
    return config, ds, results.summary_table(ds, [*metrics.data_vars, *config.metrics(ds)])


def planned(config, outputs, **options):
    """A sweep whose plan is cheap to build (no compilation): its configurations and finish."""
    plan = config.plan()
    ds = runs(plan.configs, config.clients, outputs, **options)
    return summarised(config, ds if plan.finish is None else plan.finish(ds))


def pow_d_quadratic():
    every = ROUNDS // (EVALS - 1)
    config = PowDQuadratic(rounds=ROUNDS, eval_every=every, early_round=every)
    ds = runs(config.configs(), config.clients)
    rng = np.random.default_rng(2)
    gap = np.cumprod(0.5 + 0.5 * rng.random((ds.sizes["config"], SEEDS, EVALS)), -1)
    ds = ds.assign(gap=(("config", "seed", "eval"), gap))
    ds = ds.assign_coords(eval=np.arange(EVALS) * every)
    return summarised(config, ds)


def federated(config, configs, outputs=QUEUE, rate=None):
    """A federated sweep: its configurations with their aggregation, the learner's outputs
    besides ``outputs`` and the target accuracy (``FederatedTraining.federated_plan``'s
    finish)."""
    configs = config.training.with_aggregation(configs)
    ds = runs(configs, config.clients, {**LEARNER, **outputs})
    if rate is not None:
        ds["queue_rate"] = (("config", "client"), np.full((len(configs), config.clients), rate))
    ds.attrs["target_accuracy"] = config.training.target_accuracy
    return summarised(config, ds)


def fl_rbcsf():
    config = FlRbcsf(gamma1=(1.0,))
    configs = config_table(config.policies, config.grid(),
                           shared=config.training.columns(len(config.gamma1)))  # fmt: skip
    configs = with_queue_rate(configs, config.beta[0])
    configs.insert(1, "gamma1", [config.gamma1[int(i)] for i in configs["partition"]])
    return federated(config, configs)


def fl_selection():
    config = FlSelection(dirichlet=(0.1,))
    splits = config.splits()
    configs = config_table(config.policies, config.grid(),
                           shared=config.training.columns(len(splits)))  # fmt: skip
    configs = with_queue_rate(configs, config.beta[0])
    index = configs["partition"].astype(int)
    configs.insert(1, "split", [splits[i].label for i in index])
    configs.insert(2, "dirichlet", [splits[i].dirichlet for i in index])
    return federated(config, configs)


def fl_cs_ucb_ideal():
    config = FlCsUcbIdeal()
    configs = config_table(config.policies, {}, shared=config.training.columns())
    return federated(config, configs, WIRELESS)


def fl_cs_ucb_q():
    config = FlCsUcbQ()
    configs = config_table(config.policies, {"beta": list(config.beta)},
                           shared=config.training.columns())  # fmt: skip
    return federated(config, configs, {**WIRELESS, **QUEUE}, rate=0.2)


def fl_cocs():
    config = FlCocs()
    configs = config_table(config.policies, {},
                           shared={**config.scenario(), **config.training.columns()})  # fmt: skip
    return federated(config, configs, HFL)


def as_reduced(ds, curves=None):
    """What a sweep reduced on the device holds of the per-run ``ds``: its variables without a
    per-run axis besides the seed's (per-run metrics [config, seed], …) and the band over seeds
    [config, stat, ...] of every per-run round, client or evaluation output and of ``curves``
    ({name: per-run DataArray})."""
    series = {n: v for n, v in ds.data_vars.items() if "seed" in v.dims and v.ndim == 3}
    bands = {
        f"{name}_band": xr.concat([v.mean("seed"), v.var("seed", ddof=1)], "stat")
        for name, v in {**series, **(curves or {})}.items()
    }
    bands = {name: band.transpose("config", "stat", ...) for name, band in bands.items()}
    return ds.drop_vars(list(series)).assign(bands).assign_coords(stat=["mean", "var"])


def cocs_hfl():
    """A grid of budgets, deadlines, h_T and z, reduced as on the device: the utility metrics
    (``utility_metrics``: the device's from every run's rounds) and the bands of the running
    sums and of the running regret paired with the Oracle by seed."""
    config = CocsHfl(budget=(3.5, 5.0), deadline=(3.0, 4.0), h_T=(2.0, 5.0), z=(0.2, 0.4))
    plan = config.plan()
    ds = runs(plan.configs, config.clients, HFL)
    utility = ds["utility"]
    curves = {"utility_cumsum": utility.cumsum("round")}
    curves["utility_sqrt_cumsum"] = np.sqrt(utility).cumsum("round")
    curves["regret_cumsum"] = (attach_oracle(ds)["oracle_utility"] - utility).cumsum("round")
    ds = as_reduced(ds.assign(utility_metrics(ds)), curves)
    ds = ds.assign(config.metrics(ds))
    names = [name for name, v in ds.data_vars.items() if v.dims == ("config", "seed")]
    return config, ds, results.summary_table(ds, names, bounds=config.metric_bounds)


def cs_ucb_q_delay():
    config = CsUcbQDelay()
    plan = config.plan()
    ds = runs(plan.configs, config.clients, {**WIRELESS, **QUEUE})
    fairness, availability = (plan.per_config[k] for k in ("fairness", "availability"))
    ds = add_scenario_vectors(ds, fairness=fairness, availability=availability,
                              tau_max=config.tau_max)  # fmt: skip
    return summarised(config, ds)


# name: a function returning (config, ds, summary). The experiments' defaults, except where
# a grid draws more figures (heatmaps, metrics against a swept value) or longer titles; a
# federated experiment writes the same two figures per scenario (split × learning rate), so one
# scenario each (the drawing is most of this file's time).
SWEEPS = {
    "v_beta_grid": lambda: v_beta_grid(
        {"V": [0.0, 25.0, 50.0], "beta": [0.0, 0.15, 0.3], "alpha": [0.05, 0.1, 0.2]}
    ),
    # A third of a second, a hundred clients, ten channels: its longest captions.
    "cs_ucb_ideal": lambda: regret_sweep(
        CsUcbIdeal(clients=100, tau_max=1 / 3, plot_at=("N=10",)), CsUcbIdeal().configs()
    ),
    "cs_ucb_q_fairness": lambda: regret_sweep(CsUcbQFairness(), CsUcbQFairness().configs()),
    "cs_ucb_q_delay": cs_ucb_q_delay,
    # The largest ρ is never met.
    "beta_rho_grid": lambda: regret_sweep(
        BetaRhoGrid(), configs := BetaRhoGrid().configs(), np.flatnonzero(configs["rho"] == 1.75)
    ),
    "cocs_hfl": cocs_hfl,
    "e3cs_classes": lambda: planned(E3csClasses(), SUCCESS),
    "fl_rbcsf": fl_rbcsf,
    "fl_cs_ucb": fl_cs_ucb_ideal,
    "fl_cs_ucb_q": fl_cs_ucb_q,
    "fl_cocs": fl_cocs,
    "fl_selection": fl_selection,
    "pow_d_quadratic": pow_d_quadratic,
}


@contextlib.contextmanager
def laid_out_figures():
    """``{file name: Figure}`` of every figure saved while active, as laid out to be saved
    (``jfl.plots.save`` lays it out at the dpi it saves at) but not written: rendering the
    PNGs would cost most of the time (the experiments' own tests read theirs back)."""
    saved: dict = {}

    def record(self, fname, *args, dpi=None, **kwargs):
        if self.stale or dpi not in (None, self.dpi):  # not laid out as it is saved
            self.set_dpi(dpi or self.dpi)
            self.draw_without_rendering()
        saved[Path(fname).name] = self

    with mock.patch.object(Figure, "savefig", record):
        yield saved


@pytest.fixture(scope="module")
def drawn() -> dict:
    """``{(sweep, file name): Figure}`` of every figure of every sweep of ``SWEEPS``."""
    figures = {}
    for name, make in SWEEPS.items():
        config, ds, summary = make()
        with laid_out_figures() as saved:
            config.figures(ds, summary, Path("/nonexistent"))
        assert saved, name
        figures.update({(name, file): figure for file, figure in saved.items()})
    return figures


def test_every_experiment_draws_its_figures(drawn):
    experiments = {name.split()[0] for name, _ in drawn}
    assert len(experiments) == 13, sorted(experiments)
    assert len({file for _, file in drawn}) > 30
    assert ("cs_ucb_ideal", "realised_gap_vs_round.png") in drawn
    assert ("beta_rho_grid", "heatmap_cs_ucb_q_rounds_to_target.png") in drawn


def _within(loc: float, interval) -> bool:
    low, high = sorted(interval)
    slack = 1e-9 * max(1.0, high - low)
    return low - slack <= loc <= high + slack


def visible_texts(figure) -> list:
    """Every text a reader sees on ``figure``: its suptitle and texts, and on each axes the
    titles, axis labels and their offsets, the tick labels of the ticks in view, annotations
    and the legend's title and entries."""
    texts = [*figure.texts]
    if figure._suptitle is not None:
        texts.append(figure._suptitle)
    for ax in figure.axes:
        texts += [ax.title, ax._left_title, ax._right_title, *ax.texts]
        for axis in (ax.xaxis, ax.yaxis):
            texts += [axis.label, axis.offsetText]
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if tick.get_visible() and _within(tick.get_loc(), axis.get_view_interval()):
                    texts += [tick.label1, tick.label2]
        legend = ax.get_legend()
        if legend is not None:
            texts += [legend.get_title(), *legend.get_texts()]
    return [t for t in texts if t.get_visible() and t.get_text().strip()]


def test_no_text_is_cut_off_at_the_canvas_edges(drawn):
    """Titles, axis labels, tick labels, legends and notes lie whole on the canvas (within a
    pixel), in every figure of every experiment."""
    cut = []
    for (name, file), figure in drawn.items():
        renderer = figure._get_renderer()
        page = figure.bbox
        for text in visible_texts(figure):
            box = text.get_window_extent(renderer)
            if (
                box.x0 < page.x0 - TOLERANCE
                or box.x1 > page.x1 + TOLERANCE
                or box.y0 < page.y0 - TOLERANCE
                or box.y1 > page.y1 + TOLERANCE
            ):
                cut.append(f"{name}/{file}: {text.get_text()[:50]!r} at {box.extents.round()}")
    assert not cut, "\n".join(cut)


def test_figures_use_constrained_layout(drawn):
    for (name, file), figure in drawn.items():
        assert figure.get_layout_engine().__class__.__name__ == "ConstrainedLayoutEngine", (
            name,
            file,
        )


def _tick_texts(axis) -> list[str]:
    return [t.get_text() for t in axis.get_ticklabels()]


def test_heatmaps_show_the_swept_values_in_their_units(drawn):
    """beta_rho_grid's heatmaps put β on an axis named β whose ticks are the β swept (1e-05,
    0.0001, …, 0.5), not log10 β; every heatmap's axes are named by their symbols and ticked
    with the values of the grid."""
    grid = BetaRhoGrid()
    for metric in ("average_gap", "max_rate_violation", "rounds_to_target"):
        ax = drawn["beta_rho_grid", f"heatmap_cs_ucb_q_{metric}.png"].axes[0]
        assert (ax.get_xlabel(), ax.get_ylabel()) == ("ρ", "β")
        assert _tick_texts(ax.yaxis) == [f"{b:g}" for b in grid.beta]
        assert _tick_texts(ax.xaxis) == [f"{r:g}" for r in grid.rho]
    heatmaps = [(key, fig) for key, fig in drawn.items() if key[1].startswith("heatmap_")]
    assert {name for (name, _), _ in heatmaps} == {"v_beta_grid", "beta_rho_grid", "cocs_hfl"}
    for key, figure in heatmaps:
        ax = figure.axes[0]
        for axis in (ax.xaxis, ax.yaxis):
            assert axis.get_label_text() in ("V", "β", "ρ", "h_T", "z"), key
            assert all(float(text) >= 0 for text in _tick_texts(axis)), key


def test_no_figure_shows_a_transformed_value(drawn):
    for (name, file), figure in drawn.items():
        texts = [text.get_text() for text in visible_texts(figure)]
        assert not [text for text in texts if "log10" in text], (name, file)


E3CS_METHODS = ["E3CS-0", "E3CS-0.5", "E3CS-0.8", "E3CS-inc", "random", "most_reliable"]


def _legend_texts(figure) -> list[str]:
    legends = [ax.get_legend() for ax in figure.axes if ax.get_legend() is not None]
    return [text.get_text() for legend in legends for text in legend.get_texts()]


def test_e3cs_figures_name_the_methods_as_the_paper(drawn):
    """Huang et al.'s names (E3CS-0, -0.5, -0.8, -inc) in all three figures of e3cs_classes,
    in the order of the configurations."""
    for file in ("effective_participation.png", "pull_record.png", "class_fractions.png"):
        assert _legend_texts(drawn["e3cs_classes", file]) == E3CS_METHODS, file


def test_e3cs_method_labels():
    """One name per configuration, from its policy, σ and switch; η joins them where several
    learning rates are swept."""
    from jfl.experiments.e3cs import e3cs_configs, method_labels

    configs = e3cs_configs(("e3cs", "random", "most_reliable"), (0.0, 0.5, 0.8), (0.5,), 625)
    assert method_labels(configs) == E3CS_METHODS
    configs = e3cs_configs(("e3cs", "random"), (0.0,), (0.1, 0.5), 625)
    assert method_labels(configs) == [
        "E3CS-0 η=0.1", "E3CS-0 η=0.5", "E3CS-inc η=0.1", "E3CS-inc η=0.5", "random"
    ]  # fmt: skip


def test_e3cs_classes_are_labelled_with_their_success_rates(drawn):
    ax = drawn["e3cs_classes", "class_fractions.png"].axes[0]
    rates = E3csClasses().success_rates
    assert _tick_texts(ax.xaxis) == [f"class {c} (ρ = {r:g})" for c, r in enumerate(rates)]


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_no_legend_covers_data(drawn):
    """Every legend stands off every axes' data area (the 0.4 target line of
    cs_ucb_q_fairness's panels, the bars of class_fractions.png stay in sight)."""
    covering = []
    for (name, file), figure in drawn.items():
        renderer = figure._get_renderer()
        areas = [ax.get_window_extent(renderer) for ax in figure.axes]
        for ax in figure.axes:
            legend = ax.get_legend()
            if legend is not None and any(
                _overlap(legend.get_window_extent(renderer), area) for area in areas
            ):
                covering.append(f"{name}/{file}")
    assert not covering, covering


def test_e3cs_methods_keep_their_colours_across_figures(drawn):
    """A method's bars in class_fractions.png have the colour of its line in the other two."""
    ax = drawn["e3cs_classes", "effective_participation.png"].axes[0]
    colours = {line.get_label(): line.get_color() for line in ax.get_lines()}
    bars = drawn["e3cs_classes", "class_fractions.png"].axes[0].containers
    bars = [container for container in bars if hasattr(container, "patches")]
    assert [container.get_label() for container in bars] == E3CS_METHODS
    for container in bars:
        face = container.patches[0].get_facecolor()
        np.testing.assert_allclose(face, colours[container.get_label()], err_msg=str(container))


@pytest.mark.parametrize("initial", [False, True])
def test_a_diverged_sweep_says_so_on_its_axes(initial):
    """pow_d_quadratic at a learning rate that diverges: every gap NaN (or all but the initial
    model's, a point a line cannot join). Both panels say that nothing could be drawn, and
    every legend entry why; a lone finite point is marked."""
    from jfl.plots import ISOLATED_NOTE, NO_FINITE_LABEL, NO_FINITE_NOTE

    config, ds, summary = pow_d_quadratic()
    ds = ds.assign(gap=ds["gap"].where(ds["eval"] == 0 if initial else False))
    with laid_out_figures() as saved:
        config.figures(ds, summary, Path("/nonexistent"))
    figure = saved["gap_vs_round.png"]
    note = ISOLATED_NOTE if initial else NO_FINITE_NOTE
    assert [[text.get_text() for text in ax.texts] for ax in figure.axes] == [[note]] * 2
    legend = _legend_texts(figure)
    assert len(legend) == ds.sizes["config"]
    ending = " (finite at 1 point only)" if initial else NO_FINITE_LABEL
    assert all(text.endswith(ending) for text in legend), legend
    if initial:
        assert all(line.get_markevery() == [0] for line in figure.axes[0].get_lines())


def test_heatmap_cells_no_run_met_say_never_met(drawn):
    """beta_rho_grid's rounds_to_target at ρ = 1.75, where no run meets its rates (censored,
    NaN): those cells say "never met", hatched, instead of a colour."""
    ax = drawn["beta_rho_grid", "heatmap_cs_ucb_q_rounds_to_target.png"].axes[0]
    (image,) = ax.get_images()
    missing = np.ma.getmaskarray(image.get_array())
    assert missing[:, -1].all() and not missing[:, :-1].any()
    cells = sorted((int(t.get_position()[1]), t.get_text()) for t in ax.texts)
    assert cells == [(row, "never met") for row in range(len(BetaRhoGrid().beta))]
    for metric in ("average_gap", "max_rate_violation"):
        ax = drawn["beta_rho_grid", f"heatmap_cs_ucb_q_{metric}.png"].axes[0]
        assert not ax.texts
