"""The paper's main table: per task and configuration, normalised reward and cost averaged over thresholds,
episodes and seeds, with safe marks, suite averages and safe counts, as Markdown, LaTeX and CSV."""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rllib_caps.envs import SUITES
from rllib_caps.report.records import TrialRecord

SUITE_TITLES = {"bullet": "Bullet", "safetygym": "Safety-Gymnasium", "velocity": "Velocity", "metadrive": "MetaDrive"}


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
    rows.sort(key=lambda r: (SUITES.index(r.suite), r.task, config_order(r.config)))
    by_task: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        by_task[row.task].append(row)
    for task_rows in by_task.values():
        safe = [r for r in task_rows if r.safe]
        if len(task_rows) > 1 and safe:
            max(safe, key=lambda r: r.normalized_reward).best_safe = True
    return rows


def config_order(config: str) -> tuple[int, str]:
    """Configurations labelled ``K=<n> …`` by K, others after them by name."""
    first = config.split()[0] if config else ""
    return (int(first[2:]), config) if first.startswith("K=") and first[2:].isdigit() else (1 << 30, config)


@dataclass
class MainTable:
    """The rows plus the per-configuration suite averages and safe-task counts."""

    rows: list[Row]
    configs: list[str] = field(init=False)
    tasks: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.configs = sorted({r.config for r in self.rows}, key=config_order)
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


def _body_rows(table: MainTable, pair: Callable[[float, float, bool], Sequence[str]]
               ) -> Iterator[tuple[str, bool, list[str]]]:
    """``(label, is_suite_average, cells)`` per task, suite by suite, each suite closed by its average row;
    ``pair(reward, cost, best)`` formats one configuration's two cells."""
    for suite in table.suites():
        for task in dict.fromkeys(r.task for r in table.rows if r.suite == suite):
            cells: list[str] = []
            for config in table.configs:
                row = table.cell(task, config)
                cells += pair(row.normalized_reward, row.normalized_cost, row.best_safe) if row else ["", ""]
            yield task, False, cells
        cells = []
        for config in table.configs:
            avg = table.suite_average(suite, config)
            cells += pair(*avg, False) if avg else ["", ""]
        yield SUITE_TITLES[suite], True, cells


def format_markdown(table: MainTable) -> str:
    """The main table in Markdown, tasks grouped by suite, with averages and safe counts."""
    header = ["Task"] + [f"{c} {m}" for c in table.configs for m in ("reward ↑", "cost ↓")]
    lines = ["| " + " | ".join(header) + " |", "|:---|" + "---:|" * (len(header) - 1)]
    for label, average, cells in _body_rows(table, _md_pair):
        lines.append(f"| {f'*{label} average*' if average else label} | " + " | ".join(cells) + " |")
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
    for label, average, cells in _body_rows(table, _tex_pair):
        if average:
            lines += [r"\midrule", rf"\textit{{{label} average}} & " + " & ".join(cells) + r" \\", r"\midrule"]
        else:
            lines.append(f"{label} & " + " & ".join(cells) + r" \\")
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
