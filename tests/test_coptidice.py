"""COptiDICE: the soft-χ² divergence, the stationary ratio and every loss term against hand computations, the
direction of the λ update, ν/χ/λ training on a tiny hand-made dataset, initial-state sampling, the RLlib learner
against a plain loop step for step (both implementations), and the RLlib algorithm trained through the registry,
evaluated at its own κ and checkpointed on a real local Ray."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from rllib_caps.algorithms.coptidice import keys as ck
from rllib_caps.algorithms.coptidice.forward import coptidice_minibatch, coptidice_training_outputs
from rllib_caps.algorithms.coptidice.losses import (
    COptiDICELossSettings,
    coptidice_losses,
    soft_chi2,
    soft_chi2_prime_inverse,
    stationary_ratio,
)
from rllib_caps.algorithms.coptidice.nets import NETWORKS, COptiDICENets
from rllib_caps.algorithms.cost_limited.lagrangian import SoftplusMultiplier
from rllib_caps.algorithms.registry import build_config
from rllib_caps.bench import local_learner
from rllib_caps.core.learner import STEPS_PER_CALL
from rllib_caps.core.nets import squashed_log_prob
from rllib_caps.data import DatasetError, TransitionDataset, schema

BUNDLED = Path(__file__).resolve().parents[1] / "datasets" / "BallCircle"


def test_soft_chi2_and_its_derivative_inverse_by_hand() -> None:
    x = torch.tensor([0.0, 0.5, 1.0, 3.0])
    expected = [1.0, 0.5 * math.log(0.5) - 0.5 + 1, 0.0, 2.0]
    assert soft_chi2(x).tolist() == pytest.approx(expected, abs=1e-6)
    y = torch.tensor([-2.0, -0.5, 0.0, 2.0])
    assert soft_chi2_prime_inverse(y).tolist() == pytest.approx([math.exp(-2), math.exp(-0.5), 1.0, 3.0])
    inverse = soft_chi2_prime_inverse(y)  # f′(x) = log x below 1, x − 1 above: (f′)⁻¹ inverts it
    derivative = torch.where(inverse < 1, torch.log(inverse), inverse - 1)
    assert derivative.tolist() == pytest.approx(y.tolist(), abs=1e-6)
    # w = max(0, (f′)⁻¹(e/α)): e/α = 2.8 → 3.8, e/α = −1.4 → e^−1.4
    assert stationary_ratio(torch.tensor([1.4, -0.7]), 0.5).tolist() == pytest.approx([3.8, math.exp(-1.4)])


SETTINGS = COptiDICELossSettings(gamma=0.9, reward_scale=0.1, alpha=0.5, cost_ub_epsilon=0.01, cost_threshold=0.2,
                                 time_limit="terminal")
BATCH = {schema.REWARDS: torch.tensor([10.0, 0.0]), schema.COSTS: torch.tensor([0.0, 1.0]),
         schema.TERMINATEDS: torch.tensor([False, False]), schema.TRUNCATEDS: torch.tensor([False, True])}


def scripted_outputs(lagrange: torch.Tensor) -> dict[str, torch.Tensor]:
    return {ck.NU: torch.tensor([0.5, 0.2]), ck.NU_NEXT: torch.tensor([1.0, 3.0]), ck.NU_INIT: torch.tensor([2.0, 0.0]),
            ck.CHI: torch.tensor([0.1, 0.3]), ck.CHI_NEXT: torch.tensor([0.2, 0.4]),
            ck.CHI_INIT: torch.tensor([1.0, 0.0]), ck.LAGRANGE: lagrange, ck.TEMPERATURE: torch.tensor(2.0),
            ck.LOG_PROB: torch.tensor([-1.0, -2.0])}


def test_coptidice_losses_by_hand() -> None:
    losses, metrics = coptidice_losses(scripted_outputs(torch.tensor(0.5)), BATCH, SETTINGS)
    # e = 0.1 r − λ c + γ (1 − d) ν(s′) − ν(s); row 1 ends at a time-out ("terminal": no bootstrap)
    e = [1.0 + 0.9 * 1.0 - 0.5, -0.5 * 1.0 - 0.2]
    w = [1 + e[0] / 0.5, math.exp(e[1] / 0.5)]
    f = [0.5 * (w[0] - 1) ** 2, w[1] * math.log(w[1]) - w[1] + 1]
    nu = 0.1 * (2.0 + 0.0) / 2 + sum(w[i] * e[i] - 0.5 * f[i] for i in range(2)) / 2
    assert losses["nu_loss"].item() == pytest.approx(nu)
    ell = [0.1 * 1.0 + w[0] * (0.0 + 0.9 * 0.2 - 0.1), 0.0 + w[1] * (1.0 - 0.3)]
    z = [math.exp(v / 2.0) for v in ell]
    q = [2 * v / sum(z) for v in z]
    assert losses["chi_loss"].item() == pytest.approx((q[0] * ell[0] + q[1] * ell[1]) / 2)
    kl = sum(v * math.log(v) - v + 1 for v in q) / 2
    assert metrics["kl"].item() == pytest.approx(kl, rel=1e-4)  # float32 cancellation
    cost_bound = q[1] * w[1] * 1.0 / 2
    assert metrics["cost_bound"].item() == pytest.approx(cost_bound)
    assert losses["tau_loss"].item() == pytest.approx(2.0 * (0.01 - kl), rel=1e-5)
    assert losses["lambda_loss"].item() == pytest.approx(0.5 * (0.2 - cost_bound))
    assert losses["actor_loss"].item() == pytest.approx(-(w[0] * -1.0 + w[1] * -2.0) / 2)  # w-weighted BC


@pytest.mark.parametrize(("threshold", "grows"), [(0.0, True), (1.0, False)])
def test_lambda_grows_while_the_cost_bound_exceeds_the_threshold(threshold: float, grows: bool) -> None:
    multiplier = SoftplusMultiplier()
    optimizer = torch.optim.Adam(multiplier.parameters(), lr=0.1)
    before = multiplier().item()
    settings = COptiDICELossSettings(**{**SETTINGS.__dict__, "cost_threshold": threshold})
    for _ in range(5):  # the scripted cost bound is ≈ 0.05: above 0, below 1
        losses, metrics = coptidice_losses(scripted_outputs(multiplier()), BATCH, settings)
        optimizer.zero_grad()
        losses["lambda_loss"].backward()
        optimizer.step()
    assert 0 < metrics["cost_bound"].item() < 1
    assert (multiplier().item() > before) == grows


def test_squashed_log_prob_by_hand() -> None:
    dist = torch.distributions.Normal(torch.zeros(1, 2), torch.ones(1, 2))
    a = 0.5
    expected = 2 * (-0.5 * math.atanh(a) ** 2 - 0.5 * math.log(2 * math.pi) - math.log(1 - a * a))
    assert squashed_log_prob(dist, torch.full((1, 2), a)).item() == pytest.approx(expected, rel=1e-5)
    assert torch.isfinite(squashed_log_prob(dist, torch.ones(1, 2))).all()  # boundary actions are clipped


def tiny_dataset() -> TransitionDataset:
    """One-step episodes from one state: action +0.5 earns reward 10 at no cost, action −0.5 costs 1 and earns 0;
    the next observation (terminal) is a second state."""
    n = 8
    good = torch.arange(n) % 2 == 0
    return TransitionDataset({
        schema.OBS: torch.zeros(n, 2), schema.NEXT_OBS: torch.ones(n, 2),
        schema.ACTIONS: torch.where(good, 0.5, -0.5).unsqueeze(-1), schema.REWARDS: torch.where(good, 10.0, 0.0),
        schema.COSTS: torch.where(good, 0.0, 1.0), schema.TERMINATEDS: torch.ones(n, dtype=torch.bool),
        schema.TRUNCATEDS: torch.zeros(n, dtype=torch.bool), schema.EPS_ID: torch.arange(n),
        schema.T: torch.zeros(n, dtype=torch.long)})


def test_initial_state_sampling_draws_only_t0_rows() -> None:
    dataset = TransitionDataset.from_parquet(BUNDLED)
    rows = dataset.initial_rows()
    assert (dataset.tensors[schema.T][rows] == 0).all()
    assert rows.numel() == dataset.tensors[schema.EPS_ID].unique().numel()  # one start per episode
    initial = dataset.tensors[schema.OBS][rows]
    drawn = dataset.sample_initial_obs(256, torch.Generator().manual_seed(0))
    assert drawn.shape == (256, initial.shape[1])
    assert (drawn[:, None] == initial[None]).all(-1).any(-1).all()  # every draw is some episode's first obs
    later = dataset.tensors[schema.OBS][dataset.tensors[schema.T] == 50]
    assert not (drawn[:, None] == later[None]).all(-1).any()
    no_start = TransitionDataset({**tiny_dataset().tensors, schema.T: torch.ones(8, dtype=torch.long)})
    with pytest.raises(DatasetError, match="t == 0"):
        no_start.initial_rows()


@pytest.mark.parametrize("implementation", ["osrl", "paper"])
def test_nu_chi_and_lambda_updates_on_a_tiny_dataset(implementation: str) -> None:
    torch.manual_seed(0)
    dataset = tiny_dataset()
    nets = COptiDICENets(2, 1, {"hidden": [16], "implementation": implementation, "data_noise": 0.0})
    nets.stats.assign_from(dataset)
    assert nets.stats.init_fraction.item() == 1.0
    optimizers = [torch.optim.Adam(getattr(nets, name).parameters(), lr=1e-2) for name in NETWORKS]
    settings = COptiDICELossSettings(gamma=0.9, reward_scale=0.1, alpha=0.5, cost_ub_epsilon=0.01,
                                     cost_threshold=0.0, time_limit="terminal")  # any cost violates the limit
    batch = dataset.tensors | {ck.INIT_OBS: dataset.tensors[schema.OBS],  # data_noise 0: the noise is unused
                               ck.OBS_NOISE: torch.randn(8, 2), ck.ACTION_NOISE: torch.randn(8, 1)}
    first = None
    for _ in range(200):
        losses, metrics = coptidice_losses(coptidice_training_outputs(nets, batch), batch, settings)
        first = first or {name: float(value.detach()) for name, value in (losses | metrics).items()}
        for optimizer in optimizers:
            optimizer.zero_grad()
        sum(losses.values()).backward()
        for optimizer in optimizers:
            optimizer.step()
    with torch.no_grad():
        fwd = coptidice_training_outputs(nets, batch)
        advantage = (0.1 * batch[schema.REWARDS] - fwd[ck.LAGRANGE] * batch[schema.COSTS]
                     - fwd[ck.NU])  # every transition is terminal
        w = stationary_ratio(advantage, 0.5)
    good = batch[schema.REWARDS] > 0
    # One-step episodes end in a terminal state, so w carries the (1 − γ) scale of their occupancy; its ratio
    # between the actions moves the occupancy to the rewarding, cost-free one.
    assert w[good].min() > 2 * w[~good].max(), w
    assert losses["nu_loss"].item() < first["nu_loss"]  # ν minimises its dual
    assert float(metrics["lagrange"]) > first["lagrange"]  # the cost bound is above 0: λ grows
    assert float(metrics["cost_bound"]) >= float((w * batch[schema.COSTS]).mean()) - 1e-6  # an upper bound
    assert nets.actor(batch[schema.OBS][:1]).mean.item() > 0  # weighted BC follows the upweighted action


@pytest.mark.parametrize("implementation", ["osrl", "paper"])
def test_rllib_learner_equals_a_plain_loop_step_for_step(implementation: str) -> None:
    steps = STEPS_PER_CALL + 6  # crosses a call boundary
    config = build_config("coptidice", "BallCircle", BUNDLED, cost_limit=10, steps=steps, hidden=[16, 16],
                          batch_size=32, eval_episodes=0, seed=3, implementation=implementation)
    config.validate()
    learner = local_learner(config)
    module = learner.module["default_policy"]
    initial = {name: value.clone() for name, value in module.state_dict().items()}
    dataset = TransitionDataset.from_parquet(BUNDLED)
    nets = COptiDICENets(int(config.observation_space.shape[0]), int(config.action_space.shape[0]),
                         {key: config.model_config[key] for key in ("hidden", "implementation", "data_noise")})
    nets.load_state_dict(module.state_dict())
    lrs = {"actor": config.actor_lr, "nu": config.critic_lr, "chi": config.critic_lr,
           "lagrange": config.scalar_lr, "temperature": config.scalar_lr}
    optimizers = [torch.optim.Adam(getattr(nets, name).parameters(), lr=lrs[name]) for name in NETWORKS]
    generator = torch.Generator().manual_seed(config.seed * 1000)
    for _ in range(steps):
        batch = coptidice_minibatch(dataset, config.train_batch_size_per_learner, generator, implementation)
        losses, _ = coptidice_losses(coptidice_training_outputs(nets, batch), batch, config.loss_settings())
        for optimizer in optimizers:
            optimizer.zero_grad()
        sum(losses.values()).backward()
        for optimizer in optimizers:
            optimizer.step()
    learner.update_from_dataset(num_updates=steps)
    learned, reference = module.state_dict(), nets.state_dict()
    assert learned.keys() == reference.keys() and "lagrange.raw" in reference and "stats.obs_std" in reference
    for name in reference:
        torch.testing.assert_close(learned[name], reference[name], rtol=1e-4, atol=1e-5, msg=name)
    for network in NETWORKS:  # each trained (a min's member that is never the min keeps its weights)
        assert any(not torch.equal(learned[name], initial[name]) for name in reference
                   if name.startswith(f"{network}.")), network


@pytest.mark.slow
def test_coptidice_trains_evaluates_at_its_own_kappa_and_checkpoints(ray_session, tmp_path) -> None:
    from ray.rllib.algorithms.algorithm import Algorithm

    config = build_config("coptidice", "BallCircle", BUNDLED, cost_limit=20, steps=20, updates_per_iteration=20,
                          hidden=[16, 16], batch_size=32, eval_episodes=1, seed=0)
    algo = config.build_algo()
    result = algo.train()
    learner = result["learners"]["default_policy"]
    assert math.isfinite(float(learner["nu_loss"])) and math.isfinite(float(learner["actor_loss"]))
    thresholds = result["evaluation"]["dsrl"]["thresholds"]
    assert list(thresholds) == ["20"]
    r = thresholds["20"]
    assert r["episodes"] == 1 and r["mean_length"] == 200 and math.isfinite(r["normalized_cost"])
    state = {name: value.clone() for name, value in algo.get_module().state_dict().items()}
    assert state["lagrange.raw"] != 1.0 and state["stats.init_fraction"] < 1  # trained λ, the data's p_init
    path = algo.save_to_path(tmp_path / "ckpt")
    algo.stop()
    restored = Algorithm.from_checkpoint(path)
    for name, value in restored.get_module().state_dict().items():
        torch.testing.assert_close(value, state[name], msg=name)
    restored.stop()


@pytest.mark.parametrize(("settings", "message"), [
    ({"implementation": "code"}, "implementation must be one of"),
    ({"cost_ub_epsilon": 0.0}, "cost_ub_epsilon"),
    ({"data_noise": -1.0}, "data_noise"),
    ({}, "cost_limit"),
])
def test_bad_settings_name_the_setting(settings: dict, message: str) -> None:
    config = build_config("coptidice", "BallCircle", BUNDLED, steps=10, eval_episodes=0,
                          **({"cost_limit": 20} if settings else {}), **settings)
    with pytest.raises(ValueError, match=message):
        config.validate()


def test_the_paper_constraint_is_the_occupancy_scale_of_osrls() -> None:
    osrl, paper = (build_config("coptidice", "BallCircle", BUNDLED, cost_limit=20, steps=10, eval_episodes=0,
                                implementation=impl) for impl in ("osrl", "paper"))
    assert osrl.loss_settings().cost_threshold == pytest.approx(osrl.discounted_cost_limit)
    assert paper.loss_settings().cost_threshold == pytest.approx((1 - 0.99) * osrl.discounted_cost_limit)
