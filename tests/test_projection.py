"""``tune --dry-run``'s projected time (``rllib_caps.sweeps.projection``): its sums, and the recorded figures."""

from __future__ import annotations

import pytest

from rllib_caps.algorithms.registry import ALGORITHMS
from rllib_caps.envs import SUITES
from rllib_caps.sweeps.projection import (
    MAX_SPEEDUP,
    TrialWork,
    duration_text,
    projected_seconds,
    projection_text,
    recorded_rates,
    step_size,
    trial_seconds,
)

RATES = {"steps_per_s": {"caps": 10.0}, "evaluation_ms_per_env_step": {"bullet": 2.0}}


def work(size: float, steps: int = 1000, eval_env_steps: int = 0) -> TrialWork:
    return TrialWork(algo="caps", gradient_steps=steps, size=size, default_size=step_size(512, [512, 512]),
                     eval_env_steps=eval_env_steps, suite="bullet")


def test_a_trial_at_the_default_sizes_trains_at_the_recorded_rate_and_smaller_ones_faster_up_to_the_cap() -> None:
    assert trial_seconds(work(step_size(512, [512, 512]), eval_env_steps=3000), RATES) == (100.0, 6.0)
    assert trial_seconds(work(step_size(256, [256, 256])), RATES)[0] == pytest.approx(100.0 / 8)
    assert trial_seconds(work(step_size(32, [16, 16])), RATES)[0] == pytest.approx(100.0 / MAX_SPEEDUP)


def test_the_sweep_spreads_its_trials_over_those_that_run_at_once() -> None:
    trials = [work(step_size(512, [512, 512]), eval_env_steps=1000)] * 4
    assert projected_seconds(trials, RATES, concurrency=2) == (200.0, 4.0)
    assert projected_seconds([], RATES, concurrency=1) == (0.0, 0.0)
    assert [duration_text(s) for s in (40, 720, 3900)] == ["40 s", "12 min", "1 h 05 min"]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_every_algorithm_and_suite_has_a_recorded_figure_with_its_source(device: str) -> None:
    rates = recorded_rates(device)
    assert set(rates["steps_per_s"]) == set(ALGORITHMS) and all(r > 0 for r in rates["steps_per_s"].values())
    assert set(SUITES) <= set(rates["evaluation_ms_per_env_step"])
    assert rates["machine"] and rates["date"] and rates["command"]


def test_an_algorithm_without_a_recorded_rate_is_not_projected() -> None:
    unknown = TrialWork(algo="toybc", gradient_steps=10, size=1.0, default_size=1.0, eval_env_steps=0, suite="bullet")
    assert projection_text([unknown], "cpu", 1).startswith("projected wall time: not known (no steps/s recorded for "
                                                            "toybc on cpu")
