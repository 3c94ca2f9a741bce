"""`--search optuna`: the constrained choice of the best parameters, seed averaging before the constraint,
and a real 3-sample Optuna search on Tune over a tiny real dataset."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ray.tune.search.optuna import OptunaSearch
from sim_datasets import make_data_root  # tests/sim_datasets.py

from rllib_caps.envs.tasks import get_task
from rllib_caps.report import TrialRecord, load_trials
from rllib_caps.sweeps.options import SweepError, SweepOptions, resolve_options
from rllib_caps.sweeps.search import METRIC, SearchSpace, SeedRepeater, best_parameters, make_searcher, search_space
from rllib_caps.sweeps.trials import constrained_objective, trial_settings
from rllib_caps.tune import parse_args


def _record(beta: float, seed: int, reward: float, cost: float, task: str = "BallCircle") -> TrialRecord:
    evaluation = {"thresholds": {}, "mean": {"normalized_reward": reward, "normalized_cost": cost}}
    return TrialRecord(algo="caps", task=task, heads=2, seed=seed, search={"awr_beta": beta}, evaluation=evaluation,
                       trial_dir=Path(f"/t/{beta}/{seed}"), checkpoint=None)


def test_best_is_the_highest_reward_among_seed_averaged_safe_configs() -> None:
    records = [
        _record(1.0, 0, 0.90, 1.50), _record(1.0, 10, 0.80, 1.30),  # highest reward, unsafe
        _record(2.0, 0, 0.70, 1.20), _record(2.0, 10, 0.50, 0.60),  # one seed unsafe, mean 0.90: safe
        _record(3.0, 0, 0.40, 0.10), _record(3.0, 10, 0.40, 0.20),  # safe, lower reward
    ]
    best = best_parameters(records)[("BallCircle", 2)]
    assert best["awr_beta"] == 2.0 and best["seeds"] == [0, 10]
    assert (best["normalized_reward"], best["normalized_cost"]) == pytest.approx((0.60, 0.90))


def test_without_a_safe_config_the_least_unsafe_wins() -> None:
    records = [_record(1.0, 0, 0.9, 3.0), _record(2.0, 0, 0.1, 1.2), _record(3.0, 0, 0.5, 1.8)]
    assert best_parameters(records)[("BallCircle", 2)]["awr_beta"] == 2.0


def test_optuna_is_told_the_objective_of_seed_averages() -> None:
    """Two seeds: (0.9, 1.4) unsafe and (0.5, 0.4) safe average to (0.7, 0.9), safe: Optuna must record 0.7,
    not the mean of the per-seed objectives."""
    searcher = make_searcher(heads=2, repeats=2, ranges={"awr_beta": [1.0, 4.0], "seed": 1})
    assert isinstance(searcher, SeedRepeater) and isinstance(searcher.searcher, OptunaSearch)
    searcher.set_search_properties(metric=None, mode=None, config={})
    first, second = searcher.suggest("a"), searcher.suggest("b")
    assert first["search"] == second["search"] and 1.0 <= first["search"]["awr_beta"] <= 4.0
    assert (first["__trial_index__"], second["__trial_index__"]) == (0, 1)
    searcher.on_trial_complete("a", {"normalized_reward": 0.9, "normalized_cost": 1.4, METRIC: -1000.4})
    searcher.on_trial_complete("b", {"normalized_reward": 0.5, "normalized_cost": 0.4, METRIC: 0.5})
    [trial] = searcher.searcher._ot_study.trials
    assert trial.value == pytest.approx(constrained_objective(0.7, 0.9)) == pytest.approx(0.7)


def test_search_space_sorts_lambdas_and_checks_ranges() -> None:
    import optuna

    space = search_space(4, {"lambdas": [0.1, 3.0]})
    trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0)).ask()
    constants = space(trial)
    assert set(trial.params) == {"search/awr_beta", "search/lambda_1", "search/lambda_2"}
    assert constants["search/lambdas"] == sorted(trial.params[f"search/lambda_{k}"] for k in (1, 2))
    assert SearchSpace(2)(optuna.create_study().ask()) is None  # K = 2: only β
    with pytest.raises(SweepError, match="search_space.awr_beta"):
        search_space(2, {"awr_beta": [3.0, 1.0]})
    with pytest.raises(SweepError, match="unknown keys"):
        search_space(2, {"beta": [1.0, 2.0]})


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_optuna_search_returns_constrained_best_parameters(ray_address: str, tmp_path: Path) -> None:
    from rllib_caps.sweeps.search import run_search

    data_root = make_data_root(tmp_path / "data", ["BallCircle"], episodes=4)
    options = SweepOptions(tasks="BallCircle", seeds=[0], heads=[3], data_root=str(data_root), storage=str(tmp_path),
                           name="optuna", search="optuna", num_samples=3,
                           search_space={"awr_beta": [0.5, 8.0], "lambdas": [0.1, 4.0], "seed": 0},
                           training={"steps": 60, "updates_per_iteration": 30, "hidden": [16, 16],
                                     "batch_size": 32, "eval_episodes": 1, "thresholds": [10]})
    best_file = run_search(options)
    records, unfinished = load_trials(options.experiment_dir)
    assert unfinished == [] and len(records) == 3
    assert len({r.search["awr_beta"] for r in records}) == 3  # three different samples
    scores = {r.search["awr_beta"]: (r.evaluation["mean"]["normalized_reward"],
                                     r.evaluation["mean"]["normalized_cost"]) for r in records}
    safe = {beta: rc for beta, rc in scores.items() if rc[1] <= 1.0}

    config = yaml.safe_load(best_file.read_text())
    chosen = config["overrides"]["BallCircle"]["K3"]
    assert 0.5 <= chosen["awr_beta"] <= 8.0 and len(chosen["lambdas"]) == 1
    if safe:  # the constraint holds whenever any sample satisfied it, and reward decides among those
        assert chosen["awr_beta"] in safe
        assert safe[chosen["awr_beta"]][0] == max(r for r, _ in safe.values())
    else:
        assert scores[chosen["awr_beta"]][1] == min(c for _, c in scores.values())

    sweep = resolve_options(parse_args(["--config", str(best_file)]))  # a normal sweep accepts it
    assert sweep.search is None and sweep.heads == [3] and sweep.seeds == [0]
    settings = trial_settings(sweep.training_settings(), sweep.overrides, get_task("BallCircle"), 3)
    assert settings["awr_beta"] == chosen["awr_beta"] and settings["steps"] == 60
