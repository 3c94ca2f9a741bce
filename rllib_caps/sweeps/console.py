"""What a sweep prints while it runs: one line per trial event and one table of every trial.

Three outputs (``tune --verbose`` / default / ``--quiet``, ``OUTPUTS``):

- default: a line when a trial starts, is evaluated during training (``--eval-every``), finishes or fails, and the
  table of trials (``COLUMNS``: trial, algorithm, task, the values of its algorithm's trained axes, as its registry
  entry labels them, seed, training iteration, gradient steps, its latest normalised reward and cost, status). On a
  terminal the table is live: redrawn below the event lines as results come in; elsewhere (a log file, a pipe) it is
  printed once, at the end.
- quiet: the failures and the final table only.
- verbose: the event lines beside Ray Tune's own output (its status boxes, each trial's config and results).

Tune's own console is configured off at its source for default and quiet (``tune_console``): Tune's legacy output
engine at verbosity 0, which prints no boxes, and no TensorBoard logger (the report draws the learning curves; Tune
would print a ``tensorboard --logdir`` hint into Ray's temporary directory). Tune's INFO log lines and its
``Tuner.restore(...)`` hint on an interruption (the CLI prints the sweep's own resume command) are kept in the library
log (``rllib_caps.utils.console``).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TextIO

from ray.rllib.utils.metrics import EVALUATION_RESULTS
from ray.tune import Callback

from rllib_caps.algorithms.registry import get_algorithm
from rllib_caps.core.keys import GRADIENT_STEPS, RESULTS_KEY
from rllib_caps.sweeps.trial_schema import MEMBERS, trial_params, trial_seed
from rllib_caps.sweeps.trials import describe_trial
from rllib_caps.utils.console import aligned_table

OUTPUTS = ("quiet", "default", "verbose")
COLUMNS = ("trial", "algorithm", "task", "axes", "seed", "iter", "gradient steps", "reward", "cost", "status")
TUNE_VERBOSE = 1  # RunConfig.verbose of --verbose: Tune's status table, each trial's config and results
# Ray Tune's switches of its own output, read when the sweep starts: no TensorBoard logger among its default ones
# (``tune_loggers`` passes the JSON and CSV ones), and but for --verbose its legacy engine, whose verbosity 0 prints
# nothing.
NO_TENSORBOARD = {"TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1"}
QUIET_TUNE = {**NO_TENSORBOARD, "RAY_AIR_NEW_OUTPUT": "0"}
CLEAR_UP = "\x1b[{}F\x1b[J"  # cursor up N lines to their start, then clear to the end of the screen


def axes_text(params: Mapping[str, Any]) -> str:
    """``K=2``, ``kappa=10``, ``K=2 sacbc separate``: the trial's trained axis values as its entry labels them."""
    entry = get_algorithm(params["algo"])
    values = entry.axis_values(params)
    return " ".join(axis.text(f"{values[axis.name]:g}" if isinstance(values[axis.name], float) else
                              values[axis.name])
                    for axis in entry.trained_axes if axis.named(values[axis.name]))


def result_score(result: Mapping[str, Any]) -> Mapping[str, float] | None:
    """The normalised reward and cost of a result: its trial's (a packed trial's: its members' mean) after the final
    evaluation, else the mean over thresholds of an evaluation during training, else None."""
    if not math.isnan(result.get("normalized_reward", math.nan)):
        return result
    evaluation = (result.get(EVALUATION_RESULTS) or {}).get(RESULTS_KEY)
    return evaluation["mean"] if evaluation and "mean" in evaluation else None


def score_text(score: Mapping[str, float] | None) -> tuple[str, str]:
    """Normalised reward and cost, to 3 decimals; blanks before the first evaluation."""
    if score is None or math.isnan(score.get("normalized_reward", math.nan)):
        return "", ""
    return f"{score['normalized_reward']:.3f}", f"{score['normalized_cost']:.3f}"


def trial_row(name: str, config: Mapping[str, Any], result: Mapping[str, Any], score: Mapping[str, float] | None,
              status: str) -> list[str]:
    """One row of ``COLUMNS`` (``name``: the trial's id, the end of its directory's name); a packed trial's seed
    column counts its members."""
    params = trial_params(config)
    entry = get_algorithm(params["algo"])
    seed = f"{len(params[MEMBERS])} members" if MEMBERS in params else str(trial_seed(params))
    steps = result.get(GRADIENT_STEPS)
    return [name, entry.display_name, params["task"], axes_text(params), seed,
            str(result.get("training_iteration", "")), "" if steps is None else f"{steps:g}", *score_text(score),
            status]


class SweepConsole(Callback):
    """The Tune callback that prints a sweep's events and its table of trials (``OUTPUTS``)."""

    def __init__(self, output: str = "default", stream: TextIO | None = None) -> None:
        self.output = output
        self.stream = stream or sys.stdout
        self.live = output == "default" and self.stream.isatty()
        self._scores: dict[str, Mapping[str, float]] = {}  # trial id -> its latest evaluation's mean
        self._drawn = 0  # lines of the live table on the screen

    def __getstate__(self) -> dict[str, Any]:  # Tune saves its callbacks with the experiment: no stream
        return {"output": self.output, "_scores": {}, "_drawn": 0, "live": False}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, stream=sys.stdout)
        self.live = self.output == "default" and self.stream.isatty()

    def table(self, trials: Sequence[Any]) -> str:
        """The table of ``trials``."""
        return aligned_table(COLUMNS, [trial_row(t.trial_id, t.config, t.last_result or {},
                                                 self._scores.get(t.trial_id), t.status) for t in trials])

    def _write(self, text: str, trials: Sequence[Any] | None = None) -> None:
        """Writes ``text`` (lines, or nothing), then on a terminal redraws the live table of ``trials`` below it."""
        if self._drawn:
            self.stream.write(CLEAR_UP.format(self._drawn))
            self._drawn = 0
        if text:
            self.stream.write(text + "\n")
        if self.live and trials:
            table = self.table(trials)
            self.stream.write(table + "\n")
            self._drawn = table.count("\n") + 1
        self.stream.flush()

    def _event(self, text: str, trials: Sequence[Any]) -> None:
        self._write(text if self.output != "quiet" else "", trials)

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._event(f"started   {describe_trial(trial.config)}", trials)

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        score = result_score(result)
        if score is not None:
            self._scores[trial.trial_id] = {key: score[key] for key in ("normalized_reward", "normalized_cost")}
        if score is not None and not result.get("done"):
            reward, cost = score_text(score)
            self._event(f"evaluated {describe_trial(trial.config)} at {result.get(GRADIENT_STEPS, 0):g} gradient "
                        f"steps: normalised reward {reward}, cost {cost}", trials)
        elif self.live:
            self._write("", trials)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        r = trial.last_result or {}
        reward, cost = score_text(r)
        self._event(f"finished  {describe_trial(trial.config)}: normalised reward {reward}, cost {cost} "
                    f"({'safe' if r.get('safe') == 1 else 'UNSAFE'})", trials)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._write(f"FAILED    {describe_trial(trial.config)}; its error: {trial.error_file or trial.path}", trials)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        if self.output != "verbose":
            self._write(self.table(trials))
            self._drawn = 0


def tune_verbosity(output: str) -> int:
    """``RunConfig.verbose`` for ``output`` (``OUTPUTS``)."""
    return TUNE_VERBOSE if output == "verbose" else 0


@contextmanager
def tune_console(output: str) -> Iterator[None]:
    """While Tune runs (``Tuner.fit``): its own output configured for ``output`` (``OUTPUTS``)."""
    switches = NO_TENSORBOARD if output == "verbose" else QUIET_TUNE
    before = {name: os.environ.get(name) for name in switches}
    os.environ.update(switches)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def tune_loggers() -> list[Any]:
    """Tune's JSON and CSV result loggers (what the report and Tune's ``ResultGrid`` read), without TensorBoard's."""
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

    return [JsonLoggerCallback(), CSVLoggerCallback()]
