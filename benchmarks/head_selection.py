"""The quality issue's default rule: which feasible head acts (``head_selection``) and whether Q^c is calibrated.

    # the arms on one trained checkpoint (20 episodes per κ, the evaluation's seeds), one JSON per checkpoint
    .venv/bin/python benchmarks/head_selection.py arms --checkpoint CKPT --data DATA --task DroneRun --out A.json
    # the rule over every dataset: --arms DATASET=A.json ... and the authors' code --reference DATASET=R.json ...
    .venv/bin/python benchmarks/head_selection.py rule --arms DroneRun=d-s0.json DroneRun=d-s10.json \
        --reference DroneRun=authors-s0.json DroneRun=authors-s10.json

Arms: the selection (``q_reward``, the paper's; ``head_order``; ``q_trust``, head order unless Q^r's gap exceeds the
twin critics' disagreement, added in issue 43) × the cost critic (as trained; ``+calibrated``, shifted by its bias on
the training data, ``calibrate_cost_critic`` mode "mean"; ``+pessimism``, shifted by that bias only where it is > 0,
mode "pessimism", an arm added after the first four were measured). A ``+pessimism`` arm is not rolled out again: its
shift is the ``+calibrated`` one where that is > 0 and none otherwise, so with the same module and episode seeds its
figures are exactly one of those two arms' (``with_pessimism_arms``). Per-step arms (``+per_step``,
``+per_step_pessimism``: ``calibrate_cost_critic_per_step``, a shift per time bin fitted on held-out episodes) are
rolled out, and record their table (``step_calibration``: per bin rows, predicted, realised, shift). Beside them,
``cost_head``: the cost head K−1 acting alone, every step (the fallback's own safety; not a candidate of the rule).

JSONs written before an arm existed lack it: the rule ranks only the arms measured on every (dataset, seed), and
the table shows a missing arm as "—".

The rule (docs/paper.md, "Calibrated Q^c"), fixed before the measurements: an arm qualifies if it is safe
(normalised cost ≤ 1) at every (dataset, seed, κ); among qualifying arms the default is the one with the highest
mean over datasets of (its mean normalised reward ÷ the authors' code's on that dataset); if none beats the paper's
arm by that measure, the paper's stays. A reference is a run's JSON with ``mean_nr`` (the mean normalised reward
over κ of one seed, as ``arms`` writes per arm) or ``mean_normalized_reward`` (the authors' code), or a number.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

PAPER_ARM = "q_reward"
SELECTIONS = ("q_reward", "head_order", "q_trust")
ARMS = tuple(f"{selection}{critic}" for selection in SELECTIONS for critic in ("", "+calibrated", "+pessimism"))
COST_HEAD_ARM = "cost_head"  # head K−1 alone: measured and tabled, never the rule's candidate
STEP_MODES = {"+per_step": "per_step", "+per_step_pessimism": "per_step_pessimism"}  # arm suffix -> calibration
ARMS += tuple(f"{selection}{suffix}" for selection in SELECTIONS for suffix in STEP_MODES)


def with_pessimism_arms(rows: Mapping[str, dict]) -> dict[str, dict]:
    """One checkpoint's arms with each ``SELECTION+pessimism`` arm added from the measured ones: the
    ``+calibrated`` arm's figures where its shift is > 0 (the critic was pessimistic), else the uncalibrated arm's
    with shift 0 (``calibration_shift``'s "pessimism" mode)."""
    rows = dict(rows)
    for selection in SELECTIONS:
        if f"{selection}+calibrated" not in rows:
            continue  # a JSON from before this selection was measured
        calibrated = rows[f"{selection}+calibrated"]
        rows.setdefault(f"{selection}+pessimism", calibrated if calibrated["shift"] > 0
                        else rows[selection] | {"shift": 0.0})
    return rows


def evaluate_arms(checkpoint: Path, data: Path, task: str, episodes: int) -> dict[str, dict]:
    """Every arm on one checkpoint, and the cost head alone: per κ of the task's thresholds (normalised reward,
    normalised cost), their mean reward and largest cost."""
    import torch

    from rllib_caps.algorithms.caps.calibration import calibrate_cost_critic, calibrate_cost_critic_per_step
    from rllib_caps.algorithms.caps.policy import CAPSPolicy
    from rllib_caps.core.rollout import episode_seed, evaluate_policy
    from rllib_caps.data import TransitionDataset
    from rllib_caps.envs.tasks import get_task

    torch.set_num_threads(1)
    spec = get_task(task)
    columns = TransitionDataset.from_parquet(data).numpy_columns()
    rows = {}
    for arm in (*ARMS, COST_HEAD_ARM):
        if arm.endswith("+pessimism"):
            continue  # with_pessimism_arms
        policy = CAPSPolicy.from_checkpoint(checkpoint)
        if arm == COST_HEAD_ARM:
            policy, shift, step_fit = policy.with_head(policy.num_heads - 1), 0.0, None  # Q^c is not read
        else:
            policy.head_selection, _, critic = arm.partition("+")
            step_fit = (calibrate_cost_critic_per_step(policy, columns, STEP_MODES[f"+{critic}"]).as_dict()
                        if f"+{critic}" in STEP_MODES else None)
            shift = (float(np.mean(step_fit["shift"])) if step_fit else
                     calibrate_cost_critic(policy, columns, "mean" if arm.endswith("+calibrated") else "none"))
        results = evaluate_policy(policy, spec, list(spec.thresholds), episodes, seed=episode_seed(policy),
                                  progress=False)["thresholds"]
        per_kappa = {k: (r["normalized_reward"], r["normalized_cost"]) for k, r in results.items()}
        rows[arm] = {"shift": shift, "per_kappa": per_kappa,
                     "mean_nr": float(np.mean([nr for nr, _ in per_kappa.values()])),
                     "max_nc": max(nc for _, nc in per_kappa.values()),
                     **({"step_calibration": step_fit} if step_fit else {})}
        print(arm, json.dumps(rows[arm]), flush=True)
    return with_pessimism_arms(rows)


def apply_rule(arms: Mapping[str, Sequence[Mapping[str, dict]]], reference: Mapping[str, Sequence[float]]
               ) -> tuple[str, dict[str, dict]]:
    """The default and, per arm measured on every (dataset, seed), whether it qualifies and its score. ``arms``:
    dataset -> one ``evaluate_arms`` result per seed; ``reference``: dataset -> the authors' mean normalised reward
    per seed."""
    missing = sorted(set(arms) - set(reference))
    if missing:
        raise ValueError(f"no reference (the authors' code) for {', '.join(missing)}: the rule divides by it")
    verdict: dict[str, dict] = {}
    for arm in measured_everywhere(arms):
        ratios = {dataset: float(np.mean([seed[arm]["mean_nr"] for seed in seeds]) / np.mean(reference[dataset]))
                  for dataset, seeds in arms.items()}
        safe = all(seed[arm]["max_nc"] <= 1.0 for seeds in arms.values() for seed in seeds)
        verdict[arm] = {"safe": safe, "ratios": ratios, "score": float(np.mean(list(ratios.values())))}
    qualifying = [arm for arm in verdict if verdict[arm]["safe"]]
    best = max(qualifying, key=lambda arm: verdict[arm]["score"], default=PAPER_ARM)
    beats_paper = not verdict[PAPER_ARM]["safe"] or verdict[best]["score"] > verdict[PAPER_ARM]["score"]
    return (best if beats_paper else PAPER_ARM), verdict


def measured_everywhere(arms: Mapping[str, Sequence[Mapping[str, dict]]]) -> list[str]:
    """The rule's arms (``ARMS``, in order) present in every seed's result of every dataset."""
    return [arm for arm in ARMS if all(arm in seed for seeds in arms.values() for seed in seeds)]


def per_seed_table(arms: Mapping[str, Sequence[Mapping[str, dict]]], reference: Mapping[str, Sequence[float]]) -> str:
    """Markdown: per dataset and seed (in the order given), each arm's mean normalised reward / largest normalised
    cost ("—" where that seed's JSON lacks the arm), and the authors' code's mean normalised reward; the last column
    is the mean over the seeds that have it. An arm no seed of a dataset has gets no row there."""
    lines = ["| dataset | arm | " + " | ".join(f"seed {i + 1}" for i in range(max(map(len, arms.values()))))
             + " | mean |", "|---|---|" + "---:|" * (max(map(len, arms.values())) + 1)]
    for dataset in sorted(arms):
        seeds = arms[dataset]
        for arm in (*ARMS, COST_HEAD_ARM):
            if not any(arm in seed for seed in seeds):
                continue
            cells = [f"{seed[arm]['mean_nr']:.3f} / {seed[arm]['max_nc']:.2f}" if arm in seed else "—"
                     for seed in seeds]
            mean = np.mean([seed[arm]["mean_nr"] for seed in seeds if arm in seed])
            lines.append(f"| {dataset} | {arm} | " + " | ".join(cells) + f" | {mean:.3f} |")
        authors = reference.get(dataset, [])
        lines.append(f"| {dataset} | authors' code | " + " | ".join(f"{nr:.3f}" for nr in authors)
                     + f" | {np.mean(authors):.3f} |")
    return "\n".join(lines)


def reference_reward(run: dict | float) -> float:
    """A reference seed's mean normalised reward: a number as given (a published figure), or from a JSON's
    ``mean_nr`` (as ``arms`` writes) or ``mean_normalized_reward`` (the authors' code's run)."""
    if isinstance(run, float):
        return run
    return float(run["mean_nr"] if "mean_nr" in run else run["mean_normalized_reward"])


def dataset_pairs(values: Sequence[str], flag: str, *, numbers: bool = False) -> dict[str, list]:
    """``DATASET=FILE.json`` (or, with ``numbers``, also ``DATASET=0.201``) pairs of ``flag``, grouped by dataset."""
    grouped: dict[str, list] = defaultdict(list)
    for value in values:
        dataset, sep, path = value.partition("=")
        if not sep:
            raise SystemExit(f"error: {flag} {value}: expected DATASET=FILE.json")
        try:
            grouped[dataset].append(float(path) if numbers and _is_number(path)
                                    else json.loads(Path(path).read_text()))
        except (OSError, ValueError) as err:
            raise SystemExit(f"error: {flag} {value}: {err}") from err
    return dict(grouped)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    arms = commands.add_parser("arms", help="evaluate the arms on one CAPS checkpoint")
    arms.add_argument("--checkpoint", type=Path, required=True)
    arms.add_argument("--data", type=Path, required=True, help="the converted dataset the checkpoint trained on")
    arms.add_argument("--task", required=True)
    arms.add_argument("--episodes", type=int, default=20, help="episodes per κ [20]")
    arms.add_argument("--out", type=Path, required=True, help="JSON to write")
    rule = commands.add_parser("rule", help="apply the rule to arms JSONs and the authors' reference JSONs")
    rule.add_argument("--arms", nargs="+", required=True, metavar="DATASET=FILE.json")
    rule.add_argument("--reference", nargs="+", required=True, metavar="DATASET=FILE.json|NUMBER",
                      help="the authors' code per seed: its run's JSON, or a published mean normalised reward")
    args = parser.parse_args(argv)
    if args.command == "arms":
        from rllib_caps.utils.atomic import atomic_file

        rows = evaluate_arms(args.checkpoint, args.data, args.task, args.episodes)
        with atomic_file(args.out) as tmp:
            tmp.write_text(json.dumps(rows, indent=1) + "\n")
        return 0
    measured = {dataset: [with_pessimism_arms(seed) for seed in seeds]
                for dataset, seeds in dataset_pairs(args.arms, "--arms").items()}
    reference = {dataset: [reference_reward(run) for run in runs]
                 for dataset, runs in dataset_pairs(args.reference, "--reference", numbers=True).items()}
    try:
        default, verdict = apply_rule(measured, reference)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    datasets = sorted(measured)
    print(per_seed_table(measured, reference))
    print()
    print("| arm | safe everywhere | " + " | ".join(f"{d} ÷ authors" for d in datasets) + " | score |")
    print("|---|---|" + "---:|" * (len(datasets) + 1))
    for arm, v in verdict.items():
        ratios = " | ".join(f"{v['ratios'][d]:.2f}" for d in datasets)
        print(f"| {arm} | {'yes' if v['safe'] else 'no'} | {ratios} | {v['score']:.2f} |")
    print(f"default by the rule: {default}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
