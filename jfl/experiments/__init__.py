"""The papers' experiments as typed, frozen configs on top of the generic library.

Each experiment is a :class:`jfl.driver.Experiment` with the paper's defaults, its own metrics and
figures; ``jfl.driver.run(config)`` runs it and ``sweeps/<name>.py`` is its command line. Nothing
in the generic library imports this package.
"""

from jfl.experiments.cocs import CocsHfl
from jfl.experiments.cs_ucb import BetaRhoGrid, CsUcbIdeal, CsUcbQDelay, CsUcbQFairness
from jfl.experiments.e3cs import E3csClasses
from jfl.experiments.fl import FlCocs, FlCsUcbIdeal, FlCsUcbQ, FlRbcsf
from jfl.experiments.power_of_choice import PowDQuadratic
from jfl.experiments.rbcsf import VBetaGrid
from jfl.experiments.selection import FlSelection
from jfl.registry import Registry

EXPERIMENTS: Registry[type] = Registry(
    "experiment",
    {
        config.name: config
        for config in (
            VBetaGrid,
            CsUcbIdeal,
            CsUcbQFairness,
            CsUcbQDelay,
            BetaRhoGrid,
            CocsHfl,
            E3csClasses,
            FlRbcsf,
            FlCsUcbIdeal,
            FlCsUcbQ,
            FlCocs,
            FlSelection,
            PowDQuadratic,
        )
    },
)

__all__ = [
    "EXPERIMENTS",
    "BetaRhoGrid",
    "CocsHfl",
    "CsUcbIdeal",
    "CsUcbQDelay",
    "CsUcbQFairness",
    "E3csClasses",
    "FlCocs",
    "FlCsUcbIdeal",
    "FlCsUcbQ",
    "FlRbcsf",
    "FlSelection",
    "PowDQuadratic",
    "VBetaGrid",
]
