"""Learning curves from trial results: losses and evaluations against gradient steps, the mean over seeds, and the
report's ``learning_<Task>.png`` (from a copy of the stored sweep of test_report.py, given training results)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import matplotlib.image

from rllib_caps.report import write_report
from rllib_caps.report.curves import load_curves, seed_mean, trial_curve
from rllib_caps.report.records import load_trials

FIXTURE = Path(__file__).parent / "fixtures" / "report_results" / "experiment"
README_WIDTH = 1100  # px: at most this wide, so the PNG shrinks little at a README's width


def _result(iteration: int, *, evaluation: dict | None = None, steps_per_iteration: int = 30) -> dict:
    """One training result as SweepTrial reports it: RLlib's learner results and the gradient steps so far."""
    result = {"training_iteration": iteration, "gradient_steps": iteration * steps_per_iteration,
              "learners": {"default_policy": {"qr_loss": 1.0 / iteration, "actor_loss": -0.5 * iteration,
                                              "total_loss": 99.0, "actor_learning_rate": 3e-4},
                           "__all_modules__": {"num_env_steps_trained": 960}}}
    return result | ({"evaluation": {"dsrl": evaluation}} if evaluation else {})


def _evaluation(reward: float, cost: float) -> dict:
    return {"mean": {"normalized_reward": reward, "normalized_cost": cost, "safe": float(cost <= 1)},
            "thresholds": {}}


def test_a_trial_curve_has_its_losses_and_evaluations_against_gradient_steps() -> None:
    results = [_result(1, evaluation=_evaluation(0.2, 1.5)), _result(2), _result(3, evaluation=_evaluation(0.4, 0.8))]
    curve = trial_curve(results, seed=7)
    assert curve.seed == 7
    assert curve.losses == {"qr_loss": ((30, 60, 90), (1.0, 0.5, 1 / 3)),  # not total_loss, learning rates, totals
                            "actor_loss": ((30, 60, 90), (-0.5, -1.0, -1.5))}
    assert (curve.reward, curve.cost) == (((30, 90), (0.2, 0.4)), ((30, 90), (1.5, 0.8)))
    assert curve.evaluated_during_training
    assert not trial_curve([_result(1), _result(2, evaluation=_evaluation(0.4, 0.8))], 0).evaluated_during_training
    assert trial_curve([{"training_iteration": 1, "normalized_reward": math.nan}], 0) is None  # older sweeps


def test_an_evaluation_that_ran_beside_a_later_iteration_is_placed_at_the_steps_it_evaluated() -> None:
    """A population reports an evaluation during training with the iteration after it, marked with its own
    ``gradient_steps`` (``PopulationRun``): the curve puts it there, not at the reporting iteration's steps."""
    pipelined = _result(3)
    pipelined["evaluation"] = {"dsrl": _evaluation(0.2, 1.5), "gradient_steps": 60}
    results = [_result(1), _result(2), pipelined, _result(4, evaluation=_evaluation(0.4, 0.8))]
    curve = trial_curve(results, seed=0)
    assert (curve.reward, curve.cost) == (((60, 120), (0.2, 0.4)), ((60, 120), (1.5, 0.8)))


def test_the_seed_mean_is_taken_where_every_seed_has_a_value() -> None:
    steps, means = seed_mean([((10, 20, 30), (1.0, 2.0, 3.0)), ((10, 20), (3.0, math.nan))])
    assert (steps, means) == ((10, 20), (2.0, 2.0))  # 30: one seed only; NaN left out of the mean
    assert seed_mean([]) == ((), ())


def test_the_report_draws_learning_curves_for_the_tasks_with_training_results(tmp_path: Path) -> None:
    """The stored sweep's BallCircle trials (K=2 and K=4, seeds 0 and 10) get training results with an evaluation
    during training; its other tasks keep results without gradient steps and get no learning curves."""
    experiment = tmp_path / "experiment"
    shutil.copytree(FIXTURE, experiment)
    for trial_dir in experiment.glob("BallCircle_*"):
        stored = [json.loads(line) for line in (trial_dir / "result.json").read_text().splitlines()]
        final = stored[-1]["evaluation"]["dsrl"]
        lines = [_result(1, evaluation=_evaluation(0.1, 2.0)), _result(2) | {"evaluation": {"dsrl": final}}]
        (trial_dir / "result.json").write_text("".join(json.dumps(r) + "\n" for r in lines))
    records, _ = load_trials(experiment)
    curves = load_curves(records)
    assert list(curves) == ["BallCircle"] and sorted(curves["BallCircle"]) == ["K=2", "K=4"]
    assert sorted(c.seed for c in curves["BallCircle"]["K=2"]) == [0, 10]
    report = write_report(experiment)
    pngs = sorted(p.name for p in report.out_dir.glob("learning_*.png"))
    assert pngs == ["learning_BallCircle.png"]
    height, width, _ = matplotlib.image.imread(report.out_dir / pngs[0]).shape
    assert 600 <= width <= README_WIDTH and height < width

