"""Federated training whose clients the papers' policies choose: RBCS-F §6.2, Xia Figs. 2 and 6,
Qu Table II. Each experiment is its paper's scenario (environment, policies, grid) plus the
training settings of :class:`jfl.experiments.training.FederatedTraining`.

Xia et al. train with "the SGD method ..., where the mini-batch size ρ is 2 and the learning
rate is 0.001" (§V-A), ρ being the samples of one round's local update (eq. 36, τ_LU = ρ/φ): one
SGD step on 2 samples a round. ``FlCsUcbIdeal`` and ``FlCsUcbQ`` default to that protocol
(``PAPER_PROTOCOL``); FedAvg's epochs are a flag away (``--local-steps None --batch-size 10 --lr
0.1``).

Every experiment reduces its runs on the device (``jfl.reduction``): the accuracy metrics
(``FederatedTraining.federated_plan``), the selection metrics and its scenario's own
(``WIRELESS_REDUCTIONS``, ``HFL_REDUCTIONS``), and bands over seeds of every per-round and
per-evaluation output for the figures; every run's rounds only with ``--per-run-rounds``.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from typing import ClassVar

import numpy as np

from jfl import checks
from jfl.cli import Concentrations, Floats, Names
from jfl.envs.wireless import WirelessEnv
from jfl.experiments.cocs import UTILITY_REDUCTIONS, HflScenario
from jfl.experiments.common import check_hparams, with_queue_rate
from jfl.experiments.rbcsf import RbcsfScenario
from jfl.experiments.regret import check_fairness
from jfl.experiments.regret_curves import WIRELESS_METRICS
from jfl.experiments.training import (
    ACCURACY_COLUMNS,
    FederatedTraining,
    Training,
    federated_figures,
)
from jfl.experiments.wireless import Fairness, FairnessPreset, WirelessScenario
from jfl.policies import get
from jfl.reduction import Reductions
from jfl.sweep import Plan, config_table
from jfl.trackers import QUEUE_RATE, fairness_queue

# Xia §V-A: one SGD step a round on a minibatch of ρ = 2 samples, learning rate 0.001.
PAPER_PROTOCOL = {"local_steps": 1, "batch_size": 2, "lr": (0.001,)}
XIA_TRAINING = FederatedTraining(**PAPER_PROTOCOL)
# Each experiment's training settings (frozen, so one shared default is safe).
RBCSF_TRAINING = FederatedTraining(lr=(0.3,))
XIA_IDEAL_TRAINING = dataclasses.replace(XIA_TRAINING, eval_every=200)
XIA_FAIRNESS_TRAINING = dataclasses.replace(XIA_TRAINING, eval_every=100)
FL_FAIRNESS_PRESET = FairnessPreset(N=4)  # Xia Fig. 6: K = 10 on N = 4 channels
# COCS's policies average uniformly within an edge server (eq. 3), their ``paper`` aggregation.
QU_TRAINING = FederatedTraining(epochs=2, target_accuracy=0.7, eval_every=10)
# Beside the accuracy metrics, the metrics each scenario's runs reduce on the device: the
# wireless sweeps' set reward and failures (no regret benchmark here), COCS's utilities.
WIRELESS_REDUCTIONS = Reductions(WIRELESS_METRICS)
HFL_REDUCTIONS = Reductions(UTILITY_REDUCTIONS.metrics)


def slots_of(num_clients: int):
    """``slots(policy, size)``: the most clients a policy may select in a round."""
    return lambda policy, size: get(policy).max_selected(num_clients, size)


def rbcsf_federated_plan(scenario: RbcsfScenario, configs, dataset, partitions) -> Plan:
    """The ``rbcsf`` scenario's plan for ``configs`` (every policy's fairness queue measured at
    its ``queue_rate``) with the scenario's learner training on ``partitions``."""
    env, params = scenario.environment_params()
    plan = Plan(
        env,
        params,
        configs,
        selection_size=scenario.m,
        per_run_bytes=0,
        trackers=(fairness_queue(),),
    )
    return scenario.training.federated_plan(
        plan, dataset, partitions, slots_of(scenario.clients), rounds=scenario.rounds
    )


@dataclasses.dataclass(frozen=True)
class FlRbcsf(RbcsfScenario):
    """Federated training with RBCS-F, Random and FedCS(3) selecting the clients (Huang §6.2).

    The ``rbcsf`` latency environment (N = 40 clients, m = 8 a round) decides the round times;
    the selected clients train the model with FedAvg, and the simulated wall-clock advances by
    each round's time. Client data follow §6.2.1: "we uniformly sample q_i × 500 items from each
    of the classifying class", q ~ Dir(γ₁·1) (``--gamma1``, ``iid`` for an IID split): every
    client holds ``--samples-per-client`` = 500 samples, in every γ₁ scenario. A training set
    with fewer than 500 per client caps the size at n // N, with a note (digits: 1437 samples,
    35 each for 40 clients). Default: scikit-learn's digits with logistic regression; the
    paper's setting is Fashion-MNIST or CIFAR-10 with its CNN (``--dataset fashion_mnist
    --data-dir DIR --model fashion_cnn``).

        python sweeps/fl_rbcsf.py                                   # Fig. 6
        python sweeps/fl_rbcsf.py --policies dirichlet_random --gamma2 0.1,1,10  # Fig. 5
    """

    gamma1: Concentrations = (1.0, 10.0, math.inf)
    """data concentration γ₁ > 0, or 'iid' (a list)"""
    samples_per_client: int | None = 500
    """samples per client ≥ 1 (§6.2.1: 500), capped at n // N; None: n // N"""
    seeds: int = 8
    rounds: int = 100
    training: Training = RBCSF_TRAINING
    """dataset, model and FedAvg settings"""
    out: str = "runs/fl_rbcsf"

    name: ClassVar[str] = "fl_rbcsf"
    trains: ClassVar[bool] = True  # its policies may read the learner's signals
    reduces_on_device: ClassVar[bool] = True
    figures = federated_figures("RBCS-F §6.2", ("gamma1", "learning_rate"))
    summary_columns: ClassVar[tuple[str, ...]] = (
        *"policy gamma1 learning_rate V gamma2".split(),
        *ACCURACY_COLUMNS,
    )

    read_anyway: ClassVar[tuple[str, ...]] = ("beta",)  # every policy's queue rate

    def check(self) -> None:
        super().check()
        self.training.check(self.rounds)
        if self.samples_per_client is not None:
            checks.integer("--samples-per-client", self.samples_per_client)
        # β is also the rate every other policy's fairness is measured against.
        checks.in_range("--beta", self.beta, 0.0, 1.0)
        checks.distinct("--gamma1", self.gamma1)

    def client_size(self, num_samples: int) -> int:
        """Samples per client: ``--samples-per-client`` capped at n // N (n // N for None)."""
        most = max(num_samples // self.clients, 1)
        if self.samples_per_client is None:
            return most
        return min(self.samples_per_client, most)

    def partitions(self, labels, size: int):
        """One partition per γ₁ (IID for ∞), all from ``--partition-seed``, every client with
        ``size`` samples."""
        partitions = []
        for gamma1 in self.gamma1:
            # The IID split gets the Dirichlet size too, so γ₁ alone differs between scenarios.
            if math.isinf(gamma1):
                name, options = "iid", {}
            else:
                name, options = "dirichlet", {"concentration": gamma1}
            partition = self.training.partition(
                name, labels, self.clients, samples_per_client=size, **options
            )
            partitions.append(partition)
        return partitions

    def plan(self) -> Plan:
        configs = config_table(
            self.policies,
            self.grid(),
            shared=self.training.columns(len(self.gamma1)),
        )
        configs = with_queue_rate(configs, self.beta[0])
        configs.insert(1, "gamma1", [self.gamma1[int(i)] for i in configs["partition"]])
        configs = self.training.with_aggregation(configs)
        dataset = self.training.load_data()
        num_samples = int(dataset.y_train.shape[0])
        size = self.client_size(num_samples)
        requested = self.samples_per_client
        if requested is not None and size < requested:
            print(
                f"note: {dataset.name} has {num_samples} training samples, {size} per client "
                f"instead of {requested} (--samples-per-client)",
                file=sys.stderr,
            )
        plan = rbcsf_federated_plan(self, configs, dataset, self.partitions(dataset.y_train, size))
        spc = {"requested": requested, "used": size}
        data = {**plan.metadata["data"], "samples_per_client": spc}
        return dataclasses.replace(plan, metadata={**plan.metadata, "data": data})


@dataclasses.dataclass(frozen=True)
class FlCsUcbIdeal(WirelessScenario):
    """Federated training with CS-UCB and its baselines choosing the clients (Xia Fig. 2).

    The ideal scenario of §V-B: K = 20 always-available clients in a 500 m disc (a fresh layout
    per seed) on N = 5 channels of the ``wireless`` environment; "the dataset is shuffled and
    then partitioned into the clients equally" (an IID equal split). Baselines: Random,
    Round-robin and "local accuracy based scheduling, where the clients with lower local test
    accuracy have higher priority" (``local_accuracy``: the N clients on which the global model
    is least accurate). Training follows the paper, one SGD step a round on 2 samples at learning
    rate 0.001; ``--local-steps None --batch-size 10 --lr 0.1`` trains one FedAvg epoch instead
    (the word ``None`` is how the flag takes no value). τ_max is 0.5 s, not the paper's 5 s
    (docs/decisions.md#cs-ucb-tau-max); clients that exceed it fail and their updates are
    lost. The paper's size is
    MNIST with τ_max = 5 s; the text gives no T for Fig. 2 (Fig. 3 uses 5000).

        python sweeps/fl_cs_ucb.py                                    # Fig. 2, about 30 s, 2 cores
        python sweeps/fl_cs_ucb.py --seeds 32 --rounds 20000 --eval-every 500   # more rounds
        python sweeps/fl_cs_ucb.py --dataset mnist --data-dir ~/data/mnist --tau-max 5 \
            --rounds 5000 --eval-every 100                            # the paper's size
        python sweeps/fl_cs_ucb.py --local-steps None --batch-size 10 --lr 0.1 --rounds 400 \
            --eval-every 20                                           # FedAvg
    """

    policies: Names = ("cs_ucb", "random", "round_robin", "local_accuracy")
    """registered policies (cs_ucb, random, round_robin, local_accuracy, modified_cs_ucb, …)"""
    N: int = 5
    """channels N, 1 ≤ N ≤ K"""
    seeds: int = 8
    # One SGD step on 2 samples at lr 0.001 moves the model little a round: on digits the
    # accuracy passes 0.8 after about 5000 rounds.
    rounds: int = 8000
    training: Training = XIA_IDEAL_TRAINING
    """dataset, model and FedAvg settings (the paper's protocol)"""
    out: str = "runs/fl_cs_ucb"

    name: ClassVar[str] = "fl_cs_ucb"
    trains: ClassVar[bool] = True  # its policies may read the learner's signals
    reduces_on_device: ClassVar[bool] = True
    figures = federated_figures("CS-UCB (Xia Fig. 2)")
    summary_columns: ClassVar[tuple[str, ...]] = (
        *"policy learning_rate failed_clients".split(),
        *ACCURACY_COLUMNS,
    )

    def check(self) -> None:
        super().check()
        checks.integer("--N", self.N, 1, self.clients, "--clients")
        self.training.check(self.rounds)

    def plan(self) -> Plan:
        configs = self.training.config_table(self.policies, {})
        dataset = self.training.load_data()
        partition = self.training.partition("iid", dataset.y_train, self.clients)
        params = self.wireless_params(availability=1.0)
        plan = Plan(
            WirelessEnv(),
            params,
            configs,
            selection_size=self.N,
            per_run_bytes=0,
            reductions=WIRELESS_REDUCTIONS,
        )
        return self.training.federated_plan(
            plan, dataset, [partition], slots_of(self.clients), rounds=self.rounds
        )


@dataclasses.dataclass(frozen=True)
class FlCsUcbQ(WirelessScenario):
    """Federated training with CS-UCB-Q and its baselines choosing the clients (Xia Fig. 6).

    K = 10 clients on N = 4 channels of the ``wireless`` environment; two clients hold samples
    of five digits and the other eight of one digit each (§V-B), and the guaranteed rates follow
    the data sizes, c_k = (N/2)·s_k / Σ s. Clients that exceed τ_max fail and their updates are
    lost. τ_max is the fairness scenario's, not the paper's 5 s
    (docs/decisions.md#cs-ucb-tau-max). Training
    follows the paper, one SGD step a round on 2 samples at learning rate 0.001; ``--local-steps
    None --batch-size 10 --lr 0.1`` trains one FedAvg epoch instead (the word ``None``).

        python sweeps/fl_cs_ucb_q.py                                  # Fig. 6, about 33 s, 2 cores
        python sweeps/fl_cs_ucb_q.py --rounds 10000 --eval-every 250 --seeds 32   # more rounds
        python sweeps/fl_cs_ucb_q.py --dataset mnist --data-dir ~/data/mnist --rounds 2000
        python sweeps/fl_cs_ucb_q.py --local-steps None --batch-size 10 --lr 0.1 --rounds 100 \
            --eval-every 5                                            # FedAvg
    """

    policies: Names = ("cs_ucb_q", "modified_cs_ucb", "random", "round_robin")
    beta: Floats = (0.1,)
    """CS-UCB-Q weight β in [0, 1]"""
    clients: int = 10
    preset: Fairness = FL_FAIRNESS_PRESET
    """the fairness scenario: channels, distances, availability"""
    rich_clients: int = 2
    """clients with several digits"""
    labels_per_rich: int = 5
    """digits of each rich client"""
    seeds: int = 8
    # The paper's protocol moves the model little a round (see FlCsUcbIdeal): 100 rounds leave
    # it at chance on digits, 4000 take it to about 0.6–0.7.
    rounds: int = 4000
    training: Training = XIA_FAIRNESS_TRAINING
    """dataset, model and FedAvg settings (the paper's protocol)"""
    out: str = "runs/fl_cs_ucb_q"

    name: ClassVar[str] = "fl_cs_ucb_q"
    trains: ClassVar[bool] = True  # its policies may read the learner's signals
    reduces_on_device: ClassVar[bool] = True
    figures = federated_figures("CS-UCB-Q (Xia Fig. 6)")
    summary_columns: ClassVar[tuple[str, ...]] = (
        *"policy beta learning_rate min_selection_rate max_rate_violation".split(),
        *ACCURACY_COLUMNS,
    )

    def check(self) -> None:
        super().check()
        self.preset.check(self.clients)
        checks.integer("--rich-clients", self.rich_clients, 0, self.clients, "--clients")
        checks.integer("--labels-per-rich", self.labels_per_rich)
        check_hparams(self.policies, {"beta": self.beta})
        self.training.check(self.rounds)

    def plan(self) -> Plan:
        configs = self.training.config_table(self.policies, {"beta": list(self.beta)})
        dataset = self.training.load_data()
        partition = self.training.partition(
            "heterogeneous",
            dataset.y_train,
            self.clients,
            rich_clients=self.rich_clients,
            labels_per_rich=self.labels_per_rich,
        )
        sizes = partition.count.astype(float)
        fairness = self.preset.N / 2 * sizes / sizes.sum()
        availability = np.full(self.clients, self.preset.availability)
        # c must be achievable with N channels and this availability before anything runs.
        check_fairness(fairness, availability, self.preset.N)
        params = self.preset.params(self)
        rows = len(configs)
        rate = np.tile(fairness, (rows, 1))

        def finish(ds):
            # Rate metrics are measured against each client's guaranteed rate c_k.
            ds["queue_rate"] = (("config", "client"), rate)
            return ds

        plan = Plan(
            WirelessEnv(),
            params,
            configs,
            selection_size=self.preset.N,
            per_run_bytes=0,
            per_config={
                "fairness": rate,
                "availability": np.tile(availability, (rows, 1)),
                QUEUE_RATE: rate,
            },
            env_hparams=("availability",),
            trackers=(fairness_queue(),),
            finish=finish,
            reductions=WIRELESS_REDUCTIONS,
        )
        return self.training.federated_plan(
            plan, dataset, [partition], slots_of(self.clients), rounds=self.rounds
        )


@dataclasses.dataclass(frozen=True)
class FlCocs(HflScenario):
    """Hierarchical federated training with COCS and its baselines choosing the clients (Qu
    Table II and Fig. 4a).

    N = 50 clients and M = 3 edge servers (Table I's MNIST preset); each client holds samples of
    two labels (§VI-A). Each round every edge server averages the updates of its clients that
    arrive before the deadline (eq. 3, uniform weights by default) and every T_ES = 5 rounds the
    cloud averages the edge models (eq. 6). The summary gives, per policy, the rounds (and
    simulated time) to the target accuracy and the final accuracy, as Table II does.

        python sweeps/fl_cocs.py                                       # Table II / Fig. 4a
        python sweeps/fl_cocs.py --budget 3.5,5,10 --out runs/fl_cocs_budget   # Fig. 4c
    """

    policies: Names = ("oracle", "cocs", "linucb", "cucb", "random_budget")
    labels_per_client: int = 2
    """labels each client holds"""
    global_every: int = 5
    """T_ES: rounds between global aggregations"""
    seeds: int = 8
    rounds: int = 200
    training: Training = QU_TRAINING
    """dataset, model and FedAvg settings"""
    out: str = "runs/fl_cocs"

    name: ClassVar[str] = "fl_cocs"
    trains: ClassVar[bool] = True  # its policies may read the learner's signals
    reduces_on_device: ClassVar[bool] = True
    figures = federated_figures("COCS (Qu Fig. 4a)")
    summary_columns: ClassVar[tuple[str, ...]] = (
        *"policy budget deadline learning_rate success_per_round".split(),
        *ACCURACY_COLUMNS,
    )

    def check(self) -> None:
        super().check()
        checks.integer("--labels-per-client", self.labels_per_client)
        checks.integer("--global-every", self.global_every)
        self.training.check(self.rounds)

    def plan(self) -> Plan:
        scenario = self.scenario()
        configs = self.training.config_table(self.policies, {}, shared=scenario)
        env, params = self.environment_params()
        dataset = self.training.load_data()
        partition = self.training.partition(
            "two_labels", dataset.y_train, self.clients, labels_per_client=self.labels_per_client
        )
        slots = max_selected(params, max(scenario["budget"]))
        plan = Plan(
            env,
            params,
            configs,
            selection_size=self.servers,
            per_run_bytes=0,
            per_config={name: configs[name].to_numpy() for name in scenario},
            env_hparams=tuple(scenario),
            reductions=HFL_REDUCTIONS,
        )
        return self.training.federated_plan(
            plan,
            dataset,
            [partition],
            lambda policy, size: slots,
            rounds=self.rounds,
            num_servers=self.servers,
            global_every=self.global_every,
        )


def max_selected(params, budget: float) -> int:
    """Most clients any policy can select in a round: each ES affords ⌊B / min cost⌋ of them."""
    cheapest = params.price_low * params.computation_low
    per_server = math.floor(budget / cheapest * (1 + 1e-6))
    return max(1, min(params.num_clients, per_server * params.num_servers))
