"""The Tune side of a sweep trial: ``SweepTrial``, the trainable of every algorithm (what a sweep prints of it:
``rllib_caps.sweeps.console``). This module imports Ray; the CLI path imports it only when a sweep runs
(``rllib_caps.sweeps.runner``), so ``tune --help`` stays instant. What a trial trains is decided Ray-free in
``rllib_caps.sweeps.trials``."""

from __future__ import annotations

from typing import Any

from ray.rllib.utils.metrics import EVALUATION_RESULTS
from ray.tune import PlacementGroupFactory, Trainable
from ray.tune.result import DONE

from rllib_caps.algorithms.registry import get_algorithm
from rllib_caps.core.keys import GRADIENT_STEPS, RESULTS_KEY
from rllib_caps.sweeps.population_run import PopulationRun
from rllib_caps.sweeps.trial_schema import ALGORITHM_SETTINGS, MEMBERS, VARIANT_RESULTS, trial_members, trial_params
from rllib_caps.sweeps.trials import (
    evaluated_values,
    members_summary,
    sweep_metrics,
    trial_config,
)


class SweepTrial(Trainable):
    """The Tune trainable of every algorithm. It builds the trial's algorithm (whose class the registry's config
    names) and delegates to it: ``train()`` per step, ending after the evaluation of the last iteration; checkpoints
    are the algorithm's own (``save_to_path``). Its resources are the algorithm's placement group, so the algorithm's
    learners and EnvRunners land in the trial's bundles. Tune reuses a finished trial's actor for the next trial that
    asks for the same resources (``reset_config`` stops one algorithm and builds the next), so a trial does not pay a
    new process and its imports."""

    @classmethod
    def default_resource_request(cls, config: dict[str, Any]):
        """The algorithm's placement group; a packed trial's members share its main bundle and each brings
        its evaluation EnvRunners' bundles."""
        members = trial_members(config)
        built = trial_config(members[0][1])
        request = built.algo_class.default_resource_request(built.to_dict())
        bundles = request.bundles
        return PlacementGroupFactory([bundles[0], *bundles[1:] * len(members)], strategy=request.strategy)

    def setup(self, config: dict[str, Any]) -> None:
        self._build(config)

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        """The next trial in this actor: the finished trial's algorithms stop and the new ones are built (which
        seeds Python, NumPy and torch afresh from their configs, as in a new process)."""
        self._stop()
        self._build(new_config)
        return True

    def _build(self, config: dict[str, Any]) -> None:
        members = trial_members(config)
        configs = [trial_config(params) for _, params in members]
        self._names = [name for name, _ in members]
        self._iterations = configs[0].num_iterations
        # The values of the entry's evaluated axis (e.g. CAPS's --critics) are evaluations of the trained trial.
        setup = config.get("setup") or {}
        self._entry = get_algorithm(trial_params(config)["algo"])
        self._variants = evaluated_values(self._entry, setup)
        self._variant_settings = {item.name: (setup.get(ALGORITHM_SETTINGS) or {}).get(item.name)
                                  for item in self._entry.sweep_settings}
        self.algorithms = [built.build_algo() for built in configs]
        self.population = None if self._names == [None] else PopulationRun(self.algorithms, self._names)

    def step(self) -> dict[str, Any]:
        iteration = self.iteration + 1
        done = iteration >= self._iterations
        results = (self.population.train(iteration) if self.population else
                   [self.algorithms[0].train()])
        results = [self._member_result(algorithm, result, iteration, done)
                   for algorithm, result in zip(self.algorithms, results, strict=True)]
        if self.population is None:
            return {**results[0], DONE: done}
        return {**members_summary(results), MEMBERS: dict(zip(self._names, results, strict=True)), DONE: done}

    def _member_result(self, algorithm: Any, result: dict[str, Any], iteration: int, done: bool
                       ) -> dict[str, Any]:
        """One trained algorithm's result with the sweep's metrics (and after training, its critic variants)."""
        metrics = sweep_metrics(result.get(EVALUATION_RESULTS, {}).get(RESULTS_KEY) if done else None)
        metrics[GRADIENT_STEPS] = iteration * algorithm.config.updates_per_iteration
        if done and self._variants:
            metrics[VARIANT_RESULTS] = self._entry.extension.evaluate_variants(
                algorithm, self._variants, self._variant_settings)
        return {**metrics, **result}

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        if self.population:
            self.population.save(checkpoint_dir)
        else:
            self.algorithms[0].save_to_path(checkpoint_dir)

    def load_checkpoint(self, checkpoint: str) -> None:
        if self.population:
            self.population.restore(checkpoint)
        else:
            self.algorithms[0].restore_from_path(checkpoint)

    def cleanup(self) -> None:
        self._stop()

    def _stop(self) -> None:
        if self.population:
            self.population.stop()
        else:
            self.algorithms[0].stop()

