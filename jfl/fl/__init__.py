"""Federated training driven by the selection policies: data, partitions, Flax models, FedAvg."""
