"""PNG plots of a CAPS sweep (matplotlib, Agg), one panel per task:

- ``plot_reward_cost``: normalised reward against normalised cost, one marker per configuration (K), seeds
  as small points, the safety line at cost 1;
- ``plot_kappa``: normalised reward (solid) and cost (dashed) as functions of the cost limit κ;
- ``plot_head_usage``: the fraction of steps each head acted, per configuration and κ;
- ``plot_learning_curves``: one task's training losses and evaluations during training against gradient steps,
  one thin line per seed and a thick one for their mean (``report.curves``).
"""

from __future__ import annotations

import math
import textwrap
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after selecting the backend)
import numpy as np  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402

from rllib_caps.algorithms.registry import ALGORITHMS  # noqa: E402

if TYPE_CHECKING:
    from rllib_caps.report.curves import Curve, Series
    from rllib_caps.report.records import TrialRecord
    from rllib_caps.report.tables import Row

DPI = 100
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def _panels(tasks: Sequence[str], width: float = 4.0, height: float = 3.2,
            max_cols: int = 4) -> tuple[plt.Figure, dict[str, Any]]:
    ncols = min(max_cols, len(tasks))
    nrows = math.ceil(len(tasks) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    for ax in axes.flat[len(tasks):]:
        ax.set_visible(False)
    return fig, dict(zip(tasks, axes.flat, strict=False))


def _tasks(rows: Sequence[Row]) -> list[str]:
    return list(dict.fromkeys(r.task for r in rows))


def _styles(rows: Sequence[Row]) -> dict[str, tuple[str, Any]]:
    """config -> (marker, colour), the same in every panel and plot."""
    configs = list(dict.fromkeys(r.config for r in rows))
    colours = plt.get_cmap("tab10")
    return {c: (MARKERS[i % len(MARKERS)], colours(i % 10)) for i, c in enumerate(configs)}


def _subject(rows: Sequence[Row]) -> str:
    """The title's subject: "CAPS" for a CAPS-only sweep, else the algorithms' titles."""
    return " vs ".join(dict.fromkeys(ALGORITHMS[r.algo].display_name for r in rows))


def _save(fig: plt.Figure, path: Path, title: str) -> None:
    """Wraps the title to the figure's width and saves with a tight box, so no title, legend or label is cut."""
    chars_per_line = max(30, int(fig.get_figwidth() * DPI / 7.5))  # about 7.5 px per character at 12 pt
    fig.suptitle(textwrap.fill(title, chars_per_line))
    fig.tight_layout()
    fig.savefig(path, dpi=DPI, bbox_inches="tight", pad_inches=0.1)
    plt.close(fig)


def plot_reward_cost(rows: Sequence[Row], path: Path) -> None:
    """Normalised reward vs normalised cost per task; left of the dashed line at cost 1 is safe."""
    fig, axes = _panels(_tasks(rows))
    styles = _styles(rows)
    for row in rows:
        ax = axes[row.task]
        marker, colour = styles[row.config]
        points = np.asarray(row.seed_points)
        ax.scatter(points[:, 1], points[:, 0], marker=marker, color=colour, s=14, alpha=0.4)
        ax.scatter(row.normalized_cost, row.normalized_reward, marker=marker, color=colour, s=70,
                   edgecolors="black", label=row.config, zorder=3)
    for task, ax in axes.items():
        right = max(2.0, ax.get_xlim()[1])
        ax.axvspan(1.0, right, color="tab:red", alpha=0.07)
        ax.axvline(1.0, color="tab:red", linestyle="--", linewidth=1)
        ax.set_xlim(left=min(0.0, ax.get_xlim()[0]), right=right)
        ax.set(title=task, xlabel="normalised cost", ylabel="normalised reward")
        ax.legend(fontsize="small")
    _save(fig, path, f"{_subject(rows)}: reward vs cost (large: seed mean, small: seeds; red: unsafe)")


def kappa_curves(rows: Sequence[Row], records: Sequence[TrialRecord],
                 evaluations: dict[str, dict[str, Any]] | None) -> dict[tuple[str, str], dict[float, tuple]]:
    """(task, config) -> κ -> (normalised reward, normalised cost), averaged over seeds: from the cost-limit
    evaluations when given, else from the sweep's own evaluation at the task's thresholds."""
    if evaluations is None:
        return {(r.task, r.config): r.per_threshold for r in rows}
    columns = {(r.task, r.algo, r.label): r.config for r in rows}
    values: dict[tuple[str, str], dict[float, list]] = defaultdict(lambda: defaultdict(list))
    for record in records:
        if record.key not in evaluations:  # only κ-at-deployment algorithms are re-evaluated
            continue
        column = columns[(record.task, record.algo, record.config)]
        for kappa, result in evaluations[record.key]["thresholds"].items():
            values[(record.task, column)][float(kappa)].append(
                (result["normalized_reward"], result["normalized_cost"]))
    return {key: {k: tuple(np.mean(v, axis=0)) for k, v in sorted(by_kappa.items())}
            for key, by_kappa in values.items()}


def plot_kappa(rows: Sequence[Row], records: Sequence[TrialRecord],
               evaluations: dict[str, dict[str, Any]] | None, path: Path) -> None:
    """Normalised reward (solid) and cost (dashed) against κ per task and configuration."""
    curves = kappa_curves(rows, records, evaluations)
    fig, axes = _panels(_tasks(rows))
    styles = _styles(rows)
    for (task, config), curve in curves.items():
        ax = axes[task]
        marker, colour = styles[config]
        kappas = list(curve)
        ax.plot(kappas, [v[0] for v in curve.values()], marker=marker, color=colour, label=f"{config} reward")
        ax.plot(kappas, [v[1] for v in curve.values()], marker=marker, color=colour, linestyle="--",
                label=f"{config} cost")
    for task, ax in axes.items():
        ax.axhline(1.0, color="tab:red", linewidth=1, linestyle=":")
        ax.set(title=task, xlabel="cost limit κ", ylabel="normalised value")
        ax.legend(fontsize="x-small")
    source = "cost-limit evaluations" if evaluations is not None else "the sweep's evaluation thresholds"
    plotted = [r for r in rows if (r.task, r.config) in curves]  # the cost-limit evaluations: κ-at-deployment only
    _save(fig, path, f"{_subject(plotted)}: reward (solid) and cost (dashed) vs κ, from {source}; dotted: cost 1")


def plot_head_usage(rows: Sequence[Row], path: Path) -> None:
    """Stacked bars per (configuration, κ): the fraction of steps each head acted (head 0 maximises reward,
    head K−1 minimises cost), for the rows whose evaluations report head usage (CAPS's)."""
    rows = [r for r in rows if r.head_usage]
    bars = max(len(r.head_usage) for r in rows) * len({r.config for r in rows})
    fig, axes = _panels(_tasks(rows), width=max(4.0, 0.9 * bars), height=3.6, max_cols=2 if bars > 4 else 4)
    cmap = plt.get_cmap("coolwarm")
    by_task: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        by_task[row.task].append(row)
    for task, task_rows in by_task.items():
        ax = axes[task]
        labels: list[str] = []
        seen: set[str] = set()
        for row in task_rows:
            for kappa, usage in row.head_usage.items():
                x, bottom = len(labels), 0.0
                num_heads = len(usage)
                for h, u in enumerate(usage):
                    label = f"head {h} of {num_heads}"
                    ax.bar(x, u, bottom=bottom, color=cmap(h / max(num_heads - 1, 1)), edgecolor="white",
                           label=None if label in seen else label)
                    seen.add(label)
                    bottom += u
                labels.append(f"{row.config.split()[0]}\nκ={kappa:g}")
        ax.set_xticks(range(len(labels)), labels, fontsize="small")
        ax.set(title=task, ylabel="fraction of steps", ylim=(0, 1))
        ax.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=4, frameon=False)
    _save(fig, path, f"{_subject(rows)}: head usage per threshold (blue: reward head 0 … red: cost head K−1)")


def _log_scale(series: Sequence[Series]) -> bool:
    """A log axis for values that are all positive and span at least two decades (critic losses early on)."""
    values = np.array([v for _, vs in series for v in vs], dtype=float)
    values = values[np.isfinite(values)]
    return values.size > 0 and values.min() > 0 and values.max() >= 100 * values.min()


def _learning_panels(lines: dict[str, list[Curve]]) -> dict[str, Any]:
    """Panel title -> how to get a curve's series in it: with evaluations during training the normalised reward
    and cost, then each loss by name."""
    panels: dict[str, Any] = {}
    if any(c.evaluated_during_training for curves in lines.values() for c in curves):
        panels["normalised reward"] = lambda c: c.reward
        panels["normalised cost"] = lambda c: c.cost
    names = sorted({name for curves in lines.values() for c in curves for name in c.losses})
    return panels | {name.replace("_", " "): (lambda c, n=name: c.losses.get(n)) for name in names}


def plot_learning_curves(task: str, lines: dict[str, list[Curve]], path: Path) -> None:
    """One task's learning curves: a panel per training loss and, where evaluation ran during training, for the
    normalised reward and cost (dotted: cost 1), against gradient steps; per line (configuration) a thin line per
    seed and a thick one for the mean over seeds (``report.curves.seed_mean``)."""
    from rllib_caps.report.curves import seed_mean

    panels = _learning_panels(lines)
    fig, axes = _panels(list(panels), width=3.4, height=2.6, max_cols=3)
    colours = plt.get_cmap("tab10")
    for title, get in panels.items():
        ax = axes[title]
        for i, (label, curves) in enumerate(lines.items()):
            series = [s for s in map(get, curves) if s and s[0]]
            colour = colours(i % 10)
            for steps, values in series:
                ax.plot(steps, values, color=colour, linewidth=0.8, alpha=0.35)
            if series:
                steps, values = seed_mean(series)
                ax.plot(steps, values, color=colour, linewidth=2.2, label=label,
                        marker="o" if title.startswith("normalised") else None, markersize=3)
        if title == "normalised cost":
            ax.axhline(1.0, color="tab:red", linewidth=1, linestyle=":")
        if _log_scale([s for curves in lines.values() for s in map(get, curves) if s]):
            ax.set_yscale("log")
            ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_title(title)
        ax.set_xlabel("gradient steps")
        ax.set_xlim(left=0)
        ax.grid(alpha=0.3)
        ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4))
    handles, labels = next(iter(axes.values())).get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=min(4, len(labels)), bbox_to_anchor=(0.5, 0.0),
               frameon=False)  # below the panels: the saved figure's tight box takes it in
    seeds = max(len(curves) for curves in lines.values())
    _save(fig, path, f"{task}: learning curves ({seeds} seed(s): thin lines; mean over seeds: thick)")
