"""RBCS-F and its baselines over a V × β (× α) grid and many seeds (RBCS-F §6.1): the main job.

    python sweeps/v_beta_grid.py                       # paper setting, about 9 s on 2 cores
    python sweeps/v_beta_grid.py --V 0:50:11 --beta 0:0.2:9 --seeds 256 --out runs/grid
    python sweeps/v_beta_grid.py --out runs/grid --resume   # continue an interrupted sweep

Flags: ``--help`` (the fields of ``jfl.experiments.VBetaGrid``).
Writes to --out: summary.csv, results.nc, metadata.json and figures/*.png.
"""

import sys

from jfl.cli import main
from jfl.experiments import VBetaGrid

if __name__ == "__main__":
    sys.exit(main(VBetaGrid))
