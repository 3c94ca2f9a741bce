"""A packed trial's training: its members' algorithms, their learners trained as one population
(``rllib_caps.core.population``), each member evaluated and checkpointed as the algorithm it is.

Every member is an ordinary RLlib algorithm built from its own trial config (its seed and, for the per-κ baselines,
its κ), with a local learner whose module holds views into the population's stacked parameters: its evaluation
(``Algorithm.evaluate``, which syncs the module's current weights to its evaluation EnvRunners), its checkpoint
(``save_to_path``) and its policy read the member's own weights. Only the gradient steps are shared.

With remote evaluation EnvRunners, an evaluation during training (``evaluation_every``) is pipelined: once every
member's weights are on its runners, the population trains the next iteration while the runners roll out on their
CPU workers, and the evaluation is reported with that next iteration, marked with the ``gradient_steps`` of the
weights it evaluated. It evaluates exactly those weights, so its figures are the ones a blocking evaluation gives.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.utils.metrics import EVALUATION_RESULTS, LEARNER_RESULTS

from rllib_caps.core.keys import GRADIENT_STEPS
from rllib_caps.core.offline import evaluates_at
from rllib_caps.core.population import Population
from rllib_caps.core.ray_internals import local_learner
from rllib_caps.report.records import MEMBERS


class WeightsSent(RLlibCallback):
    """Set when ``Algorithm.evaluate`` has sent the learner's weights to its evaluation EnvRunners: RLlib calls
    ``on_evaluate_start`` right after that sync (and CAPS calibrates its cost critic before it), so from then on
    the learner may train while the runners roll out."""

    def __init__(self) -> None:
        super().__init__()
        self.event = threading.Event()

    def on_evaluate_start(self, **kwargs: Any) -> None:
        self.event.set()


class PopulationRun:
    """The members' ``algorithms`` (built, each with a local learner), trained together."""

    def __init__(self, algorithms: Sequence[Any], names: Sequence[str]) -> None:
        self.algorithms, self.names = list(algorithms), list(names)
        self.learners = [local_learner(algorithm.learner_group) for algorithm in self.algorithms]
        self.config = self.algorithms[0].config
        self.population = Population.of_learners(self.learners, captured=self.learners[0].captures_steps)
        self.remote_evaluation = bool(self.config.evaluation_num_env_runners)
        self._sent = [WeightsSent() for _ in self.algorithms]
        for algorithm, sent in zip(self.algorithms, self._sent, strict=True):
            algorithm.callbacks.append(sent)  # the new API stack's list of RLlibCallback objects
        self._pool = ThreadPoolExecutor(len(self.algorithms), thread_name_prefix="member-evaluation")
        self._in_flight: tuple[int, list[Future]] | None = None  # a pipelined evaluation: its gradient steps, futures

    def train(self, iteration: int) -> list[dict[str, Any]]:
        """Training iteration ``iteration`` (1-based) of every member: ``updates_per_iteration`` population steps,
        then each member's evaluation where its config asks for one (as ``OfflineSafeAlgorithm.step`` does),
        pipelined into the next iteration where that iteration does not evaluate itself (``pipelines``). One result
        per member: its loss terms (as a learner reports them) and the evaluation that ended in this iteration."""
        steps = iteration * self.config.updates_per_iteration
        losses = self.population(self.config.updates_per_iteration)
        values = {name: term.float().cpu().tolist() for name, term in losses.items()}  # one device read
        results = [{LEARNER_RESULTS: {DEFAULT_MODULE_ID: {name: member[i] for name, member in values.items()}}}
                   for i in range(len(self.algorithms))]
        if self._in_flight is not None:
            steps_evaluated, futures = self._in_flight
            self._attach(results, steps_evaluated, [future.result() for future in futures])
            self._in_flight = None
        if evaluates_at(iteration, self.config):
            if self.pipelines(iteration):
                self._in_flight = steps, self._start_evaluation()
            else:
                self._attach(results, steps, self.evaluate())
        return results

    def pipelines(self, iteration: int) -> bool:
        """Whether the evaluation after ``iteration`` rolls out while the next iteration trains: with remote
        evaluation EnvRunners, and where the next iteration neither is the last nor evaluates itself (so every
        result carries at most one evaluation, and the last one ends the trial with its own)."""
        after = iteration + 1
        return (self.remote_evaluation and after < self.config.num_iterations
                and not evaluates_at(after, self.config))

    def evaluate(self) -> list[dict[str, Any]]:
        """Every member's evaluation (``Algorithm.evaluate``) of its current weights, one result per member. With
        remote evaluation EnvRunners (``eval_runners`` ≥ 1) the members evaluate at once, each on its own runners
        (the trial's placement group holds every member's), so their rollouts run in parallel on CPU workers; with
        in-process runners, one member after another."""
        if not self.remote_evaluation:
            return [algorithm.evaluate() for algorithm in self.algorithms]
        return [future.result() for future in self._start_evaluation()]

    def _start_evaluation(self) -> list[Future]:
        """Every member's evaluation on its remote runners, started in the background; returns once each member's
        weights are on its runners, after which training may go on."""
        for sent in self._sent:
            sent.event.clear()
        futures = [self._pool.submit(algorithm.evaluate) for algorithm in self.algorithms]
        for future, sent in zip(futures, self._sent, strict=True):
            while not sent.event.wait(timeout=0.05):
                if future.done():  # it ended before sending the weights: its error is raised here
                    future.result()
                    break
        return futures

    @staticmethod
    def _attach(results: list[dict[str, Any]], steps: int, evaluations: list[dict[str, Any]]) -> None:
        """Each member's evaluation into its result, with the gradient steps of the weights it evaluated."""
        for result, evaluation in zip(results, evaluations, strict=True):
            result[EVALUATION_RESULTS] = {**evaluation, GRADIENT_STEPS: steps}

    def save(self, directory: str | Path) -> None:
        """Each member's ordinary checkpoint, ``directory/members/<name>/``, with its optimiser state. An evaluation
        in flight ends first (a member's state includes its metrics, which the evaluation logs into); it is still
        reported with the next iteration."""
        if self._in_flight is not None:
            wait(self._in_flight[1])
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
        """Waits for an evaluation in flight (its runners are about to stop), then stops every member."""
        if self._in_flight is not None:
            wait(self._in_flight[1])
        self._pool.shutdown()
        for algorithm in self.algorithms:
            algorithm.stop()
