"""Library notices go to the log file; every other warning still reaches the console."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest

from rllib_caps.utils.console import aligned_table, divert_library_notices


def _record(name: str, message: str) -> logging.LogRecord:
    return logging.LogRecord(name, logging.WARNING, __file__, 1, message, None, None)


def test_notices_go_to_the_log_and_other_warnings_to_the_console(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLLIB_CAPS_LOG", str(tmp_path / "earlier.log"))
    divert_library_notices()  # e.g. an earlier command in the same process
    monkeypatch.setenv("RLLIB_CAPS_LOG", str(tmp_path / "library.log"))
    assert divert_library_notices() == tmp_path / "library.log"
    divert_library_notices()  # idempotent: one filter per handler
    consoles = [h for name in ("ray", "ray.rllib") for h in logging.getLogger(name).handlers]
    assert consoles
    assert all(sum(type(f).__name__ == "_DivertNotices" for f in h.filters) == 1 for h in consoles)
    notices = [_record("ray.tune.utils.util", "Install gputil for GPU system monitoring."),
               _record("ray.rllib.algorithms.algorithm_config", "You are running X on the new API stack!")]
    problem = _record("ray.rllib.core", "a learner lost its GPU")
    for handler in consoles:
        assert all(not handler.filter(r) for r in notices)  # kept off the console
        assert handler.filter(problem)  # reaches it
    log = (tmp_path / "library.log").read_text()
    assert "gputil" in log and "new API stack" in log and "lost its GPU" not in log
    assert not (tmp_path / "earlier.log").exists()  # the earlier filter no longer writes


# ------------------------------------------------------------------------------------------------ a sweep's console

def _trial(variant: dict, seed: int, trial_id: str):
    from ray.tune.experiment import Trial

    return Trial("SweepTrial", config={"variant": variant, "seed": seed, "setup": {}}, stub=True, trial_id=trial_id)


CAPS_VARIANT = {"algo": "caps", "task": "BallCircle", "num_heads": 2, "backbone": "iql", "actor": "shared"}
BC_SAFE_VARIANT = {"algo": "bc-safe", "task": "BallRun", "cost_limit": 20.0}


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _run_events(console, trials) -> None:
    """Tune's calls for two trials: both start, one is evaluated during training, both finish."""
    caps, bc_safe = trials
    for trial in trials:
        console.on_trial_start(0, trials, trial)
    evaluation = {"evaluation": {"dsrl": {"mean": {"normalized_reward": 0.25, "normalized_cost": 0.5, "safe": 1.0}}}}
    caps.update_last_result({"training_iteration": 1, "gradient_steps": 500, "normalized_reward": float("nan"),
                             "normalized_cost": float("nan"), **evaluation})
    console.on_trial_result(0, trials, caps, caps.last_result)
    for trial, reward, cost in ((caps, 0.5, 0.75), (bc_safe, 0.125, 1.5)):
        trial.update_last_result({"training_iteration": 2, "gradient_steps": 1000, "normalized_reward": reward,
                                  "normalized_cost": cost, "safe": float(cost <= 1), "done": True})
        console.on_trial_result(0, trials, trial, trial.last_result)
        trial.set_status("TERMINATED")
        console.on_trial_complete(0, trials, trial)
    console.on_experiment_end(trials)


def test_the_sweep_console_prints_one_line_per_event_and_the_table_of_trials() -> None:
    """Default: a line per start, evaluation during training and finish, then the table (trial id, algorithm, task,
    the axes as the registry labels them, seed, iteration, gradient steps, reward, cost, status); quiet: the table
    only; on a terminal the table is redrawn below the events as they come (cleared and drawn again), and stays."""
    from rllib_caps.sweeps.console import COLUMNS, SweepConsole

    outputs = {}
    for output, stream in (("default", io.StringIO()), ("quiet", io.StringIO()), ("default", _Terminal())):
        trials = [_trial(CAPS_VARIANT, 0, "a_00000"), _trial(BC_SAFE_VARIANT, 10, "a_00001")]
        _run_events(SweepConsole(output, stream), trials)
        outputs[output, stream.isatty()] = stream.getvalue()
    rows = [["a_00000", "CAPS", "BallCircle", "K=2", "0", "2", "1000", "0.500", "0.750", "TERMINATED"],
            ["a_00001", "BC-Safe", "BallRun", "kappa=20", "10", "2", "1000", "0.125", "1.500", "TERMINATED"]]
    table = aligned_table(COLUMNS, rows).splitlines()
    events = ["started   caps BallCircle K2 seed=0", "started   bc-safe BallRun kappa20 seed=10",
              "evaluated caps BallCircle K2 seed=0 at 500 gradient steps: normalised reward 0.250, cost 0.500",
              "finished  caps BallCircle K2 seed=0: normalised reward 0.500, cost 0.750 (safe)",
              "finished  bc-safe BallRun kappa20 seed=10: normalised reward 0.125, cost 1.500 (UNSAFE)"]
    assert [line.rstrip() for line in outputs["default", False].splitlines()] == [*events, *table]
    assert [line.rstrip() for line in outputs["quiet", False].splitlines()] == table
    live = outputs["default", True]
    assert live.count("\x1b[J") == 7 and live.endswith("\n".join(table) + "\n")  # cleared before each redraw
    assert all(event in live for event in events)

