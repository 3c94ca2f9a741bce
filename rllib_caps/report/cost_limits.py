"""The paper's cost-limit ablation (Table 2): the trained checkpoints evaluated at scaled limits without
retraining, counting safe tasks."""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from rllib_caps.algorithms.registry import ALGORITHMS, get_algorithm
from rllib_caps.report.records import ReportError, TrialRecord
from rllib_caps.report.tables import column_label, config_order
from rllib_caps.utils.manifest import CheckpointError

logger = logging.getLogger("rllib_caps.report")

EVALUATIONS_FILE = "cost_limits.json"  # record key -> its results at the limits, in the report directory
# The paper's cost-limit configurations {a, b}: κ = a for Bullet and MetaDrive, b for Safety-Gymnasium and Velocity.
COST_LIMITS: tuple[tuple[int, int], ...] = ((5, 10), (10, 20), (15, 30), (20, 40), (30, 60), (40, 80))


def limit_for(suite: str, limits: tuple[int, int]) -> float:
    """The κ a task gets under a cost-limit configuration {a, b} (paper: b for Safety-Gymnasium tasks)."""
    return float(limits[0] if suite in ("bullet", "metadrive") else limits[1])


def _evaluate_checkpoint(job: tuple[str, str, str, list[float], int, bool]) -> dict[str, Any] | str:
    """The checkpoint's results at the limits, or why it cannot be trusted (its integrity check's error)."""
    from rllib_caps.core.rollout import episode_seed, evaluate_policy, policy_task

    algo, checkpoint, task, thresholds, episodes, verify = job
    try:
        policy = get_algorithm(algo).policy_class.from_checkpoint(checkpoint, verify=verify)
    except CheckpointError as err:
        return str(err)
    return evaluate_policy(policy, policy_task(policy, task), thresholds, episodes, seed=episode_seed(policy),
                           progress=False)


def evaluate_cost_limits(records: Sequence[TrialRecord], episodes: int, jobs: int = 1,
                         limits: Sequence[tuple[int, int]] = COST_LIMITS, *,
                         verify: bool = True) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Evaluates the last checkpoint of every trial whose algorithm takes κ at deployment (CAPS, CDT) at its suite's
    limits with the algorithm's deployable policy (no retraining): (record key -> results, record key -> why its
    checkpoint was skipped: corrupt, modified or without a manifest, named in the log). ``verify=False`` skips the
    checkpoints' manifest check (logged)."""
    records = [r for r in records if get_algorithm(r.algo).threshold_at_deployment]  # one policy for every κ
    missing = [r.key for r in records if r.checkpoint is None]
    if missing:
        raise ReportError(f"--cost-limits: no checkpoint in {', '.join(missing)}")
    work = [(r.algo, str(r.checkpoint), r.task, sorted({limit_for(r.suite, lim) for lim in limits}), episodes, verify)
            for r in records]
    logger.info("evaluating %d checkpoints at the cost limits, %d episodes per limit", len(work), episodes)
    if jobs > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            results = list(tqdm(pool.map(_evaluate_checkpoint, work), total=len(work), desc="cost limits",
                                unit="checkpoint"))
    else:
        results = [_evaluate_checkpoint(job) for job in tqdm(work, desc="cost limits", unit="checkpoint")]
    evaluations, skipped = {}, {}
    for record, result in zip(records, results, strict=True):
        if isinstance(result, str):
            logger.warning("%s; trial %s is left out of the cost-limit table", result, record.trial_dir.name)
            skipped[record.key] = result
        else:
            evaluations[record.key] = result
    return evaluations, skipped


def kept_evaluations(report_dir: Path, records: Sequence[TrialRecord]) -> tuple[dict[str, dict[str, Any]], int]:
    """For a report that does not evaluate the checkpoints again: the evaluations of ``records``' checkpoints that the
    previous report in ``report_dir`` made (its ``cost_limits.json``), and how many of those checkpoints it lacks
    (trained since, or skipped then); said in one log line. Empty where it made none of them."""
    path = report_dir / EVALUATIONS_FILE
    if not path.is_file():
        return {}, 0
    try:
        previous = json.loads(path.read_text())
        if not isinstance(previous, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as err:  # json.JSONDecodeError is a ValueError
        logger.warning("%s: unreadable (%s); the previous cost-limit table is not kept", path, err)
        return {}, 0
    wanted = [r.key for r in records if get_algorithm(r.algo).threshold_at_deployment]
    kept = {key: previous[key] for key in wanted if key in previous}
    if not kept:
        if wanted:
            logger.warning("%s evaluated none of these checkpoints (keys are trial paths: a moved experiment?); no "
                           "cost-limit table: --cost-limits evaluates them", path)
        return {}, 0
    lacking = len(wanted) - len(kept)
    logger.info("keeping the cost-limit evaluations of the previous report (%s, %d checkpoint(s)%s); --cost-limits "
                "evaluates every checkpoint again", path, len(kept),
                f"; {lacking} checkpoint(s) not among them" if lacking else "")
    return kept, lacking


@dataclass(frozen=True)
class CostLimitTable:
    """Safe-task counts per cost-limit configuration (rows) and configuration (columns)."""

    configs: list[str]
    counts: dict[tuple[int, int], dict[str, tuple[int, int]]]  # limits -> config -> (safe, tasks)


def cost_limit_table(records: Sequence[TrialRecord], evaluations: dict[str, dict[str, Any]],
                     limits: Sequence[tuple[int, int]] = COST_LIMITS) -> CostLimitTable:
    """A task is safe at a limit when its normalised cost there, averaged over seeds, is ≤ 1. Columns are labelled
    as in the main table (``CAPS K=2``, ``CDT`` when several algorithms share it), in registry order."""
    records = [r for r in records if r.key in evaluations]  # κ-at-deployment algorithms only
    algos = {r.algo for r in records}
    order = {column_label(r.algo, r.config, algos): (list(ALGORITHMS).index(r.algo), config_order(r.config))
             for r in records}
    groups: dict[tuple[str, str], list[TrialRecord]] = defaultdict(list)
    for r in records:
        groups[(column_label(r.algo, r.config, algos), r.task)].append(r)
    configs = sorted(order, key=order.__getitem__)
    counts: dict[tuple[int, int], dict[str, tuple[int, int]]] = {}
    for lim in limits:
        counts[lim] = {}
        for config in configs:
            tasks = [(task, group) for (c, task), group in groups.items() if c == config]
            safe = sum(
                np.mean([evaluations[r.key]["thresholds"][f"{limit_for(r.suite, lim):g}"]
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
