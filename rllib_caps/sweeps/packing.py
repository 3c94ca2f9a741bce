"""Packing a sweep's trials into populations: the trials of one (algorithm, task, axes) that differ only in seed, and
for the algorithms trained once per cost limit also in κ, become one Tune trial that trains them as one vmapped
program (``rllib_caps.core.population``; ``rllib_caps.sweeps.population_run``).

Packing changes how trials run, not what they are: each member trains as it would alone (step for step, up to
the rounding of batched matrix products), is evaluated and checkpointed on its own (``members/<name>/``, an ordinary
checkpoint), and is one record of the report (``rllib_caps.report.records``).

``--pack auto`` (the default) packs when the trials train on GPUs, where it measured faster: on an H100 a
population of 8 CAPS(IQL) trials at hidden 512 ran 4.0× the member-steps/s of separate captured learners
(docs/performance.md). On CPUs it depends on the size (1.8× at hidden 64 with 8 members, 0.66× alone), so ``auto``
leaves CPU trials separate; ``--pack on`` packs them too.

In an Optuna search (``--search``) a population holds several samples × their seeds (``samples_per_population``;
the samples' β and λ_k become each member's own tensors in the one program): the samples are spread evenly over
the trials that run at once, with at most ``MAX_MEMBERS`` members per population.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any, TypeVar

from rllib_caps.algorithms.registry import get_algorithm
from rllib_caps.algorithms.surface import COST_LIMIT_AXIS
from rllib_caps.core.learner import forms_populations
from rllib_caps.core.population import MEMBER_SETTINGS
from rllib_caps.sweeps.options import MAX_MEMBERS, SweepOptions
from rllib_caps.sweeps.trial_schema import MEMBERS, member_name

T = TypeVar("T")

MEMBER_AXES = MEMBER_SETTINGS & {COST_LIMIT_AXIS}  # grid axes whose values may differ inside one population


def packs(options: SweepOptions) -> bool:
    """Whether a sweep packs its trials: ``--pack on``, ``off``, or ``auto``: when its trials train on GPUs. An
    Optuna search packs samples × their seeds (``samples_per_population``, ``rllib_caps.sweeps.search``)."""
    return options.pack == "on" or (options.pack == "auto" and options.gpus)


def why_not_packed(options: SweepOptions) -> str:
    """``--pack off``, ``--pack auto: the trials train on CPUs``: why a sweep is not packed."""
    return f"--pack {options.pack}" + (": the trials train on CPUs" if options.pack == "auto" else "")


def members_that_fit(options: SweepOptions, cluster_cpus: float | None) -> int | None:
    """The most members one packed trial can hold on a cluster of ``cluster_cpus`` CPUs (None: unknown, or no
    limit). With ``--eval-runners`` ≥ 1 every member brings its own evaluation EnvRunners, half a trial's
    ``--cpus-per-trial`` (``trials.trial_config``), so a population of P asks for (1 + P) × cpus_per_trial / 2."""
    if cluster_cpus is None or not options.training_settings().get("eval_runners"):
        return None
    return max(1, math.floor(2 * cluster_cpus / options.cpus_per_trial + 1e-9) - 1)


def samples_per_population(options: SweepOptions, concurrency: int, cluster_cpus: float | None = None) -> int:
    """How many Optuna samples (each with every seed) one packed search trial trains: ``--population-samples``, else
    the ``--num-samples`` spread evenly over the ``concurrency`` trials that run at once, at most ``MAX_MEMBERS``
    members per population; either way at most the members that fit the cluster's CPUs (``members_that_fit``),
    and at least one sample; 0 where not even one sample's seeds fit."""
    fit = members_that_fit(options, cluster_cpus)
    if fit is not None and fit < len(options.seeds):
        return 0
    fit = fit or MAX_MEMBERS
    wanted = options.population_samples or min(math.ceil(options.num_samples / max(concurrency, 1)),
                                               MAX_MEMBERS // len(options.seeds))
    return max(1, min(wanted, fit // len(options.seeds)))


def packable(algo: str) -> bool:
    """Whether ``algo``'s trials can train as a population (``forms_populations``: nothing in its learner's step
    blocks it)."""
    return forms_populations(get_algorithm(algo).config_class().get_default_learner_class())


def split_into_populations(members: Sequence[T], max_members: int) -> list[Sequence[T]]:
    """``members``, in order, in as few populations of at most ``max_members`` as can be, their sizes as equal as can be
    (36 at most 32 each: 18 and 18, not 32 and 4, so that no small population leaves its GPU idle)."""
    count = -(-len(members) // max_members)
    bounds = [-(-len(members) * i // count) for i in range(count + 1)] if count else [0]  # the first ones larger
    return [members[start:end] for start, end in pairwise(bounds)]


def packed_variants(variants: Sequence[Mapping[str, Any]], seeds: Sequence[int], max_members: int | None = None
                    ) -> list[dict[str, Any]]:
    """The trial variants of a packed sweep: per (algorithm, task, axes other than κ) of an algorithm that forms
    populations, one variant whose ``members`` are its seeds (× κ), split into populations of at most
    ``max_members`` (``split_into_populations``); every other trial as its own variant with its ``seed``. A
    population of one trial is a trial alone."""
    groups: dict[tuple, dict[str, Any]] = {}
    alone: list[dict[str, Any]] = []
    for variant in variants:
        if not packable(variant["algo"]):
            alone += [{**variant, "seed": seed} for seed in seeds]
            continue
        shared = {k: v for k, v in variant.items() if k not in MEMBER_AXES}
        group = groups.setdefault(tuple(sorted((k, repr(v)) for k, v in shared.items())), {**shared, MEMBERS: []})
        folded = {k: v for k, v in variant.items() if k in MEMBER_AXES}
        group[MEMBERS] += [{**folded, "seed": seed} for seed in seeds]
    packed = []
    for group in groups.values():
        shared, members = {k: v for k, v in group.items() if k != MEMBERS}, group[MEMBERS]
        packed += [{**shared, MEMBERS: chunk} if len(chunk) > 1 else {**shared, **chunk[0]}
                   for chunk in split_into_populations(members, max_members or len(members))]
    return packed + alone


def describe_packing(variants: Sequence[Mapping[str, Any]]) -> str:
    """The ``--dry-run`` lines of a packed sweep: each population and its members, then the Tune trial count."""
    lines = ["packed into populations (--pack; each member trains as its own trial would, in one program):"]
    populations = [v for v in variants if MEMBERS in v]
    for variant in populations:
        axes = " ".join(f"{k}={v}" for k, v in variant.items() if k not in ("algo", "task", MEMBERS))
        names = ", ".join(member_name(m) for m in variant[MEMBERS])
        lines.append(f"  {variant['algo']} {variant['task']}{' ' + axes if axes else ''}: "
                     f"{len(variant[MEMBERS])} members ({names})")
    members = sum(len(v[MEMBERS]) for v in populations)
    lines.append(f"{len(variants)} Tune trial(s): {len(populations)} population(s) of {members} trials, "
                 f"{len(variants) - len(populations)} trial(s) alone")
    return "\n".join(lines)
