"""Running a sweep: one Tune experiment of trials (or its ``--resume``), and starting or joining Ray."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rllib_caps.algorithms.registry import declared, get_algorithm
from rllib_caps.core.ray_internals import count_tune_callbacks_by_name
from rllib_caps.core.ray_session import init_ray
from rllib_caps.data import DatasetError
from rllib_caps.data.validation import check_dataset
from rllib_caps.envs import TaskSpec
from rllib_caps.report.records import load_trials
from rllib_caps.sweeps.grid import describe_grid, grid_variants
from rllib_caps.sweeps.options import SweepError, SweepOptions
from rllib_caps.sweeps.packing import members_that_fit, packed_variants, packs
from rllib_caps.sweeps.plan import experiment_started, record_plan
from rllib_caps.sweeps.resources import TrialResources, plan_resources
from rllib_caps.sweeps.state_backup import (
    EXPERIMENT_STATE_PATTERN,
    StateLostError,
    low_space_message,
    repair_state,
    state_backup,
)
from rllib_caps.sweeps.tracking import tracking_callbacks
from rllib_caps.sweeps.trial_schema import ALGORITHM_SETTINGS, EVALUATED
from rllib_caps.sweeps.trials import (
    dataset_dir,
    declared_specs,
    describe_trial,
    missing_datasets,
    missing_datasets_message,
    scope_axis,
    trial_config,
    trial_name,
    unknown_settings,
)
from rllib_caps.utils.signals import tune_stops_on_interrupt

logger = logging.getLogger("rllib_caps.tune")

CHECKPOINTS_KEPT = 2  # of each trial, the newest (Tune's num_to_keep)


def setup_dict(options: SweepOptions, resources: TrialResources) -> dict[str, Any]:
    """The part of every trial config that the whole sweep shares."""
    return {"data_root": str(Path(options.data_root).resolve()), "training": options.training_settings(),
            "overrides": options.overrides, "resources": {"cpus": resources.cpus, "gpus": resources.gpus},
            EVALUATED: {axis.name: options.values(axis) for axis in declared("axes").values() if axis.evaluated},
            ALGORITHM_SETTINGS: dict(options.algorithm_settings), **declared_specs(options.task_specs())}


def check_trials(options: SweepOptions, tasks: Sequence[TaskSpec], setup: Mapping[str, Any]) -> None:
    """Checks every task's dataset (all missing ones named in one message) and builds and validates every
    planned (algorithm, task, axes) config in the driver, so mistakes fail before Tune starts."""
    missing = missing_datasets(options.data_root, tasks)
    if missing:
        raise SweepError(missing_datasets_message(options.data_root, missing))
    for task in tasks:
        try:
            check_dataset(dataset_dir(options.data_root, task), task=task.name, obs_dim=task.obs_dim,
                          act_dim=task.act_dim, verify=options.verify)
        except DatasetError as err:
            raise SweepError(f"--data-root {options.data_root}: {err}") from err
    for scope, settings in [("training", setup["training"]), *setup["overrides"].items()]:
        unknown = unknown_settings(options.algos, {k: v for k, v in (settings or {}).items()
                                                   if scope_axis(k) is None})
        if unknown:
            raise SweepError(f"{scope if scope == 'training' else 'overrides.' + scope}: settings {unknown} belong "
                             f"to none of the algorithms {options.algos}")
    for variant in grid_variants(options, tasks):
        trial = {"variant": variant, "seed": options.seeds[0], "setup": setup}
        try:
            config = trial_config(trial)
            config.validate()
        except (TypeError, ValueError) as err:
            flags = ", ".join(f"--{axis.option.replace('_', '-')}"
                              for axis in get_algorithm(variant["algo"]).trained_axes if axis.option)
            raise SweepError(f"{describe_trial(trial)}: invalid training settings (--config training/overrides, or a "
                             f"flag: --steps, --eval-every{', ' + flags if flags else ''}): {err}") from err
        if config.evaluation_interval is None:
            raise SweepError("training.eval_episodes (--eval-episodes) must be >= 1: a trial's score is its "
                             "evaluation")


def check_experiment_dir(path: Path, resume: bool) -> None:
    """A new experiment must not overwrite one (a directory with only its plan is none yet); ``--resume`` needs
    one."""
    if resume and not path.exists():
        raise SweepError(f"--resume: no experiment at {path} (check --storage and --name)")
    if not resume and experiment_started(path):
        raise SweepError(f"{path} already exists: continue it with --resume, or pick another --name")


def experiment_state_saved(path: Path) -> bool:
    """Whether Tune saved an experiment state in ``path`` to resume. ``Tuner.can_restore`` looks only for the tuner's
    file, which Tune writes before its first ``experiment_state-*.json``: a driver killed in between leaves a
    directory that Tune would "resume" with no trials."""
    from ray import tune

    return tune.Tuner.can_restore(str(path)) and any(path.glob(EXPERIMENT_STATE_PATTERN))


def resumable(experiment_dir: Path) -> bool:
    """``--resume``: whether ``experiment_dir`` holds a Tune experiment state to continue, put back from its last good
    copy where a kill or a full disk damaged it (``repair_state``). False, with a warning, where the sweep was stopped
    before Tune saved a whole state and no trial had finished: the sweep then starts there afresh, its damaged state
    files without a copy deleted. Raises ``SweepError`` where trials finished but no state records them."""
    try:
        repair_state(experiment_dir)
    except StateLostError as err:
        if load_trials(experiment_dir)[0]:
            raise
        for path in err.paths:
            path.unlink()
        lost = f"a damaged Tune state with no earlier copy ({', '.join(path.name for path in err.paths)}: deleted)"
    else:
        if experiment_state_saved(experiment_dir):
            return True
        if load_trials(experiment_dir)[0]:
            raise SweepError(f"--resume: {experiment_dir} holds finished trials but no Tune experiment state to "
                             "resume them with")
        lost = "no Tune experiment state"
    logger.warning("--resume: %s holds %s (the sweep was stopped before Tune saved its state, and no trial had "
                   "finished): starting it there afresh", experiment_dir, lost)
    return False


def _trial_name(trial: Any) -> str:
    return trial_name(trial.config, trial.trial_id)


def run_experiment(options: SweepOptions, experiment_dir: Path, param_space: dict[str, Any], *,
                   concurrency: int, resume: bool, search_alg: Any = None, num_samples: int = 1) -> Any:
    """Runs (or with ``resume``, continues) one Tune experiment of trials, logged to the sweep's trackers
    (``rllib_caps.sweeps.tracking``; a resumed experiment keeps those it started with); returns the ResultGrid."""
    from ray import tune

    from rllib_caps.sweeps.console import SweepConsole, tune_console, tune_loggers, tune_verbosity
    from rllib_caps.sweeps.trainable import SweepTrial

    trainable = SweepTrial
    check_experiment_dir(experiment_dir, resume)
    count_tune_callbacks_by_name()  # Tune's usage tag, without importing W&B and MLflow (ray_internals)
    if resume and resumable(experiment_dir):
        logger.info("resuming %s: finished trials are kept, unfinished and errored ones continue", experiment_dir)
        tuner = tune.Tuner.restore(str(experiment_dir), trainable=trainable, resume_errored=True)
    else:
        callbacks = [SweepConsole(options.output), state_backup(experiment_dir), *tune_loggers(),
                     *tracking_callbacks(options)]
        tuner = tune.Tuner(
            trainable,
            param_space=param_space,
            tune_config=tune.TuneConfig(search_alg=search_alg, num_samples=num_samples,
                                        max_concurrent_trials=concurrency, reuse_actors=options.reuse_actors,
                                        trial_name_creator=_trial_name, trial_dirname_creator=_trial_name),
            run_config=tune.RunConfig(
                name=experiment_dir.name, storage_path=str(experiment_dir.parent),
                failure_config=tune.FailureConfig(max_failures=options.max_failures),
                checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=options.checkpoint_every,
                                                        checkpoint_at_end=True,
                                                        num_to_keep=CHECKPOINTS_KEPT),
                callbacks=callbacks, verbose=tune_verbosity(options.output),
            ),
        )
    with tune_console(options.output), tune_stops_on_interrupt() as interrupt:
        try:
            results = tuner.fit()
        except Exception as err:
            if (message := low_space_message(experiment_dir)) is None:
                raise
            raise SweepError(f"{message} ({type(err).__name__}: {err})") from err
    interrupt.raise_if_received()
    if any(result.error for result in results) and (message := low_space_message(experiment_dir)):
        logger.error("%s", message)
    return results


def tune_variants(options: SweepOptions, tasks: Sequence[TaskSpec], cluster_cpus: float | None = None
                  ) -> list[dict[str, Any]]:
    """The grid's (algorithm, task, axes) variants; packed (``rllib_caps.sweeps.packing``), the Tune trials'
    variants, each with its seed or its population's members (as many as fit ``cluster_cpus`` CPUs)."""
    variants = grid_variants(options, tasks)
    if not packs(options):
        return variants
    return packed_variants(variants, options.seeds, members_that_fit(options, cluster_cpus))


def grid_param_space(options: SweepOptions, variants: Sequence[dict[str, Any]], setup: dict[str, Any]
                     ) -> dict[str, Any]:
    """``tune_variants``' variants × seed as grid searches; packed, one grid search of the variants, which hold
    their seeds already. ``setup`` is shared."""
    from ray import tune

    seeds = {} if packs(options) else {"seed": tune.grid_search(list(options.seeds))}
    return {"variant": tune.grid_search(list(variants)), **seeds, "setup": setup}


def run_sweep(options: SweepOptions) -> Path:
    """The grid sweep: one Tune experiment of every algorithm's (task, axes) × seed trials, placed together on
    the cluster's CPUs/GPUs, or packed into populations (``--pack``); returns the experiment directory."""
    import ray

    tasks = options.task_specs()
    cluster = ray.cluster_resources()
    cluster_cpus = cluster.get("CPU", 0)
    variants = tune_variants(options, tasks, cluster_cpus)
    num_trials = len(variants) * (1 if packs(options) else len(options.seeds))
    resources = plan_resources(num_trials, cluster_cpus, cluster.get("GPU", 0), num_gpus=options.num_gpus,
                               cpus_per_trial=options.cpus_per_trial, gpus_per_trial=options.gpus_per_trial,
                               max_concurrent=options.max_concurrent)
    setup = setup_dict(options, resources)
    check_trials(options, tasks, setup)
    record_plan(options)
    logger.info("%s\n%d at a time, each %g CPU / %g GPU; results in %s", describe_grid(options, tasks, cluster_cpus),
                resources.concurrency, resources.cpus, resources.gpus, options.experiment_dir)
    run_experiment(options, options.experiment_dir, grid_param_space(options, variants, setup),
                   concurrency=resources.concurrency, resume=options.resume)
    return options.experiment_dir


def dashboard_message(url: str | None, joined: bool) -> str:
    """Where the dashboard is and how to get past Ray 2.60's token authentication."""
    if not url:
        return "the Ray cluster runs no dashboard"
    lines = [f"Ray dashboard: http://{url}" + (" (of the cluster this sweep joined)" if joined else "")]
    mode = os.environ.get("RAY_AUTH_MODE", "").lower()
    if mode == "disabled":
        lines.append("  token authentication is off (RAY_AUTH_MODE=disabled): anyone who reaches the port can "
                     "use the cluster; keep it on 127.0.0.1 or behind an SSH tunnel")
    else:
        lines.append("  Ray token authentication: the dashboard asks for a token; paste the output of "
                     "`ray get-auth-token` (the file ~/.ray/auth_token"
                     + (" on the cluster's head node" if joined else "") + "). API clients send "
                     "`Authorization: Bearer <token>`. To run a local sweep without it: "
                     "RAY_AUTH_MODE=disabled python -m rllib_caps.tune ...")
    return "\n".join(lines)


def start_ray(address: str | None, dashboard: bool) -> str | None:
    """Joins ``address`` or starts local Ray (with the dashboard if asked); returns the dashboard message
    (None for a local run without the dashboard)."""

    try:
        if address:
            context = init_ray(address=address, log_to_driver=False)
        else:
            context = init_ray(address="local", include_dashboard=dashboard, dashboard_host="127.0.0.1",
                               log_to_driver=False)  # a new local Ray, never a cluster already running here
    except Exception as err:  # ray.init raises a bare Exception when its processes time out
        if address:
            raise SweepError(f"--address {address}: cannot join the Ray cluster: {err}") from err
        raise SweepError(f"local Ray did not start: {err} On a busy machine, retry; or start Ray once with "
                         "`ray start --head` and pass --address auto.") from err
    if not (dashboard or address):
        return None
    return dashboard_message(context.dashboard_url, joined=bool(address))
