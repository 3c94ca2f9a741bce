"""BC-All and BC-Safe: the losses and the episode filter against hand computations (fast), the config rules
(fast), and on a real local Ray: learning on the bundled BallCircle (BC-Safe cheaper than BC-All at a tight κ),
the per-κ evaluation, a checkpoint round trip, and ``train --algo bc-safe`` (slow)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rllib_caps.algorithms.bc.episode_filter import safe_episodes
from rllib_caps.algorithms.bc.losses import bc_loss, deterministic_bc_loss, gaussian_bc_loss
from rllib_caps.algorithms.registry import build_config, get_algorithm
from rllib_caps.data import TransitionDataset
from rllib_caps.data.episodes import episode_costs, safe_episode_mask
from rllib_caps.data.schema import COSTS, EPS_ID

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "datasets" / "BallCircle"


# ------------------------------------------------------------------------------------------------ fast

def test_deterministic_loss_is_the_mean_squared_error() -> None:
    predicted = torch.tensor([[0.5, -0.5], [0.0, 1.0]])
    actions = torch.tensor([[1.0, 0.0], [0.0, -1.0]])
    # squared errors 0.25, 0.25, 0, 4 -> mean over batch and action dims = 4.5 / 4
    assert deterministic_bc_loss(predicted, actions).item() == pytest.approx(1.125)
    assert bc_loss("deterministic", predicted, None, actions).item() == pytest.approx(1.125)


def test_gaussian_loss_is_the_negative_log_likelihood() -> None:
    mean = torch.tensor([[0.0, 0.5]])
    log_std = torch.tensor([0.0, math.log(2.0)])
    actions = torch.tensor([[1.0, 0.5]])
    # -log N(1; 0, 1) - log N(0.5; 0.5, 2) = (0.5 + 0.5 log 2π) + (log 2 + 0.5 log 2π)
    expected = 0.5 + math.log(2.0) + math.log(2.0 * math.pi)
    assert gaussian_bc_loss(mean, log_std, actions).item() == pytest.approx(expected, rel=1e-6)
    with pytest.raises(ValueError, match="log_std"):
        bc_loss("gaussian", mean, None, actions)
    with pytest.raises(ValueError, match="policy must be one of"):
        bc_loss("stochastic", mean, log_std, actions)


def test_gradient_of_the_deterministic_loss_pulls_towards_the_data() -> None:
    predicted = torch.zeros(4, 2, requires_grad=True)
    actions = torch.ones(4, 2)
    deterministic_bc_loss(predicted, actions).backward()
    assert torch.allclose(predicted.grad, torch.full((4, 2), -2.0 / 8))  # d/dp mean((p − a)²) = 2(p − a)/N


def test_safe_episode_filter_keeps_whole_episodes_with_cost_at_most_kappa() -> None:
    # episodes 7 (cost 3), 2 (cost 5, rows not contiguous), 9 (cost 0): the filter uses the whole episode's cost
    eps_id = torch.tensor([7, 7, 2, 7, 2, 9, 9])
    costs = torch.tensor([1.0, 0.0, 4.0, 2.0, 1.0, 0.0, 0.0])
    per_row, totals = episode_costs(eps_id, costs)
    assert per_row.tolist() == [3.0, 3.0, 5.0, 3.0, 5.0, 0.0, 0.0]
    assert sorted(totals.tolist()) == [0.0, 3.0, 5.0]
    assert safe_episode_mask(eps_id, costs, 3.0).tolist() == [True, True, False, True, False, True, True]
    assert safe_episode_mask(eps_id, costs, 2.9).tolist() == [False, False, False, False, False, True, True]
    assert safe_episode_mask(eps_id, costs, 5.0).all()


def test_safe_episodes_on_the_bundled_data_and_a_clear_error_when_none_remains() -> None:
    data = TransitionDataset.from_parquet(BUNDLED)
    kept = safe_episodes(data, 10.0)
    _, totals = episode_costs(kept.tensors[EPS_ID], kept.tensors[COSTS])
    assert 0 < len(kept) < len(data) and float(totals.max()) <= 10.0
    _, all_totals = episode_costs(data.tensors[EPS_ID], data.tensors[COSTS])
    assert len(totals) == int((all_totals <= 10.0).sum())  # every safe episode kept, whole
    assert all(t.shape[0] == len(kept) for t in kept.tensors.values())
    with pytest.raises(ValueError, match="no episode of the dataset has total cost <= cost_limit -1"):
        safe_episodes(data, -1.0)


def test_config_rules_and_registry_entries() -> None:
    assert not get_algorithm("bc-all").threshold_at_deployment and get_algorithm("bc-all").axes == ()
    assert [axis.name for axis in get_algorithm("bc-safe").axes] == ["cost_limit"]
    all_config = build_config("bc-all", "BallCircle", BUNDLED)
    all_config.validate()  # BC-All needs no κ: evaluated at every threshold
    assert all_config.thresholds == [10.0, 20.0, 40.0] and all_config.hidden == [256, 256]
    assert build_config("bc-all", "BallCircle", BUNDLED, cost_limit=20).thresholds == [20.0]
    with pytest.raises(ValueError, match="cost_limit"):
        build_config("bc-safe", "BallCircle", BUNDLED).validate()
    safe = build_config("bc-safe", "BallCircle", BUNDLED, cost_limit=20)
    safe.validate()
    assert safe.safe_only and safe.thresholds == [20.0]
    with pytest.raises(ValueError, match="policy must be one of"):
        build_config("bc-safe", "BallCircle", BUNDLED, cost_limit=20, policy="stochastic").validate()
    with pytest.raises(ValueError, match="num_heads is not a setting of bc-safe"):
        build_config("bc-safe", "BallCircle", BUNDLED, cost_limit=20, heads=2)


# ------------------------------------------------------------------------------------------------ slow

def _train(algo: str, **settings):
    from rllib_caps.train import train

    config = build_config(algo, "BallCircle", BUNDLED, steps=600, updates_per_iteration=300, hidden=[64, 64],
                          batch_size=256, eval_episodes=3, seed=0, **settings)
    return train(config, progress=False)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_bc_safe_is_cheaper_than_bc_all_at_a_tight_limit(ray_session, tmp_path: Path) -> None:
    from ray.rllib.algorithms.algorithm import Algorithm

    bc_all, all_result = _train("bc-all", cost_limit=10)
    all_eval = all_result["evaluation"]["dsrl"]
    bc_all.stop()
    bc_safe, safe_result = _train("bc-safe", cost_limit=10)
    safe_eval = safe_result["evaluation"]["dsrl"]
    assert list(safe_eval["thresholds"]) == ["10"] and list(all_eval["thresholds"]) == ["10"]  # its own κ only
    assert safe_result["learners"]["default_policy"]["bc_loss"] < 0.5  # it learned to imitate (starts near 0.7)
    # the data's median episode costs 52; BC-Safe imitates only the 43 of 314 episodes with cost <= 10
    assert safe_eval["thresholds"]["10"]["cost"] < all_eval["thresholds"]["10"]["cost"]
    assert not {"head_usage", "predicted_cost"} & set(safe_eval["thresholds"]["10"])  # no heads, no cost critic

    obs = TransitionDataset.from_parquet(BUNDLED).tensors["obs"][:16]
    before = bc_safe.get_module().actions(obs)
    bc_safe.save_to_path(tmp_path / "ckpt")
    bc_safe.stop()
    restored = Algorithm.from_checkpoint(tmp_path / "ckpt")
    assert torch.allclose(restored.get_module().actions(obs), before)
    restored.stop()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_train_cli_trains_bc_safe_at_its_cost_limit(ray_address: str, tmp_path: Path) -> None:
    env = {**os.environ, "RLLIB_CAPS_SMOKE_TEST": "1", "PYTHONPATH": str(ROOT), "RAY_ADDRESS": ray_address}
    base = [sys.executable, "-m", "rllib_caps.train", "--algo", "bc-safe", "--task", "BallCircle", "--data",
            str(BUNDLED), "--out", str(tmp_path / "ckpt")]
    missing = subprocess.run(base, env=env, capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "--cost-limit is required" in missing.stderr
    done = subprocess.run([*base, "--cost-limit", "20", "--json"], env=env, capture_output=True, text=True,
                          timeout=400)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout[done.stdout.index("{"):])
    assert list(results["thresholds"]) == ["20"] and results["thresholds"]["20"]["episodes"] == 1
    assert (tmp_path / "ckpt" / "manifest.json").is_file()
