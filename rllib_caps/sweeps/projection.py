"""``tune --dry-run``'s projected wall time, from recorded figures rather than a measurement: every trial's gradient
steps at the steps/s recorded for its algorithm on this kind of device (``step_rates.json``: CPU figures from
``benchmarks/step_rates.py``, one thread; GPU figures from ``bench --project-grid`` on an H200), scaled from the
algorithm's default sizes to the trial's, plus its evaluation episodes at the measured milliseconds per environment
step of its suite, spread over the trials that run at once. A projection, not a promise: another machine, other
concurrent work or other sizes change it (docs/performance.md)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rllib_caps.algorithms.registry import default_config
from rllib_caps.envs import TaskSpec, get_task
from rllib_caps.sweeps.options import SweepOptions
from rllib_caps.sweeps.resources import TrialResources
from rllib_caps.sweeps.runner import setup_dict
from rllib_caps.sweeps.trials import trial_config

STEP_RATES_FILE = Path(__file__).with_name("step_rates.json")
# Scaling from the recorded sizes counts arithmetic only; a small network is bound by the per-step overhead instead,
# so no projected rate exceeds the recorded one by more than this factor.
MAX_SPEEDUP = 16.0
DEFAULT_EVAL_MS_PER_STEP = 3.5  # a suite without a measured figure (a declared task): MetaDrive's, the slowest


@dataclass(frozen=True)
class TrialWork:
    """One trial's work: ``gradient_steps`` of ``algo`` with a step ``size`` (batch × Σ hidden width²) against the
    algorithm's default ``default_size``, and ``eval_env_steps`` environment steps of evaluation in ``suite``, on
    ``task``."""

    algo: str
    gradient_steps: int
    size: float
    default_size: float
    eval_env_steps: int
    suite: str
    task: str = ""


def step_size(batch: int, hidden: Sequence[int]) -> float:
    """The arithmetic of one gradient step, up to a constant: batch × Σ width² over the hidden layers."""
    return float(batch * sum(width * width for width in hidden))


def trial_seconds(work: TrialWork, rates: Mapping[str, Any]) -> tuple[float, float]:
    """(training, evaluation) seconds of one trial at the recorded ``rates`` (one device kind of
    ``step_rates.json`` and its ``evaluation_ms_per_env_step``)."""
    speedup = min(work.default_size / work.size, MAX_SPEEDUP) if work.size > 0 else MAX_SPEEDUP
    train = work.gradient_steps / (rates["steps_per_s"][work.algo] * speedup)
    per_step_ms = rates["evaluation_ms_per_env_step"].get(work.suite, DEFAULT_EVAL_MS_PER_STEP)
    return train, work.eval_env_steps * per_step_ms / 1e3


def projected_seconds(works: Sequence[TrialWork], rates: Mapping[str, Any], concurrency: int) -> tuple[float, float]:
    """(training, evaluation) wall seconds of all trials, ``concurrency`` at a time (the work spread evenly)."""
    totals = [sum(parts) for parts in zip(*(trial_seconds(w, rates) for w in works), strict=True)] if works \
        else [0.0, 0.0]
    return totals[0] / max(concurrency, 1), totals[1] / max(concurrency, 1)


def recorded_rates(device: str) -> dict[str, Any]:
    """The recorded figures of ``device`` ("cpu" or "cuda"), with the evaluation figures beside them."""
    recorded = json.loads(STEP_RATES_FILE.read_text())
    return {**recorded[device], "evaluation_ms_per_env_step": recorded["evaluation_ms_per_env_step"]}


def duration_text(seconds: float) -> str:
    """``1 h 05 min``, ``12 min``, ``40 s``."""
    if seconds >= 3600:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def projection_text(works: Sequence[TrialWork], device: str, concurrency: int) -> str:
    """The dry run's line: the projected wall time, its parts and where the figures come from."""
    rates = recorded_rates(device)
    unrecorded = sorted({w.algo for w in works} - set(rates["steps_per_s"]))
    if unrecorded:
        return (f"projected wall time: not known (no steps/s recorded for {', '.join(unrecorded)} on "
                f"{device}: `python -m benchmarks.step_rates` records them)")
    train, evaluation = projected_seconds(works, rates, concurrency)
    return (f"projected wall time: about {duration_text(train + evaluation)} (training {duration_text(train)}, "
            f"evaluation {duration_text(evaluation)}; {len(works)} trial(s), {concurrency} at a time), from the "
            f"steps/s recorded on {rates['machine']} ({rates['date']}), scaled to the trials' layer widths and batch "
            f"(at most {MAX_SPEEDUP:g}×); Ray's start and the report come on top")


def sweep_work(options: SweepOptions, tasks: Sequence[TaskSpec]) -> list[TrialWork]:
    """Every trial of the sweep as ``TrialWork``, from the configs its trials would train (the datasets must be
    there, as for the output-size estimate)."""
    from rllib_caps.sweeps.output_size import trained_variants

    setup = setup_dict(options, TrialResources(cpus=1, gpus=0, concurrency=1))
    works = []
    for variant, trials in trained_variants(options, tasks):
        config = trial_config({"variant": variant, "seed": options.seeds[0], "setup": setup})
        default = default_config(variant["algo"])
        episodes = config.evaluation_duration if config.evaluation_interval is not None else 0
        works += [TrialWork(algo=variant["algo"], gradient_steps=config.num_gradient_steps,
                            size=step_size(config.train_batch_size_per_learner, config.hidden),
                            default_size=step_size(default.train_batch_size_per_learner, default.hidden),
                            eval_env_steps=episodes * len(config.thresholds) * config.resolved_horizon,
                            suite=get_task(variant["task"]).suite, task=variant["task"])] * trials
    return works
