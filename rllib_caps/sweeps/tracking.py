"""Experiment tracking through Tune's own logger callbacks: Weights & Biases (``--wandb [PROJECT]``,
``WandbLoggerCallback``) and MLflow (``--mlflow [URI]``, ``MLflowLoggerCallback``).

Each logs one run per trial, named as the trial, with the trial's Tune config (its ``variant``, seed and the
sweep's shared ``setup``) as the run's config or params and every numeric result of every iteration as metrics:
the training losses (``learners/default_policy/*_loss``), ``gradient_steps``, and the per-κ evaluation
(``evaluation/dsrl/thresholds/<κ>/...``) of the last iteration and of every ``--eval-every`` (a population logs an
evaluation during training at the iteration that ran beside it, with its own ``gradient_steps``). The sweep's name
groups the runs: the W&B group, the MLflow experiment.

W&B runs are written into the experiment directory, ``STORAGE/NAME/wandb/offline-run-<time>-<trial id>/`` (the
logging actors run on the driver's node and write there directly: a trial directory is Tune's local copy, synced
at its own times, which could take a run before W&B has finished writing it). ``WANDB_MODE=offline`` in the
sweep's environment keeps them there (no network, no API key; ``wandb sync`` uploads them later), and is passed
on to the logging actors.
MLflow logs from the driver to its tracking URI; without one, to ``sqlite:///STORAGE/mlflow.db``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rllib_caps.sweeps.options import SweepError, SweepOptions

DEFAULT_WANDB_PROJECT = "rllib-caps"
MLFLOW_DB = "mlflow.db"  # the default store's file in --storage
SQLITE = "sqlite:///"
WANDB_MODE = "WANDB_MODE"  # wandb's own variable: online, offline or disabled


def wandb_project(options: SweepOptions) -> str:
    """``--wandb``'s project, or ``DEFAULT_WANDB_PROJECT`` when it is given without one."""
    return DEFAULT_WANDB_PROJECT if options.wandb is True else str(options.wandb)


def mlflow_uri(options: SweepOptions) -> str:
    """``--mlflow``'s tracking URI, or without one a SQLite store beside the sweep's results."""
    if options.mlflow is True:
        return SQLITE + str(Path(options.storage).resolve() / MLFLOW_DB)
    return str(options.mlflow)


def _wandb_callback(options: SweepOptions) -> Any:
    from ray.air.integrations.wandb import WandbLoggerCallback

    mode = os.environ.get(WANDB_MODE)  # the logging actors run in Ray workers, whose environment may lack it
    return WandbLoggerCallback(project=wandb_project(options), group=options.name, dir=str(options.experiment_dir),
                               **({"mode": mode} if mode else {}))


def _mlflow_callback(options: SweepOptions) -> Any:
    from ray.air.integrations.mlflow import MLflowLoggerCallback

    uri = mlflow_uri(options)
    if uri.startswith(SQLITE):  # SQLite creates the file, not its directory
        Path(uri.removeprefix(SQLITE)).parent.mkdir(parents=True, exist_ok=True)
    return MLflowLoggerCallback(tracking_uri=uri, experiment_name=options.name)


def tracking_callbacks(options: SweepOptions) -> list[Any]:
    """The Tune callbacks of the sweep's trackers, each set up (credentials, store, experiment) before any trial
    starts: a SweepError naming the flag when one cannot be."""
    callbacks = []
    for flag, target, make, hint in (
            ("wandb", wandb_project, _wandb_callback, f" ({WANDB_MODE}=offline logs without an account)"),
            ("mlflow", mlflow_uri, _mlflow_callback, "")):
        if not getattr(options, flag):
            continue
        try:
            callback = make(options)
            callback.setup()
        except Exception as err:  # the libraries raise what their backends raise (ValueError, MlflowException, ...)
            raise SweepError(f"--{flag} {target(options)}: {type(err).__name__}: {err}{hint}") from err
        callbacks.append(callback)
    return callbacks
