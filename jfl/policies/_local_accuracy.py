"""Local-accuracy-based scheduling, the third baseline of Xia et al. Fig. 2 (§V-B).

"the clients with lower local test accuracy have higher priority to be chosen in each round":
each round the ``min(N, |A(t)|)`` available clients on which the current global model is least
accurate. A client holds only its own partition, so its local test accuracy is the global
model's accuracy on that partition, which the federated learner computes each round
(``jfl.fl.train.local_signals``) and the runner hands to the policy as ``obs.local_accuracy``.
The policy needs a learner: without one a run refuses it before compiling.
"""

from __future__ import annotations

import jax

from jfl.kernels import selection_count, topk_mask
from jfl.kernels.order import inverse_permutation
from jfl.policies.base import PolicySpec, check_selection_size, register, stateless


def local_accuracy(num_clients: int, selection_size: int):
    """The ``min(N, |A(t)|)`` available clients with the lowest ``obs.local_accuracy``.

    Ties are broken uniformly at random from the select key: clients with equal accuracy are
    common (a client's accuracy is a multiple of 1/s_k), and the lower index would favour the
    same clients every round.
    """
    check_selection_size(num_clients, selection_size)

    def select(key, state, obs, hparams):
        del state, hparams
        # A fresh random order of the clients each round: client n's place in it breaks ties.
        priority = inverse_permutation(jax.random.permutation(key, num_clients))
        k = selection_count(obs.available, selection_size)
        return topk_mask(-obs.local_accuracy, obs.available, k, priority)

    return stateless(select)._replace(signals=("local_accuracy",))


register(
    PolicySpec(
        "local_accuracy",
        local_accuracy,
        {},
        "the N available clients on which the global model is least accurate (Xia Fig. 2)",
        requires=("available", "local_accuracy"),
    )
)
