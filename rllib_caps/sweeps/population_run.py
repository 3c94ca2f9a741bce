"""A packed trial's training: its members' algorithms, their learners trained as one population
(``rllib_caps.core.population``), each member evaluated and checkpointed as the algorithm it is.

Every member is an ordinary RLlib algorithm built from its own trial config (its seed and, for the per-κ baselines,
its κ), with a local learner whose module holds views into the population's stacked parameters: its evaluation
(``Algorithm.evaluate``, which syncs the module's current weights to its evaluation EnvRunners), its checkpoint
(``save_to_path``) and its policy read the member's own weights. Only the gradient steps are shared.

With remote evaluation EnvRunners, an evaluation during training (``evaluation_every``) is pipelined: it is due
after its iteration, starts as the next iteration begins (after any checkpoint Tune takes in between, from the
same weights), and once every member's weights have been sent to its runners the population trains that iteration
while the runners roll out on their CPU workers. That iteration reports it, marked with the ``gradient_steps`` of
the weights it evaluated; it evaluates exactly those weights, so its figures are those of an evaluation in place.
"""

from __future__ import annotations

import json
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
from rllib_caps.sweeps.trial_schema import MEMBERS
from rllib_caps.utils.atomic import atomic_file

DUE_EVALUATION_FILE = "due_evaluation.json"  # in a population's checkpoint: the evaluation its next iteration runs


class WeightsSent(RLlibCallback):
    """Set when ``Algorithm.evaluate`` has read the learner's weights and sent them to its evaluation EnvRunners:
    RLlib calls ``on_evaluate_start`` right after that sync (and CAPS calibrates its cost critic before it). Ray
    runs one caller's calls to an actor in order, so the rollouts that follow act with those weights, and the
    learner may train on meanwhile."""

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
        self.due_evaluation: int | None = None  # gradient steps of the weights the next iteration evaluates
        if self.remote_evaluation:
            self._sent = [WeightsSent() for _ in self.algorithms]
            for algorithm, sent in zip(self.algorithms, self._sent, strict=True):
                algorithm.callbacks.append(sent)  # the new API stack's list of RLlibCallback objects
            self._pool = ThreadPoolExecutor(len(self.algorithms), thread_name_prefix="member-evaluation")

    def train(self, iteration: int) -> list[dict[str, Any]]:
        """Training iteration ``iteration`` (1-based) of every member: ``updates_per_iteration`` population steps
        (beside the rollouts of an evaluation due from the iteration before), then each member's evaluation where
        its config asks for one (as ``OfflineSafeAlgorithm.step`` does), or its due date where it pipelines
        (``pipelines``). One result per member: its loss terms (as a learner reports them) and the evaluation that
        ran in this iteration."""
        rollouts = self._start_evaluation() if self.due_evaluation is not None else None
        losses = self.population(self.config.updates_per_iteration)
        values = {name: term.float().cpu().tolist() for name, term in losses.items()}  # one device read
        results = [{LEARNER_RESULTS: {DEFAULT_MODULE_ID: {name: member[i] for name, member in values.items()}}}
                   for i in range(len(self.algorithms))]
        if rollouts is not None:
            self._attach(results, self.due_evaluation, [future.result() for future in rollouts])
            self.due_evaluation = None
        if evaluates_at(iteration, self.config):
            steps = iteration * self.config.updates_per_iteration
            if self.pipelines(iteration):
                self.due_evaluation = steps
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
        weights have been sent to its runners (``WeightsSent``), after which training may go on."""
        for sent in self._sent:
            sent.event.clear()
        futures = [self._pool.submit(algorithm.evaluate) for algorithm in self.algorithms]
        for future, sent in zip(futures, self._sent, strict=True):
            future.add_done_callback(lambda _, event=sent.event: event.set())  # also wakes if it ends before
            sent.event.wait()
            if future.done() and future.exception() is not None:  # raised once every member's has ended
                wait(futures)
                future.result()
        return futures

    @staticmethod
    def _attach(results: list[dict[str, Any]], steps: int, evaluations: list[dict[str, Any]]) -> None:
        """Each member's evaluation into its result, with the gradient steps of the weights it evaluated."""
        for result, evaluation in zip(results, evaluations, strict=True):
            result[EVALUATION_RESULTS] = {**evaluation, GRADIENT_STEPS: steps}

    def save(self, directory: str | Path) -> None:
        """Each member's ordinary checkpoint, ``directory/members/<name>/``, with its optimiser state, and the
        evaluation due (``DUE_EVALUATION_FILE``): the weights saved are the ones it evaluates."""
        self.population.save_optimizer_states(self.learners)
        for name, algorithm in zip(self.names, self.algorithms, strict=True):
            algorithm.save_to_path(Path(directory) / MEMBERS / name)
        if self.due_evaluation is not None:
            with atomic_file(Path(directory) / DUE_EVALUATION_FILE) as tmp:
                tmp.write_text(json.dumps({GRADIENT_STEPS: self.due_evaluation}))

    def restore(self, directory: str | Path) -> None:
        """The members restored from ``save``'s checkpoints: their weights (in place, into the population's
        stacks), minibatch generators and optimiser states, and the evaluation due."""
        for name, algorithm in zip(self.names, self.algorithms, strict=True):
            algorithm.restore_from_path(Path(directory) / MEMBERS / name)
        self.population.load_optimizer_states(self.learners)
        due = Path(directory) / DUE_EVALUATION_FILE
        self.due_evaluation = json.loads(due.read_text())[GRADIENT_STEPS] if due.exists() else None

    def stop(self) -> None:
        """Stops every member (an evaluation never outlives the iteration that runs it)."""
        if self.remote_evaluation:
            self._pool.shutdown()
        for algorithm in self.algorithms:
            algorithm.stop()
