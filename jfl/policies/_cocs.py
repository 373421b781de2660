"""COCS (Qu et al.) and its baselines, as the paper defines them, for the ``hfl`` environment:
COCS here, the baselines in ``jfl.policies._cocs_baselines``, the family's registry here.

Every policy assigns clients to edge servers (ES) through the shared solver of problem P2
(eq. 10): each client to at most one covering ES, each ES within its budget, maximising the sum
of the policy's per-pair weights (``jfl.kernels.assignment``; ``cardinality_assignment`` for the
max-|s| steps, ``budgeted_assignment`` otherwise, COCS's exploration then exploitation both in
``two_phase_assignment``). Each selection draws a tie-break from its key,
so that equal choices are not settled by client or ES index. The policies differ in their
weights:

* ``cocs`` (Alg. 1, eqs. 13-18): hypercube success estimates with forced exploration.
* ``cocs_lookahead``: COCS with eq. 13's "τ_n^t ≤ τ_dead" kept literally. That condition is
  this round's outcome, unknown before selecting, so this is **not a causal policy**: a
  diagnostic of what the paper's Fig. 3 may have measured (docs/reproductions/cocs.md).
* ``oracle`` (§VI-B, line ~367): "knows precisely whether one client can be received by the
  corresponding ES before the deadline": the maximum number of this round's successful pairs.
* ``oracle_context`` (§IV-A): knows p(φ) = E[X | observed context] and maximises Σ p.
* ``oracle_state``: knows P(X | everything but the uplink fading); neither of the paper's
  oracles, kept for comparison with earlier results.
* ``cucb`` (§VI-B, line ~369): UCB over whole feasible decisions s: untried decisions first,
  then the best UCB index among the decisions played.
* ``cucb_pairs``: a per-pair UCB on success, no context (not the paper's CUCB).
* ``linucb`` (§VI-B, line ~371): one linear model of a pair's success on its context shared by
  all pairs; a decision's utility is the sum over its pairs, each scored optimistically.
* ``linucb_pairs``: one ridge model per pair (not the paper's LinUCB).
* ``random_budget`` (§VI-B, line ~373): clients in a uniformly random order, each to a random
  covering ES that it can still afford.

An action is bool[N, M]; ``num_servers`` in the builders is the number of ESs M. The round
counter ``t`` of the paper is 1-based: the states count rounds played, the current round is
``t + 1``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jfl.kernels.assignment import two_phase_assignment
from jfl.policies import _cocs_baselines as baselines
from jfl.policies._cocs_baselines import check_observation, pair_tiebreak
from jfl.policies.base import HParam, Policy, PolicySpec, check_selection_size, register


class CocsState(NamedTuple):
    count: jax.Array  # f[N, M, L]  C_{n,m}(l): selections of pair (n, m) with context in cube l
    estimate: jax.Array  # f[N, M, L]  p̂_{n,m}(l), eq. 12
    t: jax.Array  # i[]  rounds played so far


def hypercube_index(context, cubes_per_dim):
    """Index l of the hypercube of side 1/h_T containing each context (context in [0, 1]^D).

    ``cubes_per_dim`` h_T may be traced: the cell of coordinate x is min(floor(x·h), h − 1)
    and l = Σ_d cell_d·h^d (row-major over dimensions).
    """
    h = jnp.asarray(cubes_per_dim, context.dtype)
    cell = jnp.clip(jnp.floor(context * h), 0, h - 1).astype(jnp.int32)
    h_int = h.astype(jnp.int32)
    index = jnp.zeros(cell.shape[:-1], jnp.int32)
    for d in reversed(range(cell.shape[-1])):
        index = index * h_int + cell[..., d]
    return index


def exploration_threshold(t, z):
    """K(t) = t^z ln t (Theorem 2); pairs with C_{n,m}(l) ≤ K(t) are under-explored (eq. 13)."""
    t = jnp.asarray(t, jnp.float32)
    return t**z * jnp.log(t)


# --------------------------------------------------------------------------------------------
# COCS
# --------------------------------------------------------------------------------------------


def _cocs(name: str, lookahead: bool):
    def build(
        num_clients: int, num_servers: int, context_dim: int = 2, max_cubes_per_dim: int = 10
    ) -> Policy:
        check_selection_size(num_clients, num_servers, "num_servers")
        if not isinstance(max_cubes_per_dim, int) or max_cubes_per_dim < 1:
            raise ValueError(
                f"max_cubes_per_dim must be an integer >= 1, got {max_cubes_per_dim!r}"
            )
        if context_dim not in (2, 4):
            raise ValueError(f"context_dim must be 2 or 4, got {context_dim!r}")

        def init(key, hparams) -> CocsState:
            del key, hparams
            shape = (num_clients, num_servers, max_cubes_per_dim**context_dim)
            return CocsState(
                count=jnp.zeros(shape), estimate=jnp.zeros(shape), t=jnp.asarray(0, jnp.int32)
            )

        def _cube(obs, hparams):
            # A traced h_T cannot raise: it is floored and clipped to [1, max_cubes_per_dim] so
            # the index always addresses the counters (the registry and the sweep refuse other
            # values).
            h = jnp.clip(jnp.floor(hparams["h_T"]), 1, max_cubes_per_dim)
            return hypercube_index(obs.context, h)

        def select(key, state: CocsState, obs, hparams):
            check_observation(name, obs, num_clients, num_servers, context_dim)
            tiebreak = pair_tiebreak(key, obs)
            cube = _cube(obs, hparams)[..., None]
            count = jnp.take_along_axis(state.count, cube, axis=-1)[..., 0]
            estimate = jnp.take_along_axis(state.estimate, cube, axis=-1)[..., 0]
            threshold = exploration_threshold(state.t + 1, hparams["z"])
            under_explored = obs.available & (count <= threshold)
            if lookahead:  # eq. 13's "τ_n^t ≤ τ_dead": this round's outcome, before selecting
                under_explored &= obs.success_now
            # Exploration, eqs. 14-15: as many under-explored pairs as the budgets allow; then
            # eqs. 16-18: clients without an under-explored pair share what is left by p̂.
            explored_clients = ~jnp.any(under_explored, axis=1, keepdims=True)
            explore, exploit = two_phase_assignment(
                obs.cost,
                under_explored,
                estimate,
                obs.available & explored_clients,
                obs.budget,
                tiebreak=tiebreak,
            )
            return explore.mask | exploit.mask

        def update(state: CocsState, obs, action, feedback, hparams) -> CocsState:
            cube = _cube(obs, hparams)
            played = action[..., None] & (jnp.arange(state.count.shape[-1]) == cube[..., None])
            count = state.count + played
            success = feedback.success[..., None].astype(state.estimate.dtype)
            step = (success - state.estimate) / jnp.maximum(count, 1)
            estimate = jnp.where(played, state.estimate + step, state.estimate)
            return CocsState(count=count, estimate=estimate, t=state.t + 1)

        return Policy(init=init, select=select, update=update)

    return build


cocs = _cocs("cocs", lookahead=False)
cocs.__name__ = "cocs"
cocs.__doc__ = """COCS, Alg. 1: hypercube success estimates with forced exploration.

Each round, with l the hypercube of the pair's context and K(t) = t^z ln t:

1. under-explored pairs are the covered ones with C_{n,m}(l) ≤ K(t) (eq. 13, without its
   "τ_n^t ≤ τ_dead", which is not known before selecting: see ``cocs_lookahead``);
2. exploration: as many under-explored pairs as the budgets allow (max |s|, eqs. 14-15,
   the first phase of ``two_phase_assignment``: ``cardinality_assignment``'s search);
3. clients without any under-explored pair then share the remaining budgets by their
   estimates p̂_{n,m}(l) (eqs. 16-17); with no under-explored pair at all this is the
   exploitation step, eq. 18.

Counters are per client, ES and cube (line ~173). The partition has h_T^D cubes; h_T is a
traced hyperparameter up to the static ``max_cubes_per_dim`` (the counters are sized for it,
so a whole (h_T, z) grid runs in one compiled program).
"""

cocs_lookahead = _cocs("cocs_lookahead", lookahead=True)
cocs_lookahead.__name__ = "cocs_lookahead"
cocs_lookahead.__doc__ = """COCS with eq. 13 read literally: a pair is under-explored only if its
update will also arrive before the deadline this round (``obs.success_now``).

Not a causal policy (it reads this round's outcome before selecting): a diagnostic of what the
paper's COCS curve may have measured. Otherwise identical to ``cocs``.
"""


# --------------------------------------------------------------------------------------------
# registry
# --------------------------------------------------------------------------------------------

_HFL = ("available_pairs", "cost", "budget", "success")
_COCS_HPARAMS = {
    "h_T": HParam(5.0, 1.0, 10.0, help="hypercubes per context dimension h_T (integer)"),
    "z": HParam(0.4, 0.0, 1.0, low_open=True, help="exploration exponent z in (0, 1]"),
}
_LINUCB_HPARAMS = {
    "alpha": HParam(1.0, 0.0, help="exploration weight α ≥ 0"),
    "lam": HParam(1.0, 0.0, low_open=True, help="ridge regulariser λ > 0"),
}

for _name, _build, _hparams, _description, _requires in (
    (
        "cocs",
        cocs,
        _COCS_HPARAMS,
        "COCS: context-hypercube success estimates with forced exploration (Qu et al. Alg. 1)",
        (*_HFL, "context"),
    ),
    (
        "cocs_lookahead",
        cocs_lookahead,
        _COCS_HPARAMS,
        "COCS with eq. 13's deadline condition read literally (sees this round's outcome; "
        "a diagnostic, not a causal policy)",
        (*_HFL, "context", "success_now"),
    ),
    (
        "oracle",
        baselines.oracle,
        {},
        "knows which pairs succeed this round and selects the most of them (Qu et al. §VI-B)",
        (*_HFL, "success_now"),
    ),
    (
        "oracle_context",
        baselines.oracle_context,
        {},
        "knows p(φ) = E[X | context] and maximises its sum (Qu et al. §IV-A)",
        (*_HFL, "success_prob_context"),
    ),
    (
        "oracle_state",
        baselines.oracle_state,
        {},
        "knows P(X | all but the uplink fading) and maximises its sum (not the paper's)",
        (*_HFL, "success_prob"),
    ),
    (
        "cucb",
        baselines.cucb,
        {},
        "UCB over whole feasible decisions, untried first (Qu et al. §VI-B)",
        _HFL,
    ),
    (
        "cucb_pairs",
        baselines.cucb_pairs,
        {},
        "per-pair UCB on success, no context (not the paper's CUCB)",
        _HFL,
    ),
    (
        "linucb",
        baselines.linucb,
        _LINUCB_HPARAMS,
        "one shared ridge model of a pair's success on its context, UCB (Qu et al. §VI-B)",
        (*_HFL, "context"),
    ),
    (
        "linucb_pairs",
        baselines.linucb_pairs,
        _LINUCB_HPARAMS,
        "one ridge model per pair, UCB (not the paper's LinUCB)",
        (*_HFL, "context"),
    ),
    (
        "random_budget",
        baselines.random_budget,
        {},
        "clients in random order, each to a random covering ES it can afford (Qu et al. §VI-B)",
        _HFL,
    ),
):
    register(
        PolicySpec(
            _name,
            _build,
            _hparams,
            _description,
            requires=_requires,
            aggregation="uniform",  # Qu et al. eq. 3: w_m + (1/S_m) Σ Δ_n within an edge server
        )
    )
