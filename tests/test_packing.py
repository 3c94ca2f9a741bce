"""Sweeps that pack trials into populations (``--pack``): the plan (fast), and on CPU with real Tune (slow) that a
packed sweep gives the same report, checkpoints and results as the same sweep unpacked, and that a packed trial
restored from its checkpoint continues exactly as an uninterrupted one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rllib_caps.report import MainTable, load_trials, summarize, write_report
from rllib_caps.sweeps.grid import describe_grid, grid_variants
from rllib_caps.sweeps.options import SweepError, SweepOptions, check_options
from rllib_caps.sweeps.packing import (
    members_that_fit,
    packed_variants,
    packs,
    samples_per_population,
    split_into_populations,
)
from rllib_caps.sweeps.resources import plan_resources
from rllib_caps.sweeps.runner import run_sweep, setup_dict
from rllib_caps.sweeps.trainable import SweepTrial
from rllib_caps.sweeps.trial_schema import MEMBERS, member_name
from rllib_caps.sweeps.trials import describe_trial, trial_name
from rllib_caps.tune import main, parse_args

ROOT = Path(__file__).resolve().parents[1]
TINY_TRAINING = {"steps": 40, "updates_per_iteration": 20, "hidden": [16, 16], "batch_size": 32, "eval_episodes": 1}


def test_pack_auto_packs_gpu_trials_only_and_on_off_are_what_they_say() -> None:
    assert not packs(SweepOptions())
    assert packs(SweepOptions(num_gpus=4)) and packs(SweepOptions(gpus_per_trial=0.5))
    assert packs(SweepOptions(pack="on")) and not packs(SweepOptions(pack="off", num_gpus=4))
    assert packs(SweepOptions(pack="on", search="optuna"))  # a sample's seeds are its population
    with pytest.raises(SweepError, match="sweep.yaml: pack must be one of auto, on, off, got 'yes'"):
        check_options(SweepOptions(pack="yes"), "sweep.yaml")
    with pytest.raises(SystemExit):
        parse_args(["--pack", "yes"])  # argparse's choices name the flag


def test_packing_groups_seeds_and_kappas_and_leaves_the_other_algorithms_alone() -> None:
    options = SweepOptions.of(algos=["caps", "bc-safe", "bearl", "cpq", "cdt"], tasks="BallCircle", seeds=[0, 10, 20],
                              heads=[2, 4])
    variants = packed_variants(grid_variants(options, options.task_specs()), options.seeds)
    packed = [v for v in variants if MEMBERS in v]
    assert [(v["algo"], v.get("num_heads")) for v in packed] == [("caps", 2), ("caps", 4), ("bc-safe", None),
                                                                 ("bearl", None), ("cpq", None), ("cdt", None)]
    assert [m["seed"] for m in packed[0][MEMBERS]] == [0, 10, 20]
    assert [member_name(m) for m in packed[2][MEMBERS]][:4] == ["kappa10_seed0", "kappa10_seed10", "kappa10_seed20",
                                                                "kappa20_seed0"]
    assert all(len(v[MEMBERS]) == 9 and "cost_limit" not in v for v in packed[2:5])  # 3 κ × 3 seeds each
    assert [m["seed"] for m in packed[5][MEMBERS]] == [0, 10, 20]  # CDT: κ is its deployment input, seeds only
    assert [v for v in variants if MEMBERS not in v] == []
    # A population of one is a trial alone.
    one = packed_variants(grid_variants(SweepOptions(seeds=[3]), SweepOptions().task_specs()), [3])
    assert one == [{"algo": "caps", "task": "BallCircle", "num_heads": 2, "backbone": "iql", "actor": "shared",
                    "seed": 3}]
    name = trial_name({"variant": packed[2], "setup": {}}, "abc")
    assert name == "bc-safe_BallCircle_population9_abc"
    assert describe_trial({"variant": packed[1], "setup": {}}) == "caps BallCircle K4 population3"


def test_populations_are_split_to_fit_the_cpus_their_members_evaluation_runners_need() -> None:
    """With --eval-runners ≥ 1 every member brings half a trial's CPUs of EnvRunners: on 4 CPUs at 1 CPU per trial a
    population holds at most 2·4/1 − 1 = 7 members, so BC-Safe's 9 (3 κ × 3 seeds) become populations of 5 and 4,
    and a search packs fewer samples; without evaluation runners nothing limits them."""
    options = SweepOptions(algos=["bc-safe"], seeds=[0, 10, 20], pack="on", eval_runners=1)
    assert members_that_fit(options, 4) == 7 and members_that_fit(options, None) is None
    assert members_that_fit(SweepOptions(pack="on"), 4) is None
    variants = packed_variants(grid_variants(options, options.task_specs()), options.seeds, max_members=7)
    assert [len(v[MEMBERS]) for v in variants] == [5, 4]  # as even as can be, at most 7 each
    assert [member_name(m) for v in variants for m in v[MEMBERS]][6:] == ["kappa40_seed0", "kappa40_seed10",
                                                                         "kappa40_seed20"]
    search = SweepOptions(seeds=[0, 10, 20], search="optuna", num_samples=10, pack="on", eval_runners=1)
    assert samples_per_population(search, concurrency=1) == 10
    assert samples_per_population(search, concurrency=1, cluster_cpus=4) == 2  # 6 of the 7 members that fit
    assert samples_per_population(search, concurrency=1, cluster_cpus=1) == 0  # 1 member fits: not 3 seeds


def test_dry_run_shows_the_populations(capsys: pytest.CaptureFixture) -> None:
    assert main(["--algos", "caps", "bc-safe", "--seeds", "0", "10", "--dry-run", "--pack", "on"]) == 0
    out = capsys.readouterr().out
    assert "caps BallCircle num_heads=2 backbone=iql actor=shared: 2 members (seed0, seed10)" in out
    assert "2 Tune trial(s): 2 population(s) of 8 trials, 0 trial(s) alone" in out
    assert main(["--seeds", "0", "10", "--dry-run"]) == 0
    assert "not packed into populations (--pack auto: the trials train on CPUs)" in capsys.readouterr().out
    described = describe_grid(SweepOptions(num_gpus=1, seeds=[0, 1]), SweepOptions().task_specs())
    assert "1 population(s) of 2 trials" in described


# ------------------------------------------------------------------------------------------------ slow

def _sweep(tmp_path: Path, pack: str) -> Path:
    options = SweepOptions(algos=["caps", "bc-safe"], tasks="BallCircle", seeds=[0, 1],
                           data_root=str(ROOT / "datasets"), storage=str(tmp_path), name=f"pack-{pack}",
                           training=TINY_TRAINING, cpus_per_trial=1.0, pack=pack)
    return run_sweep(options)


def _learned_module(checkpoint: Path):
    from ray.rllib.core.rl_module.rl_module import RLModule

    return RLModule.from_checkpoint(checkpoint / "learner_group" / "learner" / "rl_module" / "default_policy")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_packed_sweep_reports_what_the_unpacked_sweep_does(ray_address: str, tmp_path: Path) -> None:
    """``tune --algos caps bc-safe --seeds 0 1`` packed (2 Tune trials: CAPS's 2 seeds, BC-Safe's 2 seeds × 3 κ)
    and unpacked (8 trials): the same records and tables; each member's checkpoint is an ordinary checkpoint with
    the weights of the same trial alone, up to float rounding, and its evaluation the same reward up to what that
    rounding does to the episodes."""
    experiments = {pack: _sweep(tmp_path, pack) for pack in ("on", "off")}
    assert len(list(experiments["on"].glob("*/params.json"))) == 2
    assert len(list(experiments["off"].glob("*/params.json"))) == 8
    loaded = {pack: load_trials(path) for pack, path in experiments.items()}
    assert all(unfinished == [] for _, unfinished in loaded.values())
    records = {pack: {(r.algo, r.seed, r.cost_limit): r for r in found} for pack, (found, _) in loaded.items()}
    assert records["on"].keys() == records["off"].keys() and len(records["on"]) == 8
    for key, alone in records["off"].items():
        member = records["on"][key]
        assert member.member == member_name({"seed": key[1], **({"cost_limit": key[2]} if key[2] else {})})
        assert member.checkpoint.parent.name == MEMBERS and (member.checkpoint / "learner_group").is_dir()
        assert member.evaluation.keys() == alone.evaluation.keys()
        theirs = _learned_module(alone.checkpoint).state_dict()
        for name, value in _learned_module(member.checkpoint).state_dict().items():
            torch.testing.assert_close(value, theirs[name], rtol=1e-4, atol=1e-5,
                                       msg=lambda m, n=name, k=key: f"{k} {n}: {m}")
        # The same episodes, acted by weights that differ in the last float digits: the rewards agree closely; a
        # cost count, a sum of discrete events, may not (seen: 4.4 against 0.3 in one episode of an untrained policy).
        assert abs(member.evaluation["mean"]["normalized_reward"] - alone.evaluation["mean"]["normalized_reward"]) \
            < 2e-3, key
    tables = {pack: MainTable(summarize(list(records[pack].values()))) for pack in records}
    assert tables["on"].configs == tables["off"].configs == ["CAPS K=2", "BC-Safe"]
    assert [(r.task, r.config, r.seeds) for r in tables["on"].rows] == [(r.task, r.config, r.seeds)
                                                                        for r in tables["off"].rows]
    report = write_report(experiments["on"], cost_limits=True, episodes=1)
    assert "| BallCircle |" in report.markdown
    assert "| K=2 safe tasks |" in (report.out_dir / "cost_limits.md").read_text()
    assert len(json.loads((report.out_dir / "cost_limits.json").read_text())) == 2  # each CAPS member's checkpoint


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_packed_trial_restored_from_its_checkpoint_continues_as_if_uninterrupted(ray_address: str,
                                                                                   tmp_path: Path) -> None:
    """A population's checkpoint is its members' ordinary checkpoints, optimiser states and minibatch generators
    included: a packed trial restored from it (as Tune restores a retried or resumed trial) ends with the weights
    of the same trial run straight through."""
    options = SweepOptions(seeds=[3, 4], data_root=str(ROOT / "datasets"), training=TINY_TRAINING)
    setup = setup_dict(options, plan_resources(1, 1, 0, num_gpus=0, cpus_per_trial=1, gpus_per_trial=None,
                                               max_concurrent=None))
    (variant,) = packed_variants(grid_variants(options, options.task_specs()), options.seeds)
    trial = {"variant": variant, "setup": setup}

    def weights(trainable) -> list[dict[str, torch.Tensor]]:
        return [{k: v.clone() for k, v in algorithm.get_module().state_dict().items()}
                for algorithm in trainable.algorithms]

    straight = SweepTrial(config=trial)
    while not straight.train()["done"]:
        pass
    expected = weights(straight)
    straight.stop()

    interrupted = SweepTrial(config=trial)
    interrupted.train()
    checkpoint = interrupted.save(str(tmp_path / "checkpoint"))
    interrupted.stop()
    restored = SweepTrial(config=trial)
    restored.restore(checkpoint)
    result = restored.train()
    assert result["done"] and set(result[MEMBERS]) == {"seed3", "seed4"}
    got = weights(restored)
    restored.stop()
    for mine, theirs in zip(got, expected, strict=True):
        for name, value in theirs.items():
            torch.testing.assert_close(mine[name], value, rtol=0, atol=0, msg=name)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_packed_search_trains_several_samples_and_their_seeds_as_one_population(ray_address: str,
                                                                                   tmp_path: Path) -> None:
    """``--search optuna --pack on --population-samples 2``: 3 Optuna samples × 2 seeds in two Tune trials (2 samples
    × 2 seeds, then 1 × 2), each member trained with its sample's β; the report has a record per sample and seed,
    and the best parameters come from the seed averages as unpacked."""
    import yaml

    from rllib_caps.sweeps.search import best_parameters, run_search

    options = SweepOptions.of(tasks="BallCircle", seeds=[0, 1], heads=[3], data_root=str(ROOT / "datasets"),
                           storage=str(tmp_path), name="optuna", search="optuna", num_samples=3, pack="on",
                           population_samples=2, search_space={"seed": 0},
                           training={**TINY_TRAINING, "thresholds": [10]})
    best_file = run_search(options)
    assert sorted(len(json.loads(p.read_text())[MEMBERS]) for p in options.experiment_dir.rglob("params.json")
                  ) == [2, 4]  # two Tune trials
    records, unfinished = load_trials(options.experiment_dir)
    assert unfinished == [] and len(records) == 6
    samples = {}
    for record in records:
        samples.setdefault(record.search["awr_beta"], []).append(record.seed)
    assert len(samples) == 3 and all(sorted(seeds) == [0, 1] for seeds in samples.values())
    for record in records:
        result = json.loads((record.trial_dir / "result.json").read_text().splitlines()[-1])
        mine = [r for r in records if r.trial_dir == record.trial_dir]
        assert result["normalized_reward"] == pytest.approx(
            sum(r.evaluation["mean"]["normalized_reward"] for r in mine) / len(mine))
    chosen = yaml.safe_load(best_file.read_text())["overrides"]["BallCircle"]["K3"]
    assert chosen["awr_beta"] == best_parameters(records)[("BallCircle", "K3")]["awr_beta"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_members_with_remote_evaluation_runners_evaluate_at_once_as_they_do_one_by_one(ray_address: str) -> None:
    """With ``eval_runners`` ≥ 1 a packed trial's members evaluate at the same time, each on its own EnvRunners,
    with the results that evaluating them one after another gives."""
    options = SweepOptions(seeds=[3, 4], data_root=str(ROOT / "datasets"),
                           training={**TINY_TRAINING, "eval_runners": 1})
    setup = setup_dict(options, plan_resources(1, 2, 0, num_gpus=0, cpus_per_trial=1, gpus_per_trial=None,
                                               max_concurrent=None))
    (variant,) = packed_variants(grid_variants(options, options.task_specs()), options.seeds)
    trainable = SweepTrial(config={"variant": variant, "setup": setup})
    while not (result := trainable.train())["done"]:
        pass
    assert all(algorithm.config.evaluation_num_env_runners == 1 for algorithm in trainable.algorithms)
    at_once = [evaluation["dsrl"]["mean"] for evaluation in trainable.population.evaluate()]
    one_by_one = [algorithm.evaluate()["dsrl"]["mean"] for algorithm in trainable.algorithms]
    trainable.stop()
    assert at_once == one_by_one == [result[MEMBERS][name]["evaluation"]["dsrl"]["mean"] for name in ("seed3", "seed4")]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_an_evaluation_during_training_rolls_out_while_the_population_trains_on(ray_address: str, tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch
                                                                                ) -> None:
    """With remote evaluation runners, the evaluation after iteration 2 of 4 (``eval_every``) is pipelined: it is
    due after iteration 2 (a checkpoint taken then records it), and iteration 3 trains while the members' runners
    roll out and reports it with the gradient steps it evaluated. Its figures, and the weights at the end, are
    those of the same trial evaluating in place, and of the trial resumed from that checkpoint."""
    import time

    from rllib_caps.core.population import Population
    from rllib_caps.sweeps.population_run import PopulationRun

    options = SweepOptions(seeds=[3, 4], data_root=str(ROOT / "datasets"),
                           training={**TINY_TRAINING, "steps": 80, "eval_every": 40, "eval_runners": 1})
    setup = setup_dict(options, plan_resources(1, 2, 0, num_gpus=0, cpus_per_trial=1, gpus_per_trial=None,
                                               max_concurrent=None))
    (variant,) = packed_variants(grid_variants(options, options.task_specs()), options.seeds)
    training_starts, evaluations_timed = [], []  # monotonic times: each population call; each member evaluation
    population_call = Population.__call__

    def timed_call(self, n: int):
        training_starts.append(time.monotonic())
        return population_call(self, n)

    def timed(evaluate):
        def evaluate_timed():
            begin = time.monotonic()
            evaluation = evaluate()
            evaluations_timed.append((begin, time.monotonic()))
            return evaluation
        return evaluate_timed

    monkeypatch.setattr(Population, "__call__", timed_call)

    checkpoint = str(tmp_path / "checkpoint")

    def run(iterations: int, restore: bool = False) -> tuple[list[dict], list[dict[str, torch.Tensor]]]:
        training_starts.clear()
        evaluations_timed.clear()
        trainable = SweepTrial(config={"variant": variant, "setup": setup})
        for algorithm in trainable.algorithms:
            algorithm.evaluate = timed(algorithm.evaluate)
        if restore:
            trainable.restore(checkpoint)
        results = []
        for _ in range(iterations):
            results.append(trainable.train())
            if not restore and len(results) == 2:
                trainable.save(checkpoint)  # after iteration 2, whose evaluation is due (or done, in place)
        weights = [algorithm.get_module().state_dict() for algorithm in trainable.algorithms]
        trainable.stop()
        return results, weights

    def evaluations(result: dict) -> list[dict | None]:
        return [result[MEMBERS][name].get("evaluation") for name in ("seed3", "seed4")]

    def assert_same_weights(mine: list[dict], theirs: list[dict]) -> None:
        for member, other in zip(mine, theirs, strict=True):
            for name, value in other.items():
                torch.testing.assert_close(member[name], value, rtol=0, atol=0, msg=name)

    pipelined, pipelined_weights = run(4)
    assert [any(evaluations(r)) for r in pipelined] == [False, False, True, True] and pipelined[-1]["done"]
    assert [e["gradient_steps"] for e in evaluations(pipelined[2])] == [40, 40]
    assert all(begin < training_starts[2] < end for begin, end in evaluations_timed[:2])  # beside iteration 3

    resumed, resumed_weights = run(2, restore=True)
    assert [e["dsrl"] for e in evaluations(resumed[0])] == [e["dsrl"] for e in evaluations(pipelined[2])]
    assert_same_weights(resumed_weights, pipelined_weights)

    monkeypatch.setattr(PopulationRun, "pipelines", lambda self, iteration: False)
    in_place, in_place_weights = run(4)
    assert [any(evaluations(r)) for r in in_place] == [False, True, False, True]
    assert all(end < training_starts[2] for _, end in evaluations_timed[:2])
    assert [e["dsrl"] for e in evaluations(pipelined[2])] == [e["dsrl"] for e in evaluations(in_place[1])]
    assert [e["dsrl"] for e in evaluations(pipelined[3])] == [e["dsrl"] for e in evaluations(in_place[3])]
    assert_same_weights(pipelined_weights, in_place_weights)


def test_populations_split_as_few_and_as_even_as_they_can() -> None:
    """One rule for the sweep's populations, the dry run's merged groups and the benchmark's projection."""
    for members, most in [(36, 32), (81, 32), (9, 7), (5, 2), (32, 32), (1, 32)]:
        chunks = split_into_populations(list(range(members)), most)
        sizes = [len(chunk) for chunk in chunks]
        assert [m for chunk in chunks for m in chunk] == list(range(members))  # every member once, in order
        assert len(chunks) == -(-members // most) and max(sizes) <= most and max(sizes) - min(sizes) <= 1
    assert [len(c) for c in split_into_populations(list(range(36)), 32)] == [18, 18]
    assert split_into_populations([], 32) == []
