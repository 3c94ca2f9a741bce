"""CAPS as a real RLlib algorithm on a real local Ray: train, evaluate on the simulator at every threshold,
checkpoint round trip (Algorithm, CAPSPolicy), multi-learner DDP, and learning on the bundled dataset."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rllib_caps.algorithms.caps.calibration import dataset_calibration
from rllib_caps.algorithms.caps.policy import CAPSPolicy
from rllib_caps.algorithms.registry import build_config
from rllib_caps.core.rollout import evaluate_policy
from rllib_caps.data import TransitionDataset
from rllib_caps.envs.tasks import get_task
from rllib_caps.evaluate import main as evaluate_main
from rllib_caps.train import main as train_main
from rllib_caps.train import train
from rllib_caps.utils.manifest import CheckpointError

BUNDLED = Path(__file__).resolve().parents[1] / "datasets" / "BallCircle"
pytestmark = pytest.mark.slow


def tiny_config(**overrides):
    settings = dict(steps=40, heads=3, hidden=[32, 32], batch_size=64, updates_per_iteration=20, eval_episodes=2,
                    seed=0)
    settings.update(overrides)
    return build_config("caps", "BallCircle", BUNDLED, **settings)


def test_train_evaluates_every_threshold_reproducibly_and_checkpoint_round_trips(ray_session, tmp_path,
                                                                                monkeypatch, capsys):
    from ray.rllib.algorithms.algorithm import Algorithm

    algo, result = train(tiny_config(time_limit="time_aware"), progress=False)  # deployment must use t too
    caps = result["evaluation"]["dsrl"]
    assert sorted(caps["thresholds"], key=float) == ["10", "20", "40"]
    for r in caps["thresholds"].values():
        assert r["episodes"] == 2 and r["mean_length"] == 200
        assert sum(r["head_usage"].values()) == pytest.approx(1.0)
        assert r["normalized_cost"] == pytest.approx(r["cost"] / r["threshold"])
        # Q^c at each episode's first step against the cost then incurred, discounted (γ_c < 1, costs ≥ 0)
        assert np.isfinite(r["predicted_cost"]) and 0.0 <= r["discounted_cost"] <= r["cost"]
    # Before evaluating, the learner shifted Q^c by the default "pessimism" calibration (max(bias as trained, 0) on
    # the dataset), and every evaluation runner acted with that shift.
    columns = {k: v.numpy() for k, v in TransitionDataset.from_parquet(BUNDLED).tensors.items()}
    shift, bias = algo.get_module().cost_shift, dataset_calibration(algo.get_module(), columns, bins=1).bias
    assert (shift == 0.0 and bias <= 0.0) or (shift > 0.0 and abs(bias) < 1e-3 * shift)
    runner_shifts = algo.eval_env_runner_group.foreach_env_runner(lambda er: er.module.cost_shift)
    assert runner_shifts and all(s == pytest.approx(shift) for s in runner_shifts)
    again = algo.evaluate()["dsrl"]
    for key, r in caps["thresholds"].items():
        assert again["thresholds"][key]["reward"] == pytest.approx(r["reward"])
        assert again["thresholds"][key]["cost"] == pytest.approx(r["cost"])

    obs = TransitionDataset.from_parquet(BUNDLED).tensors["obs"][:32]
    spent, step = torch.zeros(32), torch.zeros(32)
    module = algo.get_module()
    before_actions, before_heads = module.switching_actions(obs, spent, step, 20.0)
    algo.save_to_path(tmp_path / "ckpt")
    algo.stop()

    restored = Algorithm.from_checkpoint(tmp_path / "ckpt")
    restored_actions, restored_heads = restored.get_module().switching_actions(obs, spent, step, 20.0)
    restored.stop()
    policy = CAPSPolicy.from_checkpoint(tmp_path / "ckpt")
    assert policy.task == "BallCircle" and policy.num_heads == 3 and policy.module.time_aware
    policy.reset(threshold=20.0, batch_size=32)
    policy_actions = policy.act(obs.numpy(), np.zeros(32))
    torch.testing.assert_close(restored_actions, before_actions)
    assert restored_heads.equal(before_heads) and np.array_equal(policy.last_heads, before_heads.numpy())
    np.testing.assert_allclose(policy_actions, before_actions.detach().numpy(), rtol=1e-6, atol=1e-6)

    # A relative path works, the saved checkpoint carries a manifest, and a damaged module file is named.
    monkeypatch.chdir(tmp_path)
    assert CAPSPolicy.from_checkpoint("ckpt").num_heads == 3
    for argv, message in ((["--task", "DroneRun"], "with 8 observation values; --task DroneRun has 17"),
                          (["--task", "CarCircle"], "--allow-task-mismatch"), (["--head", "3"], "heads 0 to 2"),
                          (["--thresholds", "-5"], "--thresholds must be >= 0")):
        assert evaluate_main(["--checkpoint", "ckpt", *argv]) == 2
        assert message in capsys.readouterr().err
    (tmp_path / "ckpt" / "manifest.json").rename(tmp_path / "manifest.json")  # deleting it does not skip the check
    with pytest.raises(CheckpointError, match="no manifest.json.*--no-verify"):
        CAPSPolicy.from_checkpoint("ckpt")
    assert evaluate_main(["--checkpoint", "ckpt", "--task", "DroneRun"]) == 2  # refused before the task check
    assert "no manifest.json" in capsys.readouterr().err
    assert CAPSPolicy.from_checkpoint("ckpt", verify=False).num_heads == 3  # the explicit opt-out, logged
    (tmp_path / "manifest.json").rename(tmp_path / "ckpt" / "manifest.json")
    weights = max((tmp_path / "ckpt").rglob("module_state*"), key=lambda p: p.stat().st_size)
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(CheckpointError, match=f"{weights.name}: corrupt or modified"):
        CAPSPolicy.from_checkpoint("ckpt")


def test_two_learners_stay_in_sync_under_ddp(ray_session):
    config = tiny_config(eval_episodes=0, num_learners=2).learners(num_cpus_per_learner=0.5)
    algo = config.build_algo()
    initial = algo.learner_group.get_weights()
    algo.train()
    weights = algo.learner_group.foreach_learner(lambda learner: learner.get_state(components="rl_module"))
    weights = [call.get() for call in weights]
    algo.stop()
    first, second = (w["rl_module"]["default_policy"] for w in weights)
    changed = False
    for name, value in first.items():
        np.testing.assert_array_equal(value, second[name], err_msg=name)
        changed |= not np.array_equal(value, initial["default_policy"][name])
    assert changed, "training did not change any weight"


def test_learning_on_bundled_dataset(ray_session, tmp_path):
    """A short CPU run: cost grows with κ yet stays within κ, and κ = 40 beats the cost head alone."""
    task = get_task("BallCircle")
    config = build_config("caps", "BallCircle", BUNDLED, steps=3000, heads=2, hidden=[64, 64], batch_size=128,
                          updates_per_iteration=1000, eval_episodes=0, seed=0)
    algo, _ = train(config, progress=False)
    algo.save_to_path(tmp_path / "ckpt")
    algo.stop()
    policy = CAPSPolicy.from_checkpoint(tmp_path / "ckpt")
    results = evaluate_policy(policy, task, [10, 20, 40], episodes=5, progress=False)
    cost_head = evaluate_policy(policy.with_head(1), task, [40], episodes=5, progress=False)
    costs = [results["thresholds"][k]["cost"] for k in ("10", "20", "40")]
    assert costs[0] <= costs[1] <= costs[2], costs
    assert costs[2] > costs[0], costs
    for kappa, cost in zip((10, 20, 40), costs, strict=True):
        assert cost <= kappa, (kappa, costs)
    assert results["thresholds"]["40"]["reward"] > cost_head["thresholds"]["40"]["reward"]


def test_sacbc_learns_on_bundled_dataset_safe_at_every_threshold(ray_session, tmp_path):
    """CAPS(SAC+BC) from the train CLI (short CPU run): the checkpoint records the backbone, CAPSPolicy deploys it,
    it is safe at every κ and earns more reward than its cost head alone."""
    task = get_task("BallCircle")
    assert train_main(["--task", "BallCircle", "--data", str(BUNDLED), "--out", str(tmp_path / "ckpt"),
                       "--backbone", "sacbc", "--heads", "2", "--steps", "3000", "--hidden", "128", "128",
                       "--batch-size", "256", "--eval-episodes", "0", "--seed", "0"]) == 0
    policy = CAPSPolicy.from_checkpoint(tmp_path / "ckpt")
    assert policy.module.backbone == "sacbc" and policy.module.clamp_cost_q
    results = evaluate_policy(policy, task, [10, 20, 40], episodes=5, progress=False)
    cost_head = evaluate_policy(policy.with_head(1), task, [40], episodes=5, progress=False)
    for kappa in (10, 20, 40):
        score = results["thresholds"][str(kappa)]
        assert score["cost"] <= kappa, (kappa, score)
        assert score["reward"] > cost_head["thresholds"]["40"]["reward"], (kappa, score, cost_head)
