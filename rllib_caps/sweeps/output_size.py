"""The disk space a sweep will write under ``--storage``, estimated before Ray starts: every trial's checkpoints
(``CHECKPOINTS_AT_ONCE`` of each, their size from the trial's RLModule: ``core.checkpoint_size``) and its results
(``RESULT_BYTES_PER_ITERATION`` per training iteration)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rllib_caps.core.checkpoint_size import config_checkpoint_bytes
from rllib_caps.data import DatasetError
from rllib_caps.envs import TaskSpec
from rllib_caps.sweeps.grid import grid_variants
from rllib_caps.sweeps.options import SweepError, SweepOptions
from rllib_caps.sweeps.resources import TrialResources
from rllib_caps.sweeps.runner import CHECKPOINTS_KEPT, setup_dict
from rllib_caps.sweeps.trials import trial_config
from rllib_caps.utils.disk import (
    NotEnoughSpaceError,
    OutputEstimate,
    bytes_under,
    check_free_space,
    mean_checkpoint_bytes,
)

# Tune keeps the newest CHECKPOINTS_KEPT of a trial; one more is on the disk while a new one is written before the
# oldest is deleted, or while the last good state (state_backup.py) still links one that Tune rotated out.
CHECKPOINTS_AT_ONCE = CHECKPOINTS_KEPT + 1
# A trial's result.json, progress.csv and TensorBoard events per iteration: measured 7.2 kB in a smoke CAPS trial
# (145 kB for 20 iterations), doubled for the evaluation results, critic variants and trackers' files.
RESULT_BYTES_PER_ITERATION = 16 * 2**10


def trained_variants(options: SweepOptions, tasks: Sequence[TaskSpec]) -> list[tuple[dict[str, Any], int]]:
    """Each distinct trained configuration ``{algo, task, <axes>}`` of the sweep and how many trials train it (its
    seeds; for a search, its samples × seeds). Packing changes neither: a packed trial checkpoints every member."""
    trials = len(options.seeds) * (options.num_samples if options.search else 1)
    return [(variant, trials) for variant in grid_variants(options, tasks)]


def sweep_output_estimate(options: SweepOptions, tasks: Sequence[TaskSpec]) -> OutputEstimate | None:
    """The estimate of what the sweep writes under ``--storage`` (less what a resumed one holds already), or None
    when a trial's config does not build (``runner.check_trials`` names the mistake once Ray runs). Builds every
    trained configuration's config (the datasets must be there) and its RLModule on the meta device."""
    setup = setup_dict(options, TrialResources(cpus=1, gpus=0, concurrency=1))  # resources change no size
    sizes, other = [], 0
    for variant, trials in trained_variants(options, tasks):
        try:
            config = trial_config({"variant": variant, "seed": options.seeds[0], "setup": setup})
            size = config_checkpoint_bytes(config)
        except (TypeError, ValueError, DatasetError):
            return None
        sizes += [size] * trials
        other += trials * config.num_iterations * RESULT_BYTES_PER_ITERATION
    return OutputEstimate(runs=len(sizes), run_noun="trial", checkpoints=CHECKPOINTS_AT_ONCE,
                          checkpoint_bytes=mean_checkpoint_bytes(sizes), other_bytes=other,
                          written=bytes_under(options.experiment_dir) if options.resume else 0)


def check_sweep_space(options: SweepOptions, tasks: Sequence[TaskSpec]) -> None:
    """Refuses a sweep whose estimate (``sweep_output_estimate``) exceeds the free space of ``--storage``: a
    SweepError naming the flag, the estimate and the free space."""
    estimate = sweep_output_estimate(options, tasks)
    try:
        if estimate is not None:
            check_free_space("--storage", options.experiment_dir, "the sweep", estimate)
    except NotEnoughSpaceError as err:
        raise SweepError(str(err)) from err
