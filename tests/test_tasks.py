"""The task registry: 38 tasks, constants equal to dsrl.infos, selection syntax, CLI."""

import json
import os
import subprocess
import sys

import pytest

from rllib_caps.envs.tasks import SUITES, TASKS, TaskSpec, get_task, select_tasks


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, check=False)


def test_38_unique_tasks_in_four_suites() -> None:
    specs = list(TASKS.values())
    assert len(specs) == 38
    assert len({s.id for s in specs}) == len({s.name for s in specs}) == len({s.env_id for s in specs}) == 38
    assert all(key == spec.name for key, spec in TASKS.items())
    counts = {suite: sum(s.suite == suite for s in specs) for suite in SUITES}
    assert counts == {"bullet": 8, "safetygym": 16, "velocity": 5, "metadrive": 9}


def test_constants_equal_dsrl_infos() -> None:
    """Compared with dsrl.infos imported the normal way, in a separate process."""
    code = (
        "import json, dsrl.infos as i; print(json.dumps({k: getattr(i, k) for k in "
        "('DEFAULT_MAX_EPISODE_STEPS', 'MAX_EPISODE_REWARD', 'MIN_EPISODE_REWARD', "
        "'MAX_EPISODE_COST', 'MIN_EPISODE_COST', 'DATASET_URLS')}))"
    )
    result = _run("-c", code, env={**os.environ, "DSRL_SUPPRESS_IMPORT_ERROR": "1"})
    assert result.returncode == 0, result.stderr
    infos = json.loads(result.stdout)
    assert set(infos["DATASET_URLS"]) == set(TASKS)
    for name, spec in TASKS.items():
        assert spec.max_episode_steps == infos["DEFAULT_MAX_EPISODE_STEPS"][name]
        assert spec.max_reward == infos["MAX_EPISODE_REWARD"][name]
        assert spec.min_reward == infos["MIN_EPISODE_REWARD"][name]
        assert spec.max_cost == infos["MAX_EPISODE_COST"][name]
        assert spec.min_cost == infos["MIN_EPISODE_COST"][name]


@pytest.mark.parametrize(
    ("name", "dsrl_id", "steps"),
    [
        ("BallRun", "OfflineBallRun-v0", 100),
        ("AntCircle", "OfflineAntCircle-v0", 500),
        ("CarButton2", "OfflineCarButton2Gymnasium-v0", 1000),
        ("PointCircle1", "OfflinePointCircle1Gymnasium-v0", 500),
        ("Walker2dVelocity", "OfflineWalker2dVelocityGymnasium-v1", 1000),
        ("harddense", "OfflineMetadrive-harddense-v0", 1000),
    ],
)
def test_ids_and_episode_lengths(name: str, dsrl_id: str, steps: int) -> None:
    spec = get_task(name)
    assert (spec.id, spec.max_episode_steps) == (dsrl_id, steps)


def test_thresholds_and_action_bounds() -> None:
    for spec in TASKS.values():
        expected = (10, 20, 40) if spec.suite in ("bullet", "metadrive") else (20, 40, 80)
        assert spec.thresholds == expected
        assert len(spec.action_low) == len(spec.action_high) == spec.act_dim
        assert all(lo < hi for lo, hi in zip(spec.action_low, spec.action_high, strict=True))
        assert spec.min_reward < spec.max_reward and spec.min_cost <= spec.max_cost


def test_get_task_by_name_or_id_case_insensitive() -> None:
    assert get_task("ballcircle") is get_task("BallCircle") is get_task("OFFLINEBALLCIRCLE-V0")
    assert get_task(" EasySparse ").name == "easysparse"
    assert get_task("offlinehoppervelocitygymnasium-v1").name == "HopperVelocity"


@pytest.mark.parametrize(("word", "suggestion"), [("BallCircel", "BallCircle"), ("PointGoal3", "PointGoal1"),
                                                  ("hardsparce", "hardsparse")])
def test_unknown_task_lists_close_names(word: str, suggestion: str) -> None:
    with pytest.raises(ValueError, match=suggestion):
        get_task(word)
    with pytest.raises(ValueError, match=suggestion):
        select_tasks(f"BallRun,{word}")


def test_suite_is_not_a_task() -> None:
    with pytest.raises(ValueError, match="unknown task 'bullet'"):
        get_task("bullet")


def _names(specs: list[TaskSpec]) -> list[str]:
    return [s.name for s in specs]


def test_select_all_and_suites() -> None:
    assert _names(select_tasks("all")) == list(TASKS)
    assert _names(select_tasks("ALL")) == list(TASKS)
    for suite in SUITES:
        selected = select_tasks(suite.upper())
        assert selected and all(s.suite == suite for s in selected)
    assert len(select_tasks("bullet,velocity")) == 13


def test_select_list_dedups_and_keeps_order() -> None:
    selection = "CarRun, ballcircle,OfflineBallCircle-v0,carrun,PointGoal1"
    assert _names(select_tasks(selection)) == ["CarRun", "BallCircle", "PointGoal1"]
    assert _names(select_tasks("easysparse,metadrive"))[:2] == ["easysparse", "easymean"]
    assert len(select_tasks("easysparse,metadrive,all")) == 38


@pytest.mark.parametrize("selection", ["", " , ", ","])
def test_empty_selection_is_an_error(selection: str) -> None:
    with pytest.raises(ValueError, match="empty task selection"):
        select_tasks(selection)


def test_cli_json_lists_38() -> None:
    result = _run("-m", "rllib_caps.tasks", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert len(rows) == 38
    assert rows[0] == TASKS[rows[0]["name"]].to_dict()
    required = {"id", "name", "suite", "env_id", "obs_dim", "act_dim", "action_low", "action_high",
                "max_episode_steps", "thresholds", "max_reward", "min_reward", "max_cost", "min_cost"}
    assert all(required <= set(row) for row in rows)


def test_cli_table_and_filter() -> None:
    result = _run("-m", "rllib_caps.tasks", "--tasks", "velocity,BallRun")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 7 and lines[0].split()[:3] == ["name", "suite", "id"]
    assert [line.split()[0] for line in lines[1:]][-1] == "BallRun"
    # aligned: every row's id column starts where the header's does
    start = lines[0].index(" id ") + 1
    assert all(line[start:].startswith("Offline") for line in lines[1:])


def test_cli_unknown_task_exits_with_suggestion() -> None:
    result = _run("-m", "rllib_caps.tasks", "--tasks", "BallCircel")
    assert result.returncode == 2
    assert "BallCircle" in result.stderr
