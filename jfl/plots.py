"""Paper-style figures with confidence bands over seeds (matplotlib).

Figures are ``matplotlib.figure.Figure`` objects saved to files, never pyplot's global figures,
so they work under whatever backend the caller has (none is selected here; a notebook's inline
backend stays as it is). Every ``plot_*`` function saves its figure to ``path`` and returns it,
for a caller that wants to show it, change it or read it back.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr
from matplotlib.figure import Figure

from jfl.stats import mean_ci, stats_ci


def _subplots(*args, **kwargs):
    """A figure outside pyplot (no backend, no global state) and its axes."""
    fig = Figure(figsize=kwargs.pop("figsize", None))
    return fig, fig.subplots(*args, **kwargs)


def band(ax, x, samples, label=None, level=0.95, **kwargs):
    """Mean line and shaded Student-t band of ``samples`` [seed, x] (no band for one seed)."""
    mean, lo, hi = mean_ci(np.asarray(samples), axis=0, level=level)
    return _draw(ax, x, mean, lo, hi, label, **kwargs)


def band_from_stats(ax, x, mean, variance, n, label=None, level=0.95, **kwargs):
    """The same line and band from the mean and variance over ``n`` seeds
    (``jfl.reduction``'s bands)."""
    mean, lo, hi = stats_ci(np.asarray(mean), np.asarray(variance), n, level)
    return _draw(ax, x, mean, lo, hi, label, **kwargs)


def _draw(ax, x, mean, lo, hi, label, **kwargs):
    (line,) = ax.plot(x, mean, label=label, **kwargs)
    if np.all(np.isfinite(lo)):
        ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.25, linewidth=0)
    return line


def seed_band(ax, ds, variable, config, dim, label=None, transform=None, **kwargs):
    """Band over seeds of ``variable`` for one configuration: from every run's values when
    ``ds`` holds them (``transform`` applied to each run's [dim] values first), else from the
    band ``<variable>_band`` a reduced sweep stores."""
    x = ds[dim].to_numpy()
    if variable in ds and "seed" in ds[variable].dims:
        samples = ds[variable].sel(config=config).transpose("seed", dim).to_numpy()
        if transform is not None:
            samples = transform(samples)
        return band(ax, x, samples, label=label, **kwargs)
    stats = ds[f"{variable}_band"].sel(config=config)
    mean, variance = stats.sel(stat="mean").to_numpy(), stats.sel(stat="var").to_numpy()
    return band_from_stats(ax, x, mean, variance, ds.sizes["seed"], label=label, **kwargs)


def config_label(ds: xr.Dataset, config: int, varying: list[str]) -> str:
    """'rbcsf V=10' style legend label with only the hyperparameters that vary."""
    c = ds.sel(config=config)
    parts = [str(c["policy"].item())]
    for name in varying:
        value = float(c[name].item())
        if np.isfinite(value):
            parts.append(f"{name}={value:g}")
    return " ".join(parts)


def varying_hparams(ds: xr.Dataset, exclude=("policy", "queue_rate")) -> list[str]:
    """The configuration coordinates (hyperparameters) that take more than one value in ``ds``."""
    names = []
    for name, coord in ds.coords.items():
        if coord.dims != ("config",) or name in exclude or name == "config":
            continue
        values = coord.to_numpy()
        finite = np.unique(values[np.isfinite(values)])
        if len(finite) > 1:
            names.append(name)
    return names


def _select_configs(ds: xr.Dataset, max_lines: int) -> list[int]:
    return list(ds["config"].to_numpy()[:max_lines])


def plot_over_rounds(
    ds, variable, ylabel, path, title, cumulative=False, configs=None, max_lines=12
):
    """One banded line per configuration of ``variable`` [config, seed, round]."""
    varying = varying_hparams(ds)
    configs = _select_configs(ds, max_lines) if configs is None else configs
    fig, ax = _subplots(figsize=(6.4, 4.2))
    for config in configs:
        label = config_label(ds, config, varying)
        if cumulative and f"{variable}_band" in ds:
            raise ValueError(f"{variable!r} is a band: plot its cumulative curve's band instead")
        cumsum = (lambda samples: np.cumsum(samples, axis=1)) if cumulative else None
        seed_band(ax, ds, variable, config, "round", label=label, transform=cumsum)
    ax.set_xlabel("round")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return fig


def plot_pull_record(ds, path, configs=None, max_lines=12):
    """Selections per client after T rounds, clients sorted ascending per seed (paper Fig. 4)."""
    varying = varying_hparams(ds)
    configs = _select_configs(ds, max_lines) if configs is None else configs
    fig, ax = _subplots(figsize=(6.4, 4.2))
    x = np.arange(1, ds.sizes["client"] + 1)
    for config in configs:
        label = config_label(ds, config, varying)
        if "pull_record_band" in ds:
            stats = ds["pull_record_band"].sel(config=config)
            mean, variance = stats.sel(stat="mean"), stats.sel(stat="var")
            band_from_stats(ax, x, mean, variance, ds.sizes["seed"], label=label, marker=".")
            continue
        counts = ds["selection_count"].sel(config=config).transpose("seed", "client").to_numpy()
        band(ax, x, np.sort(counts, axis=1), label=label, marker=".")
    ax.set_xlabel("client (sorted by pull count)")
    ax.set_ylabel(f"selections after {ds.sizes['round']} rounds")
    ax.set_title("Pull record")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return fig


def plot_heatmap(summary: pd.DataFrame, metric: str, x: str, y: str, path, title=None):
    """Heatmap of a summary metric over two hyperparameters (mean over any others)."""
    table = summary.pivot_table(index=y, columns=x, values=metric, aggfunc="mean")
    fig, ax = _subplots(figsize=(6.4, 4.8))
    image = ax.imshow(table.to_numpy(), origin="lower", aspect="auto", cmap="viridis")
    ax.set_xticks(range(len(table.columns)), [f"{v:g}" for v in table.columns], rotation=45)
    ax.set_yticks(range(len(table.index)), [f"{v:g}" for v in table.index])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title or metric)
    fig.colorbar(image, ax=ax, label=metric)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return fig


def plot_metric_vs(summary: pd.DataFrame, metric: str, x: str, path, ylabel=None, title=None):
    """A summary metric against one column, one line per policy, with its interval as error bars.

    Other varying columns would mix several configurations into one point, so every remaining
    hyperparameter combination gets its own line.
    """
    fig, ax = _subplots(figsize=(6.4, 4.2))
    others = [
        c
        for c in _label_columns(summary)
        if c not in ("policy", x) and summary[c].nunique(dropna=True) > 1
    ]
    for keys, group in summary.groupby(["policy", *others], dropna=False, sort=False):
        keys = keys if isinstance(keys, tuple) else (keys,)
        label = " ".join(
            [str(keys[0])]
            + [f"{n}={v:g}" for n, v in zip(others, keys[1:], strict=True) if np.isfinite(v)]
        )
        group = group.sort_values(x)
        mean = group[metric].to_numpy()
        err = np.stack([mean - group[f"{metric}_lo"], group[f"{metric}_hi"] - mean])
        ax.errorbar(group[x], mean, yerr=np.nan_to_num(err), marker="o", capsize=3, label=label)
    ax.set_xlabel(x)
    ax.set_ylabel(ylabel or metric)
    ax.set_title(title or metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return fig


def _label_columns(summary: pd.DataFrame) -> list[str]:
    """Columns that label a configuration (not metrics or their interval bounds)."""
    end = summary.columns.get_loc("n_seeds")
    return list(summary.columns[:end])


def plot_selection_fraction(ds: xr.Dataset, path, configs=None, max_lines=8):
    """Running selection fraction of each client vs rounds, one panel per client (Xia Fig. 5).

    Needs the ``selected`` trajectories; a dashed line marks the client's target c_k when the
    dataset has a per-client ``queue_rate`` [config, client].
    """
    from jfl.results import running_selection_fraction

    varying = varying_hparams(ds)
    configs = _select_configs(ds, max_lines) if configs is None else configs
    num_clients = ds.sizes["client"]
    fig, axes = _subplots(
        1, num_clients, figsize=(3.2 * num_clients, 3.6), sharey=True, squeeze=False
    )
    fraction = running_selection_fraction(ds)
    x = ds["round"].to_numpy()
    for k, ax in enumerate(axes[0]):
        for config in configs:
            samples = fraction.sel(config=config, client=k).transpose("seed", "round").to_numpy()
            band(ax, x, samples, label=config_label(ds, config, varying))
        if "queue_rate" in ds and "client" in ds["queue_rate"].dims:
            targets = np.unique(ds["queue_rate"].sel(config=configs, client=k).to_numpy())
            for target in targets:
                ax.axhline(target, color="k", linestyle="--", linewidth=1)
        ax.set_title(f"client {k + 1}")
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("selection fraction")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return fig


def plot_accuracy(
    ds: xr.Dataset,
    path,
    against="round",
    configs=None,
    title=None,
    max_lines=12,
    exclude=("policy", "queue_rate"),
):
    """Test accuracy with its band over seeds, against the round or the simulated wall-clock.

    Against time, the x position of an evaluation is the seed-mean of the wall-clock at that
    round (seeds differ in their clocks; the band is over accuracies at equal rounds).
    ``exclude`` names configuration labels left out of the legend.
    """
    varying = varying_hparams(ds, exclude=exclude)
    configs = _select_configs(ds, max_lines) if configs is None else configs
    rounds = ds["eval"].to_numpy()
    fig, ax = _subplots(figsize=(6.4, 4.2))
    for config in configs:
        c = ds.sel(config=config)
        samples = c["accuracy"].transpose("seed", "eval").to_numpy()
        if against == "round":
            x = rounds
        else:
            clock = c["wall_clock"].transpose("seed", "round").to_numpy().mean(axis=0)
            x = np.concatenate([[0.0], clock])[rounds]
        band(ax, x, samples, label=config_label(ds, config, varying))
    target = ds.attrs.get("target_accuracy")
    if target is not None:
        ax.axhline(float(target), color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("round" if against == "round" else "simulated wall-clock time (s)")
    ax.set_ylabel("test accuracy")
    ax.set_title(title or f"Test accuracy vs {'round' if against == 'round' else 'time'}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return fig
