"""PNG plots of a sweep (matplotlib, Agg), one panel per task. Each function builds a ``Plot``: the figure and its
caption (the report's ``report.md`` shows every PNG with it); ``Plot.save`` writes the PNG.

- ``reward_cost_plot``: normalised reward against normalised cost, one marker per configuration (K), seeds
  as small points, the safety line at cost 1;
- ``kappa_plot``: normalised reward and normalised cost as functions of the cost limit κ, on panels of their own
  (reward above cost), so neither scale flattens the other;
- ``head_usage_plot``: the fraction of steps each head acted, per configuration and κ, for the algorithms whose
  evaluations report head usage; one colour family per configuration, one shade per head;
- ``learning_curves_plot``: one task's training losses and evaluations during training against gradient steps,
  one thin line per seed and a thick one for their mean (``report.curves``); normalised reward and cost on linear
  axes, a loss on a log axis where it spans two decades.
"""

from __future__ import annotations

import math
import textwrap
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
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
HEAD_FAMILIES = ("Blues", "Oranges", "Greens", "Purples", "Reds", "Greys")  # a configuration's heads: its shades
EVALUATION_PANELS = ("normalised reward", "normalised cost")  # the learning curves' panels that stay linear


@dataclass(frozen=True)
class Plot:
    """A figure and its caption (the figure's title, unwrapped)."""

    figure: plt.Figure
    caption: str

    def save(self, path: Path) -> str:
        """Writes the PNG with the caption as its title, wrapped to the figure's width, in a tight box (no title,
        legend or label cut), and closes the figure; returns the caption."""
        fig = self.figure
        chars_per_line = max(30, int(fig.get_figwidth() * DPI / 7.5))  # about 7.5 px per character at 12 pt
        fig.suptitle(textwrap.fill(self.caption, chars_per_line))
        fig.tight_layout()
        fig.savefig(path, dpi=DPI, bbox_inches="tight", pad_inches=0.1)
        plt.close(fig)
        return self.caption


def _grid(count: int, width: float, height: float, max_cols: int, rows_per_panel: int = 1
          ) -> tuple[plt.Figure, list[list[Any]]]:
    """A figure of ``count`` panels, ``max_cols`` a row; each panel is ``rows_per_panel`` axes stacked (sharing x).
    Returns the figure and each panel's axes, top to bottom; the cells left over are hidden."""
    ncols = min(max_cols, count)
    nrows = math.ceil(count / ncols)
    fig, axes = plt.subplots(nrows * rows_per_panel, ncols, figsize=(width * ncols, height * nrows * rows_per_panel),
                             squeeze=False, sharex="col" if rows_per_panel > 1 else False)
    panels = [[axes[(i // ncols) * rows_per_panel + r, i % ncols] for r in range(rows_per_panel)]
              for i in range(nrows * ncols)]
    for panel in panels[count:]:
        for ax in panel:
            ax.set_visible(False)
    return fig, panels[:count]


def _panels(titles: Sequence[str], width: float = 4.0, height: float = 3.2,
            max_cols: int = 4) -> tuple[plt.Figure, dict[str, Any]]:
    fig, panels = _grid(len(titles), width, height, max_cols)
    return fig, {title: panel[0] for title, panel in zip(titles, panels, strict=True)}


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


def reward_cost_plot(rows: Sequence[Row]) -> Plot:
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
    return Plot(fig, f"{_subject(rows)}: reward vs cost (large: seed mean, small: seeds; red: unsafe)")


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


def kappa_plot(rows: Sequence[Row], records: Sequence[TrialRecord],
               evaluations: dict[str, dict[str, Any]] | None) -> Plot:
    """Per task two panels sharing the κ axis: normalised reward above, normalised cost below (dotted: cost 1), a
    line per configuration."""
    curves = kappa_curves(rows, records, evaluations)
    tasks = _tasks(rows)
    fig, panels = _grid(len(tasks), width=4.0, height=2.4, max_cols=4, rows_per_panel=2)
    axes = dict(zip(tasks, panels, strict=True))
    styles = _styles(rows)
    for (task, config), curve in curves.items():
        marker, colour = styles[config]
        for ax, values in zip(axes[task], zip(*curve.values(), strict=True), strict=True):
            ax.plot(list(curve), values, marker=marker, color=colour, label=config)
    for task, (reward_ax, cost_ax) in axes.items():
        cost_ax.axhline(1.0, color="tab:red", linewidth=1, linestyle=":")
        cost_ax.set_ylim(0.0, max(cost_ax.get_ylim()[1], 1.1))  # from 0, the line at cost 1 within
        reward_ax.set(title=task, ylabel="normalised reward")
        cost_ax.set(xlabel="cost limit κ", ylabel="normalised cost")
        reward_ax.tick_params(labelbottom=True)
        reward_ax.legend(fontsize="x-small")
    source = "cost-limit evaluations" if evaluations is not None else "the sweep's evaluation thresholds"
    plotted = [r for r in rows if (r.task, r.config) in curves]  # the cost-limit evaluations: κ-at-deployment only
    return Plot(fig, f"{_subject(plotted)}: normalised reward (top) and cost (bottom; dotted: cost 1) vs κ, from "
                     f"{source}")


def head_shades(rows: Sequence[Row]) -> dict[tuple[str, int], Any]:
    """(configuration, head) -> colour: a colour family per configuration (``HEAD_FAMILIES``), darkest for head 0
    (the reward head), lightest for head K−1 (the cost head)."""
    colours = {}
    for i, config in enumerate(dict.fromkeys(r.config for r in rows)):
        family = plt.get_cmap(HEAD_FAMILIES[i % len(HEAD_FAMILIES)])
        heads = max(len(u) for r in rows if r.config == config for u in r.head_usage.values())
        for h in range(heads):
            colours[config, h] = family(0.9 - 0.55 * h / max(heads - 1, 1))
    return colours


def _head_name(config: str, head: int, heads: int) -> str:
    role = " (reward)" if head == 0 else " (cost)" if head == heads - 1 else ""
    return f"{config} head {head}{role}"


def head_usage_plot(rows: Sequence[Row]) -> Plot:
    """Stacked bars per (configuration, κ): the fraction of steps each head acted (head 0 maximises reward,
    head K−1 minimises cost), for the rows whose evaluations report head usage (CAPS's); each configuration's bars
    are a group under its label (the registry's, with its K), one legend entry per configuration and head."""
    rows = [r for r in rows if r.head_usage]
    shades = head_shades(rows)
    bars = max(sum(len(r.head_usage) + 1 for r in rows if r.task == task) for task in _tasks(rows))
    fig, axes = _panels(_tasks(rows), width=max(4.0, 0.55 * bars), height=3.6, max_cols=2 if bars > 4 else 4)
    handles: dict[str, Any] = {}
    ticks: dict[str, dict[int, str]] = defaultdict(dict)  # task -> bar position -> its κ
    for row in rows:
        ax, first = axes[row.task], max(ticks[row.task], default=-2) + 2  # a gap between groups
        for x, (kappa, usage) in enumerate(row.head_usage.items(), start=first):
            bottom = 0.0
            for h, u in enumerate(usage):
                handles[_head_name(row.config, h, len(usage))] = ax.bar(
                    x, u, bottom=bottom, color=shades[row.config, h], edgecolor="white", width=0.8)
                bottom += u
            ticks[row.task][x] = f"κ={kappa:g}"
        ax.text((first + max(ticks[row.task])) / 2, 1.03, row.config, ha="center", va="bottom", fontsize="small")
    for task, ax in axes.items():
        ax.set_xticks(list(ticks[task]), list(ticks[task].values()), fontsize="small")
        ax.set(title=task, ylabel="fraction of steps", ylim=(0, 1.15), yticks=np.linspace(0, 1, 6),
               xlim=(-0.6, max(ticks[task]) + 0.6))
    fig.legend(list(handles.values()), list(handles), fontsize="x-small", loc="center left", bbox_to_anchor=(1.0, 0.5),
               frameon=False)
    return Plot(fig, f"{_subject(rows)}: head usage per threshold κ (darkest: reward head 0 … lightest: cost "
                     "head K−1)")


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
        panels[EVALUATION_PANELS[0]] = lambda c: c.reward
        panels[EVALUATION_PANELS[1]] = lambda c: c.cost
    names = sorted({name for curves in lines.values() for c in curves for name in c.losses})
    return panels | {name.replace("_", " "): (lambda c, n=name: c.losses.get(n)) for name in names}


def learning_curves_plot(task: str, lines: dict[str, list[Curve]]) -> Plot:
    """One task's learning curves: a panel per training loss and, where evaluation ran during training, for the
    normalised reward and cost (dotted: cost 1; both on linear axes), against gradient steps; per line
    (configuration) a thin line per seed and a thick one for the mean over seeds (``report.curves.seed_mean``)."""
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
                        marker="o" if title in EVALUATION_PANELS else None, markersize=3)
        if title == EVALUATION_PANELS[1]:
            ax.axhline(1.0, color="tab:red", linewidth=1, linestyle=":")
        if title not in EVALUATION_PANELS and _log_scale([s for curves in lines.values() for s in map(get, curves)
                                                          if s]):
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
    return Plot(fig, f"{task}: learning curves ({seeds} seed(s): thin lines; mean over seeds: thick)")
