"""``--search optuna``: tune an algorithm's searchable settings (``AlgorithmEntry.searchable``, in the Optuna space its
entry declares, ``search_space``; CAPS: β and the K−2 middle heads' λ_k) per task and axis values with Optuna.

For each (task, axis values) one Tune experiment STORAGE/NAME/<Task>-<axis parts>/ (CAPS: <Task>-K<K>) runs
``--num-samples`` Optuna samples (TPE), each repeated over every seed. Packed (``--pack``,
``rllib_caps.sweeps.packing``), one Tune trial trains several samples × their seeds as one population
(``PackedSamples``), each member with its sample's settings;
unpacked, each sample and seed is a trial (Tune's ``Repeater``: ``seed = seeds[__trial_index__]``). A sample's
score is :func:`rllib_caps.sweeps.trials.constrained_objective` of its seed-averaged normalised reward and cost:
the constraint cost ≤ 1 first, then reward (not a weighted sum). The best sample per
(task, axis values) goes to STORAGE/NAME/best_params.yaml, a sweep config that ``--config`` accepts.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from ray.tune.search import Repeater, Searcher

from rllib_caps.algorithms.registry import AlgorithmEntry, get_algorithm
from rllib_caps.core.ray_internals import trial_group
from rllib_caps.report.records import TrialRecord, load_trials
from rllib_caps.sweeps.grid import axis_combinations
from rllib_caps.sweeps.options import SweepError, SweepOptions, option_axes
from rllib_caps.sweeps.packing import packs, samples_per_population, why_not_packed
from rllib_caps.sweeps.plan import record_plan
from rllib_caps.sweeps.resources import plan_resources
from rllib_caps.sweeps.runner import check_experiment_dir, check_trials, run_experiment, setup_dict
from rllib_caps.sweeps.trial_schema import MEMBERS, member_name
from rllib_caps.sweeps.trials import axis_parts, constrained_objective
from rllib_caps.utils.atomic import atomic_file

logger = logging.getLogger("rllib_caps.sweeps.search")

METRIC = "objective"
SAMPLER_SEED = "seed"  # the search_space key that seeds the TPE sampler; the others are the entry's ranges
BEST_PARAMS_FILE = "best_params.yaml"


def search_space(entry: AlgorithmEntry, axes: Mapping[str, Any], ranges: Mapping[str, Any]) -> Any:
    """The entry's Optuna space for a trial of these axis values, from the YAML ``search_space`` ranges; a SweepError
    names the range at fault."""
    try:
        return entry.space(axes, {k: v for k, v in ranges.items() if k != SAMPLER_SEED})
    except ValueError as err:  # "<range key>: ..." names one of the YAML's ranges
        named = str(err).partition(":")[0] in ranges
        raise SweepError(f"search_space{'.' if named else ': '}{err}") from err


def seed_averaged_score(outcomes: Iterable[tuple[float, float]]) -> dict[str, float] | None:
    """What the searcher is told of one sample from its seeds' (normalised reward, cost): the constrained
    objective of their means, seeds without a result (failed) left out; None when no seed has one."""
    finite = np.asarray([o for o in outcomes if np.isfinite(o).all()], dtype=float).reshape(-1, 2)
    if len(finite) == 0:
        return None
    reward, cost = finite.mean(axis=0)
    return {METRIC: constrained_objective(reward, cost)}


def _tell(searcher: Searcher, sample_id: str, outcomes: Iterable[tuple[float, float]]) -> None:
    score = seed_averaged_score(outcomes)
    searcher.on_trial_complete(sample_id, result=score, error=score is None)


class SeedRepeater(Repeater):
    """Tune's ``Repeater``, except that the searcher is told the constrained objective of the seed-averaged
    reward and cost (``Repeater`` averages per-seed objectives, so one unsafe seed would sink a configuration
    whose average is safe)."""

    def on_trial_complete(self, trial_id: str, result: dict | None = None, **kwargs: Any) -> None:
        group = trial_group(self, trial_id)
        result = result or {}
        group.report(trial_id, (result.get("normalized_reward", math.nan), result.get("normalized_cost", math.nan)))
        if group.finished_reporting():
            _tell(self.searcher, group.primary_trial_id, group.scores())


class PackedSamples(Searcher):
    """A packed search's Tune trials: each is one population whose members are ``samples`` suggestions of the
    wrapped searcher × every seed (``{"sample": j, "seed": s, "search": ...}``; each member trains with its
    sample's β and λ_k, ``rllib_caps.core.population``), ``total`` suggestions in all. When a trial completes, each
    of its samples is scored from its seeds' results (``seed_averaged_score``)."""

    def __init__(self, searcher: Searcher, samples: int, seeds: Sequence[int], total: int) -> None:
        self.searcher, self.samples, self.seeds, self.total = searcher, samples, list(seeds), total
        self.suggested = 0
        self.trials: dict[str, list[str]] = {}  # Tune trial id -> its samples' ids in the wrapped searcher
        super().__init__(metric=searcher.metric, mode=searcher.mode)

    def suggest(self, trial_id: str) -> dict | str | None:
        if self.suggested >= self.total:
            return Searcher.FINISHED
        members, samples, config = [], [], None
        for index in range(min(self.samples, self.total - self.suggested)):
            config = self.searcher.suggest(f"{trial_id}_{index}")
            if config is None or config == Searcher.FINISHED:
                break
            samples.append(f"{trial_id}_{index}")
            members += [{**config, "sample": index, "seed": seed} for seed in self.seeds]
        if not samples:
            return config
        self.suggested += len(samples)
        self.trials[trial_id] = samples
        return {MEMBERS: members}

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        """``result`` is the trial's last result, flattened by Tune (``members/<name>/normalized_reward``)."""
        result = result or {}
        for index, sample_id in enumerate(self.trials.pop(trial_id, [])):
            names = [member_name({"sample": index, "seed": seed}) for seed in self.seeds]
            _tell(self.searcher, sample_id, [(result.get(f"{MEMBERS}/{name}/normalized_reward", math.nan),
                                              result.get(f"{MEMBERS}/{name}/normalized_cost", math.nan))
                                             for name in names])

    def get_state(self) -> dict:
        return {"suggested": self.suggested, "trials": dict(self.trials)}

    def set_state(self, state: dict) -> None:
        self.suggested, self.trials = state["suggested"], dict(state["trials"])

    def save(self, checkpoint_path: str) -> None:
        self.searcher.save(checkpoint_path)

    def restore(self, checkpoint_path: str) -> None:
        self.searcher.restore(checkpoint_path)

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        return self.searcher.set_search_properties(metric, mode, config, **spec)


def make_searcher(space: Any, ranges: Mapping[str, Any], seeds: Sequence[int], total: int,
                  samples_per_trial: int | None = None) -> Searcher:
    """OptunaSearch over the define-by-run ``space`` (TPE, seeded by ``search_space.seed`` of ``ranges``) over
    ``total`` samples, each run with every seed: packed ``samples_per_trial`` samples to a Tune trial
    (``PackedSamples``), or unpacked (None) one trial per sample and seed (``SeedRepeater``)."""
    from optuna.samplers import TPESampler
    from ray.tune.search.optuna import OptunaSearch

    optuna = OptunaSearch(space=space, metric=METRIC, mode="max",
                          sampler=TPESampler(seed=int(ranges.get(SAMPLER_SEED, 0))))
    if samples_per_trial:
        return PackedSamples(optuna, samples_per_trial, seeds, total)
    return SeedRepeater(optuna, repeat=len(seeds))


def experiment_name(algo: str, axes: Mapping[str, Any]) -> str:
    """``K2``: the trained axis values of one search experiment as its directory and logs name them."""
    return "-".join(axis_parts({"algo": algo, **axes}))


def best_parameters(records: Iterable[TrialRecord]) -> dict[tuple[str, str], dict[str, Any]]:
    """(task, ``experiment_name`` of the axis values, e.g. ``K2``) -> the searched parameters with the best
    constrained objective of the seed-averaged normalised reward and cost, with those averages and the axis values
    (``axes``)."""
    groups: dict[tuple[str, str, str], list[TrialRecord]] = defaultdict(list)
    for r in records:
        if r.trained:  # what the sample trained; an evaluated axis's other values are evaluations of the same trial
            groups[(r.task, experiment_name(r.algo, r.axes), yaml.safe_dump(r.search, sort_keys=True))].append(r)
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for (task, name, _), group in groups.items():
        reward = float(np.mean([r.evaluation["mean"]["normalized_reward"] for r in group]))
        cost = float(np.mean([r.evaluation["mean"]["normalized_cost"] for r in group]))
        candidate = {**group[0].search, "normalized_reward": reward, "normalized_cost": cost,
                     "seeds": sorted(r.seed for r in group),
                     "axes": {axis.name: group[0].axes[axis.name] for axis in group[0].entry.trained_axes}}
        current = best.get((task, name))
        if current is None or constrained_objective(reward, cost) > constrained_objective(
                current["normalized_reward"], current["normalized_cost"]):
            best[(task, name)] = candidate
    return best


def best_params_config(options: SweepOptions, best: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    """A sweep config (``--config``) that trains every (task, axis values) with its best searched parameters: each
    under its task and the scopes of its labelled axis values (``K4``)."""
    entry = get_algorithm(options.algos[0])
    overrides = {scope: dict(values) for scope, values in options.overrides.items()}
    for (task, _), params in sorted(best.items()):
        scope = overrides.setdefault(task, {})
        for axis in entry.trained_axes:
            if axis.label:
                scope = scope.setdefault(axis.part(params["axes"][axis.name]), {})
        scope.update({k: params[k] for k in entry.searchable if params.get(k) is not None})
    swept = {option: sorted({params["axes"][axis.name] for params in best.values()})
             for option, axis in option_axes().items() if axis in entry.trained_axes}
    return {"tasks": ",".join(dict.fromkeys(task for task, _ in sorted(best))), "seeds": list(options.seeds),
            **swept, "data_root": options.data_root, "training": options.training_settings(), "overrides": overrides}


def write_yaml(path: Path, data: dict[str, Any], header: str) -> None:
    """Writes ``data`` as YAML atomically."""
    with atomic_file(path) as tmp:
        tmp.write_text(header + yaml.safe_dump(data, sort_keys=False))


def run_search(options: SweepOptions) -> Path:
    """One Optuna experiment per (task, the algorithm's trained axis values); returns the written best_params.yaml."""
    import ray

    tasks = options.task_specs()
    (algo,) = options.algos  # one algorithm with searchable settings (checked by the tune CLI)
    if options.num_samples < 1:
        raise SweepError(f"--num-samples must be >= 1, got {options.num_samples}")
    experiment_dir = options.experiment_dir
    check_experiment_dir(experiment_dir, options.resume)
    cluster = ray.cluster_resources()

    def resources_for(trials: int) -> Any:
        return plan_resources(trials, cluster.get("CPU", 0), cluster.get("GPU", 0), num_gpus=options.num_gpus,
                              cpus_per_trial=options.cpus_per_trial, gpus_per_trial=options.gpus_per_trial,
                              max_concurrent=options.max_concurrent)

    samples = (samples_per_population(options, resources_for(options.num_samples).concurrency, cluster.get("CPU", 0))
               if packs(options) else 0)
    if packs(options) and not samples:
        logger.warning("not packed: a sample's %d seeds with their own --eval-runners EnvRunners would need more "
                       "than the cluster's %g CPUs in one trial", len(options.seeds), cluster.get("CPU", 0))
    elif options.population_samples and not packs(options):
        logger.warning("--population-samples %d: ignored, the search is not packed (%s)", options.population_samples,
                       why_not_packed(options))
    packed = samples * len(options.seeds) > 1
    trials = math.ceil(options.num_samples / samples) if packed else options.num_samples * len(options.seeds)
    resources = resources_for(trials)
    setup = setup_dict(options, resources)
    check_trials(options, tasks, setup)
    record_plan(options)
    entry = get_algorithm(algo)
    for task in tasks:
        for axes in axis_combinations(options, task, entry.trained_axes):
            search_space(entry, axes, options.search_space)  # fail on a bad range before anything runs
    for task in tasks:
        for axes in axis_combinations(options, task, entry.trained_axes):
            name = experiment_name(algo, axes)
            sub = experiment_dir / "-".join(filter(None, [task.name, name]))
            logger.info("Optuna on %s %s: %d samples × %d seeds%s, %d trials at a time; results in %s",
                        task.name, name, options.num_samples, len(options.seeds),
                        f" ({samples} sample(s) × seeds per population)" if packed else "", resources.concurrency,
                        sub)
            run_experiment(options, sub, {"algo": algo, "task": task.name, **axes,
                                          **({} if packed else {"seeds": list(options.seeds)}), "setup": setup},
                           concurrency=resources.concurrency, resume=options.resume and sub.exists(),
                           search_alg=make_searcher(search_space(entry, axes, options.search_space),
                                                    options.search_space, options.seeds, options.num_samples,
                                                    samples if packed else None),
                           num_samples=trials)
    records, _ = load_trials(experiment_dir)
    best = best_parameters(records)
    for (task, name), params in sorted(best.items()):
        chosen = {k: params[k] for k in entry.searchable if k in params}
        logger.info("best %s %s: %s: normalised reward %.3f, cost %.3f", task, name, chosen,
                    params["normalized_reward"], params["normalized_cost"])
    path = experiment_dir / BEST_PARAMS_FILE
    write_yaml(path, best_params_config(options, best),
               f"# Best Optuna parameters per task and axis values from {experiment_dir}\n"
               "# (highest mean normalised reward among those with mean normalised cost <= 1; else least unsafe).\n"
               "# Train them: python -m rllib_caps.tune --config THIS_FILE --name NAME\n")
    return path
