"""jfl.sweep's memory estimates and the chunk size decided from them."""

from __future__ import annotations

import pytest

from jfl import sweep
from jfl.sweep import IN_FLIGHT, _memory, auto_chunk_size, bytes_per_run, round_up


def test_chunk_sizes_fit_the_budget_and_the_devices():
    assert round_up(5, 4) == 8 and round_up(8, 4) == 8 and round_up(1, 1) == 1
    per_run = bytes_per_run(500, 40, 8, trajectories=False)
    assert bytes_per_run(500, 40, 8, trajectories=True) > per_run > 0
    assert bytes_per_run(1000, 40, 8, trajectories=False) > per_run
    # 10 seeds of per_run bytes: a budget of 3.5 configurations for each chunk in flight gives
    # 3, never more than exist.
    budget = int(3.5 * 10 * per_run * IN_FLIGHT)
    assert auto_chunk_size(100, 10, per_run, budget) == 3
    assert auto_chunk_size(100, 10, per_run, budget // IN_FLIGHT) == 1
    assert auto_chunk_size(2, 10, per_run, 10**12) == 2
    assert auto_chunk_size(100, 10, per_run, 1) == 1  # at least one configuration
    assert auto_chunk_size(100, 10, per_run, budget, devices=4) == 4


def test_chunk_fits_counts_the_shared_data(monkeypatch):
    """The clients' data (shared by every chunk, padded to the largest client) count once
    beside the chunks in flight: a sweep whose runs fit is refused when the data do not."""
    monkeypatch.setattr(_memory, "free_memory", lambda: 10_000)
    sweep.check_chunk_fits(2, 5, 100, auto=True)  # IN_FLIGHT · 2 · 5 · 100 = 2,000 bytes
    sweep.check_chunk_fits(2, 5, 100, auto=True, shared_bytes=8_000)  # 10,000: fits
    with pytest.raises(ValueError, match=r"5 seeds and 8\.01 kB of data need about 10 kB"):
        sweep.check_chunk_fits(2, 5, 100, auto=True, shared_bytes=8_010)
