"""The dataset frontier card (data_conversion.frontier): per-episode returns from a DSRL file, the figures per κ
against DSRL's ranges, and the CLI's refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from data_conversion.dsrl_format import write_dsrl_hdf5
from data_conversion.frontier import episode_returns, frontier, main
from rllib_caps.envs.tasks import get_task


def three_episodes(path: Path) -> Path:
    """Episodes of 3, 2 and 4 rows (the second terminates, the last has no end flag): rewards 3, 2, 8, costs 0, 30,
    10."""
    rewards = np.array([1, 1, 1, 1, 1, 2, 2, 2, 2], dtype=np.float64)
    costs = np.array([0, 0, 0, 15, 15, 0, 5, 5, 0], dtype=np.float64)
    terminals = np.array([0, 0, 0, 0, 1, 0, 0, 0, 0], dtype=bool)
    timeouts = np.array([0, 0, 1, 0, 0, 0, 0, 0, 0], dtype=bool)
    rows = len(rewards)
    write_dsrl_hdf5(path, {"observations": np.zeros((rows, 8)), "next_observations": np.zeros((rows, 8)),
                           "actions": np.zeros((rows, 2)), "rewards": rewards, "costs": costs,
                           "terminals": terminals, "timeouts": timeouts})
    return path


def test_episode_returns_split_at_either_end_flag_and_count_an_unfinished_tail(tmp_path: Path) -> None:
    returns = episode_returns(three_episodes(tmp_path / "d.hdf5"))
    assert returns["reward"].tolist() == [3.0, 2.0, 8.0]
    assert returns["cost"].tolist() == [0.0, 30.0, 10.0]
    assert returns["terminated"].tolist() == [False, True, False]


def test_frontier_counts_episodes_within_each_threshold_and_scores_the_best() -> None:
    task = get_task("BallCircle")  # κ = 10 / 20 / 40
    low, high = task.min_reward, task.max_reward
    reward = np.array([low - 1.0, low + 100.0, low + 300.0, high])
    cost = np.array([0.0, 10.0, 25.0, 60.0])
    card = frontier(task, reward, cost, np.array([False, False, True, False]))
    assert card["episodes"] == 4 and card["terminated_episodes"] == 1
    assert card["cost_return"] == [0.0, 17.5, 60.0]
    at = card["per_threshold"]
    assert [at[k]["episodes_at_or_below"] for k in ("10", "20", "40")] == [2, 2, 3]  # ≤ κ counts
    # the episode below DSRL's minimum reward is within κ but not in DSRL's range
    assert [at[k]["episodes_at_or_below_with_reward_in_dsrl_range"] for k in ("10", "20", "40")] == [1, 1, 2]
    assert at["10"]["best_reward"] == pytest.approx(low + 100.0)
    assert at["40"]["normalised_best"] == pytest.approx(300.0 / (high - low))
    with pytest.raises(ValueError, match="equal, non-empty"):
        frontier(task, reward, cost[:3], np.zeros(3, dtype=bool))


def test_cli_writes_the_card_and_refuses_bad_inputs_by_name(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    h5 = three_episodes(tmp_path / "d.hdf5")
    out = tmp_path / "card.json"
    assert main(["--task", "BallCircle", "--h5", str(h5), "--json", str(out)]) == 0
    assert "| episodes with cost ≤ 10 | 2 (2 in DSRL's range) |" in capsys.readouterr().out
    assert json.loads(out.read_text())["per_threshold"]["40"]["episodes_at_or_below"] == 3
    before = out.read_text()
    assert main(["--task", "BallCircle", "--h5", str(h5), "--json", str(out)]) == 2  # exists, no --force
    assert main(["--task", "BallCircle", "--h5", str(tmp_path / "none.hdf5"), "--json", str(out), "--force"]) == 2
    assert out.read_text() == before  # a failed run leaves the earlier card whole
    assert main(["--task", "NoSuchTask", "--h5", str(h5)]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "none.hdf5" in err and "--task" in err
