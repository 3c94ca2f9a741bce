"""The time-limit measurement: CAPS with each ``--time-limit`` variant on several tasks and seeds, in one table.

    .venv/bin/python benchmarks/time_limit.py --tasks BallCircle,DroneRun --storage results/time_limit
    .venv/bin/python benchmarks/time_limit.py --tasks BallCircle,DroneRun,CarCircle --storage results/time_limit \
        --table-only

For each variant it runs the sweep of ``tune_configs/time_limit.yaml`` (``python -m rllib_caps.tune --config ...
--time-limit V``) as experiment ``STORAGE/time_limit-V-<tasks>``, unless that experiment exists (delete it to
rerun). It then reads every ``STORAGE/time_limit-V-*`` experiment (task sets may be run separately) and
prints, per task and variant, the normalised reward and cost at each κ (mean over seeds), their means, and
the (seed, κ) pairs that are safe; and the variant the project's rule picks as the default: safe on every
(task, seed, κ) (else on the most of them), then the highest mean normalised reward.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from rllib_caps.core.keys import TIME_LIMITS
from rllib_caps.report.records import TrialRecord, load_trials

CONFIG = Path(__file__).resolve().parents[1] / "tune_configs" / "time_limit.yaml"


def experiment_name(variant: str, tasks: str) -> str:
    return f"time_limit-{variant}-{tasks.replace(',', '-')}"


def run_variant(variant: str, tasks: str, storage: str, data_root: str) -> None:
    from rllib_caps.tune import main as tune_main

    name = experiment_name(variant, tasks)
    if (Path(storage) / name).exists():
        print(f"{name}: exists, reading it as it is")
        return
    code = tune_main(["--config", str(CONFIG), "--tasks", tasks, "--time-limit", variant, "--name", name,
                      "--storage", storage, "--data-root", data_root])
    if code != 0:
        raise SystemExit(f"{name}: the sweep exited with {code}")


def table(records: dict[str, list[TrialRecord]]) -> tuple[str, str | None]:
    """The Markdown table and the variant the default rule picks."""
    by_task: dict[tuple[str, str], list[TrialRecord]] = defaultdict(list)
    for variant, recs in records.items():
        for r in recs:
            by_task[(r.task, variant)].append(r)
    kappas = sorted({float(k) for recs in records.values() for r in recs for k in r.evaluation["thresholds"]})
    lines = ["| task | time_limit | seeds | " + " | ".join(f"κ={k:g} reward / cost" for k in kappas)
             + " | mean reward | mean cost | safe (seed, κ) |",
             "|:---|:---|---:|" + "---:|" * len(kappas) + "---:|---:|---:|"]
    safe_pairs: dict[str, int] = dict.fromkeys(records, 0)
    all_pairs: dict[str, int] = dict.fromkeys(records, 0)
    mean_reward: dict[str, list[float]] = defaultdict(list)
    order = list(records)  # the variants in the order given
    for (task, variant), recs in sorted(by_task.items(), key=lambda kv: (kv[0][0], order.index(kv[0][1]))):
        cells, safe, pairs = [], 0, 0
        for k in kappas:
            results = [r.evaluation["thresholds"].get(f"{k:g}") for r in recs]
            results = [x for x in results if x is not None]
            if not results:
                cells.append("")
                continue
            cells.append(f"{np.mean([x['normalized_reward'] for x in results]):.3f} / "
                         f"{np.mean([x['normalized_cost'] for x in results]):.2f}")
            safe += sum(x["normalized_cost"] <= 1.0 for x in results)
            pairs += len(results)
        reward = float(np.mean([r.evaluation["mean"]["normalized_reward"] for r in recs]))
        cost = float(np.mean([r.evaluation["mean"]["normalized_cost"] for r in recs]))
        safe_pairs[variant] += safe
        all_pairs[variant] += pairs
        mean_reward[variant].append(reward)
        seeds = ",".join(str(s) for s in sorted(r.seed for r in recs))
        lines.append(f"| {task} | {variant} | {seeds} | " + " | ".join(cells)
                     + f" | {reward:.3f} | {cost:.2f} | {safe} / {pairs} |")
    # The rule: safe on every (task, seed, κ), then the highest mean reward; when no variant is safe everywhere,
    # the most safe (task, seed, κ) triples first.
    chosen = max(records, key=lambda v: (safe_pairs[v], np.mean(mean_reward[v])))
    summary = ["", "| time_limit | mean normalised reward over tasks | safe (task, seed, κ) |", "|:---|---:|---:|"]
    summary += [f"| {v} | {np.mean(mean_reward[v]):.3f} | {safe_pairs[v]} / {all_pairs[v]} |" for v in records]
    return "\n".join(lines + summary), chosen


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", default="BallCircle,DroneRun,CarCircle", help="comma list of tasks")
    p.add_argument("--variants", nargs="+", default=list(TIME_LIMITS), choices=TIME_LIMITS)
    p.add_argument("--storage", default="results/time_limit")
    p.add_argument("--data-root", default="datasets")
    p.add_argument("--table-only", action="store_true", help="only read the experiments that exist")
    args = p.parse_args(argv)
    tasks = set(args.tasks.split(","))
    records: dict[str, list[TrialRecord]] = {}
    for variant in args.variants:
        if not args.table_only:
            run_variant(variant, args.tasks, args.storage, args.data_root)
        for path in sorted(Path(args.storage).glob(f"time_limit-{variant}-*")):  # every task set run so far
            records.setdefault(variant, []).extend(r for r in load_trials(path)[0] if r.task in tasks)
    if not records:
        print("no experiments found", file=sys.stderr)
        return 1
    markdown, chosen = table(records)
    print(markdown)
    print(f"\ndefault by the rule (most safe (task, seed, κ), then highest mean reward): {chosen}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
