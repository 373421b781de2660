"""Federated training with RBCS-F, Random and FedCS(3) selecting the clients (Huang et al. §6.2).

    python sweeps/fl_rbcsf.py                                   # Fig. 6: accuracy vs round/time
    python sweeps/fl_rbcsf.py --policies dirichlet_random --gamma2 0.1,1,10 --out runs/fl_gamma2
    python sweeps/fl_rbcsf.py --dataset fashion_mnist --data-dir DIR --model fashion_cnn  # paper

Flags: ``--help`` (the fields of ``jfl.experiments.FlRbcsf``).
Writes to --out: summary.csv, results.nc, metadata.json and figures/*.png.
"""

import sys

from jfl.cli import main
from jfl.experiments import FlRbcsf

if __name__ == "__main__":
    sys.exit(main(FlRbcsf))
