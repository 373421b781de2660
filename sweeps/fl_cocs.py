"""Hierarchical federated training with COCS and its baselines (Qu et al. Table II, Fig. 4a).

    python sweeps/fl_cocs.py                                       # Table II / Fig. 4a
    python sweeps/fl_cocs.py --budget 3.5,5,10 --out runs/fl_cocs_budget   # Fig. 4c

Flags: ``--help`` (the fields of ``jfl.experiments.FlCocs``).
Writes to --out: summary.csv, results.nc, metadata.json and figures/*.png.
"""

import sys

from jfl.cli import main
from jfl.experiments import FlCocs

if __name__ == "__main__":
    sys.exit(main(FlCocs))
