"""Every client-selection method on one federated task: Power-of-Choice (pow-d, cpow-d, rpow-d),
rand, clustered sampling (by size and by similarity), AFL, Oort, E3CS, FedIS, DELTA, optimal
client sampling, FedCor, DivFL, RBCS-F, FedCS and Random.

    python sweeps/fl_selection.py                                   # digits, about 86 s on 2 cores
    python sweeps/fl_selection.py --policies fedcor,random --aggregation uniform --seeds 16
    python sweeps/fl_selection.py --policies pow_d,proportional --d 20,40,60
    python sweeps/fl_selection.py --setting fedcor_fmnist --data-dir DIR  # FedCor's FMNIST
    python sweeps/fl_selection.py --setting femnist --download       # FEMNIST by writer

Flags: ``--help`` (the fields of ``jfl.experiments.FlSelection``).
Writes to --out: summary.csv, results.nc, metadata.json and figures/*.png.
"""

import sys

from jfl.cli import main
from jfl.experiments import FlSelection

if __name__ == "__main__":
    sys.exit(main(FlSelection))
