"""CS-UCB-Q over a β × ρ grid with c_k = ρ s_k / Σ s (an extension of Xia et al. §V-C).

    python sweeps/beta_rho_grid.py
    python sweeps/beta_rho_grid.py --beta 1e-4,1e-3,1e-2,0.1,1 --rho 0.2:1.6:8 --seeds 512

Flags: ``--help`` (the fields of ``jfl.experiments.BetaRhoGrid``).
Writes to --out: summary.csv, results.nc, metadata.json and figures/*.png.
"""

import sys

from jfl.cli import main
from jfl.experiments import BetaRhoGrid

if __name__ == "__main__":
    sys.exit(main(BetaRhoGrid))
