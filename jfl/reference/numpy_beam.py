"""``jfl.kernels.beam.beam_assignment`` as a plain NumPy loop (``beam_numpy``).

It restates the beam search of ``jfl.kernels.beam`` with per-depth loops in the inputs' float
dtype and the kernel's order of operations (the prefix sums by the same recursive doubling, the
per-ES sums left to right), so that masks and values agree exactly with the kernel; it is the
beam stage of ``jfl.reference.milp_assignment.budgeted_numpy``. Inputs as the kernel's: the
prepared arrays of ``budgeted_assignment`` (``value``, ``eligible``, ``cost``, ``capacity``,
``tiebreak``).
"""

from __future__ import annotations

import numpy as np

# The kernel's weight of the spare-budget term (jfl.kernels.beam.ALPHA).
ALPHA = 0.5


def _doubling_prefix(x):
    """The kernel's inclusive prefix sums along axis 0 (step s adds entry i - s to entry i)."""
    x = np.array(x)
    shift = 1
    while shift < len(x):
        x = np.concatenate([x[:shift], x[shift:] + x[:-shift]])
        shift *= 2
    return x


def _prefix(x):
    x = np.asarray(x)
    return np.concatenate([np.zeros((1, *x.shape[1:]), x.dtype), _doubling_prefix(x)])


def _seq_sum(values):
    total = values[0]
    for x in values[1:]:
        total = total + x
    return total


def beam_numpy(value, eligible, cost, capacity, tiebreak, width):
    """The beam search of ``jfl.kernels.beam`` step by step; returns ``(mask, total)``.

    Clients in ascending cost (ties: smallest tie-break, index), the candidates (an eligible
    pair) first; a beam of ``width`` slots (R, V, counts, live), slot 0 live at the start. At
    each of the N depths every slot's children (leave out; its ESs by ascending tie-break) are
    scored and the ``width`` best kept (stable: equal keys by position). A count after client d
    is ``count - 1 + [one more client fits]`` (0 if it was 0).
    """
    dtype = value.dtype.type
    n_clients, n_servers = value.shape
    N, M, B, P = n_clients, n_servers, width, n_servers + 1
    inf = dtype(np.inf)
    cand = eligible.any(axis=1)
    K = int(cand.sum())
    order = np.lexsort((np.arange(N), tiebreak.min(axis=1), np.where(cand, cost, np.inf)))
    c = np.where(np.arange(N) < K, cost[order], 0).astype(dtype)
    E, W, TB = eligible[order], value[order], tiebreak[order]

    # Cost prefix sums: per ES over the clients it may take (compacted), and over all
    # candidates; +inf past the end of each list.
    pre = _prefix(np.where(E, c[:, None], 0).astype(dtype))
    lists = np.full((M, N + 2), inf)
    lists[:, 0] = 0
    for m in range(M):
        sums = pre[1:, m][E[:, m]]
        lists[m, 1 : 1 + len(sums)] = sums
    pall = np.full(N + 2, inf)
    pall[: K + 1] = _prefix(c)[: K + 1]

    # The best weights after each depth, sorted descending (0-padded), and their prefix sums.
    best = np.where(np.arange(N) < K, W.max(axis=1), 0).astype(dtype)
    pb = np.zeros((N, N + 1), dtype)
    for d in range(N):
        after = np.sort(best[d + 1 :])[::-1]
        pb[d] = _prefix(np.concatenate([after, np.zeros(d + 1, dtype)]))

    def update(count, fits):
        return np.where(count >= 1, count - 1 + fits, 0)

    options = [np.lexsort((np.arange(M), TB[d])) for d in range(N)]
    log = np.zeros((N, B), int)
    # (infinite budgets give inf - inf in the pooled counts: NaN, which fits nothing)
    with np.errstate(invalid="ignore", over="ignore"):
        room0 = np.where(capacity > 0, capacity, 0).astype(dtype)
        pooled0 = _seq_sum(room0)
        R = np.tile(capacity, (B, 1))
        V = np.zeros(B, dtype)
        live = np.arange(B) == 0
        k = np.tile([np.sum(lists[m, 1:] <= capacity[m]) for m in range(M)], (B, 1))
        k_all = np.full(B, np.sum(pall[1:] <= pooled0))
        k_pool = np.tile([np.sum(pall[1:] <= pooled0 - room0[m]) for m in range(M)], (B, 1))
        for d in range(N):
            pa = pall[d + 1]
            rem = K - d - 1
            mean = (pall[K] - pa) / dtype(rem) if rem > 0 else dtype(0)
            scale = dtype(ALPHA) / mean if mean > 0 else dtype(0)
            j0 = E[:d].sum(axis=0)
            room = np.where(R > 0, R, 0).astype(dtype)
            pooled = _seq_sum(room.T)
            pooled_in = pooled - c[d]
            need_m = np.stack(
                [
                    lists[m][np.minimum(j0[m] + 1 + k[:, m], N + 1)] - pre[d + 1, m]
                    for m in range(M)
                ],
                axis=1,
            )
            need_a = pall[np.minimum(d + 1 + k_all, N + 1)] - pa
            need_p = pall[np.minimum(d + 1 + k_pool, N + 1)] - pa
            # children: (budgets, pooled budget, value, counts, allowed), option by option
            children = []
            for option in range(P):
                e = None if option == 0 else options[d][option - 1]
                R_child, k_child, pool_child = R.copy(), k.copy(), k_pool.copy()
                for m in range(M):
                    # ES m's own list (it loses client d if m may take it), and the pool of
                    # the other ESs: the parent's pooled budget for the receiving ES, the
                    # child's for the others (the same number in exact arithmetic).
                    if m == e:
                        R_child[:, m] = R[:, m] - c[d]
                        k_child[:, m] = update(k[:, m], need_m[:, m] <= R_child[:, m])
                        pool_fits = need_p[:, m] <= pooled - room[:, m]
                    else:
                        if E[d, m]:
                            k_child[:, m] = update(k[:, m], need_m[:, m] <= R[:, m])
                        pooled_other = pooled if e is None else pooled_in
                        pool_fits = need_p[:, m] <= pooled_other - room[:, m]
                    pool_child[:, m] = update(k_pool[:, m], pool_fits)
                pooled_child = pooled if e is None else pooled_in
                all_child = update(k_all, need_a <= pooled_child)
                q = np.minimum(
                    k_child.sum(axis=1),
                    np.minimum(all_child, (pool_child + k_child).min(axis=1)),
                )
                q = np.clip(q, 0, max(rem, 0))
                gain = dtype(0) if e is None else W[d, e]
                V_child = V + gain
                allowed = live.copy() if e is None else live & E[d, e] & (c[d] <= R[:, e])
                spare = pooled_child - (pall[np.minimum(d + 1 + q, N + 1)] - pa)
                if scale > 0:
                    term = np.minimum(spare * scale, dtype(np.finfo(dtype).max / 4))
                else:
                    term = np.zeros(B, dtype)
                score = (V_child + pb[d][q]) + term
                key = np.where(allowed, score, -np.inf)
                children.append((key, R_child, V_child, k_child, all_child, pool_child, allowed))
            key = np.stack([ch[0] for ch in children], axis=1).reshape(-1)  # slot-major
            pick = np.argsort(-key, kind="stable")[:B]
            parent, option = pick // P, pick % P
            R, V, k, k_all, k_pool, live = (
                np.stack([child[i] for child in children])[option, parent] for i in range(1, 7)
            )
            log[d] = pick

    slot = int(np.argmax(np.where(live, V, -np.inf)))
    total = V[slot]
    mask = np.zeros((N, M), bool)
    for d in range(N - 1, -1, -1):
        option = log[d, slot] % P
        if option > 0:
            mask[order[d], options[d][option - 1]] = True
        slot = log[d, slot] // P
    return mask, total
