"""The paper's ablation tables (Sec. "Ablation Studies" and its appendix): K ∈ {2, 4, 8}, shared vs separate
actors, IQL vs SAC+BC, and offline critics vs FQE, as Markdown, LaTeX and CSV.

A table is written for every axis on which the sweep's CAPS records take two or more values. It compares
those values with the other axes held at their reference (the default, e.g. K = 2, shared, iql, offline, when
the sweep has it; else the first value), so each column differs from the next in that one axis. A cell is the
mean ± the half-width of the Student-t 95% confidence interval over seeds (``rllib_caps.report.stats.mean_ci``)
of the normalised reward and cost, each seed averaging the thresholds and episodes; the CSV adds every κ.
"""

from __future__ import annotations

import csv
import io
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rllib_caps.algorithms.registry import get_algorithm
from rllib_caps.algorithms.surface import AblationAxis
from rllib_caps.report.records import TrialRecord
from rllib_caps.report.stats import CONFIDENCE, mean_ci


@dataclass(frozen=True)
class Estimate:
    """Mean and 95% CI half-width (NaN with one seed) of one quantity over seeds."""

    mean: float
    half_width: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Estimate:
        return cls(*mean_ci(values))


@dataclass(frozen=True)
class Cell:
    """One task × axis value: the normalised reward and cost over seeds, overall and per κ."""

    seeds: tuple[int, ...]
    reward: Estimate
    cost: Estimate
    per_threshold: dict[float, tuple[Estimate, Estimate]]

    @property
    def safe(self) -> bool:
        return self.cost.mean <= 1.0


@dataclass(frozen=True)
class AblationTable:
    axis: AblationAxis
    values: list[Any]
    fixed: dict[str, Any]  # the other axes' values, by name
    tasks: list[str]
    cells: dict[tuple[str, Any], Cell]
    columns: dict[str, str] = field(default_factory=dict)  # axis name -> its column (``SweepAxis.column``: K)

    def best_safe(self, task: str) -> Any:
        """The value with the highest mean reward among the task's safe cells (None if none is safe)."""
        safe = [(c.reward.mean, v) for v in self.values if (c := self.cells.get((task, v))) and c.safe]
        return max(safe, key=lambda rv: rv[0])[1] if safe else None

    def fixed_text(self) -> list[str]:
        """``K=2``, ``actor=shared``: the other axes' values as labels write them."""
        return [f"{self.columns.get(name, name)}={value}" for name, value in self.fixed.items()]

    def caption(self) -> str:
        fixed = ", ".join(self.fixed_text())
        return (f"Ablation over {self.axis.title} ({fixed}). Normalised reward ↑ and cost ↓ per task: mean ± "
                f"half-width of the two-sided Student-t {CONFIDENCE:.0%} confidence interval over seeds (n − 1 "
                "degrees of freedom; none with one seed), each seed averaging the thresholds and episodes. "
                "Unsafe (mean cost > 1) marked ✗; the best safe value of each task in bold.")


def _order(axis: AblationAxis, values: Iterable[Any]) -> list[Any]:
    known = axis.order
    return sorted(set(values), key=lambda v: (known.index(v), "") if v in known else (len(known), v))


def _cell(records: Sequence[TrialRecord]) -> Cell:
    by_threshold: dict[float, list[tuple[float, float]]] = defaultdict(list)
    for r in records:
        for kappa, result in r.evaluation["thresholds"].items():
            by_threshold[float(kappa)].append((result["normalized_reward"], result["normalized_cost"]))
    return Cell(seeds=tuple(sorted(r.seed for r in records)),
                reward=Estimate.of([r.evaluation["mean"]["normalized_reward"] for r in records]),
                cost=Estimate.of([r.evaluation["mean"]["normalized_cost"] for r in records]),
                per_threshold={k: (Estimate.of([p[0] for p in v]), Estimate.of([p[1] for p in v]))
                               for k, v in sorted(by_threshold.items())})


def ablation_tables(records: Iterable[TrialRecord]) -> list[AblationTable]:
    """For each algorithm whose registry entry has ablation axes (``AlgorithmEntry.ablations``), one table per axis
    on which its records take two or more values, in the entry's order."""
    records = list(records)
    tables = []
    for algo in dict.fromkeys(r.algo for r in records):
        axes = get_algorithm(algo).ablations
        columns = {axis.name: axis.column for axis in get_algorithm(algo).axes}
        tables += _tables([r for r in records if r.algo == algo], axes, columns) if axes else []
    return tables


def _tables(records: list[TrialRecord], axes: Sequence[AblationAxis], columns: dict[str, str]
            ) -> list[AblationTable]:
    present = {axis.name: _order(axis, (r.axes[axis.name] for r in records)) for axis in axes}
    reference = {axis.name: axis.reference if axis.reference in present[axis.name] else present[axis.name][0]
                 for axis in axes if present[axis.name]}
    tables = []
    for axis in axes:
        if len(present[axis.name]) < 2:
            continue
        fixed = {name: value for name, value in reference.items() if name != axis.name}
        groups: dict[tuple[str, Any], list[TrialRecord]] = defaultdict(list)
        for r in records:
            if all(r.axes[name] == value for name, value in fixed.items()):
                groups[(r.task, r.axes[axis.name])].append(r)
        tasks = list(dict.fromkeys(r.task for r in records))
        tables.append(AblationTable(axis=axis, values=present[axis.name], fixed=fixed, columns=columns,
                                    tasks=[t for t in tasks if any(task == t for task, _ in groups)],
                                    cells={key: _cell(group) for key, group in groups.items()}))
    return tables


def _pm(e: Estimate, latex: bool = False) -> str:
    if math.isnan(e.half_width):
        return f"{e.mean:.2f}"
    return rf"{e.mean:.2f} $\pm$ {e.half_width:.2f}" if latex else f"{e.mean:.2f} ± {e.half_width:.2f}"


def _task_cells(table: AblationTable, task: str, pair: Callable[[Cell, bool], list[str]]) -> list[str]:
    """The reward and cost cells of one task row; ``pair(cell, is_best_safe)`` formats one value's two cells."""
    best, cells = table.best_safe(task), []
    for value in table.values:
        cell = table.cells.get((task, value))
        cells += ["", ""] if cell is None else pair(cell, value == best)
    return cells


def _md_pair(cell: Cell, best: bool) -> list[str]:
    reward, cost = _pm(cell.reward), _pm(cell.cost) + ("" if cell.safe else " ✗")
    return [f"**{reward}**", f"**{cost}**"] if best else [reward, cost]


def _tex_pair(cell: Cell, best: bool) -> list[str]:
    """The paper's marks: bold safe, gray unsafe, blue bold the best safe."""
    pair = [_pm(cell.reward, latex=True), _pm(cell.cost, latex=True)]
    if not cell.safe:
        return [rf"\textcolor{{gray}}{{{p}}}" for p in pair]
    if best:
        return [rf"\textcolor{{blue}}{{\textbf{{{p}}}}}" for p in pair]
    return [rf"\textbf{{{p}}}" for p in pair]


def format_markdown(table: AblationTable) -> str:
    header = ["Task"] + [f"{table.axis.label(v)} {m}" for v in table.values for m in ("reward ↑", "cost ↓")]
    lines = ["| " + " | ".join(header) + " |", "|:---|" + "---:|" * (len(header) - 1)]
    lines += [f"| {task} | " + " | ".join(_task_cells(table, task, _md_pair)) + " |" for task in table.tasks]
    seeds = sorted({len(c.seeds) for c in table.cells.values()})
    return "\n".join(lines) + f"\n\n{table.caption()} Seeds per cell: {', '.join(map(str, seeds))}."


def format_latex(table: AblationTable) -> str:
    """Booktabs (``\\usepackage{booktabs,xcolor}``) with the paper's marks."""
    n = len(table.values)
    lines = [f"% {table.caption()}", r"\begin{tabular}{l" + "cc" * n + "}", r"\toprule",
             " & " + " & ".join(rf"\multicolumn{{2}}{{c}}{{{table.axis.label(v)}}}" for v in table.values) + r" \\",
             "Task" + r" & reward $\uparrow$ & cost $\downarrow$" * n + r" \\", r"\midrule"]
    lines += [f"{task} & " + " & ".join(_task_cells(table, task, _tex_pair)) + r" \\" for task in table.tasks]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def format_csv(table: AblationTable) -> str:
    """Long format: one line per task × value × κ, plus the mean over κ; CI columns are 95% half-widths."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["axis", "fixed", "task", "value", "seeds", "threshold", "normalized_reward", "reward_ci95",
                     "normalized_cost", "cost_ci95", "safe"])
    fixed = " ".join(table.fixed_text())
    for task in table.tasks:
        for value in table.values:
            cell = table.cells.get((task, value))
            if cell is None:
                continue
            rows = [*((f"{k:g}", r, c) for k, (r, c) in cell.per_threshold.items()), ("mean", cell.reward, cell.cost)]
            for threshold, reward, cost in rows:
                writer.writerow([table.axis.name, fixed, task, value, " ".join(map(str, cell.seeds)), threshold,
                                 f"{reward.mean:.6g}", f"{reward.half_width:.6g}", f"{cost.mean:.6g}",
                                 f"{cost.half_width:.6g}", int(cost.mean <= 1.0)])
    return out.getvalue()

