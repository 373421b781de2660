"""COCS against Oracle, LinUCB, CUCB and Random on hierarchical FL (Qu et al. §VI, Figs. 3–4).

    python sweeps/cocs_hfl.py                                   # Fig. 3 (MNIST), 1000 rounds
    python sweeps/cocs_hfl.py --budget 3.5,5,10 --out runs/cocs_budget    # Fig. 4d
    python sweeps/cocs_hfl.py --policies cocs,oracle --h-T 1:10:10 --z 0.1:1:10 --seeds 128

Flags: ``--help`` (the fields of ``jfl.experiments.CocsHfl``).
Writes to --out: summary.csv, results.nc, metadata.json and figures/*.png.
"""

import sys

from jfl.cli import main
from jfl.experiments import CocsHfl

if __name__ == "__main__":
    sys.exit(main(CocsHfl))
