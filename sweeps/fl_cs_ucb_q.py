"""Federated training with CS-UCB-Q and its baselines choosing the clients (Xia et al. Fig. 6).

    python sweeps/fl_cs_ucb_q.py
    python sweeps/fl_cs_ucb_q.py --rounds 10000 --eval-every 250 --seeds 32
    python sweeps/fl_cs_ucb_q.py --dataset mnist --data-dir ~/data/mnist --rounds 2000
    python sweeps/fl_cs_ucb_q.py --local-steps None --batch-size 10 --lr 0.1 \
        --rounds 100 --eval-every 5

Flags: ``--help`` (the fields of ``jfl.experiments.FlCsUcbQ``).
Writes to --out: summary.csv, results.nc, metadata.json and figures/*.png.
"""

import sys

from jfl.cli import main
from jfl.experiments import FlCsUcbQ

if __name__ == "__main__":
    sys.exit(main(FlCsUcbQ))
