"""CS-UCB-Q for several β against modified CS-UCB (Xia et al. §V-C, Figs. 4–5).

    python sweeps/cs_ucb_q_fairness.py
    python sweeps/cs_ucb_q_fairness.py --beta 1e-5,1e-3,0.1,0.5 --seeds 128 --rounds 10000

Flags: ``--help`` (the fields of ``jfl.experiments.CsUcbQFairness``).
Writes to --out: summary.csv, results.nc, metadata.json and figures/*.png.
"""

import sys

from jfl.cli import main
from jfl.experiments import CsUcbQFairness

if __name__ == "__main__":
    sys.exit(main(CsUcbQFairness))
