"""How a sweep keeps its GPUs full, and its projected wall time there, for ``tune --num-gpus N --dry-run``: which
Tune trials (populations, ``rllib_caps.sweeps.packing``, or trials alone) run on the N GPUs, how many share each GPU
at once (fractional GPUs: ``--gpus-per-trial 1/k``), which populations of different tasks could merge into one (the
same algorithm and axes, and the same observation and action sizes), and the projected wall time from a device's
recorded figures (``rllib_caps.sweeps.gpu_figures``).

The model: a population of P members of an algorithm trains at the member-steps/s recorded for it, interpolated
linearly in P between the recorded sizes (one trial alone is P = 1) and no faster beyond the largest; k trials
sharing a GPU train at the recorded gain of k processes over one (1, no gain, where not recorded); evaluation runs
on CPUs as in ``rllib_caps.sweeps.projection``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rllib_caps.envs import TaskSpec, get_task
from rllib_caps.sweeps.gpu_figures import FiguresError, GpuFigures, check_device, read_figures
from rllib_caps.sweeps.options import MAX_MEMBERS, SweepError, SweepOptions
from rllib_caps.sweeps.packing import members_that_fit, packed_variants, packs, split_into_populations
from rllib_caps.sweeps.projection import MAX_SPEEDUP, TrialWork, duration_text, recorded_rates, trial_seconds
from rllib_caps.sweeps.resources import TrialResources, plan_resources
from rllib_caps.sweeps.trial_schema import MEMBERS

# The figures of the H100 run (benchmarks/gpu/results/2026-11-27-h100-grid.txt), used where --gpu-figures is not given.
DEFAULT_GPU_FIGURES = Path(__file__).with_name("h100_figures.json")


@dataclass(frozen=True)
class TuneTrial:
    """One Tune trial of a packed sweep: ``members`` trials (1: a trial alone) of one configuration, each ``work``."""

    variant: Mapping[str, Any]
    members: int
    work: TrialWork


def interpolated(rates: Mapping[int, float], size: float) -> float:
    """The rate at ``size``, linear between the recorded sizes, the nearest recorded one outside them."""
    sizes = sorted(rates)
    if size <= sizes[0]:
        return rates[sizes[0]]
    for low, high in zip(sizes, sizes[1:], strict=False):
        if size <= high:
            return rates[low] + (rates[high] - rates[low]) * (size - low) / (high - low)
    return rates[sizes[-1]]


def member_steps_per_s(figures: GpuFigures, algo: str, members: int) -> float:
    """Member-steps/s of a population of ``members`` of ``algo`` at its default sizes (KeyError: not recorded)."""
    return interpolated({1: figures.steps_per_s[algo], **figures.population.get(algo, {})}, members)


def sharing_gain(figures: GpuFigures, trials_per_gpu: int) -> float:
    """How much more one GPU trains with ``trials_per_gpu`` trials at once than with one: 1 where not recorded."""
    if not figures.sharing_processes or trials_per_gpu <= 1:
        return 1.0
    return interpolated(figures.sharing_processes, trials_per_gpu) / interpolated(figures.sharing_processes, 1)


def gpu_seconds(figures: GpuFigures, trial: TuneTrial, members: int | None = None) -> float:
    """Seconds one GPU trains ``trial`` alone (as a population of ``members``, default its own)."""
    members = members or trial.members
    work = trial.work
    speedup = min(work.default_size / work.size, MAX_SPEEDUP) if work.size > 0 else MAX_SPEEDUP
    return members * work.gradient_steps / (member_steps_per_s(figures, work.algo, members) * speedup)


def tune_trials(variants: Sequence[Mapping[str, Any]], works: Mapping[tuple[str, str], TrialWork]
                ) -> list[TuneTrial]:
    """The packed sweep's Tune trials (``packing.packed_variants``), each with its members' work (by algorithm and
    task)."""
    return [TuneTrial(v, len(v.get(MEMBERS, ())) or 1, works[v["algo"], v["task"]]) for v in variants]


def mergeable_groups(trials: Sequence[TuneTrial]) -> list[list[TuneTrial]]:
    """The populations of different tasks that could train as one: the same algorithm and axes, and tasks of the
    same observation and action sizes; only groups of two or more."""
    groups: dict[tuple, list[TuneTrial]] = {}
    for trial in trials:
        if MEMBERS not in trial.variant:
            continue
        spec = get_task(trial.variant["task"])
        axes = tuple(sorted((k, repr(v)) for k, v in trial.variant.items() if k not in ("task", MEMBERS)))
        groups.setdefault((axes, spec.obs_dim, spec.act_dim), []).append(trial)
    return [group for group in groups.values() if len({t.variant["task"] for t in group}) > 1]


def merged_seconds(figures: GpuFigures, group: Sequence[TuneTrial]) -> float:
    """GPU-seconds of a mergeable group as populations of all its members (``split_into_populations``, at most
    ``MAX_MEMBERS`` each)."""
    members = range(sum(t.members for t in group))
    return sum(gpu_seconds(figures, group[0], len(chunk)) for chunk in split_into_populations(members, MAX_MEMBERS))


def describe_gpu_plan(trials: Sequence[TuneTrial], figures: GpuFigures, num_gpus: float, resources: TrialResources,
                      evaluation_ms: Mapping[str, float]) -> str:
    """The dry run's lines on GPUs: the trials per GPU (``resources``: each trial's share and how many run at once),
    the mergeable populations, the figures' choice between trials sharing a GPU and one population, and the projected
    wall time (evaluation at ``evaluation_ms`` per environment step of each suite, on the trials' CPUs)."""
    concurrency = resources.concurrency
    unrecorded = sorted({t.work.algo for t in trials} - set(figures.steps_per_s))
    if unrecorded:
        return (f"projected wall time on GPUs: not known (no steps/s recorded for {', '.join(unrecorded)} in "
                f"{figures.path})")
    gpus = max(1, min(math.floor(num_gpus) or 1, len(trials), concurrency))  # the GPUs in use at once
    per_gpu = max(1, math.ceil(concurrency / gpus))
    gain = sharing_gain(figures, per_gpu)
    seconds = [gpu_seconds(figures, t) for t in trials]
    train = max(sum(seconds) / (gpus * gain), max(seconds, default=0.0))
    rates = {"steps_per_s": figures.steps_per_s, "evaluation_ms_per_env_step": evaluation_ms}
    evaluation = sum(t.members * trial_seconds(t.work, rates)[1] for t in trials) / max(concurrency, 1)
    lines = [f"on {num_gpus:g} GPU(s): {len(trials)} Tune trial(s), {concurrency} at a time, up to {per_gpu} per "
             f"GPU on {gpus} GPU(s) (each trial {resources.gpus:.3g} GPU); "
             + (f"{per_gpu} trials on one GPU train {gain:.2f}× one trial's member-steps/s (recorded)"
                if figures.sharing_processes else "no gain recorded from sharing a GPU: taken as none")]
    groups = mergeable_groups(trials)
    if groups:
        apart = sum(gpu_seconds(figures, t) for group in groups for t in group)
        merged = sum(merged_seconds(figures, group) for group in groups)
        lines.append(f"  {sum(len(g) for g in groups)} population(s) of tasks with matching observation and action "
                     f"sizes could merge into {len(groups)} group(s): {duration_text(apart)} of GPU time apart, "
                     f"{duration_text(merged)} merged (not done by the sweep yet)")
    lines.append(sharing_choice(figures))
    lines.append(f"projected wall time on {num_gpus:g} × {figures.device}: about {duration_text(train + evaluation)} "
                 f"(training {duration_text(train)}, evaluation {duration_text(evaluation)}), from {figures.path} "
                 f"({figures.date}), scaled to the trials' layer widths and batch; Ray's start and the report come on "
                 "top")
    return "\n".join(line for line in lines if line)


def sharing_choice(figures: GpuFigures) -> str:
    """Which the recorded figures favour at the largest N measured both ways: N trials of ``sharing_members``
    members each sharing one GPU, or one population of their N × members."""
    both = [n for n in figures.sharing_processes if n * figures.sharing_members in figures.sharing_population]
    if not both:
        return ""
    n = max(both)
    shared, merged = figures.sharing_processes[n], figures.sharing_population[n * figures.sharing_members]
    pick = "one population" if merged > shared else "trials sharing the GPU"
    return (f"  recorded: {n} trials of {figures.sharing_members} members on one GPU {shared:.0f} member-steps/s, "
            f"one population of {n * figures.sharing_members} {merged:.0f}: {pick} keeps the GPU fuller")


def gpu_plan_text(options: SweepOptions, tasks: Sequence[TaskSpec], works: Sequence[TrialWork],
                  cluster_cpus: float, device: str | None) -> str:
    """The dry run's GPU lines of a sweep on ``options.num_gpus`` GPUs: its packed Tune trials, as many at once as
    the ``cluster_cpus`` and GPUs allow, from ``--gpu-figures`` (refused when recorded on another GPU than this
    machine's ``device``) or the recorded H100 figures (``DEFAULT_GPU_FIGURES``, said so when ``device`` differs)."""
    from rllib_caps.sweeps.grid import grid_variants

    try:
        figures = read_figures(options.gpu_figures or DEFAULT_GPU_FIGURES)
        if options.gpu_figures:
            check_device(figures, "--gpu-figures", device)
    except FiguresError as err:
        raise SweepError(f"--gpu-figures {err}" if options.gpu_figures and "--gpu-figures" not in str(err)
                         else str(err)) from err
    note = ""
    if not options.gpu_figures and device is not None and device != figures.device:
        note = f" (recorded on {figures.device}, not this machine's {device}: pass its own with --gpu-figures)"
    variants = grid_variants(options, tasks)
    if packs(options):
        variants = packed_variants(variants, options.seeds, members_that_fit(options, cluster_cpus))
    else:
        variants = [{**variant, "seed": seed} for variant in variants for seed in options.seeds]
    trials = tune_trials(variants, {(w.algo, w.task): w for w in works})
    resources = plan_resources(len(trials), cluster_cpus, options.num_gpus, num_gpus=options.num_gpus,
                               cpus_per_trial=options.cpus_per_trial, gpus_per_trial=options.gpus_per_trial,
                               max_concurrent=options.max_concurrent)
    evaluation_ms = recorded_rates("cuda")["evaluation_ms_per_env_step"]
    return describe_gpu_plan(trials, figures, options.num_gpus, resources, evaluation_ms) + note
