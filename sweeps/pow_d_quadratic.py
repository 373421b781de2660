"""Power-of-Choice's synthetic quadratic experiment (Cho, Wang and Joshi, AISTATS 2022, Fig. 2).

    python sweeps/pow_d_quadratic.py                       # rand, pow-d, cpow-d, rpow-d, adapow-d
    python sweeps/pow_d_quadratic.py --seeds 128           # more seeds
    python sweeps/pow_d_quadratic.py --h-low 0 --h-high 9  # the reproduction's h_k = 9·U(0, 1)

Flags: ``--help`` (the fields of ``jfl.experiments.PowDQuadratic``).
Writes to --out: summary.csv, results.nc, metadata.json and figures/gap_vs_round.png.
"""

import sys

from jfl.cli import main
from jfl.experiments import PowDQuadratic

if __name__ == "__main__":
    sys.exit(main(PowDQuadratic))
