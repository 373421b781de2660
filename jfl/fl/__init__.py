"""Federated training driven by the selection policies: data, partitions, Flax models, FedAvg.

* ``jfl.fl.data`` — digits (default, ships with scikit-learn), MNIST, Fashion-MNIST, CIFAR-10
  from local files or, with ``jfl.fl.hub``, from Hugging Face Parquet files (FEMNIST too, split
  by writer);
* ``jfl.fl.partition`` — IID, Dirichlet(γ₁), per-class Dirichlet(α), shards, natural (one client
  per writer), two labels per client, the CS-UCB-Q split;
* ``jfl.fl.models`` — logistic regression, the papers' CNNs and MLP, LEAF's CNN and ResNet-18 with
  GroupNorm (Flax linen);
* ``jfl.fl.local`` — what a client computes on its own samples: local SGD and the per-client
  signals that policies read;
* ``jfl.fl.train`` — local SGD vmapped over the selected clients, FedAvg and its hierarchical
  variant, as a ``Learner`` that ``jfl.runner.make_run(..., learner=...)`` drives.

The experiments' training settings (``sweeps/fl_*.py``) are ``jfl.experiments.training``.
"""

from jfl.fl.data import (
    DATASETS,
    Dataset,
    DatasetError,
    load_dataset,
    sample_groups,
    split_by_group,
)
from jfl.fl.local import FederatedData, local_sgd
from jfl.fl.models import MODELS, init_params, make_model
from jfl.fl.partition import (
    PARTITIONS,
    ClientData,
    Partition,
    federated_data,
    make_partition,
    stack_clients,
)
from jfl.fl.train import Learner, make_learner, weighted_average

__all__ = [
    "DATASETS",
    "MODELS",
    "PARTITIONS",
    "ClientData",
    "Dataset",
    "DatasetError",
    "FederatedData",
    "Learner",
    "Partition",
    "federated_data",
    "init_params",
    "load_dataset",
    "local_sgd",
    "make_learner",
    "make_model",
    "make_partition",
    "sample_groups",
    "split_by_group",
    "stack_clients",
    "weighted_average",
]
