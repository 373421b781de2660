"""Xia et al. Fig. 6: CS-UCB-Q and its baselines choose the clients of a federated training.

    python sweeps/fl_cs_ucb_q.py                                               # about 33 s, 2 cores
    python sweeps/fl_cs_ucb_q.py --local-steps None --batch-size 10 --lr 0.1 --rounds 100 \
        --eval-every 5                                                         # FedAvg epochs

Flags: ``--help`` (the fields of ``jfl.experiments.FlCsUcbQ``).
Writes to --out: summary.csv, results.nc, metadata.json and figures/*.png.
"""

import sys

from jfl.cli import main
from jfl.experiments import FlCsUcbQ

if __name__ == "__main__":
    sys.exit(main(FlCsUcbQ))
