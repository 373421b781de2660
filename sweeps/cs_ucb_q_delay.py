"""CS-UCB-Q delay against the number of channels for several fairness scales ρ (Xia et al. Fig. 7).

    python sweeps/cs_ucb_q_delay.py                            # about 26 s on 2 cores
    python sweeps/cs_ucb_q_delay.py --rounds 20000 --seeds 32   # the paper's T = 2·10⁴

Flags: ``--help`` (the fields of ``jfl.experiments.CsUcbQDelay``).
Writes to --out: summary.csv, results.nc, metadata.json and figures/*.png.
"""

import sys

from jfl.cli import main
from jfl.experiments import CsUcbQDelay

if __name__ == "__main__":
    sys.exit(main(CsUcbQDelay))
