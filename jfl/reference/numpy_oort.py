"""Oort's training selector as a plain Python loop over the clients (SymbioticLab/Oort
``oort/oort.py``, ``_training_selector``), fed the three Gumbel noise arrays the JAX policy
draws each round, so that both make the same random choices.

Written after oort.py's own structure: per-client records, sorted lists, the pacer's history as
a list sliced as oort.py slices it (with the zero it records before the first selection), and
``np.random.choice(p, replace=False)`` as "the first clients in the order of log p_i + g_i" (g_i
standard Gumbel; clients with p_i = 0 after every other, in the order of g_i). Arithmetic in
float32 like the policy. Where jfl reads Oort differently from the authors' harness (rounds,
the learner's signals, the pacer's exploited clients), this follows jfl (docs' decisions,
section "Oort").
"""

from __future__ import annotations

import math

import numpy as np

f32 = np.float32


def _draw(noise, weight: dict[int, np.float32], count: int) -> list[int]:
    """``count`` of the clients keyed in ``weight`` without replacement, ∝ weight."""
    positive = [i for i in weight if weight[i] > 0]
    positive.sort(key=lambda i: (-(f32(np.log(weight[i])) + f32(noise[i])), i))
    empty = sorted((i for i in weight if not weight[i] > 0), key=lambda i: (-noise[i], i))
    return (positive + empty)[: max(count, 0)]


def _percentile_index(length: int, fraction, scale=1) -> int:
    """oort.py's ``min(int(len·q/scale), len − 1)``, in float32."""
    return min(math.floor(f32(f32(f32(length) * f32(fraction)) / f32(scale))), length - 1)


class OortNumpy:
    """One run's selector: ``select`` then ``update`` each round."""

    def __init__(self, num_clients: int, priority, hparams: dict):
        self.n = num_clients
        self.priority = list(priority)
        self.hp = {k: f32(v) for k, v in hparams.items()}
        self.reward = [f32(0)] * num_clients
        self.duration = [f32(0)] * num_clients
        self.time_stamp = [0] * num_clients
        self.count = [0] * num_clients
        self.unexplored = set(range(num_clients))
        self.exploration = self.hp["exploration_factor"]
        self.exploration_min = self.hp["exploration_min"]
        self.round_threshold = self.hp["round_threshold"]
        self.exploit_history = [f32(0)]  # what oort.py's pacer records at its first call
        self.training_round = 0

    def _bin(self, size):
        cap = self.hp["sample_cap"]
        return f32(min(f32(size), cap)) if cap > 0 else f32(size)

    def _penalised(self, value, duration, preferred):
        if duration > preferred:
            base = f32(preferred / f32(max(f32(1e-4), duration)))
            return f32(value * f32(np.power(base, self.hp["round_penalty"])))
        return value

    def select(self, noise, available, data_size, m) -> np.ndarray:
        """bool[N]. ``noise``: the exploit, explore and fill Gumbel arrays, f[N] each."""
        hp = self.hp
        cur_time = self.training_round + 1
        feasible = [i for i in range(self.n) if available[i]]
        k = min(m, len(feasible))
        prior = {i: self._bin(data_size[i]) for i in range(self.n)}
        reward = {i: (prior[i] if i in self.unexplored else self.reward[i]) for i in range(self.n)}

        known = sorted(self.duration[i] for i in range(self.n) if i not in self.unexplored)
        if self.round_threshold < 100 and known:
            preferred = known[_percentile_index(len(known), self.round_threshold, 100)]
        else:
            preferred = f32(np.inf)

        moving = sorted(reward[i] for i in feasible if reward[i] > 0)
        if moving:
            clip_value = moving[_percentile_index(len(moving), hp["clip_bound"])]
            low = f32(moving[0] * f32(0.999))
            spread = f32(max(f32(moving[-1] - low), f32(1e-4)))
        else:
            clip_value, low, spread = f32(0), f32(0), f32(1e-4)

        scores = {}
        log_r = f32(np.log(f32(cur_time)))
        for i in feasible:
            if i in self.unexplored:
                continue
            term = f32(np.sqrt(f32(f32(f32(0.1) * log_r) / f32(self.time_stamp[i]))))
            sc = f32(f32(f32(min(reward[i], clip_value)) - low) / spread) + term
            scores[i] = self._penalised(f32(sc), self.duration[i], preferred)

        decayed = f32(max(f32(self.exploration * hp["exploration_decay"]), self.exploration_min))
        self.exploration = self.epsilon = decayed  # ε of this round
        exploit_len = min(math.floor(f32(f32(k) * f32(f32(1) - decayed))), len(scores))
        ranked = sorted(scores.values(), reverse=True)
        picked = []
        if scores:
            cut = f32(ranked[min(exploit_len, len(ranked) - 1)] * hp["cut_off_util"])
            lake = {i: scores[i] for i in scores if scores[i] >= cut}
            picked = _draw(noise[0], lake, exploit_len)

        if self.unexplored:
            candidates = [i for i in feasible if i in self.unexplored]
            init_reward = {i: self._penalised(prior[i], self.duration[i], preferred)
                           for i in candidates}  # fmt: skip
            explore_len = min(len(candidates), k - len(picked))
            window = math.floor(f32(hp["sample_window"] * f32(explore_len)))
            best = sorted(candidates, key=lambda i: (-init_reward[i], self.priority[i]))
            window = {i: init_reward[i] for i in best[: min(window, len(best))]}
            picked += _draw(noise[1], window, explore_len)
        else:
            self.exploration_min = f32(0)
            self.exploration = f32(0)

        rest = [i for i in feasible if i not in picked]
        picked += sorted(rest, key=lambda i: (-noise[2][i], i))[: k - len(picked)]
        selected = np.zeros(self.n, bool)
        selected[picked] = True
        return selected

    def update(self, selected, data_size, local_loss_sq, time) -> None:
        """After round ``training_round + 1``: the participants' utility, duration and round,
        then the pacer's record and check (oort.py's, made at the next selection)."""
        hp = self.hp
        self.training_round += 1
        exploited = [i for i in range(self.n) if selected[i] and i not in self.unexplored]
        for i in np.flatnonzero(selected):
            self.reward[i] = f32(self._bin(data_size[i]) * f32(np.sqrt(f32(local_loss_sq[i]))))
            self.duration[i] = f32(time[i])
            self.time_stamp[i] = self.training_round
            self.count[i] += 1
            self.unexplored.discard(int(i))
        util = f32(0)
        for i in exploited:
            util = f32(util + self.reward[i])
        self.exploit_history.append(f32(util / f32(f32(1e-4) + f32(len(exploited)))))

        cur_time = self.training_round + 1
        step = max(math.floor(hp["pacer_window"]), 1)
        if cur_time >= 2 * step and cur_time % step == 0:
            last = f32(0)
            for u in self.exploit_history[-2 * step : -step]:
                last = f32(last + u)
            current = f32(0)
            for u in self.exploit_history[-step:]:
                current = f32(current + u)
            change = f32(abs(f32(current - last)))
            if change <= f32(last * f32(0.1)):
                self.round_threshold = f32(
                    min(f32(100), f32(self.round_threshold + hp["pacer_delta"]))
                )
            elif change >= f32(last * f32(5)):
                self.round_threshold = f32(
                    max(hp["pacer_delta"], f32(self.round_threshold - hp["pacer_delta"]))
                )
