"""BEAR-Lag: its losses against hand computations, the RLlib learner against the plain loop step for step, the PID
multiplier on the bundled data, and the RLlib algorithm (train, evaluation at its own κ, checkpoint with the
multipliers' state) on a real local Ray."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from benchmarks.baselines_plain import PlainLoop, run_spec
from rllib_caps.algorithms.bearl.keys import ACTOR_SAMPLES, VAE_SAMPLES
from rllib_caps.algorithms.bearl.losses import BEARLLossSettings, bearl_losses, mmd, soft_clipped_target
from rllib_caps.algorithms.cost_limited.lagrangian import PIDGains
from rllib_caps.algorithms.registry import build_config
from rllib_caps.algorithms.vae_actor_critic import keys as k
from rllib_caps.bench import local_learner
from rllib_caps.core.learner import STEPS_PER_CALL
from rllib_caps.data import schema

BUNDLED = Path(__file__).resolve().parents[1] / "datasets" / "BallCircle"


def test_mmd_by_hand_for_both_kernels() -> None:
    x, y = torch.zeros(1, 1, 1), torch.full((1, 1, 1), 2.0)
    # one sample each: k(x,x) = k(y,y) = 1, k(x,y) = exp(−‖x−y‖²/(2σ)) or exp(−‖x−y‖₁/(2σ))
    assert mmd(x, y, 1.0, "gaussian").item() == pytest.approx(math.sqrt(2 - 2 * math.exp(-2.0) + 1e-6))
    assert mmd(x, y, 1.0, "laplacian").item() == pytest.approx(math.sqrt(2 - 2 * math.exp(-1.0) + 1e-6))
    x2, y2 = torch.tensor([[[0.0], [1.0]]]), torch.zeros(1, 2, 1)
    # σ = 0.5: k(0,1) = e⁻¹; E k(x,x') = (2 + 2e⁻¹)/4 = E k(x,y); E k(y,y') = 1
    expected = math.sqrt(1 - (2 + 2 * math.exp(-1.0)) / 4 + 1e-6)
    assert mmd(x2, y2, 0.5, "gaussian").item() == pytest.approx(expected)
    with pytest.raises(ValueError, match="mmd_kernel"):
        mmd(x, y, 1.0, "cosine")


def test_soft_clipped_target_by_hand() -> None:
    q_next = torch.tensor([[[1.0, 5.0]], [[3.0, 2.0]]])  # (groups 2, B 1, samples 2)
    # sample 0: .75·1 + .25·3 = 1.5; sample 1: .75·2 + .25·5 = 2.75; max over samples
    assert soft_clipped_target(q_next, 0.75).item() == pytest.approx(2.75)
    assert soft_clipped_target(q_next, 0.25).item() == pytest.approx(max(0.25 + 2.25, 0.5 + 3.75))


def hand_case(implementation: str) -> tuple[dict, dict, BEARLLossSettings]:
    batch = {schema.REWARDS: torch.tensor([1.0, 2.0]), schema.COSTS: torch.tensor([0.0, 1.0]),
             schema.ACTIONS: torch.zeros(2, 1), schema.TERMINATEDS: torch.tensor([False, True]),
             schema.TRUNCATEDS: torch.tensor([False, False])}
    fwd = {k.VAE_RECON: torch.tensor([[0.2], [0.0]]), k.VAE_MEAN: torch.zeros(2, 2), k.VAE_STD: torch.ones(2, 2),
           k.Q_DATA: torch.zeros(2, 2, 2), k.QC_DATA: torch.zeros(2, 2, 2),
           k.Q_NEXT: torch.tensor([[[4.0], [2.0]], [[2.0], [6.0]]]),
           k.QC_NEXT: torch.tensor([[[1.0], [1.0]], [[3.0], [3.0]]]),
           VAE_SAMPLES: torch.zeros(2, 1, 1), ACTOR_SAMPLES: torch.tensor([[[2.0]], [[0.0]]]),
           k.Q_PI: torch.tensor([[1.0, 3.0], [2.0, 1.0]]), k.QC_PI: torch.tensor([[5.0, 1.0], [7.0, 3.0]]),
           k.LOG_ALPHA: torch.tensor(math.log(2.0)), k.PID_INTEGRAL: torch.tensor(0.0),
           k.PID_ERROR: torch.tensor(0.0)}
    settings = BEARLLossSettings(gamma=0.99, reward_scale=0.1, kl_weight=0.5, target_mix=0.75, mmd_sigma=1.0,
                                 mmd_kernel="gaussian", mmd_epsilon=0.05, pid=PIDGains(0.1, 0.01, 0.05),
                                 alpha_lr=0.1, cost_threshold=2.0, implementation=implementation,
                                 time_limit="terminal")
    return fwd, batch, settings


@pytest.mark.parametrize("implementation", ["osrl", "paper"])
def test_bearl_losses_by_hand(implementation: str) -> None:
    losses, metrics, state = bearl_losses(*hand_case(implementation))
    assert losses["vae_loss"].item() == pytest.approx(0.04 / 2)  # MSE; KL of N(0, I) is 0
    # Q̃: state 0 .75·2 + .25·4 = 2.5, state 1 .75·2 + .25·6 = 3; state 1 is terminal
    y = [0.1 + 0.99 * 2.5, 0.2]
    assert losses["qr_loss"].item() == pytest.approx(4 * (y[0] ** 2 + y[1] ** 2) / 2)  # 4 nets regress to y
    if implementation == "osrl":  # cost: optimistic mix .75·1 + .25·3 = 1.5, no done mask
        y_c, qc_pi = [0.0 + 0.99 * 1.5, 1.0 + 0.99 * 1.5], [5.0, 1.0]  # penalty on the min of the groups
    else:  # pessimistic mix .25·1 + .75·3 = 2.5, masked at the terminal
        y_c, qc_pi = [0.99 * 2.5, 1.0], [7.0, 3.0]  # penalty on the max
    assert losses["qc_loss"].item() == pytest.approx(4 * (y_c[0] ** 2 + y_c[1] ** 2) / 2)
    error = sum(q - 2.0 for q in qc_pi) / 2
    multiplier = 0.1 * max(error, 0) + 0.01 * max(error, 0) + 0.05 * max(error, 0)  # I = D = e on the first step
    mmds = [math.sqrt(2 - 2 * math.exp(-2.0) + 1e-6), math.sqrt(1e-6)]
    mean_mmd = sum(mmds) / 2
    actor = -1.0 + 2.0 * (mean_mmd - 0.05) + multiplier * error  # −min(Q¹, Q²) = −1 at both states, α = 2
    assert losses["actor_loss"].item() == pytest.approx(actor, rel=1e-5)
    assert metrics["cost_multiplier"].item() == pytest.approx(multiplier)
    assert state[k.LOG_ALPHA].item() == pytest.approx(math.log(2.0) + 0.1 * 2.0 * (mean_mmd - 0.05), rel=1e-5)
    assert state[k.PID_INTEGRAL].item() == pytest.approx(max(error, 0))
    assert state[k.PID_ERROR].item() == pytest.approx(error)


@pytest.mark.parametrize("algo", ["bearl", "cpq"])
def test_rllib_learner_equals_the_plain_loop_step_for_step(algo: str) -> None:
    steps = STEPS_PER_CALL + 6  # crosses a call boundary
    config = build_config(algo, "BallCircle", BUNDLED, cost_limit=10, steps=steps, hidden=[16, 16], batch_size=32,
                          eval_episodes=0, seed=3).training(vae_hidden=[16, 16])
    config.validate()
    learner = local_learner(config)
    module = learner.module["default_policy"]
    initial = {name: value.clone() for name, value in module.state_dict().items()}
    plain = PlainLoop(run_spec(algo, config), initial_state=module.state_dict(), data_seed=config.seed * 1000)
    plain(steps)  # its minibatches and noise from its own generator, seeded as the learner's
    learner.update_from_dataset(num_updates=steps)
    learned, reference = module.state_dict(), plain.nets.state_dict()
    assert learned.keys() == reference.keys() and "duals.log_alpha" in reference
    for name in reference:  # every network, target and multiplier state
        torch.testing.assert_close(learned[name], reference[name], rtol=1e-4, atol=1e-5, msg=name)
        changed = not torch.equal(learned[name], initial[name])
        assert changed or name.startswith("duals.pid_"), name  # the PID moves only above q̄_c (tested below)


def test_pid_multiplier_rises_when_the_cost_critic_exceeds_the_limit_on_bundled_data() -> None:
    torch.manual_seed(0)
    multipliers, integrals = {}, {}
    for kappa in (0.05, 1000.0):  # q̄_c ≈ 0.02: the learned Q_c exceeds it; q̄_c ≈ 433: it never does
        config = build_config("bearl", "BallCircle", BUNDLED, cost_limit=kappa, steps=128, hidden=[32, 32],
                              batch_size=64, eval_episodes=0, seed=0).training(vae_hidden=[32, 32])
        config.validate()
        learner = local_learner(config)
        results = learner.update_from_dataset(num_updates=128)
        multipliers[kappa] = float(results["default_policy"]["cost_multiplier"].peek())
        integrals[kappa] = float(learner.module["default_policy"].duals.pid_integral)
    assert multipliers[0.05] > 0 and integrals[0.05] > 0
    assert multipliers[1000.0] == 0 and integrals[1000.0] == 0


@pytest.mark.slow
def test_bearl_trains_evaluates_at_its_own_kappa_and_checkpoints_the_multipliers(ray_session, tmp_path) -> None:
    from ray.rllib.algorithms.algorithm import Algorithm

    config = build_config("bearl", "BallCircle", BUNDLED, cost_limit=0.5, steps=20, updates_per_iteration=20,
                          hidden=[16, 16], batch_size=32, eval_episodes=1, seed=0).training(vae_hidden=[16, 16])
    algo = config.build_algo()
    result = algo.train()
    thresholds = result["evaluation"]["dsrl"]["thresholds"]
    assert list(thresholds) == ["0.5"] and thresholds["0.5"]["episodes"] == 1
    duals = {name: value.clone() for name, value in algo.get_module().duals.state_dict().items()}
    assert duals["pid_error"] != 0 and duals["log_alpha"] != 0  # state that a fresh module would not have
    path = algo.save_to_path(tmp_path / "ckpt")
    algo.stop()
    restored = Algorithm.from_checkpoint(path)
    for name, value in restored.get_module().duals.state_dict().items():  # OSRL loses the PID state here
        torch.testing.assert_close(value, duals[name], msg=name)
    restored.stop()
