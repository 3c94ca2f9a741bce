"""CAPS(SAC+BC): losses against hand-computed values, gradient isolation on the real module, the module's heads and
temperature, and the sweep YAML choosing the backbone."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from rllib_caps.algorithms.caps.sacbc.backbone import sacbc_optimizer_groups
from rllib_caps.algorithms.caps.sacbc.losses import (
    caps_sacbc_losses,
    head_q_values,
    per_head_backup_loss,
    sacbc_actor_loss,
    squashed_gaussian_sample,
    squashed_log_prob,
    temperature_loss,
)
from rllib_caps.algorithms.registry import build_config
from rllib_caps.data import TransitionDataset
from rllib_caps.sweeps.trials import trial_config

BUNDLED = Path(__file__).resolve().parents[1] / "datasets" / "BallCircle"
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def test_squashed_log_prob_by_hand() -> None:
    # u = 0: N(0; 0, 1) per dimension and no Jacobian (1 − tanh² 0 = 1).
    zero = torch.zeros(1, 2, dtype=torch.float64)
    assert squashed_log_prob(zero, zero, zero).item() == pytest.approx(-2 * HALF_LOG_2PI)
    # u = 1, μ = 0.5, σ = e^{-1}: log N = −log σ − ½ log 2π − ½ ((u − μ)/σ)², minus log(1 − tanh² u).
    u, mu, log_std = t(1.0), t(0.5), t(-1.0)
    want = 1.0 - HALF_LOG_2PI - 0.5 * (0.5 / math.exp(-1.0)) ** 2 - math.log(1 - math.tanh(1.0) ** 2)
    assert squashed_log_prob(u, mu, log_std).item() == pytest.approx(want, rel=1e-12)
    # The stable Jacobian stays finite where the naive log(1 − tanh²) underflows.
    assert torch.isfinite(squashed_log_prob(t(30.0), t(0.0), t(0.0)))


def test_squashed_gaussian_sample_is_in_the_box_and_reparameterised() -> None:
    torch.manual_seed(0)
    mean = torch.zeros(1000, 2, 3, requires_grad=True)
    actions, log_probs = squashed_gaussian_sample(mean, torch.full((1000, 2, 3), 0.5))
    assert actions.shape == (1000, 2, 3) and log_probs.shape == (1000, 2)
    assert actions.abs().max() < 1
    actions.sum().backward()
    assert mean.grad is not None and mean.grad.abs().sum() > 0


def test_head_q_values() -> None:
    q_r, goodness = t(1.0, 2.0, 3.0).expand(2, 3), t(-4.0, -5.0, -6.0).expand(2, 3)  # goodness = −Q^c
    q = head_q_values(q_r, goodness, [0.5])
    torch.testing.assert_close(q[0], t(1.0, 2.0 - 2.5, -6.0))  # Q^r, Q^r − λ Q^c, −Q^c


def test_actor_loss_by_hand() -> None:
    """B = 2, K = 2, A = 1: η_k = 2.5 / mean|Q^k| = [2.5/2, 2.5/3]; α = 0.1."""
    q_heads = t(1.0, -2.0, 3.0, -4.0).reshape(2, 2)
    log_probs = t(0.5, 1.0, -0.5, 0.0).reshape(2, 2)
    pi_actions = t(0.1, 0.5, -0.2, 0.3).reshape(2, 2, 1)
    actions = t(0.0, 0.5).reshape(2, 1)
    loss = sacbc_actor_loss(q_heads, log_probs, pi_actions, actions, t(0.1), q_weight=2.5)
    head0 = ((0.05 - 1.25 * 1.0) + (-0.05 - 1.25 * 3.0)) / 2 + (0.1 ** 2 + 0.7 ** 2) / 2
    head1 = ((0.1 + 2.5 / 3 * 2.0) + (0.0 + 2.5 / 3 * 4.0)) / 2 + (0.5 ** 2 + 0.2 ** 2) / 2
    assert loss.item() == pytest.approx(head0 + head1, rel=1e-12)
    # TD3+BC's normaliser: the Q term does not depend on the scale of Q (η Q is invariant, also its gradient).
    q = q_heads.clone().requires_grad_(True)
    q10 = (10 * q_heads).clone().requires_grad_(True)
    for scaled, factor in ((q, 1.0), (q10, 10.0)):
        sacbc_actor_loss(scaled, log_probs, pi_actions, actions, t(0.1), q_weight=2.5).backward()
        scaled.grad.mul_(factor)
    torch.testing.assert_close(q.grad, q10.grad)
    torch.testing.assert_close(q.grad, -torch.tensor([[1.25, 2.5 / 3]] * 2, dtype=torch.float64) / 2)


def test_temperature_loss_by_hand_and_direction() -> None:
    log_alpha = torch.tensor(math.log(0.1), requires_grad=True)
    log_probs = t(1.0, 2.0, 1.0, 2.0).reshape(2, 2)  # entropy estimate −E[log π] = −1.5
    loss = temperature_loss(log_alpha, log_probs, target_entropy=-2.0)
    # −E[log α (log π + H̄)] = −log α · mean(−1, 0, −1, 0) = 0.5 log α
    assert loss.item() == pytest.approx(0.5 * math.log(0.1))
    loss.backward()
    assert log_alpha.grad.item() == pytest.approx(0.5)  # entropy above target → gradient descent lowers α
    below = torch.tensor(0.0, requires_grad=True)
    temperature_loss(below, t(3.0, 3.0).reshape(1, 2), target_entropy=-2.0).backward()
    assert below.grad.item() == pytest.approx(-1.0)  # entropy −3 below target −2 → α rises


def test_per_head_backups_by_hand() -> None:
    """Each head's next action gives its own backup; the twins regress onto all K of them."""
    q1, q2 = t(1.0, 2.0), t(1.5, 2.5)
    next_q1, next_q2 = t(1.0, 2.0, 3.0, 4.0).reshape(2, 2), t(2.0, 1.0, 5.0, 0.0).reshape(2, 2)
    common = dict(signal=t(1.0, 1.0), terminateds=torch.tensor([False, True]), gamma=0.5)
    bonus = t(0.2, -0.2, 0.0, 0.0).reshape(2, 2)
    # Maximising: min twins [[1, 1], [3, 0]] + bonus → row 0 targets 1 + ½[1.2, 0.8] = [1.6, 1.4]; row 1 ends: [1, 1].
    loss = per_head_backup_loss(q1, q2, next_q1, next_q2, maximize=True, entropy_bonus=bonus, **common)
    q1_mse = (0.6 ** 2 + 0.4 ** 2 + 1 + 1) / 4
    q2_mse = (0.1 ** 2 + 0.1 ** 2 + 1.5 ** 2 + 1.5 ** 2) / 4
    assert loss.item() == pytest.approx(0.5 * (q1_mse + q2_mse), rel=1e-12)
    # Minimising (cost on +c): max twins [[2, 2], [5, 4]], no bonus → row 0 targets [2, 2].
    loss = per_head_backup_loss(q1, q2, next_q1, next_q2, maximize=False, **common)
    assert loss.item() == pytest.approx(0.5 * ((1 + 1 + 1 + 1) / 4 + (0.25 + 0.25 + 2.25 + 2.25) / 4), rel=1e-12)


def _module_and_batch(implementation: str):
    config = build_config("caps", "BallCircle", BUNDLED, steps=1, heads=4, hidden=[16, 16], batch_size=32,
                          eval_episodes=0, backbone="sacbc", implementation=implementation)
    config.validate()
    module = config.get_rl_module_spec().build()
    module.make_target_networks()
    with torch.no_grad():  # targets differ from the online critics, as after some training
        for _, target in module.get_target_network_pairs():
            for p in target.parameters():
                p.add_(0.1 * torch.randn_like(p))
    batch = TransitionDataset.from_parquet(config.input_).sample(32, torch.Generator().manual_seed(0))
    return config, module, batch


@pytest.mark.parametrize("implementation", ["paper", "code"])
def test_loss_terms_touch_disjoint_parameters(implementation: str) -> None:
    """Actor term → actor only (critics frozen at (s, ã)), α term → log α only, critic terms → their critic."""
    torch.manual_seed(0)
    config, module, batch = _module_and_batch(implementation)
    losses = caps_sacbc_losses(module.forward_train(batch), batch, config.loss_settings())
    groups = {f"{name}_loss": params for name, (params, _) in sacbc_optimizer_groups(module, config).items()}
    assert set(losses) == set(groups) == {"actor_loss", "alpha_loss", "qr_loss", "qc_loss"}
    everything = [p for ps in groups.values() for p in ps]
    for name, loss in losses.items():
        grads = torch.autograd.grad(loss, everything, retain_graph=True, allow_unused=True)
        for p, g in zip(everything, grads, strict=True):
            if any(p is q for q in groups[name]):
                assert g is not None, name
            else:
                assert g is None or torch.count_nonzero(g) == 0, (name, p.shape)
    targets = [p for _, target in module.get_target_network_pairs() for p in target.parameters()]
    assert not any(p.requires_grad for p in targets)


def test_module_temperature_heads_and_defaults() -> None:
    config, module, batch = _module_and_batch("paper")
    assert module.log_alpha.item() == pytest.approx(math.log(0.1))
    assert not hasattr(module, "values") and module.actor.std == "state"
    assert (config.resolved_actor_lr, config.resolved_critic_lr, config.resolved_clamp_cost_q) == (1e-4, 1e-3, True)
    mean, log_std = module.actor.squashed_gaussian(batch["obs"])
    assert mean.shape == log_std.shape == (32, 4, 2)
    with torch.no_grad():
        module.actor.heads[0].bias[2:] = 100.0  # head 0's log-std output far above the clamp
    assert module.actor.squashed_gaussian(batch["obs"])[1][:, 0].max() == 2.0
    torch.testing.assert_close(module.actor(batch["obs"]), torch.tanh(module.actor.squashed_gaussian(batch["obs"])[0]))


def test_sweep_yaml_training_settings_choose_the_backbone() -> None:
    setup = {"data_root": str(BUNDLED.parent), "overrides": {}, "resources": {"cpus": 1, "gpus": 0},
             "training": {"backbone": "sacbc", "steps": 10, "hidden": [16, 16], "eval_episodes": 1}}
    config = trial_config({"algo": "caps", "task": "BallCircle", "heads": 2, "seed": 0, "setup": setup})
    config.validate()
    assert config.backbone == "sacbc" and config.model_config["backbone"] == "sacbc"
