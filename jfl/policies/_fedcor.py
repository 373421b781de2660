"""FedCor (M. Tang, X. Ning, Y. Wang, J. Sun, Y. Wang, H. Li and Y. Chen, "FedCor:
Correlation-Based Active Client Selection Strategy for Heterogeneous Federated Learning", CVPR
2022, arXiv 2103.13822), as the authors' code states it: Yoruko-Tang/FedCor at d941083
(2023-02-10), ``src/GPR.py`` and the loop of ``src/federated_main.py`` (cited below as
GPR.py:line and main.py:line).

A Gaussian process models the change of every client's loss in one round, ΔL_i = F_i(w^{t+1}) −
F_i(w^t), with covariance Σ = XᵀX + σ_n²·I: a linear kernel on a learned embedding X ∈ R^{D×N}
of the clients (``Poly_Kernel`` of order 1, not normalised, GPR.py:274-286; ``Covariance``,
GPR.py:341-349; D = 15, ``--dimension``) plus a fixed noise σ_n = 0.01 that is not trained
(``self.noise = torch.tensor(init_noise)``, GPR.py:32). X starts N(0, 1/D) (``torch.randn(
dimension,num_users)/np.sqrt(dimension)``, GPR.py:318) and is fitted by maximum marginal
likelihood with Adam at lr 1e-2 (``Train``, GPR.py:137-174; a new optimiser each call, X kept
from the last fit): the loss is −Σ_e γ^{age_e}·log N(ΔL_e; μ, Σ) over the stored rounds e
(GPR.py:159-163), a round kept while its age is at most M (``e+reusable_history_length<epoch``
pops it, GPR.py:50-52), μ the γ-weighted mean of the stored ΔL (``MLE_Mean``, GPR.py:117-135,
with the README's ``--update_mean``; 0 without it).

Rounds t = 0, 1, … (the authors' ``epoch``): rounds t ≤ W select uniformly at random and their
ΔL is stored (main.py:180, 203-205, 282-283); with ``update_mean`` the GP is fitted once, 1000
Adam steps, after round W (main.py:287-289), without it 150 steps after every warm-up round
(main.py:284-286). Later rounds select greedily (``Select_Clients``, GPR.py:187-223): m times,
k* = argmax_k a_k/√Σ_kk · Σ_i p_i Σ_ik over the clients not yet selected, then Σ ← Σ −
Σ_{:k*}Σ_{k*:}/Σ_{k*k*} (the posterior after observing k*), with p_i = n_i/Σn (utils.py:122-
127) and a_k the annealing factor: ×β for each client selected in a greedy round (main.py:301-
302, ``Update_Discount``), reset to 1 whenever the GP is refitted (main.py:292). Every Δt rounds
after the warm-up (``epoch%args.GPR_interval==0``) the authors train a shadow round from a copy
of the model on m uniformly random clients, store its ΔL and refit for 100 steps (main.py:291-
299). jfl's learner trains one round per round, so that round itself selects uniformly at random
and its ΔL is the one stored (docs/decisions.md#fedcor-shadow-round).
Defaults: the README's FMNIST command, W = 15, Δt = 10, M = 100, γ = 0.95, β = 0.95.

The policy reads the learner's ``local_loss`` F_i(w^t) (every client's, before each selection)
and ``data_size``. ΔL of round t is known when round t + 1's losses are: ``select`` of round
t + 1 first stores it and refits when the schedule says so (``observe``), then selects with the
new X, as the authors' loop refits between the rounds; ``update`` of round t + 1, which sees the
same losses, repeats ``observe`` to keep the result (``select`` returns no state), so a fit costs
twice its Adam steps. The Adam steps run in a ``lax.while_loop`` whose trip count is 0 in rounds
without a fit: under ``vmap`` (where a ``cond`` becomes a select and a ``scan`` would pay every
round) a round costs its greedy selection only unless some instance fits. The likelihood is
computed through the D×D matrix σ_n²·I + XXᵀ (``negative_log_likelihood``): the same function,
whose float32 gradient keeps its digits (docs/decisions.md#fedcor-float32).

Unavailable clients (docs/decisions.md#fedcor-availability): a random round draws min(m,
#available) clients uniformly among the available ones; a greedy round takes min(m, #available)
steps whose k* ranges over the available clients not yet selected, while Σ_i p_i Σ_ik still sums
over every client not yet selected (the global loss is every client's).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import lax

from jfl import checks
from jfl.kernels import gumbel_top_k, selection_count
from jfl.policies.base import HParam, Policy, PolicySpec, check_selection_size, register

# Full float32 products: a GPU's default (TF32, 10-bit mantissas) would cost the likelihood and
# the scores ~1e-3 of relative accuracy.
EXACT = lax.Precision.HIGHEST


class FedcorState(NamedTuple):
    embedding: jax.Array  # f[D, N]  X: column i is client i's position (Σ = XᵀX + σ_n²·I)
    discount: jax.Array  # f[N]  a_k, the annealing factor of the greedy score (1 after a refit)
    history: jax.Array  # f[M + 1, N]  ΔL of the stored rounds, round e in slot e mod (M + 1)
    stamp: jax.Array  # i32[M + 1]  the round whose ΔL a slot holds; -1: empty
    last_loss: jax.Array  # f[N]  F_i(w^t) seen in the last round (ΔL's starting point)
    round: jax.Array  # i32[]  rounds selected so far: the next round's index t


class Phase(NamedTuple):
    """What the authors' loop does in round t (main.py:180, 282, 291, 301)."""

    warm: jax.Array  # bool[]  t ≤ W: random selection, ΔL stored
    refit: jax.Array  # bool[]  t > W and t % Δt == 0: random selection, ΔL stored, refit
    greedy: jax.Array  # bool[]  the other rounds after the warm-up: the GP's selection


def phase(round_index, hparams) -> Phase:
    """The phase of round ``round_index`` under the warm-up W and the refit interval Δt."""
    warmup = jnp.floor(hparams["warmup"]).astype(jnp.int32)
    every = jnp.maximum(jnp.floor(hparams["refit_every"]).astype(jnp.int32), 1)
    warm = round_index <= warmup
    refit = ~warm & (jnp.remainder(round_index, every) == 0)
    return Phase(warm, refit, ~warm & ~refit)


def covariance(embedding, noise) -> jax.Array:
    """Σ = XᵀX + σ_n²·I, f[N, N] (GPR.py:278 with order 1, 349)."""
    num = embedding.shape[1]
    gram = jnp.matmul(embedding.T, embedding, precision=EXACT)
    return gram + noise**2 * jnp.eye(num, dtype=embedding.dtype)


def window_weights(stamp, current, gamma, window: int) -> jax.Array:
    """γ^{age} of each stored round, age = ``current`` − its round, 0 for an empty slot or one
    older than the window M (GPR.py:50-52, 161-163): f[M + 1]."""
    age = current - stamp
    kept = (stamp >= 0) & (age >= 0) & (age <= window)
    return jnp.where(kept, jnp.power(gamma, jnp.maximum(age, 0).astype(jnp.float32)), 0.0)


def weighted_mean(history, weight) -> jax.Array:
    """μ_i = Σ_e γ^{age_e}·ΔL_{e,i} / Σ_e γ^{age_e} (``MLE_Mean``, GPR.py:117-135): f[N]."""
    total = jnp.sum(weight)
    sums = jnp.sum(jnp.where(weight[:, None] > 0, weight[:, None] * history, 0.0), axis=0)
    return sums / jnp.where(total > 0, total, 1.0)


def negative_log_likelihood(embedding, history, weight, mean, noise) -> jax.Array:
    """−Σ_e γ^{age_e}·log N(ΔL_e; μ, XᵀX + σ_n²·I), the loss ``Train`` minimises with MML
    (GPR.py:73-89, 159-163), computed through the D×D matrix B = σ_n²·I + XXᵀ (Woodbury and
    the matrix determinant lemma): rᵀ(XᵀX + σ_n²I)⁻¹r = (‖r‖² − ‖L⁻¹Xr‖²)/σ_n² with B = LLᵀ,
    and log det = (N − D)·log σ_n² + log det B. The same function as the N×N form, cheaper (D =
    15 ≪ N), and in float32 its gradient keeps its digits where the N×N form's loses ~1% of
    them to the cancellation between K⁻¹ (entries ~ 1/σ_n²) and the ααᵀ terms
    (docs/decisions.md#fedcor-float32)."""
    dim, num = embedding.shape
    variance = noise**2
    gram = jnp.matmul(embedding, embedding.T, precision=EXACT)
    inner = variance * jnp.eye(dim, dtype=embedding.dtype) + gram
    factor = jnp.linalg.cholesky(inner)
    centred = jnp.where(weight[:, None] > 0, history - mean, 0.0)  # f[M + 1, N]
    projected = jnp.matmul(embedding, centred.T, precision=EXACT)  # f[D, M + 1]
    whitened = jax.scipy.linalg.solve_triangular(factor, projected, lower=True)
    quadratic = (jnp.sum(centred**2, axis=1) - jnp.sum(whitened**2, axis=0)) / variance
    log_det = (num - dim) * jnp.log(variance) + 2.0 * jnp.sum(jnp.log(jnp.diagonal(factor)))
    per_round = 0.5 * (quadratic + log_det + num * math.log(2.0 * math.pi))
    return jnp.sum(weight * per_round)


def fit_embedding(embedding, history, weight, mean, noise, learning_rate, steps) -> jax.Array:
    """``steps`` (traced; 0: none) Adam steps on the negative log marginal likelihood from X,
    Adam's moments new (GPR.py:146-148, 156-167). A fit that ends non-finite (a Cholesky factor
    lost to rounding) keeps the X it started from, where the authors' run would stop."""
    optimizer = optax.adam(learning_rate)
    grad = jax.grad(negative_log_likelihood)

    def step(_, carry):
        x, opt_state = carry
        updates, opt_state = optimizer.update(grad(x, history, weight, mean, noise), opt_state)
        return optax.apply_updates(x, updates), opt_state

    fitted, _ = lax.fori_loop(0, steps, step, (embedding, optimizer.init(embedding)))
    return jnp.where(jnp.all(jnp.isfinite(fitted)), fitted, embedding)


def greedy_selection(cov, share, discount, available, k, steps: int) -> jax.Array:
    """``Select_Clients`` (GPR.py:187-223): ``k`` (≤ ``steps``, static) times the available
    client k* not yet selected with the largest a_k/√Σ_kk · Σ_i p_i Σ_ik (i over the clients
    not yet selected), then Σ ← Σ − Σ_{:k*}Σ_{k*:}/Σ_{k*k*}. Returns bool[N].

    Σ_kk is floored at the smallest normal float (σ_n² > 0 bounds it in exact arithmetic); a
    NaN score ranks last, so exactly min(k, #available) clients are selected."""
    tiny = jnp.finfo(cov.dtype).tiny
    lowest = jnp.finfo(cov.dtype).min

    def step(t, carry):
        cov, chosen = carry
        variance = jnp.maximum(jnp.diagonal(cov), tiny)
        remaining = jnp.where(chosen, 0.0, share)
        gain = jnp.matmul(remaining, cov, precision=EXACT)  # Σ_i p_i Σ_ik, i remaining
        score = jnp.nan_to_num(discount / jnp.sqrt(variance) * gain, nan=lowest)
        candidates = available & ~chosen
        best = jnp.argmax(jnp.where(candidates, score, -jnp.inf))
        take = (t < k) & candidates[best]
        conditioned = cov - jnp.outer(cov[:, best], cov[best, :]) / variance[best]
        return jnp.where(take, conditioned, cov), chosen.at[best].set(chosen[best] | take)

    chosen = jnp.zeros(cov.shape[0], bool)
    return lax.fori_loop(0, steps, step, (cov, chosen))[1]


def stored(history, stamp, change, round_index, store):
    """The ring buffer with round ``round_index``'s ΔL in slot ``round_index mod (M + 1)`` when
    ``store`` (the slot's old round, M + 1 rounds older, is out of the window)."""
    slot = jnp.remainder(jnp.maximum(round_index, 0), stamp.shape[0])
    history = jnp.where(store, history.at[slot].set(change), history)
    return history, jnp.where(store, stamp.at[slot].set(round_index), stamp)


def fit_steps(previous: Phase, is_last_warm, hparams, steps, first_steps, warm_steps):
    """Adam steps after round t − 1 of phase ``previous`` (main.py:282-299): ``steps`` after a
    refit round; in the warm-up, with ``update_mean`` ``first_steps`` after round W only,
    without it ``warm_steps`` after each."""
    with_mean = jnp.where(is_last_warm, first_steps, 0)
    warm = jnp.where(hparams["update_mean"] > 0.5, with_mean, warm_steps)
    return jnp.where(previous.refit, steps, jnp.where(previous.warm, warm, 0)).astype(jnp.int32)


def fedcor(
    num_clients: int,
    selection_size: int,
    *,
    dimension: int = 15,
    window: int = 100,
    steps: int = 100,
    first_steps: int = 1000,
    warm_steps: int = 150,
) -> Policy:
    """FedCor's selection (Tang et al. 2022; Yoruko-Tang/FedCor ``src/GPR.py``): uniformly
    random rounds in the warm-up and every Δt rounds, whose loss changes fit a GP over the
    clients; in the other rounds the greedy GP selection of min(m, #available) clients.

    Static options: ``dimension`` D of the embedding (``--dimension`` 15), ``window`` M (rounds
    a stored ΔL is kept, ``--group_size``: 100 in the README's FMNIST command), and the Adam
    steps of a fit: ``steps`` after a refit round (``--GPR_Epoch`` 100), ``first_steps`` after
    the warm-up with ``update_mean`` (1000, main.py:289), ``warm_steps`` after each warm-up
    round without it (150, main.py:286). Reads the learner's ``local_loss`` and ``data_size``.
    """
    check_selection_size(num_clients, selection_size)
    sizes = {"dimension": (dimension, 1), "window": (window, 1), "steps": (steps, 0),
             "first_steps": (first_steps, 0), "warm_steps": (warm_steps, 0)}  # fmt: skip
    for name, (value, least) in sizes.items():
        checks.integer(name, value, least)
    slots = window + 1  # ages 0..M (GPR.py:50-52)

    def init(key, hparams):
        del hparams
        embedding = jax.random.normal(key, (dimension, num_clients), jnp.float32)
        return FedcorState(
            embedding=embedding / math.sqrt(dimension),
            discount=jnp.ones(num_clients, jnp.float32),
            history=jnp.zeros((slots, num_clients), jnp.float32),
            stamp=jnp.full(slots, -1, jnp.int32),
            last_loss=jnp.zeros(num_clients, jnp.float32),
            round=jnp.zeros((), jnp.int32),
        )

    def observe(state, obs, hparams) -> FedcorState:
        """Store ΔL of the previous round if it is a data round, refit if it was a fit round."""
        previous = state.round - 1
        seen = previous >= 0
        was = phase(previous, hparams)
        store = seen & (was.warm | was.refit | (hparams["every_round"] > 0.5))
        change = obs.local_loss.astype(jnp.float32) - state.last_loss
        history, stamp = stored(state.history, state.stamp, change, previous, store)
        last_warm = previous == jnp.floor(hparams["warmup"]).astype(jnp.int32)
        count = fit_steps(was, last_warm, hparams, steps, first_steps, warm_steps)
        weight = window_weights(stamp, previous, hparams["history_decay"], window)
        mean = jnp.where(hparams["update_mean"] > 0.5, weighted_mean(history, weight), 0.0)
        noise, rate = hparams["gp_noise"], hparams["gp_learning_rate"]
        count = jnp.where(seen, count, 0)
        embedding = fit_embedding(state.embedding, history, weight, mean, noise, rate, count)
        return state._replace(embedding=embedding, history=history, stamp=stamp)

    def select(key, state, obs, hparams):
        state = observe(state, obs, hparams)
        now = phase(state.round, hparams)
        k = selection_count(obs.available, selection_size)
        uniform = gumbel_top_k(key, jnp.zeros(num_clients), obs.available, k)
        size = obs.data_size.astype(jnp.float32)
        share = size / jnp.maximum(jnp.sum(size), jnp.finfo(jnp.float32).tiny)
        cov = covariance(state.embedding, hparams["gp_noise"])
        greedy = greedy_selection(cov, share, state.discount, obs.available, k, selection_size)
        return jnp.where(now.greedy, greedy, uniform)

    def update(state, obs, action, feedback, hparams):
        del feedback
        state = observe(state, obs, hparams)
        now = phase(state.round, hparams)
        annealed = jnp.where(action & now.greedy, hparams["annealing"], 1.0) * state.discount
        discount = jnp.where(now.refit, 1.0, annealed)
        last_loss = obs.local_loss.astype(jnp.float32)
        return state._replace(discount=discount, last_loss=last_loss, round=state.round + 1)

    return Policy(init, select, update, signals=("local_loss", "data_size"))


register(
    PolicySpec(
        "fedcor",
        fedcor,
        {
            "warmup": HParam(15.0, 0.0, help="W: rounds 0..W select uniformly at random"),
            "refit_every": HParam(
                10.0, 1.0, help="Δt: after the warm-up, rounds t % Δt == 0 are random and refit"
            ),
            "history_decay": HParam(
                0.95, 0.0, 1.0, help="γ: a stored loss change of age a weighs γ^a"
            ),
            "annealing": HParam(0.95, 0.0, 1.0, help="β: a_k ← β·a_k for k selected by the GP"),
            "gp_learning_rate": HParam(
                1e-2, 0.0, low_open=True, help="Adam's learning rate for the GP fit"
            ),
            "gp_noise": HParam(0.01, 0.0, low_open=True, help="σ_n: Σ = XᵀX + σ_n²·I, not trained"),
            "update_mean": HParam(
                1.0,
                0.0,
                1.0,
                help="1: μ = γ-weighted mean, one fit after round W; 0: μ = 0, a fit after "
                "every warm-up round",
            ),
            "every_round": HParam(
                0.0, 0.0, 1.0, help="1: store every round's loss change, not only random rounds'"
            ),
        },
        "FedCor: a GP over clients' loss changes; greedy max expected global-loss decrease",
        requires=("available", "local_loss", "data_size"),
        aggregation="uniform",  # the authors' code: average_weights(..., omega=None)
    )
)
