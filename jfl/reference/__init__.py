"""Plain NumPy reference implementations, written independently of the JAX code.

They serve as ground truth for the test suite and as the per-seed loop baseline of the benchmark.
"""

from jfl.reference.numpy_rbcsf import (
    RbcsfDraws,
    RbcsfTrace,
    draw_rbcsf,
    expected_times,
    make_contexts,
    p4_algorithm1,
    p4_bruteforce,
    p4_objective,
    p4_prefix_heap,
    paper_theta,
    rbcsf_numpy_loop,
    realised_times,
    rollout_environment,
    simulate_rbcsf,
)

__all__ = [
    "RbcsfDraws",
    "RbcsfTrace",
    "draw_rbcsf",
    "expected_times",
    "make_contexts",
    "p4_algorithm1",
    "p4_bruteforce",
    "p4_objective",
    "p4_prefix_heap",
    "paper_theta",
    "rbcsf_numpy_loop",
    "realised_times",
    "rollout_environment",
    "simulate_rbcsf",
]
