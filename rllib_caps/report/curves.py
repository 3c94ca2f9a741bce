"""Learning curves of a sweep's trials, read from their ``result.json`` (one result per training iteration):
the training losses (the learner results' ``*_loss`` but ``total_loss``, their sum) and, where the trial evaluated
during training (``--eval-every``), the normalised reward and cost, all against ``gradient_steps`` (an evaluation's
own, where it has one: a population's evaluation during training is reported with the iteration after it).

Curves are grouped per task and line (the report's column, and κ for an algorithm trained once per κ), one curve
per seed; ``seed_mean`` averages a line's seeds. Results without ``gradient_steps`` (sweeps before it) give no
curve.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rllib_caps.core.keys import GRADIENT_STEPS, RESULTS_KEY
from rllib_caps.report.records import TrialRecord
from rllib_caps.report.tables import column_label

LEARNERS = "learners"  # RLlib's learner results: module id -> metrics
ALL_MODULES = "__all_modules__"  # RLlib's totals over modules, no losses
LOSS_SUFFIX = "_loss"
SUM_OF_LOSSES = "total_loss"  # RLlib's sum of a module's losses: left out, the losses are plotted one by one

Series = tuple[tuple[int, ...], tuple[float, ...]]  # (gradient steps, values)


@dataclass(frozen=True)
class Curve:
    """One trial's learning curve: each loss per iteration, and each evaluation's mean normalised reward and cost
    (the last iteration's included)."""

    seed: int
    losses: dict[str, Series]  # loss name (``qr_loss``) -> its values per iteration
    reward: Series
    cost: Series

    @property
    def evaluated_during_training(self) -> bool:
        return len(self.reward[0]) > 1


def losses_of(result: Mapping[str, Any]) -> dict[str, float]:
    """The ``*_loss`` values of one result's learner results (every module; ``total_loss`` left out)."""
    return {name: float(value) for module, metrics in result.get(LEARNERS, {}).items() if module != ALL_MODULES
            for name, value in metrics.items() if name.endswith(LOSS_SUFFIX) and name != SUM_OF_LOSSES}


def _series(points: Iterable[tuple[int, float]]) -> Series:
    points = list(points)
    return tuple(p[0] for p in points), tuple(p[1] for p in points)


def trial_curve(results: Sequence[Mapping[str, Any]], seed: int) -> Curve | None:
    """A trial's curve from its results, or None when they have no ``gradient_steps``."""
    results = [r for r in results if GRADIENT_STEPS in r]
    if not results:
        return None
    losses: dict[str, list[tuple[int, float]]] = defaultdict(list)
    evaluations = []
    for result in results:
        steps = int(result[GRADIENT_STEPS])
        for name, value in losses_of(result).items():
            losses[name].append((steps, value))
        evaluation = result.get("evaluation", {})
        if RESULTS_KEY in evaluation:  # a pipelined evaluation (a population's) names the steps it evaluated
            mean = evaluation[RESULTS_KEY]["mean"]
            evaluations.append((int(evaluation.get(GRADIENT_STEPS, steps)), mean["normalized_reward"],
                                mean["normalized_cost"]))
    return Curve(seed=seed, losses={name: _series(points) for name, points in losses.items()},
                 reward=_series((s, r) for s, r, _ in evaluations), cost=_series((s, c) for s, _, c in evaluations))


def line_label(record: TrialRecord, algos: set[str]) -> str:
    """The report's column of the record, with its κ for an algorithm trained once per κ (``BC-Safe κ=20``)."""
    column = column_label(record.algo, record.config, algos)
    return column if record.cost_limit is None else f"{column} κ={record.cost_limit:g}"


def load_curves(records: Sequence[TrialRecord]) -> dict[str, dict[str, list[Curve]]]:
    """Task -> line -> one curve per trial (its seed), for the trials whose results have ``gradient_steps``; one
    curve per trial directory (a trial with several critic variants trained once)."""
    algos = {r.algo for r in records}
    curves: dict[str, dict[str, list[Curve]]] = defaultdict(lambda: defaultdict(list))
    for record in {(r.trial_dir, r.member): r for r in records}.values():
        curve = trial_curve(record.results, record.seed)
        if curve is not None:
            curves[record.task][line_label(record, algos)].append(curve)
    return {task: dict(lines) for task, lines in curves.items()}


def seed_mean(series: Sequence[Series]) -> Series:
    """The mean over seeds at the gradient steps that every seed has (NaN values left out of the mean)."""
    common = sorted(set.intersection(*(set(steps) for steps, _ in series))) if series else []
    by_step = [dict(zip(steps, values, strict=True)) for steps, values in series]
    means = []
    for step in common:
        values = [v[step] for v in by_step if not math.isnan(v[step])]
        means.append(float(np.mean(values)) if values else math.nan)
    return tuple(common), tuple(means)
