"""Experiment tracking through subclasses of Tune's own logger callbacks: Weights & Biases (``--wandb [PROJECT]``,
``WandbLoggerCallback``) and MLflow (``--mlflow [URI]``, ``MLflowLoggerCallback``), and ``--log-artifacts``.

Each logs one run per trial, named as the trial, with the trial's Tune config (its ``variant``, seed and the
sweep's shared ``setup``) as the run's config or params and every numeric result of every iteration as metrics
(``numeric_metrics``) at the result's gradient steps (W&B: its step, and ``gradient_steps`` every chart's x axis):
the training losses (``learners/default_policy/*_loss``), ``gradient_steps``, and the per-κ evaluation
(``evaluation/dsrl/thresholds/<κ>/...``) of the last iteration and of every ``--eval-every`` (a population logs an
evaluation during training at the iteration that ran beside it, with its own ``gradient_steps``). The sweep's name
groups the runs: the W&B group, the MLflow experiment.

Both log from the driver without holding up Tune's loop (which reports a callback taking over 0.5 s as "may be a
performance bottleneck"): W&B's runs share its one service process, which writes them (Ray's callback starts two Ray
actors per trial and waits for them on the trial's first result), and MLflow takes one batch per result, sent by a
thread of its own (Ray's callback sends one request per metric, ~110 per result, from the loop). W&B runs are
written into the experiment directory, ``STORAGE/NAME/wandb/offline-run-<time>-<trial id>/``. ``WANDB_MODE=offline``
in the sweep's environment keeps them there (no network, no API key; ``wandb sync`` uploads them later). No
credential goes through a Ray ``runtime_env`` (whose variables Ray logs; ``core.secrets``). MLflow logs to its
tracking URI; without one, to ``sqlite:///STORAGE/mlflow.db``, a new experiment keeping its artifacts in
``STORAGE/mlflow-artifacts``.

``--log-artifacts``: after the report, every finished trial's final checkpoint, the files its algorithm deploys it
as (``AlgorithmExtension.deployment_bundle``: CAPS's ONNX model and card) and the report's plots, in one more run
per tracker, ``NAME-artifacts`` (``log_artifacts``).

Both are checked before Ray starts (``check_trackers``): W&B logging online and an http(s) MLflow URI must answer
within ``REACH_TIMEOUT_S``, or the sweep is refused with one line naming the flag (MLflow's client would retry for
minutes, and W&B would drop the history of a run it cannot upload and end without a word).
"""

from __future__ import annotations

import logging
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from rllib_caps.core.keys import GRADIENT_STEPS
from rllib_caps.sweeps.options import SweepError, SweepOptions

logger = logging.getLogger("rllib_caps.tune")

DEFAULT_WANDB_PROJECT = "rllib-caps"
MLFLOW_DB = "mlflow.db"  # the default store's file in --storage
MLFLOW_ARTIFACTS = "mlflow-artifacts"  # a local store's artifacts, in --storage
MLFLOW_BATCH = 1000  # metrics per log_batch request (MLflow's limit)
NOT_METRICS = ("config", "done")  # result keys that no tracker logs as metrics
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
    http(s) MLflow tracking URI does not answer, each waiting at most ``REACH_TIMEOUT_S``; or if ``--log-artifacts``
    has no tracker."""
    if options.log_artifacts and not (options.wandb or options.mlflow):
        raise SweepError("--log-artifacts logs to the sweep's trackers: add --wandb, --mlflow or both")
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


def numeric_metrics(result: Mapping[str, Any]) -> dict[str, float]:
    """A Tune result's numbers, flattened with ``/`` (``evaluation/dsrl/thresholds/10/normalized_cost``): what both
    trackers log. The trial's config, Tune's ``done`` and text (dates, hosts) are left out."""
    from ray.tune.utils import flatten_dict

    flat = flatten_dict({k: v for k, v in result.items() if k not in NOT_METRICS}, delimiter="/")
    return {k: float(v) for k, v in flat.items() if isinstance(v, (int, float, np.number))}


def _wandb_callback(options: SweepOptions) -> Any:
    from ray.air.integrations.wandb import WandbLoggerCallback

    class DriverWandbLogger(WandbLoggerCallback):
        """Ray's W&B callback (its settings, its API-key checks), logging from the driver: one W&B run per trial,
        each result logged at its gradient steps. Ray's own starts two Ray actors per trial (a queue and a logging
        process) and waits for them in the loop that processes results: seconds per trial, each reported by Tune
        as "may be a performance bottleneck". Here W&B's one service process takes the runs' records without
        blocking the loop, and no ``runtime_env`` carries the API key (Ray would log it)."""

        def __getstate__(self) -> dict[str, Any]:  # Tune saves its callbacks with the experiment: no open run
            return {**self.__dict__, "runs": {}}

        def log_trial_start(self, trial: Any) -> None:
            import wandb

            runs = self.__dict__.setdefault("runs", {})
            if trial.trial_id in runs:
                return
            run = wandb.init(project=self.project, group=self.group, name=str(trial), id=trial.trial_id,
                             config=dict(trial.config), reinit="create_new", resume="allow",
                             settings=wandb.Settings(silent=True, console="off"), **self.kwargs)
            run.define_metric(GRADIENT_STEPS)
            run.define_metric("*", step_metric=GRADIENT_STEPS)  # every chart's x: gradient steps
            runs[trial.trial_id] = run

        def log_trial_result(self, iteration: int, trial: Any, result: dict) -> None:
            self.log_trial_start(trial)
            self.runs[trial.trial_id].log(numeric_metrics(result), step=int(result[GRADIENT_STEPS]))

        def log_trial_save(self, trial: Any) -> None:
            pass

        def log_trial_end(self, trial: Any, failed: bool = False) -> None:
            run = self.__dict__.setdefault("runs", {}).pop(trial.trial_id, None)
            if run is not None:
                run.finish(exit_code=1 if failed else 0)

        def on_experiment_end(self, trials: list, **info: Any) -> None:
            for trial in trials:
                self.log_trial_end(trial, failed=True)  # runs of trials that did not end (interrupted)

        def __del__(self) -> None:
            pass

    mode, _ = wandb_settings()
    return DriverWandbLogger(project=wandb_project(options), group=options.name, dir=str(options.experiment_dir),
                             mode=mode)


def mlflow_artifact_location(options: SweepOptions) -> str | None:
    """Where a new MLflow experiment of the sweep keeps its artifacts: ``STORAGE/MLFLOW_ARTIFACTS`` for a local
    store (MLflow's default would be ``./mlruns`` in the working directory); a tracking server's own (None)."""
    if mlflow_uri(options).startswith(("http://", "https://")):
        return None
    return (Path(options.storage).resolve() / MLFLOW_ARTIFACTS).as_uri()


def _mlflow_callback(options: SweepOptions) -> Any:
    import mlflow
    from ray.air.integrations.mlflow import MLflowLoggerCallback

    class BatchedMLflowLogger(MLflowLoggerCallback):
        """Ray's MLflow callback, its experiment created with the sweep's artifact location, each trial's params and
        each result's metrics logged in one request (Ray's logs one request per value: ~110 SQLite transactions per
        result, seconds in the loop that processes results), at the result's gradient steps. The requests are sent
        in order by one thread of their own, so Tune's loop never waits on the store; the experiment's end waits for
        them."""

        def setup(self, *args: Any, **kwargs: Any) -> None:
            client = mlflow.MlflowClient(self.tracking_uri)
            if client.get_experiment_by_name(self.experiment_name) is None:
                client.create_experiment(self.experiment_name, artifact_location=mlflow_artifact_location(options))
            super().setup(*args, **kwargs)
            if "writer" not in self.__dict__:  # Tune sets its callbacks up again
                self.runs: dict[str, str] = {}  # trial id -> run id, of the writer thread
                self.writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mlflow")

        def __getstate__(self) -> dict[str, Any]:  # Tune saves its callbacks with the experiment: no thread
            return {k: v for k, v in self.__dict__.items() if k not in ("writer", "runs")}

        def _send(self, request: Callable[[mlflow.MlflowClient], None]) -> None:
            def send() -> None:
                try:
                    request(mlflow.MlflowClient(self.tracking_uri))
                except Exception as err:  # MLflow raises what its store raises; a lost value is not worth a sweep
                    logger.warning("--mlflow %s: %s: %s", self.tracking_uri, type(err).__name__, err)
            self.writer.submit(send)

        def log_trial_start(self, trial: Any) -> None:
            trial_id, name = trial.trial_id, str(trial)
            params = [mlflow.entities.Param(k, str(v)) for k, v in flatten_config(trial.config).items()]

            def start(client: mlflow.MlflowClient) -> None:
                if trial_id not in self.runs:
                    run = client.create_run(self.mlflow_util.experiment_id, run_name=name,
                                            tags={**(self.tags or {}), "trial_name": name})
                    self.runs[trial_id] = run.info.run_id
                    client.log_batch(run.info.run_id, params=params)
            self._send(start)

        def log_trial_result(self, iteration: int, trial: Any, result: dict) -> None:
            self.log_trial_start(trial)
            trial_id, stamp, step = trial.trial_id, int(time.time() * 1000), int(result[GRADIENT_STEPS])
            metrics = [mlflow.entities.Metric(k, v, stamp, step) for k, v in numeric_metrics(result).items()]

            def log(client: mlflow.MlflowClient) -> None:
                for start in range(0, len(metrics), MLFLOW_BATCH):
                    client.log_batch(self.runs[trial_id], metrics=metrics[start:start + MLFLOW_BATCH])
            self._send(log)

        def log_trial_end(self, trial: Any, failed: bool = False) -> None:
            trial_id = trial.trial_id

            def end(client: mlflow.MlflowClient) -> None:
                if trial_id in self.runs:
                    client.set_terminated(self.runs.pop(trial_id), "FAILED" if failed else "FINISHED")
            self._send(end)

        def on_experiment_end(self, trials: list, **info: Any) -> None:
            self.writer.shutdown(wait=True)

    uri = mlflow_uri(options)
    if uri.startswith(SQLITE):  # SQLite creates the file, not its directory
        Path(uri.removeprefix(SQLITE)).parent.mkdir(parents=True, exist_ok=True)
    return BatchedMLflowLogger(tracking_uri=uri, experiment_name=options.name)


def flatten_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's Tune config flattened with ``/`` (``variant/num_heads``): the MLflow run's params."""
    from ray.tune.utils import flatten_dict

    return flatten_dict(dict(config), delimiter="/")


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


def artifacts_run_name(options: SweepOptions) -> str:
    """The run of each tracker that ``--log-artifacts`` logs into, beside the trials' runs."""
    return f"{options.name}-artifacts"


def sweep_artifacts(experiment_dir: Path, report_dir: Path, bundles: Path) -> dict[str, list[Path]]:
    """What ``--log-artifacts`` logs, by artifact name: each finished trial's final checkpoint
    (``checkpoint-<trial>``, a directory), the files its algorithm deploys it as where it has any (``bundle-<trial>``,
    written under ``bundles``: ``AlgorithmExtension.deployment_bundle``), and the report's plots (``report``)."""
    from rllib_caps.report.records import checkpoint_evaluation, load_trials

    artifacts: dict[str, list[Path]] = {}
    for record in load_trials(experiment_dir)[0]:
        name = "-".join(filter(None, (record.trial_dir.name, record.member)))
        if record.checkpoint is None or f"checkpoint-{name}" in artifacts:
            continue
        artifacts[f"checkpoint-{name}"] = [record.checkpoint]
        out = bundles / name
        out.mkdir(parents=True, exist_ok=True)
        bundle = record.entry.extension.deployment_bundle(record.checkpoint, out,
                                                          checkpoint_evaluation(record.checkpoint))
        if bundle:
            artifacts[f"bundle-{name}"] = bundle
    artifacts["report"] = sorted(report_dir.glob("*.png"))
    return artifacts


def _log_to_wandb(options: SweepOptions, artifacts: Mapping[str, list[Path]]) -> None:
    import wandb

    mode, _ = wandb_settings()
    run = wandb.init(project=wandb_project(options), group=options.name, name=artifacts_run_name(options),
                     job_type="artifacts", dir=str(options.experiment_dir), mode=mode, reinit="create_new",
                     settings=wandb.Settings(silent=True, console="off"))
    for name, paths in artifacts.items():
        artifact = wandb.Artifact(name, type="report" if name == "report" else "model")
        for path in paths:  # file by file: add_dir prints a line per directory
            for file in sorted(path.rglob("*")) if path.is_dir() else [path]:
                if file.is_file():
                    artifact.add_file(str(file), name=str(file.relative_to(path.parent)))
        run.log_artifact(artifact)
    run.finish()


def _log_to_mlflow(options: SweepOptions, artifacts: Mapping[str, list[Path]]) -> None:
    import mlflow

    client = mlflow.MlflowClient(mlflow_uri(options))
    experiment = client.get_experiment_by_name(options.name)
    run = client.create_run(experiment.experiment_id, run_name=artifacts_run_name(options))
    for name, paths in artifacts.items():
        for path in paths:
            if path.is_dir():
                client.log_artifacts(run.info.run_id, str(path), f"{name}/{path.name}")
            else:
                client.log_artifact(run.info.run_id, str(path), name)
    client.set_terminated(run.info.run_id)


def log_artifacts(options: SweepOptions, report_dir: Path) -> None:
    """``--log-artifacts``: after the report, ``sweep_artifacts`` logged to each of the sweep's trackers, in one run
    named ``artifacts_run_name`` in the sweep's W&B group and MLflow experiment; a SweepError naming the flag when a
    tracker refuses."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="bundles-", dir=options.experiment_dir) as bundles:
        artifacts = sweep_artifacts(options.experiment_dir, report_dir, Path(bundles))
        for flag, log in (("wandb", _log_to_wandb), ("mlflow", _log_to_mlflow)):
            if not getattr(options, flag):
                continue
            try:
                log(options, artifacts)
            except Exception as err:  # the libraries raise what their backends raise
                raise SweepError(f"--log-artifacts --{flag}: {type(err).__name__}: {err}") from err
