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


def test_an_evaluation_rolls_out_the_current_weights_though_an_earlier_send_is_still_in_flight(ray_session) -> None:
    """RLlib sends weights to evaluation EnvRunners fire-and-forget and drops a send to a runner with one still in
    flight: a runner slow to take an earlier send (a loaded machine) would evaluate those weights. Here the runner is
    held busy with an earlier send queued behind, the learner's weights change, and the runner is let go only once
    the evaluation has begun (its wait for the earlier sends, or RLlib's ``on_evaluate_start`` where nothing waits):
    it must roll out the learner's current weights."""
    import threading

    import numpy as np
    import torch
    from ray.rllib.callbacks.callbacks import RLlibCallback
    from ray.util.queue import Queue

    from rllib_caps.algorithms.registry import build_config
    from rllib_caps.core.offline import WEIGHTS_SYNC_TAG
    from rllib_caps.core.ray_internals import local_learner

    config = build_config("bc-all", "BallCircle", DATA, steps=10, updates_per_iteration=10, hidden=[8], batch_size=16,
                          eval_episodes=1, eval_runners=1)
    algorithm = config.build_algo()
    runners = algorithm.eval_env_runner_group
    gate, released = Queue(), threading.Event()

    def release(*_: object, **__: object) -> None:
        if not released.is_set():
            released.set()
            gate.put(True)

    class ReleaseAtEvaluationStart(RLlibCallback):
        def on_evaluate_start(self, **kwargs: object) -> None:
            release()

    algorithm.callbacks.append(ReleaseAtEvaluationStart())
    fetch_ready = runners.fetch_ready_async_reqs

    def fetch_ready_releasing(*args: object, **kwargs: object):
        if kwargs.get("tags") == WEIGHTS_SYNC_TAG and kwargs.get("timeout_seconds", 0.0) is None:
            release()  # the evaluation waits for the earlier sends: let the runner take them
        return fetch_ready(*args, **kwargs)

    runners.fetch_ready_async_reqs = fetch_ready_releasing
    try:
        runners.foreach_env_runner_async(lambda runner: gate.get(), tag="held")  # the runner is busy, so this send
        runners.sync_weights(from_worker_or_learner_group=algorithm.learner_group, inference_only=True)  # waits
        module = local_learner(algorithm.learner_group).module["default_policy"]
        with torch.no_grad():
            for parameter in module.parameters():
                parameter.add_(1.0)  # the weights the evaluation must roll out
        algorithm.evaluate()
        learner_weights = module.get_state(inference_only=True)
        (runner_weights,) = runners.foreach_env_runner(lambda runner: runner.module.get_state(), local_env_runner=False)
    finally:
        release()
        algorithm.stop()
    for name, value in runner_weights.items():
        np.testing.assert_array_equal(value, np.asarray(learner_weights[name]), err_msg=name)
