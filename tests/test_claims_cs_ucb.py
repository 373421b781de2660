"""The paper's qualitative claims for CS-UCB and CS-UCB-Q (SPEC §5), on fixed seeds.

Every comparison is a 95% Student-t interval over seeds that must exclude the boundary; paired
comparisons use common random numbers (the same seed keys for every policy, hence the same client
layout and channel draws). The fast suite uses 16 seeds; the slow one (``pytest -m slow``)
repeats the noisier claims on 64 seeds and over longer runs.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfl.envs import WirelessEnv
from jfl.envs.wireless import PRESET_SETTINGS, preset_params
from jfl.experiments.cs_ucb import seed_benchmarks
from jfl.policies import get
from jfl.runner import make_batched_run, make_run, seed_keys
from jfl.stats import mean_ci

FAST_SEEDS, SLOW_SEEDS = 16, 64
FAIRNESS = np.asarray(PRESET_SETTINGS["fairness"]["fairness"])  # c = (0.6, 0.5, 0.4)


def _batched_run(preset: str, policy: str, num_channels: int, rounds: int, seeds: int, betas=()):
    """The batched run of ``policy`` and its arguments; one config per β (or one without β)."""
    env = WirelessEnv()
    params = preset_params(preset)
    spec = get(policy)
    run = make_run(
        env, params, spec.build(params.num_clients, num_channels), rounds, trajectories=True
    )
    configs = max(1, len(betas))
    hparams = {k: jnp.full(configs, v, jnp.float32) for k, v in spec.defaults().items()}
    fairness = FAIRNESS if preset == "fairness" else np.zeros(params.num_clients)
    if "beta" in hparams:
        hparams["beta"] = jnp.asarray(betas, jnp.float32)
    if "fairness" in hparams:
        hparams["fairness"] = jnp.tile(jnp.asarray(fairness, jnp.float32), (configs, 1))
    queue_rate = jnp.tile(jnp.asarray(fairness, jnp.float32), (configs, 1))
    return make_batched_run(run), (seed_keys(0, np.arange(seeds)), hparams, queue_rate)


@functools.cache
def _runs(runs):
    """``{run: RunOutput}`` with leading axes [config, seed] for each ``run`` = the arguments of
    ``_batched_run``, all under one jit (one compilation instead of one per run; each run's
    numbers are those of its own batched run)."""
    built = {spec: _batched_run(*spec) for spec in runs}

    @jax.jit
    def all_runs(args):
        return {spec: built[spec][0](*args[spec]) for spec in runs}

    out = all_runs({spec: args for spec, (_, args) in built.items()})
    return {
        spec: {k: np.asarray(v) for k, v in o._asdict().items() if v is not None}
        for spec, o in out.items()
    }


BETAS = (1e-5, 0.1)
# Every run of the fast claims, computed together.
FAST_RUNS = (
    *(("ideal", policy, 5, 2000, FAST_SEEDS) for policy in ("cs_ucb", "random", "round_robin")),
    *(("ideal", "cs_ucb", n, 1000, FAST_SEEDS) for n in (2, 5, 8)),
    ("fairness", "cs_ucb_q", 2, 2000, FAST_SEEDS, BETAS),
    ("fairness", "modified_cs_ucb", 2, 2000, FAST_SEEDS),
)


def _run(*spec):
    """RunOutput of one run with leading axes [config, seed]: a fast claim's from the shared
    batch, any other (the slow claims') on its own."""
    return _runs(FAST_RUNS if spec in FAST_RUNS else (spec,))[spec]


def _assert_positive(samples, what):
    mean, lo, hi = mean_ci(np.asarray(samples, float))
    assert lo > 0, f"{what}: mean {mean:.4g}, 95% interval [{lo:.4g}, {hi:.4g}] reaches 0"


def _running_fraction(selected):
    """[seed, round, client] running fraction of rounds selected."""
    rounds = np.arange(1, selected.shape[-2] + 1)[:, None]
    return np.cumsum(selected, axis=-2) / rounds


@pytest.mark.parametrize("baseline", ["random", "round_robin"])
def test_cs_ucb_has_smaller_cumulative_gap_than_baselines(baseline):
    """Ideal scenario, K=20, N=5, T=2000: Θ(baseline) − Θ(CS-UCB) > 0 (paired, Xia Fig. 1)."""
    ucb = _run("ideal", "cs_ucb", 5, 2000, FAST_SEEDS)
    other = _run("ideal", baseline, 5, 2000, FAST_SEEDS)
    # Same seeds → same layout → same μ(S*): the gap difference is τ_max·Σ(r_ucb − r_other).
    tau_max = preset_params("ideal").tau_max
    difference = tau_max * (ucb["set_reward"][0].sum(-1) - other["set_reward"][0].sum(-1))
    _assert_positive(difference, f"gap({baseline}) - gap(cs_ucb)")


@pytest.mark.slow
@pytest.mark.parametrize("baseline", ["random", "round_robin"])
def test_cs_ucb_has_fewer_failed_clients_than_baselines(baseline):
    """Ideal scenario, T=5000, 64 seeds: cumulative failed clients smaller for CS-UCB (Fig. 1c)."""
    ucb = _run("ideal", "cs_ucb", 5, 5000, SLOW_SEEDS)
    other = _run("ideal", baseline, 5, 5000, SLOW_SEEDS)
    difference = other["num_failed"][0].sum(-1) - ucb["num_failed"][0].sum(-1)
    _assert_positive(difference, f"failed({baseline}) - failed(cs_ucb)")


def test_cs_ucb_gap_grows_with_channels():
    """Fig. 3: CS-UCB's cumulative gap Θ (against μ(S*) for each N) grows from N=2 to 5 to 8."""
    params = preset_params("ideal")
    keys = seed_keys(0, np.arange(FAST_SEEDS))
    sizes = (2, 5, 8)
    zeros = np.zeros((len(sizes), params.num_clients))
    benchmark, _ = seed_benchmarks(
        WirelessEnv(), params, keys, sizes, zeros, zeros + 1.0,
        kind="best_set", num_samples=20_000, mc_seed=1,
    )  # fmt: skip
    gaps = []
    for row, n in enumerate(sizes):
        out = _run("ideal", "cs_ucb", n, 1000, FAST_SEEDS)
        regret = 1000 * benchmark[row] - out["set_reward"][0].sum(-1)
        gaps.append(params.tau_max * regret)
    _assert_positive(gaps[1] - gaps[0], "gap(N=5) - gap(N=2)")
    _assert_positive(gaps[2] - gaps[1], "gap(N=8) - gap(N=5)")


def test_cs_ucb_q_meets_fairness_for_larger_beta():
    """Fairness preset, β=0.1: every client's running fraction ≥ c_k from some round < 2000 on."""
    out = _run("fairness", "cs_ucb_q", 2, 2000, FAST_SEEDS, BETAS)
    settle = out["last_unmet_round"][1] + 1  # first round from which c is met throughout
    _assert_positive(2000 - settle.astype(float), "2000 - rounds to meet c (β=0.1)")


def test_cs_ucb_q_small_beta_keeps_client_1_below_target():
    """β=1e-5: client 1's running fraction stays below c_1 = 0.6 at every checkpoint (Fig. 5)."""
    out = _run("fairness", "cs_ucb_q", 2, 2000, FAST_SEEDS, BETAS)
    fraction = _running_fraction(out["selected"][0])  # [seed, round, client]
    for t in (100, 500, 1000, 2000):
        _assert_positive(FAIRNESS[0] - fraction[:, t - 1, 0], f"c_1 - fraction_1({t}), β=1e-5")
    # ... and so it is slower than β = 0.1 to meet c: it has not met it by the end.
    assert np.all(out["last_unmet_round"][0] == 2000)


def test_modified_cs_ucb_favours_fast_clients():
    """Modified CS-UCB ignores c: clients 2 and 3 (faster) are selected more than client 1."""
    out = _run("fairness", "modified_cs_ucb", 2, 2000, FAST_SEEDS)
    rate = out["selection_count"][0] / 2000.0  # [seed, client]
    _assert_positive(rate[:, 1] - rate[:, 0], "rate_2 - rate_1")
    _assert_positive(rate[:, 2] - rate[:, 0], "rate_3 - rate_1")
    _assert_positive(FAIRNESS[0] - rate[:, 0], "c_1 - rate_1 (fairness ignored)")


@pytest.mark.slow
def test_cs_ucb_q_fairness_claims_long_run():
    """64 seeds, T=5000: β=0.1 meets c before round 2000 and β=1e-5 never meets c_1."""
    out = _run("fairness", "cs_ucb_q", 2, 5000, SLOW_SEEDS, BETAS)
    _assert_positive(2000 - (out["last_unmet_round"][1] + 1.0), "2000 - rounds to meet c")
    rate = out["selection_count"] / 5000.0
    _assert_positive(FAIRNESS[0] - rate[0, :, 0], "c_1 - rate_1 at T=5000, β=1e-5")
