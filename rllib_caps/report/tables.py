"""The paper's main table (Table 1): per task and column (an algorithm's configuration), normalised reward and
cost averaged over thresholds, episodes and seeds, with the mean ± 95% CI over seeds, safe marks, the best safe
column of each task, suite averages and safe counts, as Markdown, LaTeX and CSV.

A "seed" result of an algorithm trained once per κ averages its per-κ trials (``seed_evaluations``), so every
algorithm's cell is the same statistic: mean over seeds of the mean over the task's thresholds.
"""

from __future__ import annotations

import csv
import io
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rllib_caps.algorithms.registry import ALGORITHMS, trained_per_threshold
from rllib_caps.algorithms.surface import COST_LIMIT_AXIS
from rllib_caps.envs import SUITES
from rllib_caps.envs.tasks import CUSTOM_SUITE
from rllib_caps.report.records import ReportError, TrialRecord
from rllib_caps.report.stats import CONFIDENCE, mean_ci

SUITE_TITLES = {"bullet": "Bullet", "safetygym": "Safety-Gymnasium", "velocity": "Velocity", "metadrive": "MetaDrive",
                CUSTOM_SUITE: "Declared tasks"}
REPORT_SUITES = (*SUITES, CUSTOM_SUITE)  # the tables' suite order: DSRL's, then the tasks declared by the user


@dataclass
class Row:
    """One task × column, averaged over seeds (each seed already averages thresholds and episodes)."""

    task: str
    suite: str
    config: str  # the column: the configuration label, prefixed by the algorithm's title in a multi-algorithm table
    seeds: tuple[int, ...]
    normalized_reward: float
    normalized_cost: float
    per_threshold: dict[float, tuple[float, float]]  # κ -> (normalised reward, normalised cost)
    head_usage: dict[float, list[float]]  # κ -> fraction of steps per head
    seed_points: list[tuple[float, float]]  # per seed (normalised reward, normalised cost)
    algo: str  # the registry name
    best_safe: bool = False
    label: str = ""  # the registry's configuration label (``TrialRecord.config``)
    axes: dict[str, Any] = field(default_factory=dict)  # its axis values by column (``SweepAxis.column``), κ left out

    @property
    def safe(self) -> bool:
        return self.normalized_cost <= 1.0

    @property
    def reward_ci(self) -> float:
        """Half-width of the 95% Student-t interval of the normalised reward over seeds (NaN for one seed)."""
        return mean_ci([p[0] for p in self.seed_points])[1]

    @property
    def cost_ci(self) -> float:
        return mean_ci([p[1] for p in self.seed_points])[1]


def _mean_by_threshold(evaluations: Sequence[dict[str, Any]], key: str) -> dict[float, Any]:
    values: dict[float, list] = defaultdict(list)
    for evaluation in evaluations:
        for kappa, result in evaluation["thresholds"].items():
            values[float(kappa)].append(result[key])
    return {k: v for k, v in sorted(values.items())}


def head_usage_by_threshold(evaluations: Sequence[dict[str, Any]]) -> dict[float, list[float]]:
    """κ -> mean fraction of steps per head, over the evaluations."""
    usage = _mean_by_threshold([e for e in evaluations  # reported by algorithms with heads (CAPS) only
                                if all("head_usage" in r for r in e["thresholds"].values())], "head_usage")
    return {k: np.mean([[u[h] for h in sorted(u, key=int)] for u in us], axis=0).tolist() for k, us in usage.items()}


def merge_evaluations(evaluations: Sequence[dict[str, Any]], source: str) -> dict[str, Any]:
    """One seed's evaluation from its per-κ trials: their thresholds together, the mean over all of them (the
    paper: normalised values averaged over κ). A κ evaluated by two trials is an error naming ``source``."""
    thresholds: dict[str, Any] = {}
    for evaluation in evaluations:
        for kappa, result in evaluation["thresholds"].items():
            if kappa in thresholds:
                raise ReportError(f"{source}: two trials of one seed evaluated κ={kappa}")
            thresholds[kappa] = result
    reward = float(np.mean([r["normalized_reward"] for r in thresholds.values()]))
    cost = float(np.mean([r["normalized_cost"] for r in thresholds.values()]))
    return {"thresholds": thresholds,
            "mean": {"normalized_reward": reward, "normalized_cost": cost, "safe": float(cost <= 1.0)}}


def seed_evaluations(records: Iterable[TrialRecord]) -> dict[tuple[str, str, str, int], dict[str, Any]]:
    """(algorithm, task, configuration label, seed) -> that seed's evaluation; trials of one seed that differ
    only in κ (algorithms trained once per κ) are merged by ``merge_evaluations``."""
    groups: dict[tuple[str, str, str, int], list[TrialRecord]] = defaultdict(list)
    for r in records:
        groups[(r.algo, r.task, r.config, r.seed)].append(r)
    return {key: group[0].evaluation if len(group) == 1 else
            merge_evaluations([r.evaluation for r in group], ", ".join(str(r.trial_dir) for r in group))
            for key, group in groups.items()}


def column_label(algo: str, label: str, algos: set[str]) -> str:
    """A table column: the configuration label, prefixed by the algorithm's title when several algorithms share
    the table (``CAPS K=2``) unless the label is the title already (``BC-Safe``)."""
    title = ALGORITHMS[algo].display_name
    return label if len(algos) == 1 or label.startswith(title) else f"{title} {label}"


def summarize(records: Iterable[TrialRecord]) -> list[Row]:
    """Rows in suite order, then task, then algorithm (registry order) and configuration; marks each task's best
    safe column."""
    records = list(records)
    algos = {r.algo for r in records}
    groups: dict[tuple[str, str, str], list[tuple[int, dict[str, Any]]]] = defaultdict(list)
    for (algo, task, label, seed), evaluation in seed_evaluations(records).items():
        groups[(algo, task, label)].append((seed, evaluation))
    suites = {r.task: r.suite for r in records}
    axes = {(r.algo, r.task, r.config): {axis.column: r.axes[axis.name] for axis in r.entry.axes
                                         if axis.name != COST_LIMIT_AXIS} for r in records}
    rows = []
    for (algo, task, label), group in groups.items():
        evaluations = [e for _, e in group]
        rewards = _mean_by_threshold(evaluations, "normalized_reward")
        costs = _mean_by_threshold(evaluations, "normalized_cost")
        points = [(e["mean"]["normalized_reward"], e["mean"]["normalized_cost"]) for e in evaluations]
        rows.append(Row(task=task, suite=suites[task], config=column_label(algo, label, algos),
                        seeds=tuple(sorted(seed for seed, _ in group)),
                        normalized_reward=float(np.mean([p[0] for p in points])),
                        normalized_cost=float(np.mean([p[1] for p in points])),
                        per_threshold={k: (float(np.mean(rewards[k])), float(np.mean(costs[k]))) for k in rewards},
                        head_usage=head_usage_by_threshold(evaluations), seed_points=points, algo=algo, label=label,
                        axes=axes[(algo, task, label)]))
    rows.sort(key=lambda r: (REPORT_SUITES.index(r.suite), r.task, *column_order(r)))
    by_task: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        by_task[row.task].append(row)
    for task_rows in by_task.values():
        safe = [r for r in task_rows if r.safe]
        if len(task_rows) > 1 and safe:
            max(safe, key=lambda r: r.normalized_reward).best_safe = True
    return rows


def column_order(row: Row) -> tuple[int, tuple[int, str]]:
    """Algorithms in registry order, then their configurations by ``config_order``."""
    return list(ALGORITHMS).index(row.algo), config_order(row.label or row.config)


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
        self.configs = list(dict.fromkeys(r.config for r in sorted(self.rows, key=column_order)))
        self.tasks = list(dict.fromkeys(r.task for r in self.rows))

    def cell(self, task: str, config: str) -> Row | None:
        return next((r for r in self.rows if r.task == task and r.config == config), None)

    def suites(self) -> list[str]:
        return [s for s in REPORT_SUITES if any(r.suite == s for r in self.rows)]

    def suite_average(self, suite: str, config: str) -> tuple[float, float] | None:
        rows = [r for r in self.rows if r.suite == suite and r.config == config]
        if not rows:
            return None
        return float(np.mean([r.normalized_reward for r in rows])), float(np.mean([r.normalized_cost for r in rows]))

    def safe_count(self, config: str) -> tuple[int, int]:
        rows = [r for r in self.rows if r.config == config]
        return sum(r.safe for r in rows), len(rows)


Pair = Callable[[float, float, bool, tuple[float, float]], Sequence[str]]


def _value(value: float, ci: float, tex: bool = False) -> str:
    """``0.72``, or with a finite CI half-width ``0.72 ± 0.05``."""
    if not math.isfinite(ci):
        return f"{value:.2f}"
    return f"{value:.2f}" + (rf"$\pm${ci:.2f}" if tex else f" ± {ci:.2f}")


def _md_pair(reward: float, cost: float, best: bool, cis: tuple[float, float]) -> tuple[str, str]:
    r, c = _value(reward, cis[0]), _value(cost, cis[1])
    if best:
        return f"**{r}**", f"**{c}**"
    return r, c if cost <= 1.0 else f"{c} ✗"


def _body_rows(table: MainTable, pair: Pair, ci: bool) -> Iterator[tuple[str, bool, list[str]]]:
    """``(label, is_suite_average, cells)`` per task, suite by suite, each suite closed by its average row;
    ``pair(reward, cost, best, (reward_ci, cost_ci))`` formats one column's two cells (CIs NaN: none shown)."""
    none = (math.nan, math.nan)
    for suite in table.suites():
        for task in dict.fromkeys(r.task for r in table.rows if r.suite == suite):
            cells: list[str] = []
            for config in table.configs:
                row = table.cell(task, config)
                cis = (row.reward_ci, row.cost_ci) if row and ci else none
                cells += pair(row.normalized_reward, row.normalized_cost, row.best_safe, cis) if row else ["", ""]
            yield task, False, cells
        cells = []
        for config in table.configs:
            avg = table.suite_average(suite, config)
            cells += pair(*avg, False, none) if avg else ["", ""]
        yield SUITE_TITLES[suite], True, cells


def caption(table: MainTable, ci: bool) -> str:
    """What the cells are: averages, the interval (with ``ci``) and the marks."""
    text = "Normalised reward and cost averaged over thresholds, episodes and seeds"
    if ci:
        text += (f" (mean ± half-width of the two-sided {CONFIDENCE:.0%} Student-t confidence interval over "
                 "seeds; none for one seed; suite averages are means of the task means)")
    if any(trained_per_threshold(ALGORITHMS[r.algo]) for r in table.rows):
        text += "; algorithms trained once per κ average their per-κ trials within each seed"
    return text


def format_markdown(table: MainTable, ci: bool = False) -> str:
    """The main table in Markdown, tasks grouped by suite, with averages and safe counts; ``ci`` adds ± the
    95% CI over seeds to every task cell."""
    header = ["Task"] + [f"{c} {m}" for c in table.configs for m in ("reward ↑", "cost ↓")]
    lines = ["| " + " | ".join(header) + " |", "|:---|" + "---:|" * (len(header) - 1)]
    for label, average, cells in _body_rows(table, _md_pair, ci):
        lines.append(f"| {f'*{label} average*' if average else label} | " + " | ".join(cells) + " |")
    counts = [cell for n, total in map(table.safe_count, table.configs) for cell in (f"{n} / {total}", "")]
    lines.append("| safe tasks | " + " | ".join(counts) + " |")
    legend = (caption(table, ci) + "; ✗: unsafe (cost > 1)"
              + ("; **bold**: the best safe configuration of the task." if len(table.configs) > 1 else "."))
    return "\n".join(lines) + "\n\n" + legend


def _tex_pair(reward: float, cost: float, best: bool, cis: tuple[float, float]) -> list[str]:
    """The paper's marks: bold safe, gray unsafe, blue bold the best safe."""
    values = [_value(v, ci, tex=True) for v, ci in zip((reward, cost), cis, strict=True)]
    if cost > 1.0:
        return [rf"\textcolor{{gray}}{{{v}}}" for v in values]
    if best:
        return [rf"\textcolor{{blue}}{{\textbf{{{v}}}}}" for v in values]
    return [rf"\textbf{{{v}}}" for v in values]


def format_latex(table: MainTable, ci: bool = False) -> str:
    """A booktabs table (needs ``\\usepackage{booktabs,xcolor}``) with the paper's colour marks."""
    n = len(table.configs)
    lines = [f"% {caption(table, ci)}.",
             r"% Bold: safe (normalised cost <= 1); gray: unsafe; blue: best safe configuration of the task.",
             r"\begin{tabular}{l" + "cc" * n + "}", r"\toprule",
             " & " + " & ".join(rf"\multicolumn{{2}}{{c}}{{{c}}}" for c in table.configs) + r" \\",
             "Task" + r" & reward $\uparrow$ & cost $\downarrow$" * n + r" \\", r"\midrule"]
    for label, average, cells in _body_rows(table, _tex_pair, ci):
        if average:
            lines += [r"\midrule", rf"\textit{{{label} average}} & " + " & ".join(cells) + r" \\", r"\midrule"]
        else:
            lines.append(f"{label} & " + " & ".join(cells) + r" \\")
    counts = [rf"\multicolumn{{2}}{{c}}{{{n_safe} / {total}}}" for n_safe, total in map(table.safe_count,
                                                                                          table.configs)]
    lines += ["Safe tasks & " + " & ".join(counts) + r" \\", r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def format_csv(table: MainTable) -> str:
    """Long format: one line per task (or suite average) × column × threshold, plus the mean with the 95% CI
    half-widths over seeds (empty per threshold and for averages, ``nan`` for one seed), then one column per axis
    of the algorithms in the table (``SweepAxis.column``: e.g. ``K``; empty where a row's algorithm lacks it)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    columns = list(dict.fromkeys(column for row in table.rows for column in row.axes))
    writer.writerow(["task", "suite", "config", "seeds", "threshold", "normalized_reward", "normalized_cost",
                     "safe", "best_safe", "algo", "reward_ci95", "cost_ci95", *columns])
    for row in table.rows:
        seeds = " ".join(map(str, row.seeds))
        axes = [row.axes.get(column, "") for column in columns]
        for kappa, (r, c) in row.per_threshold.items():
            writer.writerow([row.task, row.suite, row.config, seeds, f"{kappa:g}", f"{r:.6g}", f"{c:.6g}",
                             int(c <= 1.0), "", row.algo, "", "", *axes])
        writer.writerow([row.task, row.suite, row.config, seeds, "mean", f"{row.normalized_reward:.6g}",
                         f"{row.normalized_cost:.6g}", int(row.safe), int(row.best_safe), row.algo,
                         f"{row.reward_ci:.6g}", f"{row.cost_ci:.6g}", *axes])
    for suite in table.suites():
        for config in table.configs:
            avg = table.suite_average(suite, config)
            if avg:
                row = next(r for r in table.rows if r.config == config)
                writer.writerow([f"{suite} average", suite, config, "", "mean", f"{avg[0]:.6g}", f"{avg[1]:.6g}",
                                 int(avg[1] <= 1.0), "", row.algo, "", "",
                                 *(row.axes.get(column, "") for column in columns)])
    return out.getvalue()
