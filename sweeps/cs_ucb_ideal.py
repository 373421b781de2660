"""CS-UCB against Random and Round-robin in the ideal scenario (Xia et al. §V-B, Figs. 1 and 3).

    python sweeps/cs_ucb_ideal.py                     # Fig. 1 (N = 5) and Fig. 3 (N = 1…10)
    python sweeps/cs_ucb_ideal.py --N 5 --rounds 20000 --seeds 256 --out runs/fig1

Flags: ``--help`` (the fields of ``jfl.experiments.CsUcbIdeal``).
Writes to --out: summary.csv, results.nc, metadata.json and figures/*.png.
"""

import sys

from jfl.cli import main
from jfl.experiments import CsUcbIdeal

if __name__ == "__main__":
    sys.exit(main(CsUcbIdeal))
