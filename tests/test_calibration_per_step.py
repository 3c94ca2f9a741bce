"""The per-time-step calibration of the cost critic (``calibration.calibrate_cost_critic_per_step``): its held-out
split, its bins, a synthetic critic's known per-step bias recovered (numpy only, no Ray), and the table where the
switching rule reads it: the CAPS module and its state (the ONNX graph: ``test_export``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_caps_module import OBS, make_module

from rllib_caps.algorithms.caps.calibration import (
    STEP_BINS,
    CostCriticAPI,
    calibrate_cost_critic,
    calibrate_cost_critic_per_step,
    discounted_cost_to_go,
    fit_step_calibration,
    held_out_episodes,
    step_bins,
)
from rllib_caps.algorithms.caps.policy import CAPSPolicy

HORIZON, EPISODES, GAMMA = 64, 400, 0.9


def per_step_bias(t: np.ndarray) -> np.ndarray:
    """The synthetic critic's known bias at step t: pessimistic early (+6 at t = 0), optimistic late."""
    return 6.0 - 9.0 * t / HORIZON


class SyntheticCritic(CostCriticAPI):
    """A cost critic in numpy whose Q^c is the realised discounted cost-to-go (observation 0) plus noise
    (observation 1) plus ``per_step_bias(t)``, read minus its shift as CAPS's module reads it."""

    horizon = HORIZON

    def __init__(self) -> None:
        self.shift, self.table = 0.0, np.zeros(STEP_BINS)

    @property
    def cost_gamma(self) -> float:
        return GAMMA

    def predicted_cost(self, obs: np.ndarray, actions: np.ndarray, steps: np.ndarray) -> np.ndarray:
        bins = step_bins(np.asarray(steps, np.float64), self.horizon).astype(int)
        return obs[:, 0] + obs[:, 1] + per_step_bias(np.asarray(steps, np.float64)) - self.shift - self.table[bins]

    @property
    def cost_shift(self) -> float:
        return self.shift

    def set_cost_shift(self, shift: float) -> None:
        self.shift, self.table = shift, np.zeros(STEP_BINS)

    @property
    def cost_step_shifts(self) -> np.ndarray:
        return self.table

    def set_cost_step_shifts(self, shifts: np.ndarray) -> None:
        self.shift, self.table = 0.0, np.asarray(shifts, np.float64)


def synthetic_dataset(seed: int = 0) -> dict[str, np.ndarray]:
    """``EPISODES`` full-length episodes (ids shuffled, rows in any order) of random sparse costs, with the realised
    discounted cost-to-go and noise in the observations the synthetic critic reads."""
    rng = np.random.default_rng(seed)
    eps_id = np.repeat(rng.permutation(10 * EPISODES)[:EPISODES], HORIZON)
    t = np.tile(np.arange(HORIZON), EPISODES)
    costs = (rng.random(len(t)) < 0.1).astype(np.float64)
    obs = np.stack([discounted_cost_to_go(costs, eps_id, t, GAMMA), rng.normal(0, 1.0, len(t))], axis=1)
    order = rng.permutation(len(t))
    return {"obs": obs[order], "actions": np.zeros((len(t), 1))[order], "costs": costs[order],
            "eps_id": eps_id[order], "t": t[order]}


def test_held_out_episodes_are_whole_seeded_and_the_same_in_any_row_order() -> None:
    ids = np.repeat(np.arange(1000), 3)
    held = held_out_episodes(ids)
    assert held.reshape(1000, 3).all(axis=1).sum() == held.reshape(1000, 3).any(axis=1).sum()  # whole episodes
    assert 0.15 < held.mean() < 0.25  # about 20 %
    order = np.random.default_rng(1).permutation(len(ids))
    np.testing.assert_array_equal(held_out_episodes(ids[order]), held[order])
    assert (held_out_episodes(ids, seed=1) != held).any()
    assert held_out_episodes(ids, fraction=0.5).mean() > held.mean()
    with pytest.raises(ValueError, match="held-out fraction"):
        held_out_episodes(ids, fraction=1.0)


def test_step_bins_are_equal_width_over_the_horizon_in_numpy_and_torch() -> None:
    steps = np.array([0, 3, 4, 7, 8, 63, 64, 500], dtype=np.float64)
    expected = [0, 0, 1, 1, 2, 15, 15, 15]  # 64 steps, 16 bins of 4; steps past the horizon stay in the last
    assert step_bins(steps, 64).astype(int).tolist() == expected
    assert step_bins(torch.as_tensor(steps), 64).long().tolist() == expected
    assert step_bins(np.arange(1000.0), 1000).astype(int).tolist() == np.repeat(np.arange(16), [63, 62] * 8).tolist()


def test_a_synthetic_critics_known_per_step_bias_is_recovered_on_held_out_episodes() -> None:
    columns, critic = synthetic_dataset(), SyntheticCritic()
    critic.set_cost_shift(123.0)  # replaced, not added to
    fit = calibrate_cost_critic_per_step(critic, columns, "per_step")
    bins = step_bins(np.arange(HORIZON, dtype=np.float64), HORIZON).astype(int)
    known = np.array([per_step_bias(np.flatnonzero(bins == b).astype(np.float64)).mean() for b in range(STEP_BINS)])
    np.testing.assert_allclose(fit.shift, known, atol=0.2)  # noise σ 1 over ~80 episodes × 4 steps per bin
    assert sum(fit.rows) == held_out_episodes(columns["eps_id"]).sum() < 0.3 * len(columns["t"])
    np.testing.assert_array_equal(critic.cost_step_shifts, fit.shift)
    assert critic.cost_shift == 0.0
    # the other 80 % of the episodes, which the fit did not read: their per-bin bias is gone too
    rest = {name: values[~held_out_episodes(columns["eps_id"])] for name, values in columns.items()}
    predicted = critic.predicted_cost(rest["obs"], rest["actions"], rest["t"])
    residual = fit_step_calibration(predicted, discounted_cost_to_go(rest["costs"], rest["eps_id"], rest["t"], GAMMA),
                                    rest["t"], HORIZON, "per_step")
    assert np.abs(residual.shift).max() < 0.2
    # the pessimism variant removes only positive bias; the summary returned is the table's mean
    pessimism = calibrate_cost_critic(critic, columns, "per_step_pessimism")
    np.testing.assert_allclose(critic.cost_step_shifts, np.maximum(fit.shift, 0.0))
    assert pessimism == pytest.approx(np.maximum(fit.shift, 0.0).mean()) and (critic.cost_step_shifts == 0).sum() > 3
    assert calibrate_cost_critic(critic, columns, "mean") == pytest.approx(known.mean(), abs=0.2)
    assert not critic.cost_step_shifts.any()  # a scalar mode clears the table


def test_a_bin_without_rows_takes_its_nearest_fitted_bins_bias() -> None:
    steps = np.array([0.0, 1, 40, 41])  # horizon 64: bins 0 and 10 only
    fit = fit_step_calibration(np.array([3.0, 5, 1, 1]), np.array([0.0, 0, 2, 2]), steps, 64, "per_step")
    assert fit.rows[0] == 2 and fit.rows[10] == 2 and sum(fit.rows) == 4
    assert fit.shift[:6] == (4.0,) * 6 and fit.shift[6:] == (-1.0,) * 10  # bin 5 is nearer to 0, bin 6 to 10
    with pytest.raises(ValueError, match="per-step cost calibration must be one of"):
        fit_step_calibration(np.ones(2), np.ones(2), steps[:2], 64, "mean")


def test_the_module_reads_its_per_step_table_where_the_rule_reads_q_cost_and_saves_it() -> None:
    torch.manual_seed(0)
    module = make_module(3, time_limit="time_aware")  # horizon 50
    obs, step = torch.randn(6, OBS), torch.tensor([0.0, 3, 4, 20, 49, 80], dtype=torch.float64)
    with torch.no_grad():
        _, _, as_trained = module.head_values(obs, step)
    table = np.linspace(-2.0, 5.0, STEP_BINS)
    module.set_cost_shift(1.5)
    module.set_cost_step_shifts(table)
    assert module.cost_shift == 0.0  # the table replaces the scalar shift
    with torch.no_grad():
        _, _, shifted = module.head_values(obs, step)
    bins = step_bins(step.numpy(), 50).astype(int)
    assert bins.tolist() == [0, 0, 1, 6, 15, 15]
    np.testing.assert_allclose(shifted.numpy(), as_trained.numpy() - table[bins, None].astype(np.float32), atol=1e-6)
    predicted = CAPSPolicy(module).predicted_cost(obs.numpy(), np.zeros((6, 2), np.float32), step.numpy())
    module.set_cost_shift(0.0)
    assert not module.cost_step_shifts.any()
    np.testing.assert_allclose(predicted, CAPSPolicy(module).predicted_cost(
        obs.numpy(), np.zeros((6, 2), np.float32), step.numpy()) - table[bins].astype(np.float32), atol=1e-6)
    module.set_cost_step_shifts(table)
    state = module.get_state()
    np.testing.assert_allclose(np.asarray(state["cost_offset_per_step"]), table.astype(np.float32))
    fresh = make_module(3, time_limit="time_aware")
    fresh.set_state(state)
    np.testing.assert_array_equal(fresh.cost_step_shifts, module.cost_step_shifts)
    fresh.set_state({k: v for k, v in state.items() if k != "cost_offset_per_step"})  # a checkpoint from before
    assert not fresh.cost_step_shifts.any()
    with pytest.raises(ValueError, match="16 entries"):
        module.set_cost_step_shifts(np.zeros(3))
    with pytest.raises(ValueError, match="not finite"):
        module.set_cost_step_shifts(np.full(STEP_BINS, np.nan))


def test_without_a_table_q_cost_is_the_scalar_shifted_one_to_the_bit() -> None:
    """The existing modes' numbers are unchanged: a zero table subtracts exactly nothing."""
    torch.manual_seed(0)
    module = make_module(2)
    module.set_cost_shift(0.7)
    obs, actions, step = torch.randn(32, OBS), torch.rand(32, 2) * 2 - 1, torch.arange(32, dtype=torch.float64)
    with torch.no_grad():
        qc1, qc2 = module.qc(obs, actions)
        expected = torch.max(qc1, qc2) - module.cost_offset
        assert torch.equal(module.cost_q(obs, actions, step), expected)


@pytest.mark.parametrize("holdout", [False, True])
def test_calibration_holdout_trains_on_the_other_episodes_and_calibrates_on_all(holdout: bool) -> None:
    """``calibration_holdout`` (opt-in): the learner's training rows leave out the held-out episodes, which the
    per-step fit then reads; its calibration still reads the whole dataset."""
    from pathlib import Path

    from rllib_caps.algorithms.registry import build_config
    from rllib_caps.bench import local_learner

    data = Path(__file__).resolve().parents[1] / "datasets" / "BallCircle"
    config = build_config("caps", "BallCircle", data, steps=1, heads=2, hidden=[16, 16], batch_size=32,
                          eval_episodes=0, seed=0)
    config.training(calibration_holdout=holdout)
    config.validate()
    learner = local_learner(config)
    everything = learner.calibration_data.tensors["eps_id"].numpy()
    trained_on = np.unique(learner.dataset.tensors["eps_id"].numpy())
    held_out = np.unique(everything[held_out_episodes(everything)])
    assert len(held_out) > 0 and len(learner.calibration_data) > 1000
    if holdout:
        assert not set(trained_on) & set(held_out) and len(trained_on) + len(held_out) == len(np.unique(everything))
        assert learner.update_from_dataset(num_updates=2) is not None  # trains on the rest
    else:
        assert learner.dataset is learner.calibration_data
    learner.calibrate_cost_critic("per_step")
    module = learner.module["default_policy"]
    assert module.cost_shift == 0.0 and module.cost_step_shifts.any()


@pytest.mark.slow
def test_training_with_a_per_step_calibration_evaluates_and_saves_with_its_table(ray_session, tmp_path) -> None:
    """``cost_calibration="per_step"``: before its evaluation the learner fits the table, the evaluation runners act
    with it, and the checkpoint's policy loads it."""
    from test_caps_algorithm import tiny_config

    from rllib_caps.train import train

    config = tiny_config(eval_episodes=1)
    config.training(cost_calibration="per_step")
    algo, result = train(config, progress=False)
    table = algo.get_module().cost_step_shifts
    assert table.any() and algo.get_module().cost_shift == 0.0 and result["evaluation"]["dsrl"]["thresholds"]
    runner_tables = algo.eval_env_runner_group.foreach_env_runner(lambda er: er.module.cost_step_shifts)
    assert runner_tables and all(np.array_equal(t, table) for t in runner_tables)
    algo.save_to_path(tmp_path / "ckpt")
    algo.stop()
    np.testing.assert_array_equal(CAPSPolicy.from_checkpoint(tmp_path / "ckpt").cost_step_shifts, table)


def test_a_dataset_too_small_to_hold_episodes_out_is_fitted_on_all_of_them_with_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    columns = synthetic_dataset()
    kept_in = next(e for e in np.unique(columns["eps_id"]) if not held_out_episodes(np.array([e])).any())
    one = columns["eps_id"] == kept_in
    episode = {name: values[one] for name, values in columns.items()}
    with caplog.at_level("WARNING", logger="rllib_caps.algorithms.caps.calibration"):
        fit = calibrate_cost_critic_per_step(SyntheticCritic(), episode, "per_step")
    assert sum(fit.rows) == one.sum()
    assert "none of the dataset's 1 episodes falls in the held-out 20%" in caplog.text
