"""The figures of a sweep's dataset: one banded line per configuration, against the rounds (or
the clients, or the simulated wall-clock), in panels of at most ``max_lines`` lines.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import xarray as xr

from jfl.plots.bands import band, band_from_stats, band_title, has_runs, seed_band
from jfl.plots.figure import _finish, _panels_note, line_figure, save
from jfl.plots.style import (
    MAX_LINES,
    config_label,
    line_styles,
    panel_groups,
    policy_colors,
    varying_hparams,
)
from jfl.stats import UNIT_INTERVAL, Bounds


def _drawn(ds: xr.Dataset, configs, varying, max_lines, colors, labels=None):
    """``(configs, labels, styles, panels)`` of the lines of ``configs`` (every configuration
    of ``ds`` by default): their legend labels (``labels``: ``{config: label}`` or a function
    of the configuration, as an experiment names its methods; default :func:`config_label`'s,
    the hyperparameters in ``varying``), colours and line styles (``colors``: ``{policy:
    colour}``, default :func:`policy_colors` of ``ds["policy"]``) and the panels they go in."""
    configs = list(ds["config"].to_numpy() if configs is None else configs)
    colors = policy_colors(ds["policy"].to_numpy()) if colors is None else colors
    policies = [str(ds["policy"].sel(config=c).item()) for c in configs]
    if labels is None:
        names = [config_label(ds, c, varying) for c in configs]
    else:
        names = [labels[c] if isinstance(labels, Mapping) else labels(c) for c in configs]
    return configs, names, line_styles(policies, colors), panel_groups(policies, max_lines)


def plot_over_rounds(
    ds,
    variable,
    ylabel,
    path,
    title,
    cumulative=False,
    configs=None,
    max_lines=MAX_LINES,
    method="t",
    varying=None,
    subtitle="",
    bounds=None,
    colors=None,
    labels=None,
):
    """One banded line per configuration of ``variable`` [config, seed, round] (``configs``:
    every one by default, every one drawn), told apart by colour and legend; the legend labels
    name the hyperparameters in ``varying`` (by default those that vary in ``ds``), or are
    ``labels``' (``{config: label}`` or a function of the configuration: how an experiment
    names its methods), and ``subtitle`` (what the figure fixes, say) goes under the title.
    ``method``: the interval of the bands, clipped to ``bounds`` (default: the variable's
    declared ones; of its running sum with ``cumulative``). More than ``max_lines`` lines are
    split into panels; ``colors``: ``{policy: colour}`` (default :func:`policy_colors` of
    ``ds["policy"]``).
    """
    from jfl.results import bounds_of  # on use: results loads JAX

    if cumulative and f"{variable}_band" in ds:
        raise ValueError(f"{variable!r} is a band: plot its cumulative curve's band instead")
    varying = varying_hparams(ds) if varying is None else varying
    configs, labels, styles, groups = _drawn(ds, configs, varying, max_lines, colors, labels)
    bounds = bounds_of(variable, ds=ds) if bounds is None else Bounds(*bounds)
    cumsum = None
    if cumulative:
        bounds = bounds.cumulative()

        def cumsum(samples):
            return np.cumsum(samples, axis=1)

    legend_title = band_title(ds, variable, method)
    fig, axes = line_figure([[labels[i] for i in g] for g in groups], legend_title)
    for (ax,), group in zip(axes, groups, strict=True):
        for i in group:
            seed_band(
                ax, ds, variable, configs[i], "round", label=labels[i], transform=cumsum,
                method=method, bounds=bounds, **styles[i],
            )  # fmt: skip
    _finish(axes, groups, "round", ylabel, title, (subtitle,), legend_title)
    return save(fig, path)


def plot_pull_record(
    ds,
    path,
    configs=None,
    max_lines=MAX_LINES,
    method="t",
    varying=None,
    subtitle="",
    colors=None,
    labels=None,
):
    """Selections per client after T rounds, clients sorted ascending per seed (paper Fig. 4);
    the arguments as :func:`plot_over_rounds`'."""
    from jfl.results import bounds_of  # on use: results loads JAX

    varying = varying_hparams(ds) if varying is None else varying
    configs, labels, styles, groups = _drawn(ds, configs, varying, max_lines, colors, labels)
    x = np.arange(1, ds.sizes["client"] + 1)
    runs = has_runs(ds, "selection_count") and (
        method == "bootstrap" or "pull_record_band" not in ds
    )
    legend_title = band_title(ds, "selection_count" if runs else "pull_record", method)
    fig, axes = line_figure([[labels[i] for i in g] for g in groups], legend_title)
    for (ax,), group in zip(axes, groups, strict=True):
        for i in group:
            config, style = configs[i], {"label": labels[i], "marker": ".", **styles[i]}
            if not runs:
                stats = ds["pull_record_band"].sel(config=config)
                mean, variance = stats.sel(stat="mean"), stats.sel(stat="var")
                bounds = bounds_of("pull_record", ds=ds)
                band_from_stats(ax, x, mean, variance, ds.sizes["seed"], bounds=bounds, **style)
                continue
            counts = ds["selection_count"].sel(config=config).transpose("seed", "client")
            bounds = bounds_of("selection_count", ds=ds)
            band(ax, x, np.sort(counts.to_numpy(), axis=1), method=method, bounds=bounds, **style)
    _finish(
        axes, groups, "client (sorted by pull count)",
        f"selections after {ds.sizes['round']} rounds", "Pull record", (subtitle,), legend_title,
    )  # fmt: skip
    return save(fig, path)


def plot_selection_fraction(
    ds: xr.Dataset, path, configs=None, max_lines=8, method="t", colors=None, labels=None
):
    """Running selection fraction of each client vs rounds, one panel per client (Xia Fig. 5).

    From every run's ``selected`` trajectories, else from the band a reduced sweep stores
    (``selection_fraction_band`` [config, stat, round, client]: Student-t whatever ``method``
    asks, as :func:`jfl.plots.seed_band`); a dashed line marks the client's target c_k when the
    dataset has a per-client ``queue_rate`` [config, client]. Bands in [0, 1]. More than
    ``max_lines`` configurations are split into rows of panels (one panel per client in each);
    ``colors``: ``{policy: colour}`` (default :func:`policy_colors` of ``ds["policy"]``);
    ``labels`` as :func:`plot_over_rounds`'.
    """
    varying = varying_hparams(ds)
    configs, labels, styles, groups = _drawn(ds, configs, varying, max_lines, colors, labels)
    num_clients = ds.sizes["client"]
    legend_title = band_title(ds, "selected", method)
    fig, axes = line_figure(
        [[labels[i] for i in g] for g in groups], legend_title, width=3.2 * num_clients,
        height=3.6, columns=num_clients, fontsize=7,
    )  # fmt: skip
    fraction_band = _fraction_band(ds, method)
    for row, group in zip(axes, groups, strict=True):
        shown = [configs[i] for i in group]
        for k, ax in enumerate(row):
            for i in group:
                fraction_band(ax, configs[i], k, label=labels[i], **styles[i])
            if "queue_rate" in ds and "client" in ds["queue_rate"].dims:
                targets = np.unique(ds["queue_rate"].sel(config=shown, client=k).to_numpy())
                for target in targets:
                    ax.axhline(target, color="k", linestyle="--", linewidth=1)
    _finish(axes, groups, "round", "selection fraction", None, (), legend_title, 7)
    for k, ax in enumerate(axes[0]):
        ax.set_title(f"client {k + 1}")
    if len(groups) > 1:
        fig.suptitle(_panels_note(groups), fontsize=9)
    return save(fig, path)


def _fraction_band(ds: xr.Dataset, method: str):
    """``draw(ax, config, client, **line)``: the band over seeds of one client's running
    selection fraction, from every run's ``selected`` or from ``selection_fraction_band``."""
    x = ds["round"].to_numpy()
    if has_runs(ds, "selected"):
        from jfl.results import running_selection_fraction  # on use: results loads JAX

        fraction = running_selection_fraction(ds)

        def draw(ax, config, client, **line):
            samples = fraction.sel(config=config, client=client).transpose("seed", "round")
            band(ax, x, samples.to_numpy(), method=method, bounds=UNIT_INTERVAL, **line)

        return draw
    stats = ds["selection_fraction_band"]

    def draw(ax, config, client, **line):
        one = stats.sel(config=config, client=client)
        mean, variance = one.sel(stat="mean").to_numpy(), one.sel(stat="var").to_numpy()
        band_from_stats(ax, x, mean, variance, ds.sizes["seed"], bounds=UNIT_INTERVAL, **line)

    return draw


def _mean_clock(ds: xr.Dataset, config) -> np.ndarray:
    """The seed-mean simulated clock after each round of ``config``: of every run's
    ``wall_clock``, or its band's mean (a sweep reduced on the device)."""
    if has_runs(ds, "wall_clock"):
        return ds["wall_clock"].sel(config=config).mean("seed").to_numpy()
    return ds["wall_clock_band"].sel(config=config, stat="mean").to_numpy()


EVALUATION_LABELS = {"accuracy": "test accuracy", "test_loss": "test loss"}


def plot_accuracy(
    ds: xr.Dataset,
    path,
    against="round",
    configs=None,
    title=None,
    max_lines=MAX_LINES,
    exclude=("policy", "queue_rate"),
    method="t",
    variable="accuracy",
    colors=None,
    labels=None,
):
    """Test accuracy (or ``variable``, another evaluation: ``test_loss``) with its band over
    seeds, against the round or the simulated wall-clock.

    Against time, the x position of an evaluation is the seed-mean of the wall-clock at that
    round (seeds differ in their clocks; the band is over accuracies at equal rounds), from
    ``wall_clock_band`` in a sweep reduced on the device.
    ``exclude`` names configuration labels left out of the legend. Bands in the accuracy's
    bounds, [0, 1]. Every configuration of ``configs`` is drawn, more than ``max_lines`` in
    panels; ``colors``: ``{policy: colour}`` (default :func:`policy_colors` of
    ``ds["policy"]``, the same in every figure of the dataset); ``labels`` as
    :func:`plot_over_rounds`'.
    """
    from jfl.results import bounds_of  # on use: results loads JAX

    varying = varying_hparams(ds, exclude=exclude)
    configs, labels, styles, groups = _drawn(ds, configs, varying, max_lines, colors, labels)
    rounds = ds["eval"].to_numpy()
    bounds = bounds_of(variable, ds=ds)
    legend_title = band_title(ds, variable, method)
    fig, axes = line_figure([[labels[i] for i in g] for g in groups], legend_title)
    target = ds.attrs.get("target_accuracy") if variable == "accuracy" else None
    for (ax,), group in zip(axes, groups, strict=True):
        for i in group:
            x = rounds
            if against != "round":
                x = np.concatenate([[0.0], _mean_clock(ds, configs[i])])[rounds]
            seed_band(
                ax, ds, variable, configs[i], "eval", label=labels[i], method=method,
                bounds=bounds, x=x, **styles[i],
            )  # fmt: skip
        if target is not None:
            ax.axhline(float(target), color="grey", linestyle=":", linewidth=1)
    ylabel = EVALUATION_LABELS.get(variable, variable)
    against_name = "round" if against == "round" else "time"
    _finish(
        axes, groups, "round" if against == "round" else "simulated wall-clock time (s)",
        ylabel, title or f"{ylabel.capitalize()} vs {against_name}", (), legend_title,
    )  # fmt: skip
    return save(fig, path)
