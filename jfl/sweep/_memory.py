"""Memory: every estimate and budget a sweep's chunk size is decided from, and the decision."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jfl.kernels.selection import SMALL_POOL_MAX
from jfl.sweep._chunks import round_up
from jfl.sweep._grid import Plan


def bytes_per_run(
    num_rounds: int, num_clients: int, selection_size: int, trajectories: bool
) -> int:
    """Rough upper bound of device memory one (config, seed) run needs, outputs included."""
    outputs = 4 * 4 * num_rounds + 8 * num_clients
    if trajectories:
        outputs += 5 * num_rounds * num_clients
    # Pairwise ranks (O(N²)) up to SMALL_POOL_MAX clients, sorting (O(N)) above.
    pairwise = num_clients * min(num_clients, SMALL_POOL_MAX)
    working = 4 * (24 * num_clients + 8 * pairwise + 2 * num_clients * selection_size)
    return 2 * (outputs + working)  # ×2: double-buffered outputs and XLA temporaries


def model_footprint(model, sample_shape) -> tuple[int, int]:
    """(parameters, activation floats per sample) of ``model``, from shapes only."""

    def init(x):
        _, variables = model.init_with_output(jax.random.key(0), x, capture_intermediates=True)
        return variables

    variables = jax.eval_shape(init, jax.ShapeDtypeStruct((1, *sample_shape), jnp.float32))
    params = variables["params"]
    intermediates = variables.get("intermediates", {})
    num_params = sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(params))
    activations = sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(intermediates))
    return num_params, max(activations, int(np.prod(sample_shape)))


def bytes_per_fl_run(
    num_params: int,
    activations: int,
    *,
    slots: int,
    batch_size: int,
    num_servers: int,
    num_rounds: int,
    num_clients: int,
    eval_batch: int,
) -> int:
    """Rough upper bound of the memory one (configuration, seed) training run needs, with the
    test set evaluated ``eval_batch`` samples at a time (``jfl.fl.local.EVAL_BATCH``)."""
    models = num_params * (4 * slots + 3 * num_servers + 4)  # start, trained, grads, averages
    training = 3 * activations * batch_size * slots  # forward and backward activations
    evaluation = activations * eval_batch
    selection = bytes_per_run(num_rounds, num_clients, slots, False)
    # float32, ×2 for XLA temporaries, plus the selection run's own footprint.
    return 2 * 4 * (models + max(training, evaluation)) + selection


# Chunks on the device at once: one computing while the previous one is fetched.
IN_FLIGHT = 2


def auto_chunk_size(
    num_configs: int, num_seeds: int, per_run_bytes: int, budget_bytes: int, devices: int = 1
) -> int:
    """Largest number of configurations per chunk such that the chunks in flight
    (``IN_FLIGHT``) fit ``budget_bytes`` together."""
    per_config = max(1, num_seeds * per_run_bytes * IN_FLIGHT)
    size = max(1, budget_bytes // per_config)
    size = min(size, num_configs)
    return round_up(size, devices)


def _device_free() -> int | None:
    """Bytes free on this process's first device, None where it reports no memory statistics
    (the CPU)."""
    stats = jax.local_devices()[0].memory_stats() or {}
    if "bytes_limit" not in stats:
        return None
    return int(stats["bytes_limit"] - stats.get("bytes_in_use", 0))


def device_memory_budget(fraction: float = 0.5) -> int | None:
    """``fraction`` of the free memory of this process's first device, in bytes; None where the
    device reports no memory statistics (the CPU)."""
    free = _device_free()
    return None if free is None else int(fraction * free)


def free_memory() -> int | None:
    """Bytes free on this process's first device: an accelerator's own memory, the host's
    available memory for the CPU (Linux's MemAvailable); None where neither is known."""
    free = _device_free()
    if free is not None:
        return free
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_chunk_fits(
    chunk: int, num_seeds: int, per_run_bytes: int, auto: bool, shared_bytes: int = 0
) -> None:
    """ValueError, with the figure and the way out, when the chunks in flight (``chunk``
    configurations × ``num_seeds`` runs each) and the data they share (``shared_bytes``: a
    federated sweep's clients' data) cannot fit the device's free memory."""
    need = IN_FLIGHT * chunk * num_seeds * per_run_bytes + shared_bytes
    free = free_memory()
    if free is None or need <= free:
        return
    ways = ["fewer `seeds`, `rounds` or clients"]
    if chunk > 1:
        ways.insert(0, "a smaller `memory_budget`" if auto else "a smaller `chunk_size`")
    data = f" and {format_bytes(shared_bytes)} of data" if shared_bytes else ""
    raise ValueError(
        f"`seeds` {num_seeds}: {IN_FLIGHT} chunks in flight of {chunk} configuration(s) × "
        f"{num_seeds} seeds{data} need about {format_bytes(need)} ({format_bytes(per_run_bytes)} "
        f"a run), more than the {format_bytes(free)} free on "
        f"{jax.local_devices()[0].platform.upper()}; "
        f"use {' or '.join(ways)}"
    )


def format_bytes(count: float) -> str:
    """``1.2 MB``: decimal units, three significant digits."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if count < 1000 or unit == "TB":
            return f"{count:.3g} {unit}"
        count /= 1000
    return f"{count:.3g} TB"


# Largest batch (configurations × seeds) of one chunk on CPU: the vmapped runner is fastest
# near a thousand runs, and larger batches spill its working set out of the caches.
CPU_BATCH = 1024
# The memory budget's default on CPU, in MiB (accelerators: half the device's free memory).
CPU_MEMORY_BUDGET = 1024.0


def memory_budget_bytes(memory_budget: float | None) -> int:
    """A budget given in MiB, in bytes; by default half an accelerator's free memory, or 1 GiB
    on the CPU."""
    if memory_budget is not None:
        return int(memory_budget * 2**20)
    return device_memory_budget() or int(CPU_MEMORY_BUDGET * 2**20)


def chunk_size(
    requested: str | int,
    plan: Plan,
    seeds: int,
    memory_budget: float | None = None,
    exact: bool = False,
    stored: int | None = None,
) -> int:
    """The configurations per chunk: ``requested`` (rounded up to the devices), the size of the
    sweep being resumed (``stored``, so that its chunks are the same), or with ``"auto"`` the
    most configurations whose chunks in flight fit the budget.

    A federated sweep whose learner is not batch invariant (``exact``) computes one configuration
    per device: XLA rounds a model's matrix products and reductions differently in batches of
    different shapes (a vmapped softmax cross-entropy changes in the last bit between 3 and 4
    configurations on the CPU), so a chunk sized from the sweep would make a configuration's
    numbers depend on the other configurations of its sweep
    (docs/decisions.md#federated-chunks)."""
    devices = jax.local_device_count()  # a chunk runs on one process's devices
    if requested != "auto":
        return round_up(int(requested), devices)
    if stored is not None:
        return stored
    if exact:
        return devices
    groups = ["policy"]
    if isinstance(plan.selection_size, str):
        groups.append(plan.selection_size)
    largest = int(plan.configs.groupby(groups, sort=False).size().max())
    budget = max(memory_budget_bytes(memory_budget) - plan.data_bytes, 0)
    size = auto_chunk_size(largest, seeds, plan.per_run_bytes, budget, devices)
    if jax.default_backend() == "cpu":
        size = min(size, round_up(max(1, CPU_BATCH // seeds), devices))
    return size
