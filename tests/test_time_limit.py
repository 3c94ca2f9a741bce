"""``time_limit``: which transitions stop the TD bootstrap, and the time input of time-aware critics (Ray-free
module and losses; the RLlib config and checkpoint round trip are in test_caps_algorithm)."""

from __future__ import annotations

import pytest
import torch
from ray.rllib.core.columns import Columns
from test_caps_module import OBS, make_module
from test_losses import SETTINGS, _tiny_batch

from rllib_caps.algorithms.caps.caps import CAPSConfig
from rllib_caps.algorithms.caps.iql.losses import IQLLossSettings, caps_iql_losses
from rllib_caps.algorithms.caps.keys import HEAD_MEANS, PI_ACTIONS
from rllib_caps.algorithms.caps.switching import select_heads
from rllib_caps.core.budget import remaining_budget_threshold
from rllib_caps.core.keys import COST_SPENT, STEP
from rllib_caps.core.time_limit import TIME_LIMITS, episode_ends, remaining_time
from rllib_caps.data import schema


def test_episode_ends_per_variant() -> None:
    batch = {schema.TERMINATEDS: torch.tensor([False, True, False, False]),
             schema.TRUNCATEDS: torch.tensor([False, False, True, False])}
    assert episode_ends(batch, "bootstrap").tolist() == [0.0, 1.0, 0.0, 0.0]
    assert episode_ends(batch, "terminal").tolist() == [0.0, 1.0, 1.0, 0.0]
    assert episode_ends(batch, "time_aware").tolist() == [0.0, 1.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="time_limit"):
        episode_ends(batch, "never")


def test_remaining_time_is_the_fraction_of_the_episode_left() -> None:
    frac = remaining_time(torch.tensor([0.0, 50.0, 199.0, 200.0, 250.0]), horizon=200)
    assert frac.shape == (5, 1)
    torch.testing.assert_close(frac.squeeze(-1), torch.tensor([1.0, 0.75, 0.005, 0.0, 0.0]))


@pytest.mark.parametrize("time_limit", TIME_LIMITS)
def test_truncated_transition_bootstraps_only_in_bootstrap_mode(time_limit: str) -> None:
    """Row 0 is a time-out: its Q^r target is r + γ V^r(s') only with "bootstrap", else r alone."""
    fwd_out, batch = _tiny_batch()
    batch[schema.TRUNCATEDS] = torch.tensor([True, False])
    settings = IQLLossSettings(**{**SETTINGS, "time_limit": time_limit}, implementation="paper")
    losses = caps_iql_losses(fwd_out, batch, settings)
    scale, gamma = SETTINGS["reward_scale"], SETTINGS["gamma"]
    target0 = scale * 10.0 + (gamma * 4.0 if time_limit == "bootstrap" else 0.0)  # V^r(s'_0) = 4
    target1 = scale * 20.0  # row 1 terminated
    qr1, qr2 = (1.0, 3.0), (2.0, 2.0)
    expected = 0.5 * (((qr1[0] - target0) ** 2 + (qr1[1] - target1) ** 2) / 2
                      + ((qr2[0] - target0) ** 2 + (qr2[1] - target1) ** 2) / 2)
    assert losses["qr_loss"].item() == pytest.approx(expected, rel=1e-6)


def test_time_aware_critics_see_the_step_and_the_actor_does_not() -> None:
    torch.manual_seed(0)
    aware, plain = make_module(time_limit="time_aware"), make_module(time_limit="bootstrap")
    assert aware.qr.members[0][0].in_features == plain.qr.members[0][0].in_features + 1
    assert aware.values.members[0][0].in_features == OBS + 1 and aware.actor.bodies[0][0].in_features == OBS
    obs = torch.randn(1, OBS).expand(3, -1)
    means, q_reward, q_cost = aware.head_values(obs, torch.tensor([0.0, 25.0, 49.0]))
    torch.testing.assert_close(means[0], means[1])  # same state: same head actions at every step
    assert not torch.allclose(q_reward[0], q_reward[1]) and not torch.allclose(q_cost[1], q_cost[2])
    _, q_plain, _ = plain.head_values(obs, torch.tensor([0.0, 25.0, 49.0]))
    torch.testing.assert_close(q_plain[0], q_plain[1])


@pytest.mark.parametrize("backbone", ["iql", "sacbc"])
def test_actor_time_gives_the_heads_the_remaining_time_in_training_and_acting(backbone: str) -> None:
    torch.manual_seed(2)
    module = make_module(time_limit="time_aware", actor_time=True, backbone=backbone, initial_alpha=0.1)
    assert module.actor.bodies[0][0].in_features == OBS + 1
    obs = torch.randn(1, OBS).expand(3, -1)
    steps = torch.tensor([0.0, 25.0, 49.0])
    means, _, _ = module.head_values(obs, steps)
    assert not torch.allclose(means[0], means[1])  # same state, other time left: other head actions
    torch.testing.assert_close(module.head_means(obs, steps), means)
    batch = {Columns.OBS: obs, Columns.ACTIONS: torch.zeros(3, module.action_space.shape[0]),
             Columns.NEXT_OBS: obs, schema.T: steps}
    out = module.forward_train(batch)
    if backbone == "iql":  # the heads' means the AWR loss fits are those at each row's own step
        torch.testing.assert_close(out[HEAD_MEANS], means)
    else:  # SAC+BC samples around the squashed mean of the time-aware input
        assert out[PI_ACTIONS].shape[:2] == (3, module.num_heads)
        mean, _ = module.actor.squashed_gaussian(module.actor_input(obs, steps))
        assert not torch.allclose(mean[0], mean[1])


def test_actor_time_needs_time_aware_critics() -> None:
    config = CAPSConfig().environment("BallCircle").offline_data(input_="datasets/BallCircle")
    config.training(time_limit="time_aware", actor_time=True).validate()
    assert config.get_rl_module_spec().model_config["actor_time"] is True
    with pytest.raises(ValueError, match="actor_time needs time_limit 'time_aware'"):
        CAPSConfig().environment("BallCircle").offline_data(input_="datasets/BallCircle").training(
            time_limit="terminal", actor_time=True).validate()


def test_time_aware_inference_takes_the_step_from_the_connector_column() -> None:
    torch.manual_seed(1)
    module = make_module(time_limit="time_aware")
    module.set_cost_threshold(1e9)  # every head feasible: the pick is argmax Q^r, which depends on t
    obs = torch.randn(1, OBS).expand(40, -1)
    steps = torch.arange(40).float()
    out = module.forward_inference({Columns.OBS: obs, COST_SPENT: torch.zeros(40), STEP: steps})
    _, q_reward, _ = module.head_values(obs, steps)
    assert torch.equal(out["head"], torch.argmax(q_reward, dim=-1))


def test_config_validates_and_passes_time_limit_to_the_module() -> None:
    config = CAPSConfig().environment("BallCircle").offline_data(input_="datasets/BallCircle")
    assert config.time_limit is None and config.resolved_time_limit == "bootstrap"  # paper mode's default
    config.training(time_limit="time_aware")
    config.validate()
    assert config.get_rl_module_spec().model_config["time_limit"] == "time_aware"
    assert config.loss_settings().time_limit == "time_aware"
    with pytest.raises(ValueError, match="time_limit"):
        CAPSConfig().environment("BallCircle").offline_data(input_="datasets/BallCircle").training(
            time_limit="sometimes").validate()


@pytest.mark.parametrize("cost_gamma", [0.5, 1.0])
def test_cost_gamma_discounts_the_cost_critics_only(cost_gamma: float) -> None:
    """Q^c's target is c + γ_c V^c(s'), Q^r's keeps γ; row 1 is terminal (target c), row 0 bootstraps."""
    fwd_out, batch = _tiny_batch()
    batch[schema.TRUNCATEDS] = torch.tensor([False, False])
    settings = IQLLossSettings(**{**SETTINGS, "time_limit": "terminal", "cost_gamma": cost_gamma},
                                implementation="paper")
    losses = caps_iql_losses(fwd_out, batch, settings)
    target0, target1 = 1.0 + cost_gamma * 2.0, 0.0  # c = (1, 0), V^c(s') = (2, 6)
    qc1, qc2 = (2.0, 0.0), (1.0, 1.0)
    expected = 0.5 * (((qc1[0] - target0) ** 2 + (qc1[1] - target1) ** 2) / 2
                      + ((qc2[0] - target0) ** 2 + (qc2[1] - target1) ** 2) / 2)
    assert losses["qc_loss"].item() == pytest.approx(expected, rel=1e-6)
    reference = caps_iql_losses(fwd_out, batch, IQLLossSettings(**{**SETTINGS, "time_limit": "terminal"},
                                                                 implementation="paper"))
    assert losses["qr_loss"].item() == reference["qr_loss"].item()


def test_undiscounted_cost_critic_is_compared_with_the_remaining_budget_itself() -> None:
    """With γ_c = 1 the switching threshold is κ − c_<t at every step, with no finite-horizon conversion."""
    torch.manual_seed(3)
    module = make_module(time_limit="time_aware", cost_gamma=1.0)
    obs = torch.randn(1, OBS).expand(4, -1)
    steps, spent = torch.tensor([0.0, 20.0, 45.0, 49.0]), torch.tensor([0.0, 3.0, 10.0, 12.0])
    _, q_reward, q_cost = module.head_values(obs, steps)
    for kappa in (spent + q_cost.min(-1).values + 1e-4, spent + q_cost.median(-1).values + 1e-4):
        _, heads = module.switching_actions(obs, spent, steps, kappa)
        assert torch.equal(heads, select_heads(q_reward, q_cost, kappa - spent, module.head_selection))
    discounted = remaining_budget_threshold(kappa, spent, steps, horizon=50, gamma=0.99)
    assert not torch.allclose(discounted, kappa - spent)  # what γ_c = γ = 0.99 would have compared against


def test_cost_gamma_config_rules_and_checkpoint_setting() -> None:
    def config(**training):
        return CAPSConfig().environment("BallCircle").offline_data(input_="datasets/BallCircle").training(**training)

    default = config()
    default.validate()
    assert default.resolved_cost_gamma == default.gamma == default.loss_settings().cost_gamma
    undiscounted = config(time_limit="time_aware", cost_gamma=1.0)
    undiscounted.validate()
    assert undiscounted.get_rl_module_spec().model_config["cost_gamma"] == 1.0
    assert undiscounted.loss_settings().cost_gamma == 1.0 and undiscounted.loss_settings().gamma == 0.99
    with pytest.raises(ValueError, match="cost_gamma 1.0 needs time_limit 'terminal' or 'time_aware'"):
        config(cost_gamma=1.0).validate()
    with pytest.raises(ValueError, match=r"cost_gamma must be in \(0, 1\]"):
        config(time_limit="terminal", cost_gamma=1.5).validate()
