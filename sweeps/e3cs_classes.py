"""E3CS-0/0.5/0.8/inc against Random and FedCS-like selection on volatile clients (Huang et al.
2022, §VI): cumulative effective participation and the selection fraction of each class.

    python sweeps/e3cs_classes.py                  # 100 clients, 4 classes, k = 20, 2500 rounds
    python sweeps/e3cs_classes.py --sigma 0:1:11 --no-inc --policies e3cs --seeds 64

Flags: ``--help`` (the fields of ``jfl.experiments.E3csClasses``).
Writes to --out: summary.csv, results.nc, metadata.json and figures/*.png.
"""

import sys

from jfl.cli import main
from jfl.experiments import E3csClasses

if __name__ == "__main__":
    sys.exit(main(E3csClasses))
