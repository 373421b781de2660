"""A sweep's configuration table run policy group by policy group: one compiled program per
(policy, selection size), its configurations in chunks."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import numpy as np
from tqdm import tqdm  # plain: tqdm.auto's notebook widget needs ipywidgets, else it warns

from jfl.distributed import SINGLE, Layout
from jfl.outputs import Metric, Outputs, learner_outputs, output_metrics
from jfl.policies import get as get_policy
from jfl.reduction import REFERENCE, make_reducer
from jfl.runner import make_batched_run, make_run, seed_keys
from jfl.sweep._chunks import balanced_chunk_size, group_chunk_size
from jfl.sweep._directory import ChunkStore
from jfl.sweep._execution import run_chunked
from jfl.sweep._grid import (
    Group,
    Plan,
    checked_arrays,
    policy_groups,
    policy_hparams,
    selection_sizes,
)


class PolicyGrid:
    """A plan's policy groups, checked, with their learners and the dims of the outputs.

    Every group is checked when the grid is made (the policy against the environment and its
    learner's signals), before anything compiles. ``metrics`` declares every output of the runs
    (``jfl.outputs.output_metrics``: from the plan's own environment, learner and trackers),
    ``dims`` names each one's axes after [config, seed]; ``exact`` says whether every chunk
    must be computed at exactly the chunk size (a learner that is not batch invariant:
    ``jfl.sweep.chunk_size``).
    """

    def __init__(self, plan: Plan, trajectories: bool = False):
        self.plan = plan
        # Recorded for the experiment's reductions, or to be kept per run.
        trajectories = trajectories or plan.trajectories
        self.trajectories = trajectories
        self.sizes = selection_sizes(plan.configs, plan.selection_size)
        self.groups = policy_groups(plan.configs, plan.selection_size)
        self.learners = [self._checked_learner(group) for group in self.groups]
        if plan.learner is not None:
            if len({tuple(learner_outputs(g)) for g in self.learners}) > 1:
                raise ValueError("the policies' learners evaluate different quantities")
        first = False if plan.learner is None else self.learners[0]
        self.metrics = output_metrics(
            plan.env, learner=first, trajectories=trajectories, trackers=plan.trackers
        )
        self.dims = {name: tuple(metric.dims) for name, metric in self.metrics.items()}
        self.exact = plan.learner is not None and not self.learners[0].batch_invariant
        self.reference_rows = self._checked_reference()

    def reduced_declarations(self) -> dict[str, Metric]:
        """The declarations of what a reduction on the device returns beside the runs' own
        outputs: the experiment's metrics and curves (``Plan.reductions``), for their bounds."""
        extra = self.plan.reductions
        declared = {n: Metric(("seed",), "", m.bounds) for n, m in extra.metrics.items()}
        declared.update({n: Metric(c.dims, "", c.bounds) for n, c in extra.curves.items()})
        return declared

    def _checked_reference(self) -> np.ndarray | None:
        """The plan's reference rows [config] (``jfl.reduction.Reference``), checked."""
        reference = self.plan.reference
        if reference is None:
            return None
        count = len(self.plan.configs)
        rows = np.asarray(reference.rows)
        if rows.shape != (count,) or not np.issubdtype(rows.dtype, np.integer):
            raise ValueError(
                f"reference rows: {count} integers needed, got {rows.dtype} {rows.shape}"
            )
        if ((rows < -1) | (rows >= count)).any():
            raise ValueError(f"reference rows must be -1 or rows of the table [0, {count})")
        unknown = [name for name in reference.outputs if name not in self.dims]
        if unknown or not reference.outputs:
            raise ValueError(
                f"reference outputs {list(reference.outputs)}: name the runs' outputs, among "
                f"{sorted(self.dims)}"
            )
        return rows

    def _checked_learner(self, group: Group):
        name, size = self._policy(group)
        spec = get_policy(name)
        spec.check_environment(self.plan.env)
        learner = None if self.plan.learner is None else self.plan.learner(name, size)
        spec.check_learner(learner)
        return learner

    def _policy(self, group: Group) -> tuple[str, int]:
        return self.plan.configs["policy"].iloc[group.start], int(self.sizes[group.start])

    def run(
        self,
        *,
        rounds: int,
        seeds: Sequence[int],
        chunk_size: int,
        base_seed: int = 0,
        store: ChunkStore | None = None,
        show_progress: bool = True,
        layout: Layout = SINGLE,
        on_device: bool = False,
        per_run: tuple[str, ...] = (),
    ) -> Outputs:
        """Every configuration over ``seeds``: outputs with axes [config, seed, ...], and the
        runs' declarations of them (``Outputs.metrics``).

        ``on_device``: the runs are reduced on the device (``jfl.reduction``): the outputs are
        the per-run metrics [config, seed] and the bands over seeds [config, ...] that
        ``jfl.reduction.reduced_dims`` lists, and the outputs named in ``per_run``, which go to
        ``store`` chunk by chunk instead of being returned where there is a store. With a
        ``plan.reference`` (``jfl.reduction.Reference``) the reference rows run first, into a
        table that every chunk's reduction reads (:meth:`_reference_table`). ``layout`` shares
        the chunks among the processes of a distributed sweep (``jfl.distributed``); every
        process returns all outputs.
        """
        plan = self.plan
        per_config, per_seed = checked_arrays(
            plan.configs, seeds, plan.per_config, plan.per_seed, tuple(plan.trackers)
        )
        reducer = self._reducer(rounds, per_run) if on_device else None
        keys = seed_keys(base_seed, seeds)
        programs = [
            self._batched(*self._policy(group), learner, rounds, reducer, tuple(per_seed))
            for group, learner in zip(self.groups, self.learners, strict=True)
        ]
        sizes = [self._chunk_configs(group, chunk_size) for group in self.groups]
        reference = None
        if on_device and self.reference_rows is not None:
            arrays = (keys, per_config, per_seed)
            reference, rows = self._reference_table(programs, sizes, *arrays)
        outputs = []
        bar = tqdm(total=len(plan.configs), unit="config", disable=not show_progress, desc="sweep")
        try:
            for group, program, size in zip(self.groups, programs, sizes, strict=True):
                hparams = self._hparams(group, per_config, per_seed)
                bar.set_postfix_str(self._policy(group)[0])
                if reference is not None:  # the table shared, each configuration's row its own
                    hparams[REFERENCE] = rows[group.start : group.stop]
                    program = functools.partial(program, reference=reference)
                count = group.stop - group.start
                outputs.append(
                    run_chunked(
                        program,
                        keys,
                        hparams,
                        size,
                        num_configs=count,
                        exact=self.exact,
                        store=store,
                        label=group.label,
                        progress=bar,
                        layout=layout,
                        per_run=per_run if on_device else (),
                        first_row=group.start,
                    )
                )
        finally:
            bar.close()
        if len(outputs) > 1:
            outputs = [{k: np.concatenate([o[k] for o in outputs]) for k in outputs[0]}]
        return Outputs(outputs[0], self.metrics)

    def _chunk_configs(self, group: Group, chunk_size: int) -> int:
        """The group's largest chunk (``run_chunked`` computes every chunk at its balanced
        size)."""
        return group_chunk_size(chunk_size, group.stop - group.start, self.exact)

    def _reference_table(self, programs, sizes, keys, per_config, per_seed):
        """The reference rows' outputs ``{output: [reference row, seed, ...]}`` (in the order
        of the rows) and each configuration's row in it ([config], -1 for none).

        Computed by each group's own runs' program (``make_batched_run``'s ``runs``: no
        compilation of its own) at the chunk size of the group's chunks, so each row's values
        are those of its own runs in the sweep; a learner that is not batch invariant computes
        each row alone (its chunk padded with copies of it), so that the table does not depend
        on which other reference rows the sweep has. Every process computes it (no store).
        """
        names = tuple(self.plan.reference.outputs)
        rows = np.unique(self.reference_rows[self.reference_rows >= 0])
        tables = []
        for group, program, size in zip(self.groups, programs, sizes, strict=True):
            own = rows[(rows >= group.start) & (rows < group.stop)]
            if not len(own):
                continue
            hparams = self._hparams(group, per_config, per_seed)
            count, devices = group.stop - group.start, jax.local_device_count()
            chunk = balanced_chunk_size(count, size, devices, self.exact)  # the group's chunks'

            def selected(keys, hparams, num_configs=None, runs=program.runs):
                arrays = runs(keys, hparams, num_configs).arrays()
                return {name: arrays[name] for name in names}

            for batch in [[r] for r in own] if self.exact else [own]:
                picked = {k: v[np.asarray(batch) - group.start] for k, v in hparams.items()}
                tables.append(
                    run_chunked(selected, keys, picked, chunk, num_configs=len(batch), exact=True)
                )
        table = {name: np.concatenate([t[name] for t in tables]) for name in names}
        index = np.searchsorted(rows, self.reference_rows).astype(np.int32)
        return table, np.where(self.reference_rows >= 0, index, -1).astype(np.int32)

    def _hparams(self, group: Group, per_config, per_seed) -> dict[str, np.ndarray]:
        """The group's hyperparameters: its policy's (defaults, fixed, swept), then its rows of
        the per-configuration and per-seed arrays."""
        rows = slice(group.start, group.stop)
        name, _ = self._policy(group)
        hparams = policy_hparams(name, self.plan.configs.iloc[rows], self.plan.fixed)
        for arrays in (per_config, per_seed):
            hparams.update({k: v[rows].astype(np.float32) for k, v in arrays.items()})
        return hparams

    def _reducer(self, rounds: int, per_run: tuple[str, ...]):
        rates = [t.hparams[0] for t in self.plan.trackers if "final_queue" in t.outputs]
        return make_reducer(
            self.dims, rounds, tuple(per_run), *rates[:1], extra=self.plan.reductions
        )

    def _batched(self, name, size, learner, rounds, reducer, seed_hparams):
        """The group's program: its runs, reduced by ``reducer`` when there is one."""
        plan = self.plan
        run = make_run(
            plan.env,
            plan.env_params,
            get_policy(name).build(plan.env_params.num_clients, size),
            rounds,
            trajectories=self.trajectories,
            env_hparams=plan.env_hparams,
            learner=learner,
            eval_every=plan.eval_every,
            trackers=tuple(plan.trackers),
        )
        # The environment's parameters are an argument of the program: traced, not constants.
        return make_batched_run(
            run,
            plan.data,
            seed_hparams=seed_hparams,
            reduce=reducer,
            params=plan.env_params,
            reducer_hparams=(REFERENCE,),
            reducer_reads=self._reducer_reads(),
        )

    def _reducer_reads(self) -> tuple[str, ...]:
        """The per-configuration hyperparameters a reduction reads: the plan's
        per-configuration arrays, the trackers' hyperparameters and the reference rows, not the
        policies' own (so that every group shares one compiled reduction)."""
        tracked = (name for tracker in self.plan.trackers for name in tracker.hparams)
        return (*self.plan.per_config, *tracked, REFERENCE)


def run_policy_grid(
    plan: Plan,
    *,
    rounds: int,
    seeds: Sequence[int],
    chunk_size: int,
    trajectories: bool = False,
    **options,
) -> Outputs:
    """Run every configuration of ``plan.configs`` over ``seeds``: outputs with axes
    [config, seed, ...], declared by the runs' own environment, learner and trackers
    (``jfl.outputs.Outputs``; ``PolicyGrid.run``'s ``options``: ``base_seed``, ``store``,
    ``show_progress``, ``layout``, ``on_device``, ``per_run``).

    One compiled program per policy and selection size (``plan.selection_size``: an int, or the
    name of a config column holding it per row); each group's rows must be contiguous.
    ``plan.per_config`` holds extra per-configuration arrays (leading axis ``len(configs)``):
    hyperparameters that are vectors, such as a fairness vector c [C, N]; ``plan.trackers``
    (``jfl.trackers``) are kept in every run, the hyperparameters they read taken from
    ``per_config`` or else from the column of that name; ``plan.per_seed`` holds
    per-(configuration, seed) arrays ([C, S, ...]) that each run reads for its own seed;
    ``plan.env_hparams`` names environment fields taken from the hyperparameters (see
    ``jfl.runner.make_run``). Federated runs: ``plan.learner(policy, size)`` builds each group's
    learner, ``plan.data`` is the ``jfl.fl.FederatedData`` every run reads, and
    ``plan.eval_every`` the evaluation period in rounds.
    """
    grid = PolicyGrid(plan, trajectories)
    return grid.run(rounds=rounds, seeds=seeds, chunk_size=chunk_size, **options)
