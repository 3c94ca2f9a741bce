"""A packed trial's training: its members' algorithms, their learners trained as one population
(``rllib_caps.core.population``), each member evaluated and checkpointed as the algorithm it is.

Every member is an ordinary RLlib algorithm built from its own trial config (its seed and, for the per-κ baselines,
its κ), with a local learner whose module holds views into the population's stacked parameters: its evaluation
(``Algorithm.evaluate``, which syncs the module's current weights to its evaluation EnvRunners), its checkpoint
(``save_to_path``) and its policy read the member's own weights. Only the gradient steps are shared.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.utils.metrics import EVALUATION_RESULTS, LEARNER_RESULTS

from rllib_caps.core.offline import evaluates_at
from rllib_caps.core.population import Population
from rllib_caps.core.ray_internals import local_learner
from rllib_caps.report.records import MEMBERS


class PopulationRun:
    """The members' ``algorithms`` (built, each with a local learner), trained together."""

    def __init__(self, algorithms: Sequence[Any], names: Sequence[str]) -> None:
        self.algorithms, self.names = list(algorithms), list(names)
        self.learners = [local_learner(algorithm.learner_group) for algorithm in self.algorithms]
        self.config = self.algorithms[0].config
        self.population = Population.of_learners(self.learners, captured=self.learners[0].captures_steps)

    def train(self, iteration: int) -> list[dict[str, Any]]:
        """Training iteration ``iteration`` (1-based) of every member: ``updates_per_iteration`` population steps,
        then each member's evaluation where its config asks for one (as ``OfflineSafeAlgorithm.step`` does). One
        result per member: its loss terms (as a learner reports them) and its evaluation."""
        losses = self.population(self.config.updates_per_iteration)
        values = {name: term.float().cpu().tolist() for name, term in losses.items()}  # one device read
        results = [{LEARNER_RESULTS: {DEFAULT_MODULE_ID: {name: member[i] for name, member in values.items()}}}
                   for i in range(len(self.algorithms))]
        if evaluates_at(iteration, self.config):
            for result, evaluation in zip(results, self.evaluate(), strict=True):
                result[EVALUATION_RESULTS] = evaluation
        return results

    def evaluate(self) -> list[dict[str, Any]]:
        """Every member's evaluation (``Algorithm.evaluate``). With remote evaluation EnvRunners
        (``eval_runners`` ≥ 1) the members evaluate at once, each on its own runners (the trial's placement group
        holds every member's), so their rollouts run in parallel on CPU workers; with in-process runners, one
        member after another."""
        if not self.config.evaluation_num_env_runners:
            return [algorithm.evaluate() for algorithm in self.algorithms]
        with ThreadPoolExecutor(len(self.algorithms), thread_name_prefix="member-evaluation") as pool:
            return list(pool.map(lambda algorithm: algorithm.evaluate(), self.algorithms))

    def save(self, directory: str | Path) -> None:
        """Each member's ordinary checkpoint, ``directory/members/<name>/``, with its optimiser state."""
        self.population.save_optimizer_states(self.learners)
        for name, algorithm in zip(self.names, self.algorithms, strict=True):
            algorithm.save_to_path(Path(directory) / MEMBERS / name)

    def restore(self, directory: str | Path) -> None:
        """The members restored from ``save``'s checkpoints: their weights (in place, into the population's
        stacks), minibatch generators and optimiser states."""
        for name, algorithm in zip(self.names, self.algorithms, strict=True):
            algorithm.restore_from_path(Path(directory) / MEMBERS / name)
        self.population.load_optimizer_states(self.learners)

    def stop(self) -> None:
        for algorithm in self.algorithms:
            algorithm.stop()
