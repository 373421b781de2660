"""Chunk geometry: how a group's configurations are cut into chunks of one compiled shape."""

from __future__ import annotations

import math

import jax


def chunk_bounds(
    num_configs: int, max_size: int, devices: int = 1, exact: bool = False
) -> list[tuple[int, int]]:
    """``(start, stop)`` of each chunk: as few chunks as ``max_size`` allows, of equal size
    (``ceil(C / ceil(C / max))`` configurations, a multiple of ``devices``), the last one shorter.
    ``exact``: every chunk ``max_size`` configurations (rounded up to ``devices``), whatever C.

    Every chunk is computed at the same, first chunk's, size (the last padded), so one compiled
    program serves them all; balancing keeps that padding below one row per chunk and device.
    """
    if num_configs < 1:
        return []
    size = balanced_chunk_size(num_configs, max_size, devices, exact)
    return [(start, min(start + size, num_configs)) for start in range(0, num_configs, size)]


def balanced_chunk_size(
    num_configs: int, max_size: int, devices: int = 1, exact: bool = False
) -> int:
    """The size every chunk of ``chunk_bounds`` is computed at (the last one padded to it);
    ``exact``: ``max_size`` itself (rounded up to ``devices``), so that the batch's shape does
    not depend on how many configurations there are."""
    if exact:
        return round_up(max_size, devices)
    count = math.ceil(num_configs / max_size)
    return round_up(math.ceil(num_configs / count), devices)


def round_up(x: int, multiple: int) -> int:
    """The smallest multiple of ``multiple`` that is at least ``x``."""
    return int(math.ceil(x / multiple) * multiple)


def group_chunk_size(chunk_size: int, num_configs: int, exact: bool = False) -> int:
    """A group's largest chunk: a policy with few configurations is not padded to a large one,
    unless ``exact`` (the chunk's shape must not depend on the group's size)."""
    if exact:
        return chunk_size
    return min(chunk_size, round_up(num_configs, jax.local_device_count()))
