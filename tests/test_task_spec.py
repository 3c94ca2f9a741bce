"""Declared tasks (``rllib_caps.envs.tasks``): task files, their errors, ``register_task``, the spec's round trip, the
ranges derived from a dataset, and scores that are never called normalised without a range. Pure: no Ray."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from rllib_caps.core.results import format_results_table, labelled_results, results_dict
from rllib_caps.core.scoring import EpisodeOutcome, reward_range, summarize
from rllib_caps.envs import make_env, tasks
from rllib_caps.envs.tasks import (
    CUSTOM_SUITE,
    TaskSpec,
    get_task,
    load_task_file,
    register_task,
    select_tasks,
    with_dataset_ranges,
)
from rllib_caps.task_file_flag import add_task_file_argument

LINE_WORLD = "tests.custom_env:LineWorld"


@pytest.fixture(autouse=True)
def own_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test declares into a copy of the registry, so no declared task outlives it (``all`` stays DSRL's)."""
    monkeypatch.setattr(tasks, "CUSTOM_TASKS", {})
    monkeypatch.setattr(tasks, "_BY_KEY", dict(tasks._BY_KEY))
    monkeypatch.setattr(tasks, "_TASK_FILES", {})


def write(tmp_path: Path, text: str, name: str = "tasks.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_file_declares_several_tasks_with_sizes_from_the_env_or_declared(tmp_path: Path) -> None:
    path = write(tmp_path, f"""
tasks:
  - name: LineA
    entry_point: {LINE_WORLD}
    env_kwargs: {{wall: 0.5}}
    max_episode_steps: 30
    thresholds: [2, 5]
  - name: LineB
    id: LineB-v3
    entry_point: {LINE_WORLD}
    obs_dim: 2
    act_dim: 1
    action_low: -0.5
    action_high: [0.5]
    max_episode_steps: 10
    thresholds: [1]
    reward_range: [0, 3]
    cost_range: [0, 10]
""")
    line_a, line_b = load_task_file(path)
    assert (line_a.obs_dim, line_a.act_dim, line_a.action_low, line_a.action_high) == (2, 1, (-1.0,), (1.0,))
    assert line_a.suite == CUSTOM_SUITE and line_a.env_kwargs == {"wall": 0.5} and line_a.thresholds == (2.0, 5.0)
    assert line_a.range_source is None and not line_a.has_reward_range
    assert (line_b.action_low, line_b.action_high) == ((-0.5,), (0.5,))
    assert line_b.range_source == "declared" and line_b.has_reward_range
    assert (line_b.min_cost, line_b.max_cost) == (0, 10)
    assert get_task("lineb-V3") is line_b and get_task("LINEA") is line_a
    assert [t.name for t in select_tasks("custom")] == ["LineA", "LineB"]
    assert {"LineA", "BallCircle"} <= {t.name for t in select_tasks("all")}
    assert TaskSpec.from_dict(line_b.to_dict()) == line_b  # the dict a config and a sweep carry
    env = make_env(line_a, seed=3)
    env.reset()
    *_, truncated, info = env.step(env.action_space.sample())
    assert "cost" in info and not truncated
    assert load_task_file(path) == [line_a, line_b]  # the same file again: the same tasks, no clash


@pytest.mark.parametrize(("entry", "key", "words"), [
    ("name: X\n    entry_point: m:f\n    max_episode_steps: 5\n    thresholds: [1]\n    colour: red",
     "tasks[0].colour", "unknown key"),
    ("name: X\n    entry_point: m:f\n    thresholds: [1]", "tasks[0].max_episode_steps", "missing"),
    ("name: X\n    max_episode_steps: 5\n    thresholds: [1]", "tasks[0].env_id", "entry_point"),
    ("name: X\n    entry_point: m:f\n    max_episode_steps: five\n    thresholds: [1]",
     "tasks[0].max_episode_steps", "whole number"),
    ("name: X\n    entry_point: m:f\n    max_episode_steps: 5\n    thresholds: 1", "tasks[0].thresholds", "list"),
    (f"name: X\n    entry_point: {LINE_WORLD}\n    max_episode_steps: 5\n    thresholds: [1]\n    reward_range: [1]",
     "tasks[0].reward_range", "2 numbers"),
    ("name: X\n    entry_point: no_such_module:f\n    max_episode_steps: 5\n    thresholds: [1]",
     "tasks[0]", "cannot import 'no_such_module'"),
    (f"name: X\n    entry_point: {LINE_WORLD}\n    env_kwargs: {{colour: 1}}\n    max_episode_steps: 5\n"
     "    thresholds: [1]", "tasks[0]", "unexpected keyword argument 'colour'"),
    (f"name: BallCircle\n    entry_point: {LINE_WORLD}\n    max_episode_steps: 5\n    thresholds: [1]",
     "BallCircle", "is the DSRL task BallCircle"),
])
def test_a_bad_entry_is_refused_naming_the_file_and_key(tmp_path: Path, entry: str, key: str, words: str) -> None:
    path = write(tmp_path, f"tasks:\n  - {entry}\n")
    with pytest.raises(ValueError, match=r"tasks\.yaml") as err:
        load_task_file(path)
    assert key in str(err.value) and words in str(err.value), str(err.value)
    assert "X" not in tasks.CUSTOM_TASKS  # nothing of a refused file is declared


def test_a_bad_file_is_refused_as_a_whole(tmp_path: Path) -> None:
    twice = f"  - {{name: T, entry_point: '{LINE_WORLD}', max_episode_steps: 5, thresholds: [1]}}\n"
    for text, words in (("tasks: [", "not valid YAML"), ("name: T\n", "expected one key, tasks"),
                        ("tasks:\n" + twice * 2, "'T' is declared twice")):
        with pytest.raises(ValueError, match=words):
            load_task_file(write(tmp_path, text))
    with pytest.raises(ValueError, match="missing.yaml: cannot read it"):
        load_task_file(tmp_path / "missing.yaml")
    assert not tasks.CUSTOM_TASKS


def spec(**fields: object) -> TaskSpec:
    return TaskSpec(**{"id": "Mine", "name": "Mine", "suite": CUSTOM_SUITE, "env_id": "Mine", "obs_dim": 2,
                       "act_dim": 1, "action_low": (-1.0,), "action_high": (1.0,), "max_episode_steps": 10,
                       "thresholds": (1.0,), "max_reward": None, "min_reward": None, "max_cost": None,
                       "min_cost": None, "range_source": None, "entry_point": LINE_WORLD, **fields})


def test_register_task_refuses_clashes_and_bad_specs() -> None:
    mine = register_task(spec())
    assert register_task(spec()) == mine and get_task("mine") == mine
    with pytest.raises(ValueError, match="already declared, with other fields"):
        register_task(spec(max_episode_steps=11))
    with pytest.raises(ValueError, match="is the DSRL task PointGoal1"):
        register_task(spec(name="Other", id="OfflinePointGoal1Gymnasium-v0"))
    with pytest.raises(ValueError, match="the reward range must be"):
        register_task(spec(name="Bad", id="Bad", min_reward=1.0, max_reward=1.0, range_source="declared"))
    with pytest.raises(ValueError, match="'Nope'.*declare your own tasks with --task-file"):
        get_task("Nope")


def test_the_task_file_flag_loads_its_tasks_and_a_task_not_in_it_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, f"tasks:\n  - {{name: Flagged, entry_point: '{LINE_WORLD}', max_episode_steps: 5, "
                           "thresholds: [1]}\n")
    parser = argparse.ArgumentParser(prog="cli")
    add_task_file_argument(parser)
    assert parser.parse_args(["--task-file", str(path)]).task_file == [str(path)]
    assert get_task("Flagged").max_episode_steps == 5
    with pytest.raises(ValueError, match=rf"unknown task 'Absent'.*{path} declares Flagged"):
        get_task("Absent")


def test_ranges_derived_from_the_dataset_are_recorded_and_a_declared_range_wins() -> None:
    returns, costs = {"min": -2.0, "max": 8.0, "mean": 1.0}, {"min": 0.0, "max": 30.0, "mean": 4.0}
    derived = with_dataset_ranges(spec(), returns, costs)
    assert (derived.min_reward, derived.max_reward, derived.min_cost, derived.max_cost) == (-2.0, 8.0, 0.0, 30.0)
    assert derived.range_source == "dataset" and derived.has_reward_range
    declared = spec(min_reward=0.0, max_reward=1.0, min_cost=0.0, max_cost=1.0, range_source="declared")
    assert with_dataset_ranges(declared, returns, costs) is declared
    assert get_task("BallCircle").range_source == "dsrl"


def test_a_score_is_normalised_only_with_a_range() -> None:
    outcomes = [EpisodeOutcome(reward=6.0, cost=1.0, length=10), EpisodeOutcome(reward=2.0, cost=3.0, length=10)]
    derived = with_dataset_ranges(spec(), {"min": -2.0, "max": 8.0}, {"min": 0.0, "max": 30.0})
    for task, normalised in ((spec(), None), (derived, 0.6)):
        summary = summarize(outcomes, 4.0, *reward_range(task))
        assert summary.normalized_reward == normalised and summary.reward == 4.0
        results = labelled_results(results_dict([summary]), task)
        assert ("normalized_reward" in results["thresholds"]["4"]) == (normalised is not None)
        assert results["scale"]["reward"] == ("normalised" if normalised else "raw")
        table = format_results_table(results, title="Mine")
        assert ("reward raw" in table) == (normalised is None)
        assert ("normalised by the dataset range" in table) == (normalised is not None)
    assert labelled_results({}, derived)["scale"] == {"reward": "normalised", "range_source": "dataset",
                                                      "reward_range": [-2.0, 8.0], "cost_range": [0.0, 30.0]}


def test_an_env_without_a_cost_in_info_is_refused() -> None:
    env = make_env(spec(env_kwargs={"with_cost": False}))
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"task 'Mine': its env's step\(\) returned an info without 'cost'"):
        env.step(env.action_space.sample())
