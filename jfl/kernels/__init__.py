"""Pure single-instance kernels; callers ``vmap`` them."""

from jfl.kernels.assignment import AssignmentResult, assignment_value, budgeted_assignment
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
from jfl.kernels.selection import divide_and_conquer, p4_objective, selection_count, topk_mask
from jfl.kernels.ucb import ArmStats, arm_stats_init, arm_stats_update, ucb_bonus, ucb_index

__all__ = [
    "ArmStats",
    "AssignmentResult",
    "RidgeEstimate",
    "RidgeState",
    "arm_stats_init",
    "arm_stats_update",
    "assignment_value",
    "budgeted_assignment",
    "divide_and_conquer",
    "lower_confidence_bound",
    "p4_objective",
    "ridge_estimate",
    "ridge_init",
    "ridge_update",
    "selection_count",
    "topk_mask",
    "ucb_bonus",
    "ucb_index",
    "upper_confidence_bound",
    "virtual_queue_update",
]
