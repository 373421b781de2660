"""What Power-of-Choice's quadratic experiment shows (Cho, Wang and Joshi, AISTATS 2022, §5 and
Fig. 2), at the experiment's defaults (``-m slow``: K = 30, m = 3, τ = 2, η = 2·10⁻⁵, 15,000
rounds, h_k ~ U(1, 20), 32 seeds, fixed).

Each claim is a paired comparison over the seeds whose 95% Student-t interval must exclude 0:
the tolerance is the interval's half-width, which the seed count sets. The claims are the
paper's: pow-d descends faster early on than rand, the more so the larger d; it stalls at a
higher error floor than rand, the higher the larger d; adapow-d keeps pow-d's early speed
(d = K before its switch) without its floor. Two identities hold exactly: cpow-d is pow-d on the
quadratic (its probe is exact), and adapow-d is pow-d with d = K until its switch. README and
docs/reproductions/power-of-choice.md quote these numbers.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from jfl.driver import run
from jfl.experiments import PowDQuadratic
from jfl.results import load_dataset
from jfl.stats import mean_ci

pytestmark = pytest.mark.slow

SEEDS = 32
D = (6, 9, 15, 30)


@pytest.fixture(scope="module")
def gaps(tmp_path_factory):
    out = tmp_path_factory.mktemp("pow_d_quadratic") / "out"
    # Every run's evaluations kept (the identities compare them), beside the gaps reduced on
    # the device.
    experiment = PowDQuadratic(
        seeds=SEEDS, quiet=True, plots=False, per_run_rounds=True, out=str(out)
    )
    run(experiment)
    ds = load_dataset(out / "results.nc")
    early = ds["early_gap"].to_numpy()  # [config, seed], at round 2500
    final = ds["final_gap"].to_numpy()
    policy, d, switch = (ds[name].to_numpy() for name in ("policy", "d", "switch"))

    def row(name, value=None, adaptive=False):
        match = policy == name
        if value is not None:
            match &= d == value
        if name == "pow_d":
            match &= (switch > 0) == adaptive
        (index,) = np.flatnonzero(match)
        return int(index)

    rows = {"rand": row("proportional"), "adapow": row("pow_d", adaptive=True)}
    rows.update({f"pow{n}": row("pow_d", n) for n in D})
    rows.update({"cpow9": row("cpow_d", 9), "rpow9": row("rpow_d", 9)})
    return ds, early, final, rows


def _assert_positive(samples, what):
    mean, lo, hi = mean_ci(np.asarray(samples, float))
    assert lo > 0, f"{what}: mean {mean:.4g}, 95% interval [{lo:.4g}, {hi:.4g}] reaches 0"


def test_pow_d_descends_faster_early_the_more_so_the_larger_d(gaps):
    _, early, _, rows = gaps
    for n in D:
        _assert_positive(
            early[rows["rand"]] - early[rows[f"pow{n}"]], f"round 2500: rand − pow-d d={n}"
        )
    for small, large in itertools.pairwise(D):
        _assert_positive(
            early[rows[f"pow{small}"]] - early[rows[f"pow{large}"]],
            f"round 2500: pow-d d={small} − d={large}",
        )
    _assert_positive(early[rows["rand"]] - early[rows["rpow9"]], "round 2500: rand − rpow-d d=9")


def test_pow_d_stalls_at_a_higher_error_floor_than_rand(gaps):
    _, _, final, rows = gaps
    for n in D:
        _assert_positive(final[rows[f"pow{n}"]] - final[rows["rand"]], f"final: pow-d d={n} − rand")
    for small, large in itertools.pairwise(D):
        _assert_positive(
            final[rows[f"pow{large}"]] - final[rows[f"pow{small}"]],
            f"final: pow-d d={large} − d={small}",
        )


def test_adapow_d_keeps_the_early_speed_without_the_floor(gaps):
    ds, _, final, rows = gaps
    gap = ds["gap"].to_numpy()
    before = ds["eval"].to_numpy() < PowDQuadratic().switch_round()
    np.testing.assert_array_equal(gap[rows["adapow"]][:, before], gap[rows["pow30"]][:, before])
    _assert_positive(final[rows["pow30"]] - final[rows["adapow"]], "final: pow-d d=30 − adapow-d")
    _assert_positive(final[rows["pow6"]] - final[rows["adapow"]], "final: pow-d d=6 − adapow-d")


def test_cpow_d_is_pow_d_on_the_quadratic(gaps):
    ds, _, _, rows = gaps
    gap = ds["gap"].to_numpy()
    np.testing.assert_array_equal(gap[rows["cpow9"]], gap[rows["pow9"]])
