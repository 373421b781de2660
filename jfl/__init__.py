"""jfl: vectorised client selection for federated learning in JAX.

The layers, from the bottom:

* ``jfl.kernels`` — pure single-instance kernels (selection, assignment, ridge, UCB, queues);
* ``jfl.envs`` — client simulators, gymnax style (``reset``/``step`` over explicit pytrees);
* ``jfl.policies`` — selection policies as ``(init, select, update)`` triples, and their registry;
* ``jfl.trackers`` — what a run measures about its selections (the fairness queue);
* ``jfl.runner`` — ``make_run``: one configuration and seed as a pure function, ``vmap``-ped;
* ``jfl.sweep`` — grids of configurations run in chunks, resumable, across devices and processes;
* ``jfl.reduction``, ``jfl.results``, ``jfl.stats``, ``jfl.plots`` — per-run metrics, bands over
  seeds, labelled datasets, summaries with intervals, figures;
* ``jfl.driver`` — ``Experiment`` (a typed config) and ``run(config)``, behind every command line;
* ``jfl.fl`` — federated training (data, partitions, Flax models, FedAvg) driven by the policies;
* ``jfl.experiments`` — the papers' experiments on top of all this (the library knows no paper).

The most used names are here too (``jfl.make_run``, ``jfl.run_policy_grid``, ``jfl.Experiment``,
…). Submodules and names load on first use, so ``import jfl`` is cheap; importing jfl changes no
global state (JAX's PRNG lowering and matplotlib's backend stay as they are; see ``jfl.prng``
for the opt-in faster CPU random numbers the sweeps use).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_SUBMODULES = (
    "checks",
    "cli",
    "compilation_cache",
    "distributed",
    "driver",
    "envs",
    "experiments",
    "fl",
    "kernels",
    "outputs",
    "plots",
    "policies",
    "prng",
    "reduction",
    "reference",
    "results",
    "runner",
    "stats",
    "sweep",
    "trackers",
)

# Public names re-exported at the top level, by the module that defines them.
_NAMES = {
    "Environment": "envs",
    "Policy": "policies",
    "PolicySpec": "policies",
    "HParam": "policies",
    "register": "policies",
    "Tracker": "trackers",
    "fairness_queue": "trackers",
    "RunOutput": "runner",
    "make_run": "runner",
    "make_batched_run": "runner",
    "output_dims": "outputs",
    "Metric": "outputs",
    "seed_keys": "runner",
    "config_table": "sweep",
    "run_policy_grid": "sweep",
    "run_chunked": "sweep",
    "ChunkStore": "sweep",
    "make_reducer": "reduction",
    "to_dataset": "results",
    "summarize": "results",
    "load_dataset": "results",
    "Experiment": "driver",
    "Plan": "sweep",
    "run": "driver",
}

__all__ = sorted(["__version__", *_SUBMODULES, *_NAMES], key=str.casefold)


def __getattr__(name: str):
    """Load a submodule, or the module of a re-exported name, on first use."""
    if name in _SUBMODULES:
        return importlib.import_module(f"jfl.{name}")
    if name in _NAMES:
        return getattr(importlib.import_module(f"jfl.{_NAMES[name]}"), name)
    raise AttributeError(f"module 'jfl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
