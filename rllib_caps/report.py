"""The paper's tables and plots for a finished (or partly finished) sweep.

    python -m rllib_caps.report results/quickstart
    python -m rllib_caps.report results/paper --cost-limits --episodes 20 --jobs 2 --force

Reads every Tune trial under EXPERIMENT_DIR (``params.json`` + ``result.json``, no Ray needed) and writes
EXPERIMENT_DIR/report/ atomically:

- ``main_table.{md,csv,tex}``: per task and configuration (K, and searched parameters) the normalised
  reward and cost averaged over thresholds, episodes and seeds; unsafe (cost > 1) marked, the best safe
  configuration of each task marked when there are several; suite averages; the number of safe tasks.
- ``cost_limits.{md,csv,tex,json}`` with ``--cost-limits``: the paper's cost-limit ablation (Table 2): the
  same checkpoints evaluated at scaled limits without retraining, counting safe tasks.
- ``reward_cost.png``, ``kappa.png``, ``head_usage.png`` (see ``rllib_caps.plots``).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rllib_caps.checkpoints import OutputExistsError, atomic_directory
from rllib_caps.tasks import SUITES, get_task
from rllib_caps.tune import SEARCHED_KEYS, trial_seed

logger = logging.getLogger("rllib_caps.report")

REPORT_DIR = "report"
SUITE_TITLES = {"bullet": "Bullet", "safetygym": "Safety-Gymnasium", "velocity": "Velocity", "metadrive": "MetaDrive"}
# The paper's cost-limit configurations {a, b}: κ = a for Bullet and MetaDrive, b for Safety-Gymnasium and Velocity.
COST_LIMITS: tuple[tuple[int, int], ...] = ((5, 10), (10, 20), (15, 30), (20, 40), (30, 60), (40, 80))
METADRIVE_CAVEAT = ("MetaDrive scores come from a re-created task configuration on metadrive-simulator 0.4.3, not "
                    "the simulator fork that collected DSRL's data; they are not comparable to the paper's.")


class ReportError(ValueError):
    """Nothing to report, or the output exists; the message names the directory."""


# ----------------------------------------------------------------------------------------------------------
# Reading trials
# ----------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TrialRecord:
    """One finished trial: what it trained and its evaluation (the ``evaluation/caps`` results schema)."""

    task: str
    heads: int
    seed: int
    search: dict[str, Any]
    evaluation: dict[str, Any]
    trial_dir: Path
    checkpoint: Path | None

    @property
    def suite(self) -> str:
        return get_task(self.task).suite

    @property
    def config(self) -> str:
        """The configuration label: K, plus any searched parameters."""
        label = f"K={self.heads}"
        if "awr_beta" in self.search:
            label += f" β={self.search['awr_beta']:.3g}"
        if self.search.get("lambdas"):
            label += " λ=" + ",".join(f"{v:.3g}" for v in self.search["lambdas"])
        return label


def last_evaluation(result_file: Path) -> dict[str, Any] | None:
    """The ``evaluation/caps`` of the last result line that has one (None for an unfinished trial)."""
    if not result_file.is_file():
        return None
    evaluation = None
    for line in result_file.read_text().splitlines():
        if line.strip():
            found = json.loads(line).get("evaluation", {}).get("caps")
            evaluation = found or evaluation
    return evaluation


def latest_checkpoint(trial_dir: Path) -> Path | None:
    checkpoints = sorted(trial_dir.glob("checkpoint_*"))
    return checkpoints[-1] if checkpoints else None


def trial_dirs(experiment_dir: Path) -> list[Path]:
    """Every Tune trial directory under ``experiment_dir`` (search experiments nest one level deeper)."""
    return sorted(p.parent for p in experiment_dir.rglob("params.json")
                  if REPORT_DIR not in p.relative_to(experiment_dir).parts)


def load_trials(experiment_dir: str | Path) -> tuple[list[TrialRecord], list[Path]]:
    """The finished trials, and the trial directories without an evaluation (unfinished or failed)."""
    records, unfinished = [], []
    for trial_dir in trial_dirs(Path(experiment_dir)):
        params = json.loads((trial_dir / "params.json").read_text())
        evaluation = last_evaluation(trial_dir / "result.json")
        if evaluation is None:
            unfinished.append(trial_dir)
            continue
        records.append(TrialRecord(task=params["task"], heads=int(params["heads"]), seed=trial_seed(params),
                                   search={k: v for k, v in (params.get("search") or {}).items()
                                           if k in SEARCHED_KEYS},
                                   evaluation=evaluation, trial_dir=trial_dir,
                                   checkpoint=latest_checkpoint(trial_dir)))
    return records, unfinished


# ----------------------------------------------------------------------------------------------------------
# The main table
# ----------------------------------------------------------------------------------------------------------

@dataclass
class Row:
    """One task × configuration, averaged over seeds (each seed already averages thresholds and episodes)."""

    task: str
    suite: str
    config: str
    seeds: tuple[int, ...]
    normalized_reward: float
    normalized_cost: float
    per_threshold: dict[float, tuple[float, float]]  # κ -> (normalised reward, normalised cost)
    head_usage: dict[float, list[float]]  # κ -> fraction of steps per head
    seed_points: list[tuple[float, float]]  # per seed (normalised reward, normalised cost)
    best_safe: bool = False

    @property
    def safe(self) -> bool:
        return self.normalized_cost <= 1.0


def _mean_by_threshold(evaluations: Sequence[dict[str, Any]], key: str) -> dict[float, Any]:
    values: dict[float, list] = defaultdict(list)
    for evaluation in evaluations:
        for kappa, result in evaluation["thresholds"].items():
            values[float(kappa)].append(result[key])
    return {k: v for k, v in sorted(values.items())}


def head_usage_by_threshold(evaluations: Sequence[dict[str, Any]]) -> dict[float, list[float]]:
    """κ -> mean fraction of steps per head, over the evaluations."""
    usage = _mean_by_threshold(evaluations, "head_usage")
    return {k: np.mean([[u[h] for h in sorted(u, key=int)] for u in us], axis=0).tolist() for k, us in usage.items()}


def summarize(records: Iterable[TrialRecord]) -> list[Row]:
    """Rows in suite order, then task, then configuration; marks each task's best safe configuration."""
    groups: dict[tuple[str, str], list[TrialRecord]] = defaultdict(list)
    for r in records:
        groups[(r.task, r.config)].append(r)
    rows = []
    for (task, config), group in groups.items():
        evaluations = [r.evaluation for r in group]
        rewards = _mean_by_threshold(evaluations, "normalized_reward")
        costs = _mean_by_threshold(evaluations, "normalized_cost")
        points = [(e["mean"]["normalized_reward"], e["mean"]["normalized_cost"]) for e in evaluations]
        rows.append(Row(task=task, suite=group[0].suite, config=config, seeds=tuple(sorted(r.seed for r in group)),
                        normalized_reward=float(np.mean([p[0] for p in points])),
                        normalized_cost=float(np.mean([p[1] for p in points])),
                        per_threshold={k: (float(np.mean(rewards[k])), float(np.mean(costs[k]))) for k in rewards},
                        head_usage=head_usage_by_threshold(evaluations), seed_points=points))
    rows.sort(key=lambda r: (SUITES.index(r.suite), r.task, _config_order(r.config)))
    by_task: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        by_task[row.task].append(row)
    for task_rows in by_task.values():
        safe = [r for r in task_rows if r.safe]
        if len(task_rows) > 1 and safe:
            max(safe, key=lambda r: r.normalized_reward).best_safe = True
    return rows


def _config_order(config: str) -> tuple[int, str]:
    return int(config.split()[0][2:]), config


@dataclass
class MainTable:
    """The rows plus the per-configuration suite averages and safe-task counts."""

    rows: list[Row]
    configs: list[str] = field(init=False)
    tasks: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.configs = sorted({r.config for r in self.rows}, key=_config_order)
        self.tasks = list(dict.fromkeys(r.task for r in self.rows))

    def cell(self, task: str, config: str) -> Row | None:
        return next((r for r in self.rows if r.task == task and r.config == config), None)

    def suites(self) -> list[str]:
        return [s for s in SUITES if any(r.suite == s for r in self.rows)]

    def suite_average(self, suite: str, config: str) -> tuple[float, float] | None:
        rows = [r for r in self.rows if r.suite == suite and r.config == config]
        if not rows:
            return None
        return float(np.mean([r.normalized_reward for r in rows])), float(np.mean([r.normalized_cost for r in rows]))

    def safe_count(self, config: str) -> tuple[int, int]:
        rows = [r for r in self.rows if r.config == config]
        return sum(r.safe for r in rows), len(rows)


def _md_pair(reward: float, cost: float, best: bool) -> tuple[str, str]:
    r, c = f"{reward:.2f}", f"{cost:.2f}"
    if best:
        return f"**{r}**", f"**{c}**"
    return r, c if cost <= 1.0 else f"{c} ✗"


def format_markdown(table: MainTable) -> str:
    """The main table in Markdown, tasks grouped by suite, with averages and safe counts."""
    header = ["Task"] + [f"{c} {m}" for c in table.configs for m in ("reward ↑", "cost ↓")]
    lines = ["| " + " | ".join(header) + " |", "|:---|" + "---:|" * (len(header) - 1)]
    for suite in table.suites():
        for task in dict.fromkeys(r.task for r in table.rows if r.suite == suite):
            cells = []
            for config in table.configs:
                row = table.cell(task, config)
                cells += _md_pair(row.normalized_reward, row.normalized_cost, row.best_safe) if row else ["", ""]
            lines.append(f"| {task} | " + " | ".join(cells) + " |")
        cells = []
        for config in table.configs:
            avg = table.suite_average(suite, config)
            cells += _md_pair(*avg, best=False) if avg else ["", ""]
        lines.append(f"| *{SUITE_TITLES[suite]} average* | " + " | ".join(cells) + " |")
    counts = [cell for n, total in map(table.safe_count, table.configs) for cell in (f"{n} / {total}", "")]
    lines.append("| safe tasks | " + " | ".join(counts) + " |")
    legend = ("Normalised reward and cost averaged over thresholds, episodes and seeds; ✗: unsafe (cost > 1)"
              + ("; **bold**: the best safe configuration of the task." if len(table.configs) > 1 else "."))
    return "\n".join(lines) + "\n\n" + legend


def _tex_pair(reward: float, cost: float, best: bool) -> list[str]:
    """The paper's marks: bold safe, gray unsafe, blue bold the best safe."""
    if cost > 1.0:
        return [rf"\textcolor{{gray}}{{{v:.2f}}}" for v in (reward, cost)]
    if best:
        return [rf"\textcolor{{blue}}{{\textbf{{{v:.2f}}}}}" for v in (reward, cost)]
    return [rf"\textbf{{{v:.2f}}}" for v in (reward, cost)]


def format_latex(table: MainTable) -> str:
    """A booktabs table (needs ``\\usepackage{booktabs,xcolor}``) with the paper's colour marks."""
    n = len(table.configs)
    lines = [r"% Bold: safe (normalised cost <= 1); gray: unsafe; blue: best safe configuration of the task.",
             r"\begin{tabular}{l" + "cc" * n + "}", r"\toprule",
             " & " + " & ".join(rf"\multicolumn{{2}}{{c}}{{{c}}}" for c in table.configs) + r" \\",
             "Task" + r" & reward $\uparrow$ & cost $\downarrow$" * n + r" \\", r"\midrule"]
    for suite in table.suites():
        for task in dict.fromkeys(r.task for r in table.rows if r.suite == suite):
            cells = []
            for config in table.configs:
                row = table.cell(task, config)
                cells += _tex_pair(row.normalized_reward, row.normalized_cost, row.best_safe) if row else ["", ""]
            lines.append(f"{task} & " + " & ".join(cells) + r" \\")
        cells = []
        for config in table.configs:
            avg = table.suite_average(suite, config)
            cells += _tex_pair(*avg, best=False) if avg else ["", ""]
        lines += [r"\midrule", rf"\textit{{{SUITE_TITLES[suite]} average}} & " + " & ".join(cells) + r" \\",
                  r"\midrule"]
    counts = [rf"\multicolumn{{2}}{{c}}{{{n_safe} / {total}}}" for n_safe, total in map(table.safe_count,
                                                                                          table.configs)]
    lines += ["Safe tasks & " + " & ".join(counts) + r" \\", r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def format_csv(table: MainTable) -> str:
    """Long format: one line per task (or suite average) × configuration × threshold, plus the mean."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["task", "suite", "config", "seeds", "threshold", "normalized_reward", "normalized_cost",
                     "safe", "best_safe"])
    for row in table.rows:
        seeds = " ".join(map(str, row.seeds))
        for kappa, (r, c) in row.per_threshold.items():
            writer.writerow([row.task, row.suite, row.config, seeds, f"{kappa:g}", f"{r:.6g}", f"{c:.6g}",
                             int(c <= 1.0), ""])
        writer.writerow([row.task, row.suite, row.config, seeds, "mean", f"{row.normalized_reward:.6g}",
                         f"{row.normalized_cost:.6g}", int(row.safe), int(row.best_safe)])
    for suite in table.suites():
        for config in table.configs:
            avg = table.suite_average(suite, config)
            if avg:
                writer.writerow([f"{suite} average", suite, config, "", "mean", f"{avg[0]:.6g}", f"{avg[1]:.6g}",
                                 int(avg[1] <= 1.0), ""])
    return out.getvalue()


# ----------------------------------------------------------------------------------------------------------
# The cost-limit ablation
# ----------------------------------------------------------------------------------------------------------

def limit_for(suite: str, limits: tuple[int, int]) -> float:
    """The κ a task gets under a cost-limit configuration {a, b} (paper: b for Safety-Gymnasium tasks)."""
    return float(limits[0] if suite in ("bullet", "metadrive") else limits[1])


def _evaluate_checkpoint(job: tuple[str, str, list[float], int]) -> dict[str, Any]:
    from rllib_caps.evaluate import evaluate_policy
    from rllib_caps.policy import CAPSPolicy

    checkpoint, task, thresholds, episodes = job
    return evaluate_policy(CAPSPolicy.from_checkpoint(checkpoint), get_task(task), thresholds, episodes,
                           progress=False)


def evaluate_cost_limits(records: Sequence[TrialRecord], episodes: int, jobs: int = 1,
                         limits: Sequence[tuple[int, int]] = COST_LIMITS) -> dict[str, dict[str, Any]]:
    """Evaluates every trial's last checkpoint at its suite's limits (no retraining): trial dir -> results."""
    missing = [str(r.trial_dir) for r in records if r.checkpoint is None]
    if missing:
        raise ReportError(f"--cost-limits: no checkpoint in {', '.join(missing)}")
    work = [(str(r.checkpoint), r.task, sorted({limit_for(r.suite, lim) for lim in limits}), episodes)
            for r in records]
    logger.info("evaluating %d checkpoints at the cost limits, %d episodes per limit", len(work), episodes)
    if jobs > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            results = list(pool.map(_evaluate_checkpoint, work))
    else:
        results = [_evaluate_checkpoint(job) for job in work]
    return {str(r.trial_dir): res for r, res in zip(records, results, strict=True)}


@dataclass(frozen=True)
class CostLimitTable:
    """Safe-task counts per cost-limit configuration (rows) and configuration (columns)."""

    configs: list[str]
    counts: dict[tuple[int, int], dict[str, tuple[int, int]]]  # limits -> config -> (safe, tasks)


def cost_limit_table(records: Sequence[TrialRecord], evaluations: dict[str, dict[str, Any]],
                     limits: Sequence[tuple[int, int]] = COST_LIMITS) -> CostLimitTable:
    """A task is safe at a limit when its normalised cost there, averaged over seeds, is ≤ 1."""
    groups: dict[tuple[str, str], list[TrialRecord]] = defaultdict(list)
    for r in records:
        groups[(r.config, r.task)].append(r)
    configs = sorted({r.config for r in records}, key=_config_order)
    counts: dict[tuple[int, int], dict[str, tuple[int, int]]] = {}
    for lim in limits:
        counts[lim] = {}
        for config in configs:
            tasks = [(task, group) for (c, task), group in groups.items() if c == config]
            safe = sum(
                np.mean([evaluations[str(r.trial_dir)]["thresholds"][f"{limit_for(r.suite, lim):g}"]
                         ["normalized_cost"] for r in group]) <= 1.0
                for _, group in tasks)
            counts[lim][config] = (int(safe), len(tasks))
    return CostLimitTable(configs=configs, counts=counts)


def format_cost_limits(table: CostLimitTable, fmt: str) -> str:
    """The ablation table as ``md``, ``csv`` or ``tex``."""
    label = {lim: f"{{{lim[0]}, {lim[1]}}}" for lim in table.counts}
    if fmt == "csv":
        lines = ["limits,config,safe_tasks,tasks"]
        lines += [f"\"{label[lim]}\",{c},{n},{t}" for lim, row in table.counts.items() for c, (n, t) in row.items()]
        return "\n".join(lines) + "\n"
    if fmt == "tex":
        lines = [r"\begin{tabular}{c" + "c" * len(table.configs) + "}", r"\toprule",
                 r"Cost limits & " + " & ".join(table.configs) + r" \\", r"\midrule"]
        lines += [rf"\{{{lim[0]}, {lim[1]}\}} & " + " & ".join(f"{n} / {t}" for n, t in row.values()) + r" \\"
                  for lim, row in table.counts.items()]
        return "\n".join([*lines, r"\bottomrule", r"\end{tabular}"]) + "\n"
    lines = ["| cost limits | " + " | ".join(f"{c} safe tasks" for c in table.configs) + " |",
             "|:---|" + "---:|" * len(table.configs)]
    lines += [f"| {label[lim]} | " + " | ".join(f"{n} / {t}" for n, t in row.values()) + " |"
              for lim, row in table.counts.items()]
    return "\n".join(lines) + ("\n\nCost limits {a, b}: κ = a for Bullet and MetaDrive tasks, b for "
                               "Safety-Gymnasium and Velocity tasks; the trained checkpoints, not retrained.")


# ----------------------------------------------------------------------------------------------------------
# Writing the report
# ----------------------------------------------------------------------------------------------------------

def metadrive_caveat() -> str:
    try:
        from rllib_caps.metadrive_env import FIDELITY_NOTE
    except ImportError:
        return METADRIVE_CAVEAT
    return FIDELITY_NOTE


@dataclass(frozen=True)
class Report:
    markdown: str
    out_dir: Path
    unfinished: list[Path]  # trial directories without an evaluation


def build_markdown(table: MainTable, unfinished: Sequence[Path], cost_limits: CostLimitTable | None) -> str:
    parts = ["## CAPS: normalised reward and cost", "", format_markdown(table)]
    if any(r.suite == "metadrive" for r in table.rows):
        parts += ["", f"Caveat: {metadrive_caveat()}"]
    if unfinished:
        parts += ["", f"{len(unfinished)} trial(s) have no evaluation yet (unfinished or failed) and are left out: "
                  + ", ".join(p.name for p in unfinished)]
    if cost_limits is not None:
        parts += ["", "## Cost-limit ablation: safe tasks", "", format_cost_limits(cost_limits, "md")]
    return "\n".join(parts)


def write_report(experiment_dir: str | Path, *, out: str | Path | None = None, force: bool = False,
                 cost_limits: bool = False, episodes: int = 20, jobs: int = 1) -> Report:
    """Writes the tables and plots into ``out`` (default EXPERIMENT_DIR/report) atomically."""
    from rllib_caps.plots import plot_head_usage, plot_kappa, plot_reward_cost

    experiment_dir = Path(experiment_dir).resolve()
    if not experiment_dir.is_dir():
        raise ReportError(f"{experiment_dir}: no such experiment directory")
    records, unfinished = load_trials(experiment_dir)
    if not records:
        raise ReportError(f"{experiment_dir}: no finished trials to report ({len(unfinished)} unfinished)")
    out_dir = Path(out).resolve() if out else experiment_dir / REPORT_DIR
    if out_dir.exists() and not force:
        raise ReportError(f"{out_dir}: already exists (use --force to overwrite)")
    table = MainTable(summarize(records))
    limits_table = evaluations = None
    if cost_limits:
        evaluations = evaluate_cost_limits(records, episodes, jobs)
        limits_table = cost_limit_table(records, evaluations)
    markdown = build_markdown(table, unfinished, limits_table)
    try:
        with atomic_directory(out_dir, force=force) as tmp:
            (tmp / "report.md").write_text(markdown + "\n")
            (tmp / "main_table.md").write_text(format_markdown(table) + "\n")
            (tmp / "main_table.csv").write_text(format_csv(table))
            (tmp / "main_table.tex").write_text(format_latex(table))
            if limits_table is not None:
                for fmt in ("md", "csv", "tex"):
                    (tmp / f"cost_limits.{fmt}").write_text(format_cost_limits(limits_table, fmt) + "\n")
                (tmp / "cost_limits.json").write_text(json.dumps(evaluations, indent=1))
            plot_reward_cost(table.rows, tmp / "reward_cost.png")
            plot_kappa(table.rows, records, evaluations, tmp / "kappa.png")
            plot_head_usage(table.rows, tmp / "head_usage.png")
    except OutputExistsError as err:
        raise ReportError(str(err)) from err
    return Report(markdown=markdown, out_dir=out_dir, unfinished=unfinished)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m rllib_caps.report",
        description="Tables (Markdown, CSV, LaTeX) and plots of a CAPS sweep from its Tune experiment directory: "
                    "normalised reward and cost per task averaged over thresholds, episodes and seeds, safe marks, "
                    "suite averages; optionally the paper's cost-limit ablation.",
    )
    p.add_argument("experiment_dir", help="a Tune experiment directory written by python -m rllib_caps.tune")
    p.add_argument("--out", help="output directory (default: EXPERIMENT_DIR/report)")
    p.add_argument("--force", action="store_true", help="replace the output directory if it exists")
    p.add_argument("--cost-limits", action="store_true",
                   help="also evaluate each trial's checkpoint at the cost limits " + ", ".join(
                       f"{{{a},{b}}}" for a, b in COST_LIMITS) + " (Ray-free, no retraining)")
    p.add_argument("--episodes", type=int, default=20, help="episodes per cost limit (default 20)")
    p.add_argument("--jobs", type=int, default=1, help="evaluation processes for --cost-limits (default 1)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.episodes < 1 or args.jobs < 1:
        print("error: --episodes and --jobs must be >= 1", file=sys.stderr)
        return 2
    try:
        report = write_report(args.experiment_dir, out=args.out, force=args.force, cost_limits=args.cost_limits,
                              episodes=args.episodes, jobs=args.jobs)
    except ReportError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(report.markdown)
    print(f"\nreport written to {report.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
