"""How many trials run at once and what each one reserves (CPUs, GPU fractions)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rllib_caps.sweeps.options import SweepError


@dataclass(frozen=True)
class TrialResources:
    """What one trial's placement group reserves, and how many trials run at once."""

    cpus: float
    gpus: float
    concurrency: int


def plan_resources(num_trials: int, cluster_cpus: float, cluster_gpus: float, *, num_gpus: float,
                   cpus_per_trial: float, gpus_per_trial: float | None,
                   max_concurrent: int | None) -> TrialResources:
    """Trials pack by CPUs (fractions allowed); the ``num_gpus`` GPUs are shared by the concurrent trials
    (at most 1 each, as each trial has one learner) unless ``gpus_per_trial`` is given."""
    if cpus_per_trial <= 0:
        raise SweepError(f"--cpus-per-trial must be > 0, got {cpus_per_trial}")
    if num_gpus > cluster_gpus:
        raise SweepError(f"--num-gpus {num_gpus:g}: the Ray cluster has only {cluster_gpus:g} GPUs")
    concurrency = min(num_trials, math.floor(cluster_cpus / cpus_per_trial + 1e-9), max_concurrent or num_trials)
    if gpus_per_trial:
        if gpus_per_trial > max(num_gpus, cluster_gpus):
            raise SweepError(f"--gpus-per-trial {gpus_per_trial:g}: only {max(num_gpus, cluster_gpus):g} GPUs")
        concurrency = min(concurrency, math.floor(max(num_gpus, cluster_gpus) / gpus_per_trial + 1e-9))
    if concurrency < 1:
        raise SweepError(f"--cpus-per-trial {cpus_per_trial:g}: the Ray cluster has only {cluster_cpus:g} CPUs")
    gpus = gpus_per_trial if gpus_per_trial else (min(1.0, num_gpus / concurrency) if num_gpus else 0.0)
    return TrialResources(cpus=cpus_per_trial, gpus=gpus, concurrency=concurrency)
