"""`--search optuna`: the constrained choice of the best parameters, seed averaging before the constraint,
and a real 3-sample Optuna search on Tune over a tiny real dataset."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ray.tune.search.optuna import OptunaSearch
from sim_datasets import make_data_root  # tests/sim_datasets.py

from rllib_caps.algorithms.caps.search_space import CAPSSearchSpace
from rllib_caps.algorithms.registry import get_algorithm
from rllib_caps.envs.tasks import get_task
from rllib_caps.report import TrialRecord, load_trials
from rllib_caps.sweeps.options import SweepError, SweepOptions, resolve_options
from rllib_caps.sweeps.packing import samples_per_population
from rllib_caps.sweeps.resources import plan_resources
from rllib_caps.sweeps.runner import setup_dict
from rllib_caps.sweeps.search import (
    METRIC,
    PackedSamples,
    SeedRepeater,
    best_parameters,
    make_searcher,
    search_space,
)
from rllib_caps.sweeps.trial_schema import trial_members
from rllib_caps.sweeps.trials import constrained_objective, trial_config, trial_settings
from rllib_caps.tune import parse_args

BUNDLED_DATA = Path(__file__).resolve().parents[1] / "datasets"


def caps_space(heads: int, ranges: dict) -> CAPSSearchSpace:
    """CAPS's search space for K heads, as the search builds it from its registry entry."""
    return search_space(get_algorithm("caps"), {"num_heads": heads}, ranges)


def _record(beta: float, seed: int, reward: float, cost: float, task: str = "BallCircle") -> TrialRecord:
    evaluation = {"thresholds": {}, "mean": {"normalized_reward": reward, "normalized_cost": cost}}
    return TrialRecord(algo="caps", task=task, axes={"num_heads": 2}, seed=seed, search={"awr_beta": beta},
                       evaluation=evaluation, trial_dir=Path(f"/t/{beta}/{seed}"), checkpoint=None)


def test_best_is_the_highest_reward_among_seed_averaged_safe_configs() -> None:
    records = [
        _record(1.0, 0, 0.90, 1.50), _record(1.0, 10, 0.80, 1.30),  # highest reward, unsafe
        _record(2.0, 0, 0.70, 1.20), _record(2.0, 10, 0.50, 0.60),  # one seed unsafe, mean 0.90: safe
        _record(3.0, 0, 0.40, 0.10), _record(3.0, 10, 0.40, 0.20),  # safe, lower reward
    ]
    best = best_parameters(records)[("BallCircle", "K2")]
    assert best["awr_beta"] == 2.0 and best["seeds"] == [0, 10]
    assert (best["normalized_reward"], best["normalized_cost"]) == pytest.approx((0.60, 0.90))


def test_without_a_safe_config_the_least_unsafe_wins() -> None:
    records = [_record(1.0, 0, 0.9, 3.0), _record(2.0, 0, 0.1, 1.2), _record(3.0, 0, 0.5, 1.8)]
    assert best_parameters(records)[("BallCircle", "K2")]["awr_beta"] == 2.0


def test_optuna_is_told_the_objective_of_seed_averages() -> None:
    """Two seeds: (0.9, 1.4) unsafe and (0.5, 0.4) safe average to (0.7, 0.9), safe: Optuna must record 0.7,
    not the mean of the per-seed objectives."""
    ranges = {"awr_beta": [1.0, 4.0], "seed": 1}
    searcher = make_searcher(caps_space(2, ranges), ranges, seeds=[0, 10], total=1)
    assert isinstance(searcher, SeedRepeater) and isinstance(searcher.searcher, OptunaSearch)
    searcher.set_search_properties(metric=None, mode=None, config={})
    first, second = searcher.suggest("a"), searcher.suggest("b")
    assert first["search"] == second["search"] and 1.0 <= first["search"]["awr_beta"] <= 4.0
    assert (first["__trial_index__"], second["__trial_index__"]) == (0, 1)
    searcher.on_trial_complete("a", {"normalized_reward": 0.9, "normalized_cost": 1.4, METRIC: -1000.4})
    searcher.on_trial_complete("b", {"normalized_reward": 0.5, "normalized_cost": 0.4, METRIC: 0.5})
    [trial] = searcher.searcher._ot_study.trials
    assert trial.value == pytest.approx(constrained_objective(0.7, 0.9)) == pytest.approx(0.7)


def test_a_packed_search_trial_holds_several_samples_and_optuna_is_told_each_ones_seed_average() -> None:
    """Packed, 3 samples at 2 per Tune trial with seeds 0 and 10: the first trial's population is 2 samples × 2
    seeds, each member carrying its sample's β and λ; the second trial holds the last sample; Optuna is told each
    sample's constrained objective of its seeds' means, and a sample whose seeds all failed is an error."""
    searcher = make_searcher(caps_space(3, {"seed": 1}), {"seed": 1}, seeds=[0, 10], total=3, samples_per_trial=2)
    assert isinstance(searcher, PackedSamples)
    searcher.set_search_properties(metric=None, mode=None, config={})
    first, second = searcher.suggest("a"), searcher.suggest("b")
    assert searcher.suggest("c") == PackedSamples.FINISHED
    members = trial_members({"algo": "caps", **first})
    assert [name for name, _ in members] == ["sample0_seed0", "sample0_seed10", "sample1_seed0", "sample1_seed10"]
    assert members[0][1]["search"] == members[1][1]["search"] != members[2][1]["search"]
    assert len(members[2][1]["search"]["lambdas"]) == 1 and members[3][1]["seed"] == 10
    assert [name for name, _ in trial_members(second)] == ["sample0_seed0", "sample0_seed10"]
    setup = setup_dict(SweepOptions(data_root=str(BUNDLED_DATA)),
                       plan_resources(1, 1, 0, num_gpus=0, cpus_per_trial=1, gpus_per_trial=None, max_concurrent=None))
    for _, params in members:  # each member's algorithm config trains with its sample's β and λ
        config = trial_config({**params, "task": "BallCircle", "heads": 3, "setup": setup})
        assert (config.awr_beta, config.lambdas, config.seed) == (params["search"]["awr_beta"],
                                                                  params["search"]["lambdas"], params["seed"])

    state = searcher.get_state()
    searcher.set_state({"suggested": 0, "trials": {}})
    searcher.set_state(state)  # what Tune's experiment checkpoint restores on --resume
    flat = {"members/sample0_seed0/normalized_reward": 0.9, "members/sample0_seed0/normalized_cost": 1.4,
            "members/sample0_seed10/normalized_reward": 0.5, "members/sample0_seed10/normalized_cost": 0.4,
            "members/sample1_seed0/normalized_reward": 0.2, "members/sample1_seed0/normalized_cost": 0.5,
            "members/sample1_seed10/normalized_reward": float("nan"),
            "members/sample1_seed10/normalized_cost": float("nan")}  # this seed failed: left out
    searcher.on_trial_complete("a", flat)
    searcher.on_trial_complete("b", error=True)
    values = {t.number: (t.state.name, t.value) for t in searcher.searcher._ot_study.trials}
    assert values[0] == ("COMPLETE", pytest.approx(constrained_objective(0.7, 0.9)))
    assert values[1] == ("COMPLETE", pytest.approx(0.2))
    assert values[2][0] == "FAIL"


def test_samples_per_population_spread_the_samples_over_the_concurrent_trials() -> None:
    assert samples_per_population(SweepOptions(num_samples=10, seeds=[0, 10, 20]), concurrency=4) == 3
    assert samples_per_population(SweepOptions(num_samples=10, seeds=[0, 10, 20]), concurrency=1) == 10
    assert samples_per_population(SweepOptions(num_samples=40, seeds=[0, 10, 20]), concurrency=1) == 10  # ≤ 32 members
    assert samples_per_population(SweepOptions(num_samples=40, seeds=list(range(40))), concurrency=1) == 1
    assert samples_per_population(SweepOptions(num_samples=10, population_samples=2), concurrency=1) == 2


def test_search_space_sorts_lambdas_and_checks_ranges() -> None:
    import optuna

    space = caps_space(4, {"lambdas": [0.1, 3.0]})
    trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0)).ask()
    constants = space(trial)
    assert set(trial.params) == {"search/awr_beta", "search/lambda_1", "search/lambda_2"}
    assert constants["search/lambdas"] == sorted(trial.params[f"search/lambda_{k}"] for k in (1, 2))
    assert CAPSSearchSpace(2)(optuna.create_study().ask()) is None  # K = 2: only β
    with pytest.raises(SweepError, match="search_space.awr_beta"):
        caps_space(2, {"awr_beta": [3.0, 1.0]})
    with pytest.raises(SweepError, match="unknown keys"):
        caps_space(2, {"beta": [1.0, 2.0]})


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_optuna_search_returns_constrained_best_parameters(ray_address: str, tmp_path: Path) -> None:
    from rllib_caps.sweeps.search import run_search

    data_root = make_data_root(tmp_path / "data", ["BallCircle"], episodes=4)
    options = SweepOptions.of(tasks="BallCircle", seeds=[0], heads=[3], data_root=str(data_root), storage=str(tmp_path),
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
    assert sweep.search is None and sweep.axes["num_heads"] == [3] and sweep.seeds == [0]
    settings = trial_settings(sweep.training_settings(), sweep.overrides, get_task("BallCircle"), {"num_heads": 3})
    assert settings["awr_beta"] == chosen["awr_beta"] and settings["steps"] == 60


def test_dry_run_describes_the_search_and_its_packing(capsys: pytest.CaptureFixture) -> None:
    from rllib_caps.tune import main

    config = str(BUNDLED_DATA.parent / "tune_configs" / "optuna.yaml")
    assert main(["--config", config, "--tasks", "BallCircle", "--num-samples", "10",
                 "--pack", "on", "--population-samples", "4", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert ("Optuna search of CAPS over awr_beta, lambdas: 1 task(s) × K {2, 4}, one experiment each of 10 samples "
            "× 2 seed(s) [0, 10] = 20 trained trials; 40 in all") in out
    assert "4 Optuna sample(s) × 2 seed(s), 8 members" in out and "3 Tune trial(s) per experiment" in out
    assert main(["--config", config, "--pack", "off", "--dry-run"]) == 0
    assert "every sample and seed is its own Tune trial" in capsys.readouterr().out
