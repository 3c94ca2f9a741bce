"""The proxy benchmark's table (docs/paper.md, "Proxy benchmark"): one arm of this project against the authors' code,
per dataset, grouped by suite.

    .venv/bin/python -m benchmarks.proxy_table \
        --ours CarCircle1-v3=benchmarks/quality_runs/CarCircle1-v3-s0-train.json \
        --authors CarCircle1-v3=benchmarks/quality_runs/authors-CarCircle1-v3-s0.json

``--ours``: per seed, a ``head_selection.py arms`` JSON (``--arm`` picks the arm) or ``train``'s final evaluation
(``evaluation.json`` in its checkpoint: the checkpoint's own settings, the defaults unless it was trained with
others); ``--authors``: ``authors_reference.py`` JSONs, one per
seed, or a published mean normalised reward (a number: it counts in the mean, not in the safe count). Each dataset's
suite is its task's (``rllib_caps.envs.tasks``), read from the authors' JSONs or given as ``--task DATASET=TASK``.
A row: the mean normalised reward over seeds (each seed's mean over κ) ± the half-width of its 95 % t-interval
("—" with one seed), the (seed, κ) pairs with normalised cost ≤ 1, the largest normalised cost, and the ratio of
the two means ("—" where the authors' mean is ≤ 0, and then left out of the means). The last line of each suite, and
of the table, is the mean of its datasets' ratios.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import stats

from benchmarks.head_selection import dataset_pairs, reference_reward, with_pessimism_arms

DEFAULT_ARM = "head_order+pessimism"


def mean_and_halfwidth(values: Sequence[float]) -> tuple[float, float | None]:
    """The mean and the half-width of its two-sided 95 % Student-t interval (None for a single value)."""
    mean = float(np.mean(values))
    if len(values) < 2:
        return mean, None
    return mean, float(stats.t.ppf(0.975, len(values) - 1) * np.std(values, ddof=1) / np.sqrt(len(values)))


def seed_scores(run: dict | float, arm: str | None) -> tuple[float, list[float]]:
    """One seed's mean normalised reward and its normalised cost per κ: from ``train``'s evaluation, an arms JSON
    (``arm``), an ``authors_reference.py`` JSON (``arm`` None), or a published number (no costs)."""
    if isinstance(run, float):
        return run, []
    if "thresholds" in run:
        rows = run["thresholds"].values()
        return float(np.mean([r["normalized_reward"] for r in rows])), [float(r["normalized_cost"]) for r in rows]
    if arm is not None:
        row = with_pessimism_arms(run)[arm]
        return float(row["mean_nr"]), [float(nc) for _, nc in row["per_kappa"].values()]
    return reference_reward(run), [float(k["normalized_cost"]) for k in run["per_kappa"].values()]


def mean_text(ratios: Sequence[float]) -> str:
    return f"{np.mean(ratios):.2f}" if ratios else "—"


def table(ours: Mapping[str, list], authors: Mapping[str, list], suites: Mapping[str, str], arm: str) -> str:
    """The markdown table, suites in name order and datasets in name order within each."""
    def cell(runs: list, arm_or_none: str | None) -> tuple[str, float, str, str]:
        scores = [seed_scores(run, arm_or_none) for run in runs]
        mean, half = mean_and_halfwidth([nr for nr, _ in scores])
        costs = [nc for _, ncs in scores for nc in ncs]
        safe = f"{sum(nc <= 1.0 for nc in costs)} / {len(costs)}" if costs else "—"
        return (f"{mean:.3f}" + (f" ± {half:.3f}" if half is not None else ""), mean, safe,
                f"{max(costs):.2f}" if costs else "—")

    lines = ["| suite | dataset | seeds | ours | safe | largest cost | authors' code | safe | largest cost "
             "| ÷ authors |", "|---|---|---:|---|---:|---:|---|---:|---:|---:|"]
    all_ratios = []
    for suite in sorted(set(suites.values())):
        ratios = []
        for dataset in sorted(d for d in ours if suites[d] == suite):
            text, mean, safe, worst = cell(ours[dataset], arm)
            a_text, a_mean, a_safe, a_worst = cell(authors[dataset], None)
            ratio = mean / a_mean if a_mean > 0 else None  # a ratio to a mean ≤ 0 says nothing
            ratios += [ratio] if ratio is not None else []
            lines.append(f"| {suite} | {dataset} | {len(ours[dataset])} | {text} | {safe} | {worst} | {a_text} | "
                         f"{a_safe} | {a_worst} | {'—' if ratio is None else f'{ratio:.2f}'} |")
        lines.append(f"| {suite} | mean of its datasets | | | | | | | | {mean_text(ratios)} |")
        all_ratios += ratios
    lines.append(f"| all | mean of every dataset | | | | | | | | {mean_text(all_ratios)} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ours", nargs="+", required=True, metavar="DATASET=FILE.json",
                        help="per seed: a head_selection.py arms JSON, or train's evaluation.json")
    parser.add_argument("--authors", nargs="+", required=True, metavar="DATASET=FILE.json|NUMBER",
                        help="the authors' code per seed: authors_reference.py's JSON, or a published figure")
    parser.add_argument("--task", nargs="*", default=[], metavar="DATASET=TASK",
                        help="a dataset's task, where no authors' JSON names it (e.g. DroneRun-shared=DroneRun)")
    parser.add_argument("--arm", default=DEFAULT_ARM, help=f"the arm read from arms JSONs [{DEFAULT_ARM}]")
    args = parser.parse_args(argv)
    from rllib_caps.envs.tasks import get_task

    ours = dataset_pairs(args.ours, "--ours")
    authors = dataset_pairs(args.authors, "--authors", numbers=True)
    tasks = dict(value.partition("=")[::2] for value in args.task)
    missing = sorted(set(ours) - set(authors))
    if missing:
        raise SystemExit(f"error: --authors: no run for {', '.join(missing)}")
    suites = {}
    for dataset in ours:
        task = tasks.get(dataset) or next((run["task"] for run in authors[dataset] if isinstance(run, dict)), None)
        if task is None:
            raise SystemExit(f"error: --task: {dataset}'s task is not known (its authors' runs are numbers)")
        suites[dataset] = get_task(task).suite
    print(table(ours, authors, suites, args.arm))
    return 0


if __name__ == "__main__":
    sys.exit(main())
