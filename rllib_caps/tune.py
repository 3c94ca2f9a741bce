"""Sweep CAPS over tasks × seeds × K on Ray Tune, then print the paper's table.

    python -m rllib_caps.tune --config tune_configs/quickstart.yaml
    python -m rllib_caps.tune --tasks bullet --seeds 0 10 20 --heads 2 4 8 --config tune_configs/paper.yaml
    python -m rllib_caps.tune --config tune_configs/paper.yaml --name paper --resume   # after an interruption
    python -m rllib_caps.tune --search optuna --config tune_configs/optuna.yaml --tasks BallCircle

Every trial is the CAPS RLlib algorithm (:class:`CAPSTrial`) for one (task, K, seed). Its Tune config is
small (``task``, ``heads``, ``seed`` and the shared ``setup``); :func:`caps_config` turns it into the
``CAPSConfig`` with :func:`rllib_caps.train.build_config`. The last training iteration evaluates at the
task's thresholds and ends the trial; every result carries top-level ``normalized_reward``,
``normalized_cost``, ``safe`` and ``objective`` (NaN before that evaluation), so Tune's strict metric
check and searchers see them in every result.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from rllib_caps.tasks import SUITES, TaskSpec, get_task, select_tasks

logger = logging.getLogger("rllib_caps.tune")

TRIAL_INDEX = "__trial_index__"  # ray.tune.search.repeater.TRIAL_INDEX: the repeat (seed) index under Repeater
SEARCHED_KEYS = ("awr_beta", "lambdas")  # what `--search optuna` tunes; under the trial config's "search" key
METRIC_KEYS = ("normalized_reward", "normalized_cost", "safe", "objective")
INFEASIBLE_FLOOR = -1000.0  # objective of a config with normalised cost > 1, minus its violation


class SweepError(ValueError):
    """A sweep that cannot start; the message names the flag, file or path to fix."""


# ----------------------------------------------------------------------------------------------------------
# Options: command line over YAML over defaults
# ----------------------------------------------------------------------------------------------------------

@dataclass
class SweepOptions:
    """Everything a sweep needs. Each field is a flag (``--data-root``) and a YAML key (``data_root``)."""

    tasks: str = "BallCircle"
    seeds: list[int] = field(default_factory=lambda: [0, 10, 20])
    heads: list[int] = field(default_factory=lambda: [2])
    data_root: str = "datasets"
    storage: str = "results"
    name: str = "sweep"
    steps: int | None = None  # overrides training.steps
    eval_episodes: int | None = None  # overrides training.eval_episodes
    eval_runners: int | None = None  # overrides training.eval_runners
    num_gpus: float = 0.0
    gpus_per_trial: float | None = None
    cpus_per_trial: float = 1.0
    max_concurrent: int | None = None
    max_failures: int = 2
    checkpoint_every: int = 10
    address: str | None = None
    dashboard: bool = False
    resume: bool = False
    search: str | None = None
    num_samples: int = 10
    training: dict[str, Any] = field(default_factory=dict)
    overrides: dict[str, Any] = field(default_factory=dict)
    search_space: dict[str, Any] = field(default_factory=dict)  # Optuna ranges (rllib_caps.search)

    @property
    def experiment_dir(self) -> Path:
        return Path(self.storage).resolve() / self.name

    def task_specs(self) -> list[TaskSpec]:
        try:
            return select_tasks(self.tasks)
        except ValueError as err:
            raise SweepError(f"--tasks: {err}") from err

    def training_settings(self) -> dict[str, Any]:
        """The YAML ``training`` mapping with the --steps/--eval-episodes/--eval-runners overrides."""
        flags = {"steps": self.steps, "eval_episodes": self.eval_episodes, "eval_runners": self.eval_runners}
        return {**self.training, **{k: v for k, v in flags.items() if v is not None}}


def load_config_file(path: str | Path) -> dict[str, Any]:
    """A sweep YAML: any option by its flag's name with underscores, plus ``training``, ``overrides`` and
    ``search_space``."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as err:
        raise SweepError(f"--config {path}: {err.strerror}") from err
    except yaml.YAMLError as err:
        raise SweepError(f"--config {path}: not valid YAML: {err}") from err
    if not isinstance(data, dict):
        raise SweepError(f"--config {path}: expected a mapping of options, got {type(data).__name__}")
    known = {f.name for f in fields(SweepOptions)} - {"resume", "address", "dashboard"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise SweepError(f"--config {path}: unknown keys {unknown}; valid keys: {sorted(known)}")
    if isinstance(data.get("tasks"), list):
        data["tasks"] = ",".join(data["tasks"])
    return data


def resolve_options(args: argparse.Namespace) -> SweepOptions:
    """Flags given on the command line win over the ``--config`` file, which wins over the defaults."""
    file_options = load_config_file(args.config) if args.config else {}
    if args.name is None and args.config and "name" not in file_options:
        file_options["name"] = Path(args.config).stem
    given = {k: v for k, v in vars(args).items() if k != "config" and v is not None}
    return SweepOptions(**{**file_options, **given})


# ----------------------------------------------------------------------------------------------------------
# One trial: Tune config -> CAPSConfig
# ----------------------------------------------------------------------------------------------------------

def trial_settings(training: Mapping[str, Any], overrides: Mapping[str, Any], task: TaskSpec,
                   heads: int) -> dict[str, Any]:
    """``training``, then ``overrides[suite]``, then ``overrides[task]``; inside each, ``K<heads>`` wins."""
    settings = dict(training)
    for scope in (task.suite, task.name):
        scoped = dict(overrides.get(scope) or {})
        per_k = {k: scoped.pop(k) for k in list(scoped) if k.startswith("K") and k[1:].isdigit()}
        settings.update(scoped)
        settings.update(per_k.get(f"K{heads}") or {})
    return settings


def dataset_dir(data_root: str | Path, task: TaskSpec) -> Path:
    """``DATA_ROOT/<ShortName>``, or a SweepError that says how to make it."""
    path = Path(data_root).resolve() / task.name
    if not (path / "data").is_dir():
        raise SweepError(
            f"--data-root {data_root}: no converted dataset for {task.name} at {path}. Convert DSRL's data with "
            f"`python -m data_conversion.dsrl_to_parquet --task {task.name} --out {path}`, or collect it from the "
            f"simulator with `python -m data_conversion.collect --task {task.name} --out {task.name}.hdf5` and "
            f"convert that file with `--h5 {task.name}.hdf5`."
        )
    return path


def trial_seed(trial: Mapping[str, Any]) -> int:
    """``seed``, or under a Repeater (search) ``seeds[__trial_index__]``."""
    return int(trial["seed"]) if "seed" in trial else int(trial["seeds"][trial.get(TRIAL_INDEX, 0)])


def caps_config(trial: Mapping[str, Any]):
    """The ``CAPSConfig`` of one trial config ``{task, heads, seed | seeds, [search], setup}``."""
    from rllib_caps.train import build_config

    setup = trial["setup"]
    task = get_task(trial["task"])
    settings = trial_settings(setup["training"], setup["overrides"], task, trial["heads"])
    settings.update({k: v for k, v in (trial.get("search") or {}).items() if k in SEARCHED_KEYS})
    res = setup["resources"]
    runners = int(settings.get("eval_runners", 0))
    config = build_config(task.name, dataset_dir(setup["data_root"], task), heads=int(trial["heads"]),
                          seed=trial_seed(trial), num_gpus_per_learner=res["gpus"], **settings)
    main_cpus = res["cpus"] / 2 if runners else res["cpus"]  # evaluation runs after training: they share
    return (config.learners(num_cpus_per_learner=main_cpus)
            .resources(num_cpus_for_main_process=main_cpus)
            .env_runners(num_cpus_per_env_runner=res["cpus"] / 2 / max(runners, 1)))


def constrained_objective(normalized_reward: float, normalized_cost: float) -> float:
    """Lexicographic score: a safe result (cost ≤ 1) scores its reward; an unsafe one scores below every
    safe one (normalised rewards above ``INFEASIBLE_FLOOR``), lower the more it violates."""
    if normalized_cost <= 1.0:
        return normalized_reward
    return INFEASIBLE_FLOOR - (normalized_cost - 1.0)


def sweep_metrics(evaluation: Mapping[str, Any] | None) -> dict[str, float]:
    """Top-level metrics of a result: the mean over thresholds, or NaN before the final evaluation."""
    if evaluation is None:
        return dict.fromkeys(METRIC_KEYS, math.nan)
    mean = evaluation["mean"]
    return {"normalized_reward": mean["normalized_reward"], "normalized_cost": mean["normalized_cost"],
            "safe": mean["safe"],
            "objective": constrained_objective(mean["normalized_reward"], mean["normalized_cost"])}


def _define_tune_classes() -> None:
    """Defines :class:`CAPSTrial` and :class:`TrialLogger` on first use (see ``__getattr__``), so that importing
    this module, ``--help`` and argument errors do not wait for RLlib and Tune to import."""
    from ray.rllib.utils.metrics import EVALUATION_RESULTS
    from ray.tune import Callback
    from ray.tune.result import DONE

    from rllib_caps.caps.caps import CAPS

    class CAPSTrial(CAPS):
        """CAPS as a Tune trainable whose config names one (task, K, seed); ends after its evaluation."""

        def __init__(self, config: dict[str, Any], **kwargs: Any) -> None:
            built = caps_config(config)
            self._iterations = built.evaluation_interval
            super().__init__(config=built, **kwargs)

        @classmethod
        def default_resource_request(cls, config: dict[str, Any]):
            return super().default_resource_request(caps_config(config).to_dict())

        def step(self) -> dict[str, Any]:
            result = super().step()
            metrics = sweep_metrics(result.get(EVALUATION_RESULTS, {}).get("caps"))
            return {**metrics, **result, DONE: self.iteration + 1 >= self._iterations}

    class TrialLogger(Callback):
        """Tune callback: one log line per finished trial with its normalised reward and cost."""

        def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            r, c = trial.last_result, trial.config
            logger.info("finished %s K=%s seed=%s: normalised reward %.3f, cost %.3f (%s)", c["task"], c["heads"],
                        trial_seed(c), r.get("normalized_reward", math.nan), r.get("normalized_cost", math.nan),
                        "safe" if r.get("safe") == 1 else "UNSAFE")

        def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            logger.error("trial %s K=%s seed=%s failed; see %s", trial.config["task"], trial.config["heads"],
                         trial_seed(trial.config), trial.path)

    for cls in (CAPSTrial, TrialLogger):
        cls.__module__, cls.__qualname__ = __name__, cls.__name__
        globals()[cls.__name__] = cls


def _tune_class(name: str) -> type:
    if name not in globals():
        _define_tune_classes()
    return globals()[name]


def __getattr__(name: str) -> Any:
    """Lazy module attributes: pickle finds ``rllib_caps.tune.CAPSTrial`` through this in Ray workers."""
    if name in ("CAPSTrial", "TrialLogger"):
        return _tune_class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ----------------------------------------------------------------------------------------------------------
# Resources
# ----------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TrialResources:
    """What one trial's placement group reserves, and how many trials run at once."""

    cpus: float
    gpus: float
    concurrency: int


def plan_resources(num_trials: int, cluster_cpus: float, cluster_gpus: float, *, num_gpus: float,
                   cpus_per_trial: float, gpus_per_trial: float | None,
                   max_concurrent: int | None) -> TrialResources:
    """Trials pack by CPUs (fractions allowed); the ``num_gpus`` GPUs are shared by the concurrent trials
    (at most 1 each, as each trial has one learner) unless ``gpus_per_trial`` is given."""
    if cpus_per_trial <= 0:
        raise SweepError(f"--cpus-per-trial must be > 0, got {cpus_per_trial}")
    if num_gpus > cluster_gpus:
        raise SweepError(f"--num-gpus {num_gpus:g}: the Ray cluster has only {cluster_gpus:g} GPUs")
    concurrency = min(num_trials, math.floor(cluster_cpus / cpus_per_trial + 1e-9), max_concurrent or num_trials)
    if gpus_per_trial:
        if gpus_per_trial > max(num_gpus, cluster_gpus):
            raise SweepError(f"--gpus-per-trial {gpus_per_trial:g}: only {max(num_gpus, cluster_gpus):g} GPUs")
        concurrency = min(concurrency, math.floor(max(num_gpus, cluster_gpus) / gpus_per_trial + 1e-9))
    if concurrency < 1:
        raise SweepError(f"--cpus-per-trial {cpus_per_trial:g}: the Ray cluster has only {cluster_cpus:g} CPUs")
    gpus = gpus_per_trial if gpus_per_trial else (min(1.0, num_gpus / concurrency) if num_gpus else 0.0)
    return TrialResources(cpus=cpus_per_trial, gpus=gpus, concurrency=concurrency)


# ----------------------------------------------------------------------------------------------------------
# Running experiments
# ----------------------------------------------------------------------------------------------------------

def setup_dict(options: SweepOptions, resources: TrialResources) -> dict[str, Any]:
    """The part of every trial config that the whole sweep shares."""
    return {"data_root": str(Path(options.data_root).resolve()), "training": options.training_settings(),
            "overrides": options.overrides, "resources": {"cpus": resources.cpus, "gpus": resources.gpus}}


def check_trials(options: SweepOptions, tasks: Sequence[TaskSpec], setup: Mapping[str, Any]) -> None:
    """Builds and validates every (task, K) config in the driver, so mistakes fail before Tune starts."""
    for task in tasks:
        dataset_dir(options.data_root, task)
        for heads in options.heads:
            try:
                config = caps_config({"task": task.name, "heads": heads, "seed": options.seeds[0], "setup": setup})
                config.validate()
            except (TypeError, ValueError) as err:
                raise SweepError(f"{task.name} K={heads}: invalid training settings "
                                 f"(--config training/overrides): {err}") from err
            if config.evaluation_interval is None:
                raise SweepError("training.eval_episodes (--eval-episodes) must be >= 1: a trial's score is its "
                                 "evaluation")


def check_experiment_dir(path: Path, resume: bool) -> None:
    """A new experiment must not overwrite one; ``--resume`` needs one."""
    if resume and not path.exists():
        raise SweepError(f"--resume: no experiment at {path} (check --storage and --name)")
    if not resume and path.exists():
        raise SweepError(f"{path} already exists: continue it with --resume, or pick another --name")


def _trial_name(trial: Any) -> str:
    c = trial.config
    return f"{c['task']}_K{c['heads']}_seed{trial_seed(c)}_{trial.trial_id}"


def run_experiment(options: SweepOptions, experiment_dir: Path, param_space: dict[str, Any], *,
                   concurrency: int, resume: bool, search_alg: Any = None, num_samples: int = 1) -> Any:
    """Runs (or with ``resume``, continues) one Tune experiment of CAPS trials; returns the ResultGrid."""
    from ray import tune

    trainable = _tune_class("CAPSTrial")
    check_experiment_dir(experiment_dir, resume)
    if resume:
        if not tune.Tuner.can_restore(str(experiment_dir)):
            raise SweepError(f"--resume: {experiment_dir} holds no Tune experiment state to resume")
        logger.info("resuming %s: finished trials are kept, unfinished and errored ones continue", experiment_dir)
        tuner = tune.Tuner.restore(str(experiment_dir), trainable=trainable, resume_errored=True)
    else:
        tuner = tune.Tuner(
            trainable,
            param_space=param_space,
            tune_config=tune.TuneConfig(search_alg=search_alg, num_samples=num_samples,
                                        max_concurrent_trials=concurrency, trial_name_creator=_trial_name,
                                        trial_dirname_creator=_trial_name),
            run_config=tune.RunConfig(
                name=experiment_dir.name, storage_path=str(experiment_dir.parent),
                failure_config=tune.FailureConfig(max_failures=options.max_failures),
                checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=options.checkpoint_every,
                                                        checkpoint_at_end=True, num_to_keep=2),
                callbacks=[_tune_class("TrialLogger")()], verbose=1,
            ),
        )
    return tuner.fit()


def grid_param_space(options: SweepOptions, tasks: Sequence[TaskSpec], setup: dict[str, Any]) -> dict[str, Any]:
    """task × K × seed as grid searches; ``setup`` is shared."""
    from ray import tune

    return {"task": tune.grid_search([t.name for t in tasks]), "heads": tune.grid_search(list(options.heads)),
            "seed": tune.grid_search(list(options.seeds)), "setup": setup}


def run_sweep(options: SweepOptions) -> Path:
    """The grid sweep: one Tune experiment of task × seed × K trials; returns the experiment directory."""
    import ray

    tasks = options.task_specs()
    num_trials = len(tasks) * len(options.seeds) * len(options.heads)
    resources = plan_resources(num_trials, ray.cluster_resources().get("CPU", 0),
                               ray.cluster_resources().get("GPU", 0), num_gpus=options.num_gpus,
                               cpus_per_trial=options.cpus_per_trial, gpus_per_trial=options.gpus_per_trial,
                               max_concurrent=options.max_concurrent)
    setup = setup_dict(options, resources)
    check_trials(options, tasks, setup)
    logger.info("%d trials (%d tasks × %d seeds × K in %s), %d at a time, each %g CPU / %g GPU; results in %s",
                num_trials, len(tasks), len(options.seeds), options.heads, resources.concurrency, resources.cpus,
                resources.gpus, options.experiment_dir)
    run_experiment(options, options.experiment_dir, grid_param_space(options, tasks, setup),
                   concurrency=resources.concurrency, resume=options.resume)
    return options.experiment_dir


# ----------------------------------------------------------------------------------------------------------
# Ray and the dashboard
# ----------------------------------------------------------------------------------------------------------

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
    import ray

    try:
        if address:
            context = ray.init(address=address, log_to_driver=False)
        else:
            context = ray.init(include_dashboard=dashboard, dashboard_host="127.0.0.1", log_to_driver=False)
    except Exception as err:  # ray.init raises a bare Exception when its processes time out
        if address:
            raise SweepError(f"--address {address}: cannot join the Ray cluster: {err}") from err
        raise SweepError(f"local Ray did not start: {err} On a busy machine, retry; or start Ray once with "
                         "`ray start --head` and pass --address auto.") from err
    if not (dashboard or address):
        return None
    return dashboard_message(context.dashboard_url, joined=bool(address))


# ----------------------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------------------

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m rllib_caps.tune",
        description="Train and evaluate CAPS on Ray Tune: one trial per task × seed × K (grid), or an Optuna "
                    "search over β and the middle heads' λ (--search optuna). Each trial evaluates the switching "
                    "policy at its task's three cost thresholds; at the end the paper's table (normalised reward "
                    "and cost, safe marks, suite averages) is printed and written next to the trials.",
        epilog="Every option can also be set in the --config YAML under its long name with underscores "
               "(e.g. data_root: datasets); flags on the command line win. The YAML's `training` mapping "
               "holds rllib_caps.train.build_config arguments and CAPSConfig settings (steps, hidden, "
               "batch_size, eval_episodes, awr_beta, ...); `overrides` holds per-suite or per-task settings, "
               "each optionally per K (e.g. overrides: {metadrive: {steps: 200000}, BallCircle: {K4: "
               "{lambdas: [0.5, 1.5]}}}). See tune_configs/ and docs/sweeps.md.",
    )
    d = SweepOptions()  # the defaults, shown in [brackets]
    g = p.add_argument_group("what to run")
    g.add_argument("--config", help="sweep YAML, e.g. tune_configs/quickstart.yaml (default name: its stem)")
    g.add_argument("--tasks", help="'all', a suite (" + ", ".join(SUITES) + ") or a comma list of tasks "
                   f"[{d.tasks}]")
    g.add_argument("--seeds", type=int, nargs="+", help=f"training seeds [{' '.join(map(str, d.seeds))}]")
    g.add_argument("--heads", type=int, nargs="+",
                   help=f"numbers of policy heads K, e.g. 2 4 8 [{' '.join(map(str, d.heads))}]")
    g.add_argument("--data-root", help=f"directory with one converted dataset per task, ROOT/<Task>/ [{d.data_root}]")
    g.add_argument("--steps", type=int, help="gradient steps per trial (overrides training.steps)")
    g.add_argument("--eval-episodes", type=int, help="evaluation episodes per threshold (overrides training)")
    g.add_argument("--eval-runners", type=int, help="remote evaluation EnvRunners per trial, 0: in the trial "
                   "process (overrides training.eval_runners)")
    g = p.add_argument_group("where results go")
    g.add_argument("--storage", help=f"results directory [{d.storage}]")
    g.add_argument("--name", help=f"experiment name: results in STORAGE/NAME [the --config stem, else {d.name}]")
    g.add_argument("--resume", action="store_true", default=None,
                   help="continue the interrupted experiment STORAGE/NAME: finished trials are kept, unfinished "
                        "and errored ones continue from their last checkpoint")
    g = p.add_argument_group("search")
    g.add_argument("--search", choices=("optuna",), help="Optuna over awr_beta (β) and the K-2 middle λ_k, per task "
                   "and K; each sample runs every seed; best parameters go to STORAGE/NAME/best_params.yaml")
    g.add_argument("--num-samples", type=int, help=f"Optuna samples per task and K [{d.num_samples}]")
    g = p.add_argument_group("cluster and resources")
    g.add_argument("--address", help="join this Ray cluster (e.g. auto or ray://host:10001) instead of starting one")
    g.add_argument("--dashboard", action="store_true", default=None,
                   help="start local Ray with the dashboard and print its URL and how to log in")
    g.add_argument("--num-gpus", type=float, help="GPUs the sweep uses in total, shared by the concurrent trials "
                   f"(0: CPU) [{d.num_gpus:g}]")
    g.add_argument("--gpus-per-trial", type=float, help="GPUs per trial (overrides the share of --num-gpus)")
    g.add_argument("--cpus-per-trial", type=float, help="CPUs per trial, fractions allowed; with evaluation "
                   f"runners half go to them [{d.cpus_per_trial:g}]")
    g.add_argument("--max-concurrent", type=int, help="at most this many trials at once [as many as fit]")
    g.add_argument("--max-failures", type=int,
                   help=f"restarts of a failing trial from its last checkpoint [{d.max_failures}]")
    g.add_argument("--checkpoint-every", type=int,
                   help=f"checkpoint every N iterations (and at the end) [{d.checkpoint_every}]")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    args = parse_args(argv)
    try:
        options = resolve_options(args)
        options.task_specs()
        check_experiment_dir(options.experiment_dir, bool(options.resume))
    except SweepError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    import ray

    from rllib_caps.report import ReportError, write_report

    try:
        message = start_ray(options.address, options.dashboard)
        if message:
            print(message, flush=True)
        if options.search == "optuna":
            from rllib_caps.search import run_search

            best = run_search(options)
            print(f"best parameters per task and K: {best}\nuse them with: python -m rllib_caps.tune "
                  f"--config {best} --name NAME")
        else:
            run_sweep(options)
        report = write_report(options.experiment_dir, force=True)
    except (SweepError, ReportError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:
        ray.shutdown()
    print(report.markdown)
    print(f"\nresults: {options.experiment_dir}\nreport: {report.out_dir}")
    if report.unfinished:
        print(f"{len(report.unfinished)} trial(s) did not finish; continue them with the same command and --resume",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
