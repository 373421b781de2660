"""Pure single-instance kernels; callers ``vmap`` them."""

from jfl.kernels.assignment import (
    AssignmentResult,
    assignment_value,
    budgeted_assignment,
    cardinality_assignment,
    two_phase_assignment,
)
from jfl.kernels.linkage import (
    Linkage,
    cut_by_weight,
    node_weights,
    pairwise_distances,
    ward_linkage,
)
from jfl.kernels.order import random_priority
from jfl.kernels.queues import virtual_queue_update
from jfl.kernels.ridge import (
    RidgeEstimate,
    RidgeState,
    lower_confidence_bound,
    ridge_estimate,
    ridge_init,
    ridge_update,
    upper_confidence_bound,
)
from jfl.kernels.sampling import (
    capped_inclusion,
    clustered_buckets,
    draw_per_bucket,
    fill_uniformly,
    gumbel_top_k,
    sample_with_replacement,
    systematic_sample,
)
from jfl.kernels.selection import divide_and_conquer, p4_objective, selection_count, topk_mask
from jfl.kernels.ucb import ArmStats, arm_stats_init, arm_stats_update, ucb_bonus, ucb_index

__all__ = [
    "ArmStats",
    "AssignmentResult",
    "Linkage",
    "RidgeEstimate",
    "RidgeState",
    "arm_stats_init",
    "arm_stats_update",
    "assignment_value",
    "budgeted_assignment",
    "capped_inclusion",
    "cardinality_assignment",
    "clustered_buckets",
    "cut_by_weight",
    "divide_and_conquer",
    "draw_per_bucket",
    "fill_uniformly",
    "gumbel_top_k",
    "lower_confidence_bound",
    "node_weights",
    "p4_objective",
    "pairwise_distances",
    "random_priority",
    "ridge_estimate",
    "ridge_init",
    "ridge_update",
    "sample_with_replacement",
    "selection_count",
    "systematic_sample",
    "topk_mask",
    "two_phase_assignment",
    "ucb_bonus",
    "ucb_index",
    "upper_confidence_bound",
    "virtual_queue_update",
    "ward_linkage",
]
