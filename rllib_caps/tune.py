"""Sweep offline safe RL (CAPS and the baselines) over algorithms × tasks × seeds × (K or κ) on Ray Tune, then
print the paper's table.

    python -m rllib_caps.tune --config tune_configs/quickstart.yaml
    python -m rllib_caps.tune --algos caps bc-all bc-safe --tasks BallCircle --seeds 0 10 20 --dry-run
    python -m rllib_caps.tune --heads 2 4 8 --actors shared separate --critics offline fqe-reward fqe-both
    python -m rllib_caps.tune --tasks bullet --seeds 0 10 20 --heads 2 4 8 --config tune_configs/paper.yaml
    python -m rllib_caps.tune --config tune_configs/paper.yaml --name paper --resume   # after an interruption
    python -m rllib_caps.tune --search optuna --config tune_configs/optuna.yaml --tasks BallCircle
    python -m rllib_caps.tune --tasks bullet --prepare --config tune_configs/paper.yaml   # fetch missing data first
    WANDB_MODE=offline python -m rllib_caps.tune --config tune_configs/quickstart.yaml --wandb --mlflow --eval-every 500

The work is done in ``rllib_caps.sweeps`` (options, trials, resources, runner, search) and
``rllib_caps.report``; this module is the command line.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

# What --help needs, and no more: the sweep's modules that import Ray, torch or SciPy are imported in main().
from rllib_caps.algorithms.registry import ALGORITHMS, names_where, trained_per_threshold
from rllib_caps.envs import SUITES, TaskSpec
from rllib_caps.interrupts import interruptible
from rllib_caps.sweeps.options import MAX_MEMBERS, PACK_MODES, SweepError, SweepOptions, option_type, resolve_options
from rllib_caps.sweeps.plan import PlanChangedError, changed_plan_advice, check_plan
from rllib_caps.sweeps.tracking import DEFAULT_WANDB_PROJECT, MLFLOW_DB, SQLITE, check_trackers
from rllib_caps.training_flags import add_training_flags
from rllib_caps.utils.atomic import OutputNotWritableError
from rllib_caps.utils.checks import check_local_gpus, check_writable, local_gpu_name, seed_type
from rllib_caps.utils.console import divert_library_notices

logger = logging.getLogger("rllib_caps.tune")


def finished_experiment(path: Path) -> bool:
    """Whether ``path`` holds a sweep whose every trial has its evaluation and whose report was written."""
    from rllib_caps.report.records import REPORT_DIR, load_trials

    if not (path / REPORT_DIR / "report.md").is_file():
        return False
    records, unfinished = load_trials(path)
    return bool(records) and not unfinished


def prepare_source(text: str) -> Any:
    """The ``--prepare`` source, or a SweepError naming the flag."""
    from data_conversion.sources import FetchError, parse_source

    try:
        return parse_source(text)
    except FetchError as err:
        raise SweepError(f"--prepare: {err}") from err


def prepare_data(options: SweepOptions, missing: list[TaskSpec], source: Any) -> None:
    """The sweep's first stage: fetch and convert the missing datasets on the running Ray cluster; a SweepError
    naming the tasks that are still missing."""
    from data_conversion.fetch import format_outcomes, prepare_datasets

    logger.info("preparing %d missing dataset(s) from %s into %s: %s", len(missing), source.label,
                options.data_root, ", ".join(t.name for t in missing))
    outcomes = prepare_datasets(missing, options.data_root, source)
    print(format_outcomes(outcomes), flush=True)
    failed = [o.task for o in outcomes if not o.ready]
    if failed:
        raise SweepError(f"--prepare {options.prepare}: no dataset for {', '.join(failed)} (errors above); "
                         "no trial was started")


def check_before_ray(options: SweepOptions, tasks: list[TaskSpec]) -> tuple[list[TaskSpec], Any]:
    """The sweep's first checks, in seconds, before Ray or RLlib is imported (a run and ``--dry-run`` alike):
    ``--storage`` writable, the trackers' credentials and servers, the GPUs asked for against this machine's (for a
    local Ray), the datasets. Returns the missing datasets and the ``--prepare`` source that makes them (None when
    none is missing); raises a SweepError or OutputNotWritableError naming the flag."""
    from rllib_caps.sweeps.trials import missing_datasets, missing_datasets_message

    check_writable(options.experiment_dir, "--storage")
    check_trackers(options)
    if not options.address:  # a cluster's GPUs are checked once Ray has joined it
        try:
            check_local_gpus("--num-gpus", options.num_gpus)
            check_local_gpus("--gpus-per-trial", options.gpus_per_trial or 0)
        except ValueError as err:
            raise SweepError(str(err)) from err
    missing = missing_datasets(options.data_root, tasks)
    if missing and not options.prepare:
        raise SweepError(missing_datasets_message(options.data_root, missing))
    return missing, prepare_source(options.prepare) if missing else None


def add_entry_options(parser: argparse.ArgumentParser) -> None:
    """One group per algorithm with the sweep axes and settings its registry entry declares (``SweepAxis``,
    ``SweepSetting``), each flag once (the first entry's, where two declare the same)."""
    added: set[str] = set()
    for entry in ALGORITHMS.values():
        axes = [axis for axis in entry.axes if axis.option and axis.option not in added]
        settings = [item for item in entry.sweep_settings if item.name not in added]
        if not axes and not settings:
            continue
        g = parser.add_argument_group(f"{entry.display_name}'s sweep axes and settings (--algos {entry.name})")
        for axis in axes:
            g.add_argument(f"--{axis.option.replace('_', '-')}", dest=axis.option, type=axis.kind, nargs="+",
                           choices=axis.choices or None, metavar=axis.option.upper().rstrip("S") or None,
                           help=f"{axis.help} "
                                f"[{' '.join(map(str, axis.default))}]")
        for item in settings:
            g.add_argument(f"--{item.name.replace('_', '-')}", dest=item.name, type=option_type(item.name),
                           help=item.help)
        added |= {axis.option for axis in axes} | {item.name for item in settings}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from rllib_caps.task_file_flag import add_task_file_argument

    p = argparse.ArgumentParser(
        prog="python -m rllib_caps.tune",
        description="Train and evaluate CAPS and the baselines on Ray Tune: one trial per algorithm × task × seed × "
                    "its axes (grid): K for CAPS, whose one policy is evaluated at the task's three cost thresholds; "
                    f"κ for the algorithms trained once per threshold ({names_where(trained_per_threshold)}), each "
                    "evaluated at its own κ; the others train once and are evaluated at every κ. Or an Optuna search "
                    f"over the searchable settings of one algorithm ({names_where(lambda e: bool(e.searchable))}) "
                    "(--search optuna). At the end the paper's table (normalised reward and cost per "
                    "algorithm, mean ± 95% CI over seeds, safe marks, suite averages, safe counts) is printed and "
                    "written next to the trials.",
        epilog="Every option can also be set in the --config YAML under its long name with underscores "
               "(e.g. data_root: datasets); flags on the command line win. The YAML's `training` mapping "
               "holds rllib_caps.algorithms.registry.build_config arguments and CAPSConfig settings (steps, hidden, "
               "batch_size, eval_episodes, awr_beta, ...); `overrides` holds per-suite or per-task settings, "
               "each optionally per K (e.g. overrides: {metadrive: {steps: 200000}, BallCircle: {K4: "
               "{lambdas: [0.5, 1.5]}}}). See tune_configs/ and docs/sweeps.md.",
    )
    d = SweepOptions()  # the defaults, shown in [brackets]
    g = p.add_argument_group("what to run")
    g.add_argument("--config", help="sweep YAML, e.g. tune_configs/quickstart.yaml (default name: its stem)")
    g.add_argument("--algos", nargs="+", choices=sorted(ALGORITHMS), metavar="ALGO",
                   help=f"algorithms, from {', '.join(ALGORITHMS)} [{' '.join(d.algos)}]")
    g.add_argument("--tasks", help="'all', a suite (" + ", ".join(SUITES) + ") or a comma list of tasks "
                   f"[{d.tasks}]")
    add_task_file_argument(g)
    g.add_argument("--seeds", type=seed_type, nargs="+",
                   help=f"training seeds, integers in [0, 2**32) [{' '.join(map(str, d.seeds))}]")
    g.add_argument("--data-root", help=f"directory with one converted dataset per task, ROOT/<Task>/ [{d.data_root}]")
    g.add_argument("--prepare", nargs="?", const="hf", metavar="SOURCE",
                   help="first fetch and convert the tasks' missing datasets into --data-root, on the sweep's Ray "
                        "cluster, before any trial starts; SOURCE: hf (DSRL's Hub repo, the default), a directory "
                        "of DSRL files, or an http(s) URL prefix (see python -m data_conversion.fetch)")
    add_training_flags(g, note="overrides training.{setting}")
    g.add_argument("--dry-run", action="store_true", default=None,
                   help="print the planned grid (algorithms × tasks × seeds × K or κ) and its trial count, and run "
                        "the checks that need no Ray (datasets, GPUs, trackers, --storage, disk space); train nothing")
    g.add_argument("--gpu-figures", metavar="JSON",
                   help="with --dry-run and --num-gpus: the GPU figures file the packing plan and projected wall time "
                        "are read from (written by python -m rllib_caps.bench --project-grid --figures; refused when "
                        "recorded on another GPU than this machine's) [the H100's: rllib_caps/sweeps/h100_figures.json]"
                   )
    g.add_argument("--cost-limits", action=argparse.BooleanOptionalAction, default=None,
                   help="end with the paper's cost-limit table: every checkpoint of an algorithm that takes κ at "
                        f"deployment ({names_where(lambda e: e.threshold_at_deployment)}) evaluated at the limit sets "
                        "{5,10} … {40,80} without retraining "
                        "[on when the sweep has such an algorithm]")
    add_entry_options(p)
    g = p.add_argument_group("where results go")
    g.add_argument("--storage", help=f"results directory [{d.storage}]")
    g.add_argument("--name", help=f"experiment name: results in STORAGE/NAME [the --config stem, else {d.name}]")
    g.add_argument("--no-verify", dest="verify", action="store_false", default=None,
                   help="use datasets without metadata.json or file checksums (and report checkpoints without "
                        "manifest.json) without checking their files (logged)")
    g.add_argument("--resume", action="store_true", default=None,
                   help="continue the interrupted experiment STORAGE/NAME: finished trials are kept, unfinished "
                        "and errored ones continue from their last checkpoint")
    g = p.add_argument_group("tracking (one run per trial, grouped by --name; docs/sweeps.md)")
    g.add_argument("--wandb", nargs="?", const=True, metavar="PROJECT",
                   help=f"log every trial to Weights & Biases, project PROJECT [{DEFAULT_WANDB_PROJECT}]; with "
                        "WANDB_MODE=offline the runs stay in the trial directories (no network or API key)")
    g.add_argument("--mlflow", nargs="?", const=True, metavar="URI",
                   help=f"log every trial to MLflow at tracking URI URI [{SQLITE}STORAGE/{MLFLOW_DB}]")
    g.add_argument("--log-artifacts", action="store_true", default=None,
                   help="after the report, also log every trial's final checkpoint, its deployable bundle (CAPS: the "
                        "ONNX model and card) and the report's plots to the trackers, in one run named NAME-artifacts")
    g = p.add_argument_group("console").add_mutually_exclusive_group()
    g.add_argument("--verbose", dest="output", action="store_const", const="verbose",
                   help="Ray Tune's own output too: its status boxes and each trial's config and results")
    g.add_argument("--quiet", dest="output", action="store_const", const="quiet",
                   help="print only failures and the final table [default: a line per trial event and the table]")
    g = p.add_argument_group("search")
    g.add_argument("--search", choices=("optuna",), help="Optuna over the searchable settings of one algorithm in the "
                   "space its entry declares (CAPS: awr_beta (β) and the K-2 middle λ_k), per task and axis values "
                   "(K); each sample runs every seed; best parameters go to STORAGE/NAME/best_params.yaml")
    g.add_argument("--num-samples", type=option_type("num_samples"),
                   help=f"Optuna samples per task and K [{d.num_samples}]")
    g.add_argument("--population-samples", type=option_type("population_samples"), metavar="N",
                   help="with packing (--pack), train N samples × every seed as one population per Tune trial, each "
                        "sample's β and λ_k its members' own [the samples spread evenly over the trials that run at "
                        f"once, at most {MAX_MEMBERS} members per population]")
    g = p.add_argument_group("cluster and resources")
    g.add_argument("--address", default=os.environ.get("RAY_ADDRESS") or None,
                   help="join this Ray cluster (e.g. auto or ray://host:10001) instead of starting one [$RAY_ADDRESS, "
                        "as ray.init reads it; unset: a new local Ray]")
    g.add_argument("--dashboard", action="store_true", default=None,
                   help="start local Ray with the dashboard and print its URL and how to log in")
    g.add_argument("--num-gpus", type=option_type("num_gpus"),
                   help="GPUs the sweep uses in total, shared by the concurrent trials "
                   f"(0: CPU) [{d.num_gpus:g}]")
    g.add_argument("--gpus-per-trial", type=option_type("gpus_per_trial"),
                   help="GPUs per trial (overrides the share of --num-gpus)")
    g.add_argument("--cpus-per-trial", type=option_type("cpus_per_trial"),
                   help="CPUs per trial, fractions allowed; with evaluation "
                   f"runners half go to them [{d.cpus_per_trial:g}]")
    g.add_argument("--max-concurrent", type=option_type("max_concurrent"),
                   help="at most this many trials at once [as many as fit]")
    g.add_argument("--max-failures", type=option_type("max_failures"),
                   help=f"restarts of a failing trial from its last checkpoint [{d.max_failures}]")
    g.add_argument("--checkpoint-every", type=option_type("checkpoint_every"),
                   help=f"checkpoint every N iterations (and at the end) [{d.checkpoint_every}]")
    g.add_argument("--pack", choices=PACK_MODES,
                   help="train the trials of one algorithm, task and K that differ only in seed (and for the "
                        "per-κ baselines in κ) as one population, one vmapped program on one device; each stays its "
                        "own trial in checkpoints (members/<name>/) and the report. auto: when trials train on GPUs, "
                        f"where it measured faster (docs/performance.md) [{d.pack}]")
    g.add_argument("--fresh-actors", dest="reuse_actors", action="store_false", default=None,
                   help="start every trial in a new actor process (default: a finished trial's actor runs the next "
                        "trial with the same resources, saving the process start and imports)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    args = parse_args(argv)
    if args.output == "quiet":  # the sweep's INFO lines (its grid, where its results go) are left out
        logging.getLogger("rllib_caps").setLevel(logging.WARNING)
    from rllib_caps.report.records import REPORT_DIR, load_trials

    try:
        options = resolve_options(args)
        tasks = options.task_specs()
        searchable = [name for name in ALGORITHMS if ALGORITHMS[name].searchable]
        if options.search and (len(options.algos) != 1 or options.algos[0] not in searchable):
            raise SweepError(f"--search {options.search} tunes one algorithm with searchable settings "
                             f"({', '.join(searchable)}); got --algos {' '.join(options.algos)}")
        if options.dry_run:
            from rllib_caps.sweeps.grid import describe_grid

            print(describe_grid(options, tasks, None if options.address else os.cpu_count()))  # local Ray: all
        check_plan(options)  # a dry run too: whether running it would be refused
        if not options.dry_run and not options.resume and finished_experiment(options.experiment_dir):
            print(f"{options.experiment_dir} already holds this finished sweep; its report is in "
                  f"{options.experiment_dir / REPORT_DIR}. Nothing to do (pass --name to start another).")
            return 0
        missing, source = check_before_ray(options, tasks)
        divert_library_notices()  # imports RLlib, as the rest does
        from rllib_caps.sweeps.output_size import check_sweep_space
        from rllib_caps.sweeps.runner import check_experiment_dir, run_sweep, start_ray

        if not options.dry_run:
            check_experiment_dir(options.experiment_dir, bool(options.resume))
        if not missing:  # else once --prepare has made them: the estimate builds the trials' configs
            check_sweep_space(options, tasks)
        if options.dry_run:
            from rllib_caps.sweeps.projection import projection_text, sweep_work
            from rllib_caps.sweeps.resources import plan_resources

            if not missing:
                works = sweep_work(options, tasks)
                if options.num_gpus:  # the packed trials on the GPUs, from a GPU's figures
                    from rllib_caps.sweeps.gpu_plan import gpu_plan_text

                    print(gpu_plan_text(options, tasks, works, os.cpu_count() or 1,
                                        None if options.address else local_gpu_name()))
                else:
                    at_once = plan_resources(len(works), os.cpu_count() or 1, 0, num_gpus=0,
                                             cpus_per_trial=options.cpus_per_trial,
                                             gpus_per_trial=options.gpus_per_trial,
                                             max_concurrent=options.max_concurrent).concurrency
                    print(projection_text(works, "cpu", at_once))
            print(f"checked before Ray starts: --storage writable, {len(tasks) - len(missing)} of {len(tasks)} "
                  f"dataset(s) in {options.data_root}"
                  + (f" (--prepare makes {len(missing)})" if missing else "")
                  + ("" if options.address else f", GPUs ({options.num_gpus:g} asked)")
                  + (", trackers" if options.wandb or options.mlflow else ""))
            return 0
    except (SweepError, OutputNotWritableError) as err:
        advice = f"\n{changed_plan_advice(err, sys.argv[1:] if argv is None else argv)}" \
            if isinstance(err, PlanChangedError) else ""
        print(f"error: {err}{advice}", file=sys.stderr)
        return 2
    import ray

    from rllib_caps.report import ReportError, write_report

    resume = "python -m rllib_caps.tune " + " ".join(sys.argv[1:] if argv is None else argv)
    resume += "" if options.resume else " --resume"

    def kept() -> str:
        if not options.experiment_dir.exists():
            return "no experiment was started; run the same command again"
        return (f"Tune saved the experiment state; finished trials and checkpoints are in {options.experiment_dir}. "
                f"Continue the sweep with:  {resume}")

    with interruptible(kept):
        try:
            message = start_ray(options.address, options.dashboard)
            if message:
                print(message, flush=True)
            if source is not None:
                prepare_data(options, missing, source)
                check_sweep_space(options, tasks)
            if options.search == "optuna":
                from rllib_caps.sweeps.search import run_search

                best = run_search(options)
                print(f"best parameters per task and K: {best}\nuse them with: python -m rllib_caps.tune "
                      f"--config {best} --name NAME")
            else:
                run_sweep(options)
            if not load_trials(options.experiment_dir)[0]:
                print(f"no trial finished; continue the sweep with:\n  {resume}", file=sys.stderr)
                return 1
            episodes = options.training_settings().get("eval_episodes")  # per limit, as per threshold in training
            report = write_report(options.experiment_dir, cost_limits=options.report_cost_limits,
                                  verify=options.verify,
                                  **({"episodes": max(int(episodes), 1)} if episodes is not None else {}))
            if options.log_artifacts:
                from rllib_caps.sweeps.tracking import log_artifacts

                log_artifacts(options, report.out_dir)
        except (SweepError, ReportError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        finally:
            ray.shutdown()
    print(report.markdown)
    print(f"\nresults: {options.experiment_dir}\nreport: {report.out_dir}")
    if report.unfinished:
        print(f"{len(report.unfinished)} trial(s) did not finish or failed: "
              f"{', '.join(p.name for p in report.unfinished)}; continue them with:\n  {resume}", file=sys.stderr)
        return 1
    return 0

if __name__ == "__main__":
    sys.exit(main())
