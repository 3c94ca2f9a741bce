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
sweep's environment keeps them there (no network, no API key; ``wandb sync`` uploads them later). The logging actors
use the driver's W&B mode (``WANDB_MODE`` or ``wandb offline``'s settings), given to them, and its API key, given
as an actor argument, never through a ``runtime_env`` (whose variables Ray logs; ``core.secrets``).
MLflow logs from the driver to its tracking URI; without one, to ``sqlite:///STORAGE/mlflow.db``.

Both are checked before Ray starts (``check_trackers``): W&B logging online and an http(s) MLflow URI must answer
within ``REACH_TIMEOUT_S``, or the sweep is refused with one line naming the flag (MLflow's client would retry for
minutes, and W&B would drop the history of a run it cannot upload and end without a word).
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from rllib_caps.sweeps.options import SweepError, SweepOptions

DEFAULT_WANDB_PROJECT = "rllib-caps"
MLFLOW_DB = "mlflow.db"  # the default store's file in --storage
SQLITE = "sqlite:///"
WANDB_MODE = "WANDB_MODE"  # wandb's own variable: online, offline or disabled
WANDB_API_KEY = "WANDB_API_KEY"  # wandb's own variable: the API key of an online run
WANDB_LOCAL_MODES = ("offline", "dryrun", "disabled")  # no server needed
REACH_TIMEOUT_S = 5.0  # to connect to a tracking server and have its first answer


def wandb_project(options: SweepOptions) -> str:
    """``--wandb``'s project, or ``DEFAULT_WANDB_PROJECT`` when it is given without one."""
    return DEFAULT_WANDB_PROJECT if options.wandb is True else str(options.wandb)


def mlflow_uri(options: SweepOptions) -> str:
    """``--mlflow``'s tracking URI, or without one a SQLite store beside the sweep's results."""
    if options.mlflow is True:
        return SQLITE + str(Path(options.storage).resolve() / MLFLOW_DB)
    return str(options.mlflow)


def wandb_settings() -> tuple[str, str]:
    """W&B's mode and server (``base_url``) as W&B itself resolves them for this process now: its settings files
    (``wandb offline``), then ``WANDB_MODE`` and ``WANDB_BASE_URL``. (W&B in this process is set up afresh for
    it, and torn down again with the service process it starts.)"""
    import wandb

    wandb.teardown()  # a set-up W&B keeps the settings of its time
    settings = wandb.setup().settings
    wandb.teardown()
    return settings.mode, settings.base_url


def unreachable(url: str) -> str | None:
    """Why the server at ``url`` cannot be reached, or None if it answers (any HTTP status, 401 or 404 too)."""
    try:
        with urllib.request.urlopen(url, timeout=REACH_TIMEOUT_S):
            return None
    except urllib.error.HTTPError:
        return None
    except (OSError, ValueError) as err:  # URLError, timeouts and refused connections are OSErrors
        return str(getattr(err, "reason", None) or err)


def wandb_has_key() -> bool:
    """Whether W&B finds an API key for this process (``WANDB_API_KEY``, or ``wandb login``'s), without asking its
    server or the user."""
    import wandb

    return bool(os.environ.get(WANDB_API_KEY)) or wandb.login(prompt=False, verify=False)


def check_trackers(options: SweepOptions) -> None:
    """A SweepError naming the flag if W&B logs online without an API key or its server does not answer, or if the
    http(s) MLflow tracking URI does not answer; each waits at most ``REACH_TIMEOUT_S``."""
    if options.wandb:
        mode, server = wandb_settings()
        if mode not in WANDB_LOCAL_MODES and not wandb_has_key():
            raise SweepError(f"--wandb {wandb_project(options)}: W&B logs online (mode {mode}) but has no API key; "
                             f"set {WANDB_API_KEY} or run `wandb login`, or log offline with {WANDB_MODE}=offline")
        reason = None if mode in WANDB_LOCAL_MODES else unreachable(server)
        if reason:
            raise SweepError(f"--wandb {wandb_project(options)}: W&B logs online (mode {mode}) but its server "
                             f"{server} cannot be reached ({reason}); log offline with {WANDB_MODE}=offline "
                             "(`wandb sync` uploads the runs later)")
    uri = mlflow_uri(options) if options.mlflow else ""
    if uri.startswith(("http://", "https://")):
        reason = unreachable(uri)
        if reason:
            raise SweepError(f"--mlflow {uri}: the MLflow tracking server cannot be reached ({reason}); check the "
                             "URI and that the server runs")


def _wandb_callback(options: SweepOptions) -> Any:
    from ray.air.integrations.wandb import WandbLoggerCallback

    from rllib_caps.core.ray_internals import WandbActorHook

    class CredentialsAsArgument(WandbActorHook, WandbLoggerCallback):
        """W&B's callback whose logging actors get the API key as an argument, not through a ``runtime_env``."""

    mode, _ = wandb_settings()  # the driver's: the logging actors' environment may lack it
    return CredentialsAsArgument(project=wandb_project(options), group=options.name, dir=str(options.experiment_dir),
                                 mode=mode)


def _mlflow_callback(options: SweepOptions) -> Any:
    from ray.air.integrations.mlflow import MLflowLoggerCallback

    uri = mlflow_uri(options)
    if uri.startswith(SQLITE):  # SQLite creates the file, not its directory
        Path(uri.removeprefix(SQLITE)).parent.mkdir(parents=True, exist_ok=True)
    return MLflowLoggerCallback(tracking_uri=uri, experiment_name=options.name)


def tracking_callbacks(options: SweepOptions) -> list[Any]:
    """The Tune callbacks of the sweep's trackers, each checked (``check_trackers``) and set up (credentials, store,
    experiment) before any trial starts: a SweepError naming the flag when one cannot be."""
    check_trackers(options)
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
