"""Calibration of the cost critic on its dataset (``rllib_caps.algorithms.caps.calibration``): the realised discounted
cost-to-go by hand, the bias / centred-error split, CAPS's critic as the switching rule reads it, and
``evaluate --calibration``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from test_caps_module import OBS, make_module

from rllib_caps.algorithms.caps.calibration import (
    CALIBRATIONS,
    SCALAR_CALIBRATIONS,
    calibrate,
    calibrate_cost_critic,
    calibration_shift,
    dataset_calibration,
    discounted_cost_to_go,
)
from rllib_caps.algorithms.caps.policy import CAPSPolicy
from rllib_caps.algorithms.caps.torch.default_caps_torch_rl_module import DefaultCAPSTorchRLModule
from rllib_caps.data import TransitionDataset

BUNDLED = Path(__file__).resolve().parents[1] / "datasets" / "BallCircle"


def test_discounted_cost_to_go_by_hand_in_any_row_order() -> None:
    # Episode 7: costs 1, 0, 2 at t = 0, 1, 2; episode 3: costs 0, 1. γ = 0.5. Rows shuffled.
    episode = np.array([3, 7, 7, 3, 7])
    step = np.array([1, 2, 0, 0, 1])
    cost = np.array([1.0, 2.0, 1.0, 0.0, 0.0])
    expected = np.array([1.0, 2.0, 1.0 + 0.5 * (0.0 + 0.5 * 2.0), 0.0 + 0.5 * 1.0, 0.0 + 0.5 * 2.0])
    assert np.allclose(discounted_cost_to_go(cost, episode, step, 0.5), expected)
    assert np.allclose(discounted_cost_to_go(cost, episode, step, 1.0), [1.0, 2.0, 3.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="gamma"):
        discounted_cost_to_go(cost, episode, step, 1.5)


def test_bias_and_centred_error_tell_pessimism_from_inaccuracy() -> None:
    rng = np.random.default_rng(0)
    realised = rng.uniform(0, 10, 1000)
    pessimistic = calibrate(realised + 3.0, realised)  # shifted, perfectly ranked
    assert pessimistic.bias == pytest.approx(3.0) and pessimistic.centred_rmse == pytest.approx(0.0, abs=1e-9)
    assert pessimistic.correlation == pytest.approx(1.0)
    noisy = calibrate(realised + rng.normal(0, 4, 1000), realised)  # unbiased, badly ranked
    assert abs(noisy.bias) < 0.5 and noisy.centred_rmse > 3.0 and noisy.correlation < 0.7
    assert list(pessimistic.bin_predicted) == sorted(pessimistic.bin_predicted) and len(noisy.bin_realised) == 10
    assert np.isnan(calibrate(np.ones(3), np.arange(3.0)).correlation)  # a constant prediction has no r
    with pytest.raises(ValueError, match="equally long"):
        calibrate(np.ones(3), np.ones(2))


def test_caps_predicted_cost_is_the_switching_rules_q_cost() -> None:
    """``predicted_cost`` at a head's action is the Q^c the switching rule compares with the budget."""
    torch.manual_seed(0)
    module = make_module(3, time_limit="time_aware", implementation="code")  # time input and the −c sign
    policy = CAPSPolicy(module)
    obs, step = torch.randn(5, OBS), torch.tensor([0.0, 3, 10, 20, 49], dtype=torch.float64)
    with torch.no_grad():
        means, _, q_cost = module.head_values(obs, step)
    for head in range(3):
        predicted = policy.predicted_cost(obs.numpy(), means[:, head].numpy(), step.numpy())
        assert np.allclose(predicted, q_cost[:, head].numpy(), atol=1e-6)
    assert policy.cost_gamma == module.cost_gamma


def test_dataset_calibration_covers_every_row_of_the_bundled_dataset() -> None:
    dataset = TransitionDataset.from_parquet(BUNDLED)
    columns = {k: v.numpy() for k, v in dataset.tensors.items()}
    torch.manual_seed(0)
    from rllib_caps.algorithms.registry import build_config

    config = build_config("caps", "BallCircle", BUNDLED, hidden=[16, 16])
    config.validate()  # fills the spaces from the task registry
    module = config.get_rl_module_spec().build()
    result = dataset_calibration(CAPSPolicy(module), columns, bins=5)
    assert result.rows == len(dataset) and len(result.bin_predicted) == 5
    assert result.mean_realised == pytest.approx(discounted_cost_to_go(
        columns["costs"], columns["eps_id"], columns["t"], module.cost_gamma).mean())
    assert np.isfinite([result.bias, result.rmse, result.centred_rmse, result.correlation]).all()


def test_calibrating_the_cost_critic_removes_its_dataset_bias_where_the_switching_rule_reads_it() -> None:
    dataset = TransitionDataset.from_parquet(BUNDLED)
    columns = {k: v.numpy() for k, v in dataset.tensors.items()}
    torch.manual_seed(0)
    columns["obs"] = columns["obs"][:, :OBS]  # the test module's observation size; any inputs do for a shift
    module = make_module(2, time_limit="time_aware")
    policy = CAPSPolicy(module)
    obs, step = torch.as_tensor(columns["obs"][:64]), torch.as_tensor(columns["t"][:64], dtype=torch.float64)
    before = dataset_calibration(policy, columns)
    with torch.no_grad():
        _, _, q_cost_before = module.head_values(obs, step)
    shift = calibrate_cost_critic(policy, columns)
    assert shift == pytest.approx(before.bias) and abs(shift) > 0.1
    after = dataset_calibration(policy, columns)
    assert after.bias == pytest.approx(0.0, abs=1e-3 * abs(shift))  # pessimism fitted to the data
    assert after.centred_rmse == pytest.approx(before.centred_rmse, rel=1e-4)  # a shift, not a new critic
    with torch.no_grad():
        _, _, q_cost_after = module.head_values(obs, step)
    torch.testing.assert_close(q_cost_after, q_cost_before - shift, rtol=0, atol=1e-4)
    assert calibrate_cost_critic(policy, columns) == pytest.approx(shift, rel=1e-5)  # from the critic as trained
    assert policy.cost_shift == pytest.approx(shift, rel=1e-5)
    assert module.state_dict()["cost_offset"] == pytest.approx(shift)  # saved: runners, checkpoints, exports
    assert calibrate_cost_critic(policy, columns, "none") == 0.0 and policy.cost_shift == 0.0
    pessimism = calibrate_cost_critic(policy, columns, "pessimism")
    assert pessimism == pytest.approx(max(shift, 0.0), rel=1e-5)


def test_the_calibration_modes_remove_the_bias_either_way_only_pessimism_or_nothing() -> None:
    assert [calibration_shift(3.0, mode) for mode in SCALAR_CALIBRATIONS] == [0.0, 3.0, 3.0]
    assert [calibration_shift(-2.0, mode) for mode in SCALAR_CALIBRATIONS] == [0.0, -2.0, 0.0]
    assert set(CALIBRATIONS) == {*SCALAR_CALIBRATIONS, "per_step", "per_step_pessimism"}
    for mode in ("median", "per_step"):  # a per-step mode has a table, not one shift
        with pytest.raises(ValueError, match="cost calibration must be one of"):
            calibration_shift(1.0, mode)


def test_a_module_state_from_before_the_saved_shift_loads_with_none() -> None:
    torch.manual_seed(0)
    module = make_module(2)
    module.set_cost_shift(4.0)
    state = {name: value for name, value in module.get_state().items() if name != "cost_offset"}
    module.set_state(state)
    assert module.cost_shift == 0.0


@pytest.mark.slow
def test_evaluate_calibration_writes_its_numbers_and_plot(ray_session, tmp_path, monkeypatch, capsys) -> None:
    from rllib_caps.algorithms.registry import build_config
    from rllib_caps.evaluate import main as evaluate_main
    from rllib_caps.train import train

    monkeypatch.setenv("RLLIB_CAPS_SMOKE_TEST", "1")
    algo, _ = train(build_config("caps", "BallCircle", BUNDLED, steps=20, heads=2, seed=0), progress=False)
    algo.save_to_path(tmp_path / "ckpt")
    algo.stop()
    monkeypatch.chdir(tmp_path)
    assert evaluate_main(["--checkpoint", "ckpt", "--data", str(BUNDLED), "--thresholds", "20", "--json",
                          "--calibration", "plots/calibration.png"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert list(printed["thresholds"]) == ["20"] and printed["calibration"]["rows"] > 0
    png = tmp_path / "plots" / "calibration.png"
    assert png.read_bytes()[:4] == b"\x89PNG" and [p.name for p in png.parent.iterdir()] == ["calibration.png"]
    assert evaluate_main(["--checkpoint", "ckpt", "--data", str(BUNDLED), "--thresholds", "20",
                          "--calibration", "plots/calibration.png"]) == 0
    assert "bias" in capsys.readouterr().out  # the table output says it in words too
    # Training's default calibration ("pessimism") left a shift of max(bias as trained, 0) in the checkpoint.
    shift, bias = printed["cost_shift"], printed["calibration"]["bias"]
    assert (shift == 0.0 and bias <= 0.0) or (shift > 0.0 and abs(bias) < 1e-3 * shift)
    assert evaluate_main(["--checkpoint", "ckpt", "--data", str(BUNDLED), "--thresholds", "20", "--json",
                          "--calibrate-cost", "mean", "--calibration", "plots/calibrated.png"]) == 0
    calibrated = json.loads(capsys.readouterr().out)
    assert calibrated["cost_shift"] == pytest.approx(shift + bias, rel=1e-4, abs=1e-4)
    assert abs(calibrated["calibration"]["bias"]) < 1e-3 * max(abs(calibrated["cost_shift"]), 1.0)
    assert evaluate_main(["--checkpoint", "ckpt", "--data", str(BUNDLED), "--thresholds", "20", "--json",
                          "--calibrate-cost", "per_step"]) == 0
    per_step = json.loads(capsys.readouterr().out)  # a table per time bin acts, in place of the one shift
    assert per_step["cost_shift"] == 0.0 and len(per_step["cost_step_shifts"]) == 16


def test_rollouts_compare_q_cost_at_the_first_step_with_the_cost_then_incurred() -> None:
    """Per κ, evaluation reports the mean Q^c(s₀, a₀) of the action taken and the cost the episodes then incurred,
    discounted by γ_c: what that Q^c predicts."""
    from rllib_caps.core.rollout import evaluate_policy
    from rllib_caps.envs import get_task, make_env

    task = get_task("BallCircle")
    probe = make_env(task)
    torch.manual_seed(0)
    module = DefaultCAPSTorchRLModule(
        observation_space=probe.observation_space, action_space=probe.action_space,
        model_config={"hidden": [16, 16], "num_heads": 2, "shared_actor": True, "learn_std": True,
                      "cost_maximize": False, "gamma": 0.99, "horizon": task.max_episode_steps, "task": task.name})
    policy = CAPSPolicy(module)
    results = evaluate_policy(policy, task, [20.0], 1, seed=3, progress=False)["thresholds"]["20"]
    obs, _ = probe.reset(seed=3)
    policy.reset(20.0)
    policy.act(obs)
    assert results["predicted_cost"] == pytest.approx(
        float(policy.predicted_cost(obs[None], policy.last_actions, np.zeros(1))[0]), rel=1e-6)
    assert 0.0 <= results["discounted_cost"] <= results["cost"]  # γ_c < 1 shrinks the sum
