"""DivFL (Balakrishnan, Li, Zhou, Himayat, Smith and Bilmes, "Diverse client selection for
federated learning via submodular maximization", ICLR 2022; code: melodi-lab/divfl,
``flearn/trainers/fedavg.py`` and ``flearn/trainers/fedbase.py``).

The server keeps G_i, client i's full-batch gradient at the model it last received: every
client's at round 0 (``fedavg.py`` l. 60–63, ``show_grads``), then the participants' rows
replaced by the gradient each computes at the model it receives, before training (l. 120–121
with ``solve_inner``'s ``get_gradients`` call, e.g. ``flearn/models/synthetic/mclr.py`` l. 80).
Here G is the learner's ``grad_sketch``: a client's row is the round's grad_sketch when it is
selected (the model it receives is the global model w of that round). Each round selects, by
greedy maximisation of the facility location function, m clients S minimising

    Σ_i min_{j ∈ S} ‖G_i − G_j‖,

one client per step: j = argmin_j Σ_i min(c_i, ‖G_i − G_j‖) over the candidates, c_i the
distance from G_i to the clients chosen so far (+∞ before the first; ``fedbase.py`` ``greedy``
l. 192–210 and its lazy form ``lazy_greedy`` l. 212–275, which the code calls). The selected
clients train and the server averages their models weighted by data size (``aggregate``
l. 294–305): ``select`` returns a plain selection and the learner's default ``data_size``
aggregation does that.

Options (docs/decisions.md#divfl-gradients and the entries after it):

* ``stochastic=True``: stochastic greedy (Mirzasoleiman et al., AAAI 2015): each step
  evaluates only a uniformly random subset of the remaining candidates, of size
  ⌈(n/k)·ln(1/ε)⌉ (n available clients, k selected; ``epsilon``), or with ``subsample`` > 0 the
  code's max(k, ⌊subsample·n⌋) (``stochastic_greedy`` l. 168–190, subsample 0.1; the code never
  calls it: ``select_cl_submod(..., stochastic_greedy = False)``).
* ``refresh_every`` = r ≥ 1: every r-th round (0, r, 2r, …) all of G is refreshed from the
  round's gradients. The code's condition ``if i == 0 or self.clients_per_round == 1`` refreshes
  only at round 0 for any m > 1 (its scripts pass ``--m_interval`` 1 or 10 and
  ``--clients_per_round`` 10 or 20): 0, the default, is what it runs.
* The paper's clients are all available. Candidates are the round's available clients (k =
  min(m, #available)); the sum runs over every client (``cover="all"``, the function the paper
  maximises, unavailable clients at their last gradient) or over the available ones
  (``cover="available"``).
* Ties (exact in arithmetic for facility location, e.g. two candidates nearest to each other)
  go to the run's random priority among the candidates within a relative ``TIE_RTOL`` of the
  best, so neither rounding nor the client index decides them.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jfl import checks
from jfl.kernels import random_priority, selection_count, topk_mask
from jfl.kernels.linkage import pairwise_distances
from jfl.kernels.order import materialise
from jfl.kernels.reduce import pairwise_sum
from jfl.policies.base import (
    SKETCH_DIM,
    HParam,
    Policy,
    PolicySpec,
    check_selection_size,
    check_sketch,
    register,
)
from jfl.prng import uniform

COVERS = ("all", "available")
# Candidates whose value is within this relative distance of the best count as tied: facility
# location's ties are exact in arithmetic and their float values differ in the last bits.
TIE_RTOL = 1e-5


class DivflState(NamedTuple):
    grads: jax.Array  # f[N, K]  G_i: client i's gradient sketch at the model it last received
    priority: jax.Array  # i32[N]  random_priority: ties go to the lower value
    round: jax.Array  # i32[]  rounds selected so far (0: G is read from the round's gradients)


def refreshing(round_index, hparams):
    """Whether this round reads every client's gradient: round 0, and every ``refresh_every``-th
    round when that is ≥ 1 (the code's unreached full refresh)."""
    every = jnp.floor(hparams["refresh_every"]).astype(jnp.int32)
    due = (every >= 1) & (jnp.mod(round_index, jnp.maximum(every, 1)) == 0)
    return (round_index == 0) | due


def subset_size(available, k, hparams):
    """Stochastic greedy's candidates per step: ⌈(n/k)·ln(1/ε)⌉ (Mirzasoleiman et al. 2015), or
    the code's max(k, ⌊subsample·n⌋) when ``subsample`` > 0; at least 1."""
    n = jnp.sum(available, dtype=jnp.int32).astype(jnp.float32)
    k_float = jnp.maximum(k, 1).astype(jnp.float32)
    paper = jnp.ceil(n / k_float * jnp.log(1.0 / hparams["epsilon"]))
    code = jnp.maximum(k_float, jnp.floor(hparams["subsample"] * n))
    size = jnp.where(hparams["subsample"] > 0, code, paper)
    return jnp.maximum(size, 1.0).astype(jnp.int32)


def facility_location_greedy(distance, available, cover, k, priority, steps: int, noise=None,
                             size=None):  # fmt: skip
    """k clients by greedy facility location (DivFL; ``fedbase.py`` ``greedy``): each step the
    candidate j minimising Σ_{i ∈ cover} min(c_i, d_ij), then c ← min(c, d_{·j}).

    Args:
      distance: f[N, N] d_ij.
      available: bool[N] the candidates.
      cover: bool[N] the clients i summed over.
      k: how many (int, possibly traced; at most ``steps``).
      priority: i32[N] ties (within ``TIE_RTOL``) go to the lower value.
      steps: the most clients (static: the loop's length).
      noise: optional f[steps, N]: stochastic greedy, step s evaluating only the ``size``
        remaining candidates with the largest ``noise[s]`` (a uniformly random subset).
      size: int, the subset size (with ``noise``).

    Returns:
      bool[N], min(k, #available) clients.
    """
    n = distance.shape[0]

    def step(s, carry):
        selected, cost = carry
        candidates = available & ~selected & (s < k)
        if noise is not None:
            candidates = topk_mask(noise[s], candidates, size)
        covered = jnp.where(cover[:, None], jnp.minimum(cost[:, None], distance), 0.0)
        value = materialise(jnp.where(candidates, pairwise_sum(covered, axis=0), jnp.inf))
        best = jnp.min(value)
        tied = candidates & (value <= best * (1.0 + TIE_RTOL))
        pick = jnp.argmin(jnp.where(tied, priority, n))
        found = jnp.any(candidates)
        selected = selected.at[pick].set(selected[pick] | found)
        cost = jnp.where(found, jnp.minimum(cost, distance[:, pick]), cost)
        return selected, cost

    start = (jnp.zeros(n, bool), jnp.full(n, jnp.inf, distance.dtype))
    return lax.fori_loop(0, steps, step, start)[0]


def divfl(
    num_clients: int,
    selection_size: int,
    *,
    stochastic: bool = False,
    cover: str = "all",
    sketch_dim: int = SKETCH_DIM,
) -> Policy:
    """DivFL (Balakrishnan et al. 2022): k = min(m, #available) available clients by greedy
    facility location on the distances between the clients' gradient sketches at the models
    they last received.

    Args:
      num_clients: N.
      selection_size: m.
      stochastic: stochastic greedy (hyperparameters ``epsilon``, ``subsample``).
      cover: ``"all"`` (the sum over every client) or ``"available"``.
      sketch_dim: K of the learner's ``grad_sketch`` (``jfl.fl.make_learner``'s ``sketch_dim``;
        its default is 128).
    """
    check_selection_size(num_clients, selection_size)
    checks.choice("cover", cover, COVERS)
    sketch_dim = checks.integer("sketch_dim", sketch_dim)
    m = selection_size

    def init(key, hparams):
        del hparams
        grads = jnp.zeros((num_clients, sketch_dim), jnp.float32)
        return DivflState(grads, random_priority(key, num_clients), jnp.zeros((), jnp.int32))

    def current(state, obs, hparams):
        """G as this round reads it (every row from the round's gradients when refreshing)."""
        check_sketch(obs.grad_sketch, sketch_dim, "grad_sketch")
        fresh = refreshing(state.round, hparams)
        return jnp.where(fresh, obs.grad_sketch.astype(jnp.float32), state.grads)

    def select(key, state, obs, hparams):
        available = obs.available
        distance = pairwise_distances(current(state, obs, hparams))
        k = selection_count(available, m)
        covered = jnp.ones_like(available) if cover == "all" else available
        if not stochastic:
            return facility_location_greedy(distance, available, covered, k, state.priority, m)
        noise = uniform(key, (m, num_clients))
        size = subset_size(available, k, hparams)
        return facility_location_greedy(
            distance, available, covered, k, state.priority, m, noise, size
        )

    def update(state, obs, action, feedback, hparams):
        del feedback
        grads = current(state, obs, hparams)
        grads = jnp.where(action[:, None], obs.grad_sketch.astype(jnp.float32), grads)
        return DivflState(grads, state.priority, state.round + 1)

    return Policy(init, select, update, signals=("grad_sketch",))


register(
    PolicySpec(
        "divfl",
        divfl,
        {
            "epsilon": HParam(
                0.1,
                0.0,
                1.0,
                low_open=True,
                high_open=True,
                help="stochastic greedy (stochastic=True): ⌈(n/k)·ln(1/ε)⌉ candidates a step",
            ),
            "subsample": HParam(
                0.0,
                0.0,
                1.0,
                help="stochastic greedy: the code's max(k, ⌊subsample·n⌋) candidates (0: off)",
            ),
            "refresh_every": HParam(
                0.0,
                0.0,
                help="refresh every client's gradient every r rounds (the code's unreached "
                "full refresh; 0: only at round 0)",
            ),
        },
        "DivFL: greedy facility location on the clients' gradient sketches (diverse clients)",
        requires=("available", "grad_sketch"),
        aggregation="data_size",  # the authors' code: `aggregate`, "w is the number of samples"
    )
)
