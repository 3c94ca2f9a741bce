"""The core pieces BEAR-Lag and CPQ share, against hand computations: the VAE's ELBO, the PID and dual-ascent
multiplier updates on scripted constraint signals, the TD target and ensemble regression, the critic ensemble,
the frozen critic call, the squashed actor and the per-step cost limit q̄_c. Ray-free and fast."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from rllib_caps.algorithms.cost_limited.lagrangian import MultiplierState, PIDGains, dual_log_step, pid_lagrangian
from rllib_caps.algorithms.vae_actor_critic.vae import PRIOR_CLIP, ConditionalVAE, gaussian_kl, vae_loss
from rllib_caps.core.losses import ensemble_mse, td_target
from rllib_caps.core.nets import QEnsemble, SquashedGaussianActor, frozen_call

BUNDLED = Path(__file__).resolve().parents[1] / "datasets" / "BallCircle"


def test_gaussian_kl_and_vae_loss_by_hand() -> None:
    mean = torch.tensor([[1.0, 0.0]])
    std = torch.tensor([[1.0, math.exp(-1.0)]])
    # j=1: −½(1 + 0 − 1 − 1) = ½; j=2: −½(1 − 2 − 0 − e⁻²) = ½(1 + e⁻²); averaged over the latent dims.
    expected_kl = (0.5 + 0.5 * (1 + math.exp(-2.0))) / 2
    assert gaussian_kl(mean, std).item() == pytest.approx(expected_kl)
    assert gaussian_kl(torch.zeros(3, 4), torch.ones(3, 4)).abs().max().item() == 0.0  # N(0, I) itself
    recon, actions = torch.tensor([[0.5, 0.0]]), torch.zeros(1, 2)
    assert vae_loss(recon, actions, mean, std, kl_weight=0.5).item() == pytest.approx(0.125 + 0.5 * expected_kl)


def test_vae_shapes_clamps_and_prior_samples() -> None:
    torch.manual_seed(0)
    vae = ConditionalVAE(obs_dim=3, act_dim=2, hidden=[8, 8])
    obs, actions = torch.randn(5, 3), torch.rand(5, 2) * 2 - 1
    recon, mean, std = vae(obs, actions, torch.randn(5, 4))
    assert recon.shape == (5, 2) and mean.shape == std.shape == (5, 4)  # latent 2|A|
    assert recon.abs().max() < 1.0
    with torch.no_grad():
        vae.log_std.bias.fill_(100.0)
    assert vae.encode(obs, actions)[1].max().item() == pytest.approx(math.exp(15.0), rel=1e-5)  # log σ ≤ 15
    seen = []
    vae.decoder.register_forward_hook(lambda _m, inputs, _o: seen.append(inputs[0][..., 3:]))
    assert vae.sample_raw(obs, torch.randn(5, 7, 4)).shape == (5, 7, 2)
    assert seen[0].abs().max().item() <= PRIOR_CLIP  # z ~ N(0, I) clipped to ±0.5


def test_pid_step_by_hand() -> None:
    gains = PIDGains(kp=0.1, ki=0.01, kd=0.05)
    integral, previous = torch.tensor(0.0), torch.tensor(0.0)
    expected = [  # (e, I, λ): I ← max(0, I + e), D = max(0, e − e_prev), λ = max(0, K_P max(0, e) + K_I I + K_D D)
        (2.0, 2.0, 0.1 * 2 + 0.01 * 2 + 0.05 * 2),
        (2.0, 4.0, 0.1 * 2 + 0.01 * 4),
        (-1.0, 3.0, 0.01 * 3),
        (-5.0, 0.0, 0.0),
        (1.0, 1.0, 0.1 * 1 + 0.01 * 1 + 0.05 * 6),
    ]
    for error, want_integral, want_multiplier in expected:
        multiplier, integral = pid_lagrangian(torch.tensor(error), integral, previous, gains)
        previous = torch.tensor(error)
        assert integral.item() == pytest.approx(want_integral)
        assert multiplier.item() == pytest.approx(want_multiplier)


def test_pid_multiplier_rises_while_cost_exceeds_the_limit_and_falls_to_zero_after() -> None:
    gains, limit = PIDGains(0.1, 0.003, 0.001), 5.0
    costs = [8.0] * 50 + [2.0] * 400  # a scripted cost critic: above the limit, then below it
    state = MultiplierState()
    multipliers = []
    for cost in costs:
        error = torch.tensor(cost - limit)
        multiplier, integral = pid_lagrangian(error, state.pid_integral, state.pid_error, gains)
        state.assign(pid_integral=integral, pid_error=error)
        multipliers.append(multiplier.item())
    above, below = multipliers[:50], multipliers[50:]
    assert all(b > a for a, b in zip(above[1:], above[2:], strict=False))  # the integral keeps growing
    assert below[0] < above[-1] and all(b <= a for a, b in zip(below, below[1:], strict=False))
    assert below[-1] == 0.0 and state.pid_integral.item() == 0.0  # clamped at 0, not negative


def test_dual_log_step_by_hand_and_clamped() -> None:
    log_alpha = torch.tensor(0.0)
    assert dual_log_step(log_alpha, torch.tensor(0.5), lr=0.1).item() == pytest.approx(0.05)  # violated: α grows
    assert dual_log_step(torch.tensor(math.log(2.0)), torch.tensor(-1.0), lr=0.1).item() == pytest.approx(
        math.log(2.0) - 0.2)  # log α + lr α v with α = 2
    assert dual_log_step(torch.tensor(4.99), torch.tensor(100.0), lr=1.0).item() == 5.0
    assert dual_log_step(torch.tensor(-4.99), torch.tensor(-1e6), lr=1.0).item() == -5.0


def test_td_target_and_ensemble_regression_by_hand() -> None:
    signal, next_value, ends = torch.tensor([1.0, 2.0]), torch.tensor([10.0, 10.0]), torch.tensor([0.0, 1.0])
    assert td_target(signal, next_value, 0.9, ends).tolist() == pytest.approx([10.0, 2.0])
    assert td_target(signal, next_value, 0.9, None).tolist() == pytest.approx([10.0, 11.0])  # no done mask
    predictions = torch.tensor([[[1.0, 2.0], [0.0, 0.0]], [[1.0, 1.0], [3.0, 2.0]]])  # (groups 2, twins 2, B 2)
    target = torch.tensor([1.0, 1.0])
    # per net: mean((q − y)²) = 0.5, 1.0, 0.0, 2.5, summed
    assert ensemble_mse(predictions, target).item() == pytest.approx(4.0)


def test_q_ensemble_shapes_and_frozen_call_sends_gradient_to_inputs_only() -> None:
    torch.manual_seed(0)
    critic = QEnsemble(obs_dim=3, act_dim=2, hidden=[8], groups=2)
    obs, actions = torch.randn(4, 3), torch.randn(4, 2, requires_grad=True)
    assert critic(obs, actions).shape == (2, 2, 4)
    assert critic(obs.expand(5, 4, 3), actions.expand(5, 4, 2)).shape == (2, 2, 5, 4)
    frozen_call(critic, obs, actions).sum().backward()
    assert actions.grad is not None and actions.grad.abs().sum() > 0
    assert all(p.grad is None for p in critic.parameters())
    torch.testing.assert_close(frozen_call(critic, obs, actions), critic(obs, actions))


def test_squashed_actor_clamps_log_std_and_acts_with_tanh_mean() -> None:
    torch.manual_seed(0)
    actor = SquashedGaussianActor(obs_dim=3, act_dim=2, hidden=[8])
    with torch.no_grad():
        actor.log_std.bias.fill_(50.0)
    obs = torch.randn(6, 3)
    dist = actor(obs)
    assert dist.stddev.max().item() == pytest.approx(math.exp(2.0), rel=1e-5)
    torch.testing.assert_close(actor.deterministic(obs), torch.tanh(dist.mean))


def test_discounted_cost_limit_is_the_per_step_conversion() -> None:
    from rllib_caps.algorithms.registry import build_config

    config = build_config("bearl", "BallCircle", BUNDLED, cost_limit=20, steps=10, eval_episodes=0)
    horizon, gamma = config.resolved_horizon, config.gamma
    assert horizon == 200
    assert config.discounted_cost_limit == pytest.approx(20 * (1 - gamma**horizon) / ((1 - gamma) * horizon))
    assert config.discounted_cost_limit / 20 == pytest.approx(0.433, abs=1e-3)  # baselines.md's table
