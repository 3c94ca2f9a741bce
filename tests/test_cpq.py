"""CPQ: its losses against hand computations (the OOD cost inflation, the feasibility-gated backups and actor), the
OSRL/paper switch of the inflation's gradient, its effect on the bundled data, and the RLlib algorithm trained
through the registry and evaluated at its own κ on a real local Ray. The learner's step-for-step match with the
plain loop is in tests/test_bearl.py (parametrised over both algorithms)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from rllib_caps.algorithms.cpq.forward import CRITIC_GROUPS, TARGETS, cpq_noise_shapes, cpq_training_outputs
from rllib_caps.algorithms.cpq.keys import OOD_KL, QC_OOD
from rllib_caps.algorithms.cpq.losses import CPQLossSettings, cpq_losses, linear_quantile, ood_cost
from rllib_caps.algorithms.registry import build_config
from rllib_caps.algorithms.vae_actor_critic import keys as k
from rllib_caps.algorithms.vae_actor_critic.nets import VAEActorCriticNets
from rllib_caps.algorithms.vae_actor_critic.noise import standard_normal_draws
from rllib_caps.algorithms.vae_actor_critic.vae import gaussian_kl
from rllib_caps.bench import local_learner
from rllib_caps.data import TransitionDataset, schema

BUNDLED = Path(__file__).resolve().parents[1] / "datasets" / "BallCircle"


def test_ood_cost_by_hand() -> None:
    kl = torch.tensor([[0.1, 0.9], [0.5, 0.3]])  # (N 2, B 2)
    qc = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    # the median of {0.1, 0.3, 0.5, 0.9} is 0.4: samples (0, 1) and (1, 0) are OOD
    inflated = ood_cost(kl, qc, 0.5)
    assert inflated.tolist() == pytest.approx([(0 + 3) / 2, (2 + 0) / 2])
    inflated.sum().backward()
    assert qc.grad.tolist() == [[0.0, 0.5], [0.5, 0.0]]  # gradient only on the OOD samples' Q_c


@pytest.mark.parametrize("q", [0.0, 0.3, 0.5, 0.75, 1.0])
def test_linear_quantile_is_torchs_quantile(q: float) -> None:
    values = torch.randn(101, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(linear_quantile(values, q), torch.quantile(values, q), rtol=0, atol=1e-6)
    members = torch.stack([values, 2 * values])  # vmapped over members: each member's own quantile
    torch.testing.assert_close(torch.func.vmap(linear_quantile, in_dims=(0, None))(members, q),
                               torch.quantile(members, q, dim=1), rtol=0, atol=1e-6)


def settings(implementation: str) -> CPQLossSettings:
    return CPQLossSettings(gamma=0.9, reward_scale=0.1, kl_weight=0.5, ood_quantile=0.5, ood_cost_scale=1.5,
                           alpha_lr=0.1, cost_threshold=2.0, implementation=implementation, time_limit="terminal")


@pytest.mark.parametrize("implementation", ["osrl", "paper"])
def test_cpq_losses_by_hand(implementation: str) -> None:
    batch = {schema.REWARDS: torch.tensor([1.0, 2.0]), schema.COSTS: torch.tensor([0.0, 1.0]),
             schema.ACTIONS: torch.zeros(2, 1), schema.TERMINATEDS: torch.tensor([False, False]),
             schema.TRUNCATEDS: torch.tensor([False, True])}
    fwd = {k.VAE_RECON: torch.tensor([[0.2], [0.0]]), k.VAE_MEAN: torch.zeros(2, 2), k.VAE_STD: torch.ones(2, 2),
           k.Q_DATA: torch.zeros(1, 2, 2), k.QC_DATA: torch.zeros(1, 2, 2),
           k.Q_NEXT: torch.tensor([10.0, 10.0]), k.QC_NEXT: torch.tensor([1.0, 3.0]),
           OOD_KL: torch.tensor([[0.1, 0.9], [0.5, 0.3]]), QC_OOD: torch.tensor([[1.0, 2.0], [3.0, 4.0]]),
           k.Q_PI: torch.tensor([4.0, 6.0]), k.QC_PI: torch.tensor([1.5, 2.5]), k.LOG_ALPHA: torch.tensor(0.0)}
    losses, metrics, state = cpq_losses(fwd, batch, settings(implementation))
    assert losses["vae_loss"].item() == pytest.approx(0.02)
    # reward: state 0 is feasible (Q_c′ = 1 ≤ 2) and bootstraps; state 1 is not (3 > 2) and ends at a time-out
    y = [0.1 + 0.9 * 10.0, 0.2]
    assert losses["qr_loss"].item() == pytest.approx(2 * (y[0] ** 2 + y[1] ** 2) / 2)
    y_c = [0.9 * 1.0, 1.0 + 0.9 * 3.0] if implementation == "osrl" else [0.9 * 1.0, 1.0]  # paper masks the end
    regression = 2 * (y_c[0] ** 2 + y_c[1] ** 2) / 2
    q_ood, level = (1.5 + 1.0) / 2, 1.5 * 2.0
    assert metrics["qc_regression"].item() == pytest.approx(regression)
    assert losses["qc_loss"].item() == pytest.approx(regression - 1.0 * (q_ood - level))  # α = 1
    assert losses["actor_loss"].item() == pytest.approx(-(4.0 + 0.0) / 2)  # only state 0 passes Q_c ≤ q̄_c
    assert state[k.LOG_ALPHA].item() == pytest.approx(0.1 * 1.0 * (level - q_ood))  # below the level: α grows


@pytest.mark.parametrize("implementation", ["osrl", "paper"])
def test_the_inflation_has_a_gradient_only_in_the_paper_variant(implementation: str) -> None:
    torch.manual_seed(0)
    nets = VAEActorCriticNets(obs_dim=8, act_dim=2, settings={"hidden": [16], "vae_hidden": [16], "num_samples": 4,
                              "implementation": implementation}, critic_groups=CRITIC_GROUPS, targets=TARGETS)
    generator = torch.Generator().manual_seed(0)
    batch = TransitionDataset.from_parquet(BUNDLED).sample(32, generator)
    fwd = cpq_training_outputs(nets, batch | standard_normal_draws(cpq_noise_shapes(nets, 32), generator))
    assert fwd[QC_OOD].requires_grad == (implementation == "paper")
    losses, metrics, _ = cpq_losses(fwd, batch, settings(implementation))
    (losses["qc_loss"] - metrics["qc_regression"]).backward()  # the OOD term alone
    grads = [p.grad for p in nets.qc.parameters()]
    inflated = any(g is not None and g.abs().sum() > 0 for g in grads)
    assert inflated == (implementation == "paper")
    assert all(p.grad is None for p in nets.actor.parameters())  # the probes are detached samples


def online_ood_cost(module, batch: dict[str, torch.Tensor], quantile: float = 0.75) -> float:
    """E[1(OOD) Q_c] under the online cost critic, at tanh-squashed policy samples, the same probe for both
    variants."""
    with torch.no_grad():
        obs = batch[schema.OBS]
        samples = torch.tanh(module.actor(obs).sample((10,)))
        obs_rep = obs.unsqueeze(0).expand(10, -1, -1)
        kl = gaussian_kl(*module.vae.encode(obs_rep, samples))
        return float(ood_cost(kl, module.qc(obs_rep, samples).amin(dim=(0, 1)), quantile).mean())


def test_paper_inflation_raises_the_cost_of_ood_actions_on_bundled_data() -> None:
    batch = TransitionDataset.from_parquet(BUNDLED).sample(512, torch.Generator().manual_seed(1))
    inflated = {}
    for implementation in ("osrl", "paper"):
        config = build_config("cpq", "BallCircle", BUNDLED, cost_limit=20, steps=96, hidden=[32, 32], batch_size=64,
                              eval_episodes=0, seed=0).training(vae_hidden=[32, 32], implementation=implementation)
        config.validate()
        torch.manual_seed(0)
        learner = local_learner(config)
        results = learner.update_from_dataset(num_updates=96)["default_policy"]
        assert math.isfinite(float(results["qr_loss"].peek()))
        torch.manual_seed(1)
        inflated[implementation] = online_ood_cost(learner.module["default_policy"], batch)
    # the same regression in both; only the paper's inflation term pushes Q_c up on OOD actions
    assert inflated["paper"] > 1.5 * inflated["osrl"] > 0, inflated


@pytest.mark.slow
def test_cpq_trains_through_the_registry_and_evaluates_at_its_own_kappa(ray_session) -> None:
    config = build_config("cpq", "BallCircle", BUNDLED, cost_limit=20, steps=20, updates_per_iteration=20,
                          hidden=[16, 16], batch_size=32, eval_episodes=1, seed=0).training(vae_hidden=[16, 16])
    algo = config.build_algo()
    result = algo.train()
    algo.stop()
    evaluation = result["evaluation"]["dsrl"]
    assert list(evaluation["thresholds"]) == ["20"]
    r = evaluation["thresholds"]["20"]
    assert r["episodes"] == 1 and r["mean_length"] == 200 and math.isfinite(r["normalized_cost"])


@pytest.mark.parametrize(("algo", "settings", "message"), [
    ("cpq", {"implementation": "code"}, "implementation must be one of"),
    ("cpq", {"ood_quantile": 1.5}, "ood_quantile"),
    ("bearl", {"mmd_kernel": "cosine"}, "mmd_kernel"),
    ("bearl", {"pid_gains": (0.1, -1.0, 0.0)}, "pid_gains"),
    ("bearl", {"vae_hidden": []}, "vae_hidden"),
])
def test_bad_settings_name_the_setting(algo: str, settings: dict, message: str) -> None:
    config = build_config(algo, "BallCircle", BUNDLED, cost_limit=20, steps=10, eval_episodes=0, **settings)
    with pytest.raises(ValueError, match=message):
        config.validate()


@pytest.mark.parametrize("algo", ["bearl", "cpq"])
def test_a_cost_limit_is_required(algo: str) -> None:
    config = build_config(algo, "BallCircle", BUNDLED, steps=10, eval_episodes=0)
    with pytest.raises(ValueError, match="cost_limit"):
        config.validate()
