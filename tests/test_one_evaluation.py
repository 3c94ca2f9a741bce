"""One evaluation: ``python -m rllib_caps.evaluate`` on a checkpoint reproduces the table ``python -m
rllib_caps.train`` printed for it (the same episodes: every figure to the bit), CAPS's with its evaluation on the
local EnvRunner and on remote ones, and CDT's; and the seeds and splits both paths share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rllib_caps.core.rollout import EVALUATION_SEED_OFFSET, episode_seed, runner_shares
from rllib_caps.evaluate import main as evaluate_main
from rllib_caps.train import main as train_main

DATA = Path(__file__).resolve().parents[1] / "datasets" / "BallCircle"
EPISODES = 2


def test_runner_shares_split_the_episodes_as_evaluation_runners_take_them() -> None:
    assert runner_shares(5, 0) == [(0, 5)]
    assert runner_shares(5, 2) == [(1, 3), (2, 2)]
    assert runner_shares(1, 2) == [(1, 1), (2, 0)]


def test_the_first_episode_seed_is_rllibs_evaluation_runner_seed() -> None:
    class Trained:
        training_seed = 7

    assert episode_seed(Trained()) == 7 + EVALUATION_SEED_OFFSET
    assert episode_seed(object()) == EVALUATION_SEED_OFFSET  # a checkpoint that predates recording its seed


def _json(text: str) -> dict:
    return json.loads(text[text.index("{"):])


@pytest.mark.parametrize(("algo", "runners"), [("caps", 0), ("caps", 2), ("cdt", 0)])
def test_evaluate_reproduces_trains_table(ray_session, tmp_path: Path, capsys: pytest.CaptureFixture, algo: str,
                                          runners: int) -> None:
    checkpoint = tmp_path / "ckpt"
    assert train_main(["--algo", algo, "--task", "BallCircle", "--data", str(DATA), "--out", str(checkpoint),
                       "--seed", "3", "--steps", "64", "--updates-per-iteration", "64", "--hidden", "16", "16",
                       "--batch-size", "32", "--eval-episodes", str(EPISODES), "--eval-runners", str(runners),
                       "--json"]) == 0
    trained = _json(capsys.readouterr().out)
    assert evaluate_main(["--checkpoint", str(checkpoint), "--episodes", str(EPISODES), "--json"]) == 0
    evaluated = _json(capsys.readouterr().out)
    assert [r["episodes"] for r in trained["thresholds"].values()] == [EPISODES] * 3
    # every figure of every κ (raw and normalised reward and cost, discounted cost, CAPS's head usage) and the mean
    assert evaluated["thresholds"] == trained["thresholds"]
    assert evaluated["mean"] == trained["mean"]
    # the episodes differ from one another (not one start state repeated), so the seeds were tested
    assert evaluate_main(["--checkpoint", str(checkpoint), "--episodes", "1", "--json"]) == 0
    first = _json(capsys.readouterr().out)
    assert any(first["thresholds"][k]["reward"] != trained["thresholds"][k]["reward"] for k in first["thresholds"])
