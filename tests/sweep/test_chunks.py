"""jfl.sweep's chunk geometry."""

from __future__ import annotations

import numpy as np
import pytest

from jfl.sweep import chunk_bounds


@pytest.mark.parametrize("devices", [1, 2, 4])
def test_balanced_chunks_cover_every_configuration_once(devices):
    for num_configs in range(1, 60):
        for max_size in range(devices, 25, devices):
            bounds = chunk_bounds(num_configs, max_size, devices)
            rows = np.concatenate([np.arange(a, b) for a, b in bounds])
            np.testing.assert_array_equal(rows, np.arange(num_configs))
            sizes = [b - a for a, b in bounds]
            assert max(sizes) <= max_size and len(set(sizes[:-1])) <= 1
            assert len(bounds) == 1 or sizes[0] % devices == 0
            assert len(bounds) == -(-num_configs // max_size)  # as few chunks as fit
            # Every chunk computes at the first one's size: the padding is below one row per
            # chunk and device.
            padded = -(-sizes[0] // devices) * devices
            assert len(bounds) * padded - num_configs < len(bounds) * devices
