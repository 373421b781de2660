"""The configuration table, its policy groups and the plan of a sweep."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from jfl.policies import get as get_policy
from jfl.reduction import NO_REDUCTIONS, Reductions, Reference


def config_table(
    policies: Sequence[str],
    swept: Mapping[str, Sequence[float]],
    fixed: Mapping[str, float] | None = None,
    shared: Mapping[str, Sequence[float]] | None = None,
) -> pd.DataFrame:
    """Cartesian grid per policy over the swept hyperparameters that policy reads.

    Columns: ``policy``, every ``shared`` name (scenario axes crossed with every policy, e.g. the
    number of channels or the fairness scale) and every swept name (NaN where the policy does not
    use it). Values are validated against each policy's ranges.
    """
    fixed = dict(fixed or {})
    shared = dict(shared or {})
    if not policies:
        raise ValueError("`policies`: give at least one policy")
    if len(set(policies)) != len(policies):
        raise ValueError(f"`policies`: duplicate names in {list(policies)}")
    rows = []
    for name in policies:
        spec = get_policy(name)
        used = [k for k in swept if k in spec.hparams]
        spec.validate({k: swept[k] for k in used})
        spec.validate({k: v for k, v in fixed.items() if k in spec.hparams})
        for scenario in itertools.product(*shared.values()):
            for values in itertools.product(*(swept[k] for k in used)):
                row = {
                    "policy": name,
                    **dict(zip(shared, scenario, strict=True)),
                    **{k: np.nan for k in swept},
                    **dict(zip(used, values, strict=True)),
                }
                rows.append(row)
    return pd.DataFrame(rows, columns=["policy", *shared, *swept])


def policy_hparams(name: str, rows: pd.DataFrame, fixed: Mapping[str, float] | None = None):
    """Full per-config hyperparameter arrays for ``name`` (defaults, then fixed, then swept)."""
    spec = get_policy(name)
    fixed = {k: v for k, v in (fixed or {}).items() if k in spec.hparams}
    values = spec.complete(fixed)
    out = {}
    for key, default in values.items():
        if key in rows and rows[key].notna().all():
            out[key] = rows[key].to_numpy(np.float32)
        else:
            out[key] = np.full(len(rows), default, np.float32)
    return out


class Group(NamedTuple):
    """The contiguous rows of ``configs`` that share one compiled program (policy and selection
    size)."""

    label: str  # its chunks' folder in the store
    start: int
    stop: int


def selection_sizes(configs: pd.DataFrame, selection_size: int | str) -> np.ndarray:
    """Every row's selection size: the int, or the column it names."""
    if isinstance(selection_size, str):
        return configs[selection_size].to_numpy()
    return np.full(len(configs), selection_size)


def policy_groups(configs: pd.DataFrame, selection_size: int | str) -> list[Group]:
    """The (policy, selection size) groups of ``configs``, in order; each group's rows must be
    contiguous."""
    sizes = selection_sizes(configs, selection_size)
    keys = pd.Series(list(zip(configs["policy"], sizes, strict=True))).to_numpy()
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    if pd.Series(keys[starts]).duplicated().any():
        raise ValueError(
            "configs must list each (policy, selection size) group's rows contiguously"
        )
    groups = []
    for start, stop in zip(starts, [*starts[1:], len(configs)], strict=True):
        name, size = configs["policy"].iloc[start], int(sizes[start])
        label = name if isinstance(selection_size, int | np.integer) else f"{name}-m{size}"
        groups.append(Group(label, int(start), int(stop)))
    return groups


def checked_arrays(configs, seeds, per_config, per_seed, trackers):
    """``per_config`` ([C, ...]) with the trackers' hyperparameters that only the table holds,
    and ``per_seed`` ([C, S, ...]), as NumPy arrays of the right leading shapes."""
    per_config = {k: np.asarray(v) for k, v in (per_config or {}).items()}
    for key, value in per_config.items():
        if value.shape[:1] != (len(configs),):
            raise ValueError(f"per_config[{key!r}] needs {len(configs)} rows, got {value.shape}")
    per_seed = {k: np.asarray(v) for k, v in (per_seed or {}).items()}
    for key, value in per_seed.items():
        if value.shape[:2] != (len(configs), len(seeds)):
            raise ValueError(
                f"per_seed[{key!r}] needs {len(configs)} rows of {len(seeds)} seeds, got "
                f"{value.shape}"
            )
    for name in {n for t in trackers for n in t.hparams} - set(per_config):
        if name not in configs:
            raise ValueError(f"a tracker reads {name!r}: give it as a column or per_config")
        per_config[name] = configs[name].to_numpy()
    return per_config, per_seed


@dataclasses.dataclass
class Plan:
    """The Python-side setup of a sweep (an experiment's ``plan()``; :func:`run_policy_grid`)."""

    env: Any
    env_params: Any
    configs: pd.DataFrame  # one row per configuration: policy and labels
    selection_size: int | str  # an int, or the configs column holding it per row
    per_run_bytes: int = 0  # memory of one (configuration, seed) run, for an automatic chunk size
    per_config: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)  # [C, ...]
    per_seed: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)  # [C, S, ...]
    env_hparams: tuple[str, ...] = ()  # environment fields read from the hyperparameters
    fixed: Mapping[str, float] = dataclasses.field(default_factory=dict)
    learner: Callable | None = None  # learner(policy, size) for federated runs
    data: Any = None  # the jfl.fl.FederatedData every run reads
    data_bytes: int = 0  # device memory of ``data``, shared by every chunk
    eval_every: int | None = None
    trackers: tuple = ()  # jfl.trackers kept in every run (their hparams: columns or per_config)
    finish: Callable | None = None  # ds -> ds: the experiment's variables, attributes
    # The experiment's own per-run metrics and curves, reduced on the device (jfl.reduction).
    reductions: Reductions = NO_REDUCTIONS
    # Whether the runs record the trajectories (selections, queues) for those reductions even
    # where they are not kept per run (--trajectories).
    trajectories: bool = False
    # The configuration each configuration is paired with by seed in those reductions, and the
    # outputs its runs read of it (RunView.reference); None: none.
    reference: Reference | None = None
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
