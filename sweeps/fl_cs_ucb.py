"""Federated training with CS-UCB and its baselines choosing the clients (Xia et al. Fig. 2).

    python sweeps/fl_cs_ucb.py
    python sweeps/fl_cs_ucb.py --seeds 32 --rounds 20000 --eval-every 500
    python sweeps/fl_cs_ucb.py --dataset mnist --data-dir ~/data/mnist --rounds 2000
    python sweeps/fl_cs_ucb.py --local-steps None --batch-size 10 --lr 0.1 \
        --rounds 400 --eval-every 20

Flags: ``--help`` (the fields of ``jfl.experiments.FlCsUcbIdeal``).
Writes to --out: summary.csv, results.nc, metadata.json and figures/*.png.
"""

import sys

from jfl.cli import main
from jfl.experiments import FlCsUcbIdeal

if __name__ == "__main__":
    sys.exit(main(FlCsUcbIdeal))
