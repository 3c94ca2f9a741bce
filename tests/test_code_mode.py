"""``implementation="code"`` reproduces the authors' IQL code: one test per difference from the paper mode
(docs/paper.md, "Choices" and "implementation='code': what it reproduces"). Paper mode stays as it was."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from rllib_caps.algorithms.caps.caps import CAPSConfig
from rllib_caps.algorithms.caps.iql.losses import IQLLossSettings, awr_actor_loss, awr_head_weights
from rllib_caps.algorithms.caps.torch.caps_torch_learner import ACTOR_LR_COSINE_STEPS
from rllib_caps.algorithms.registry import build_config
from rllib_caps.bench import local_learner

BUNDLED = Path(__file__).resolve().parents[1] / "datasets" / "BallCircle"


def config(**settings) -> CAPSConfig:
    return build_config("caps", "BallCircle", BUNDLED, steps=10, heads=2, hidden=[16, 16], batch_size=16,
                        eval_episodes=0, **settings)


def test_code_mode_treats_time_outs_as_terminal_and_refuses_a_conflicting_time_limit() -> None:
    code, paper = config(implementation="code"), config()
    for c in (code, paper):
        c.validate()
    assert code.resolved_time_limit == code.loss_settings().time_limit == "terminal"
    assert code.model_config["time_limit"] == "terminal"
    assert paper.resolved_time_limit == paper.loss_settings().time_limit == "bootstrap"
    config(implementation="code", time_limit="terminal").validate()
    for conflicting in ("bootstrap", "time_aware"):
        with pytest.raises(ValueError, match=f"time_limit '{conflicting}' conflicts with implementation 'code'"):
            config(implementation="code", time_limit=conflicting).validate()


def test_code_mode_averages_the_actor_loss_over_heads() -> None:
    log_probs, weights = torch.tensor([[-1.0, -2.0, -3.0]]), torch.tensor([[1.0, 2.0, 3.0]])
    assert awr_actor_loss(log_probs, weights).item() == pytest.approx(14.0)  # paper: Σ_k
    assert awr_actor_loss(log_probs, weights, mean_over_heads=True).item() == pytest.approx(14.0 / 3)  # code: mean_k
    shared = dict(gamma=0.99, reward_scale=0.1, expectile_reward=0.7, expectile_cost=0.7, beta=3.0, max_weight=100.0,
                  lambdas=(), time_limit="terminal", cost_gamma=0.99)
    assert IQLLossSettings(**shared, implementation="code").mean_over_heads
    assert not IQLLossSettings(**shared, implementation="paper").mean_over_heads


def test_code_mode_has_a_separate_beta_for_the_cost_advantage() -> None:
    a_r, a_c = torch.tensor([0.5]), torch.tensor([0.25])
    w = awr_head_weights(a_r, a_c, beta=2.0, beta_cost=4.0, lambdas=[0.5], mode="code")
    want = [math.exp(1.0), math.exp(1.0) + 0.5 * math.exp(1.0), math.exp(1.0)]  # β a_r = 1 and β_c a_c = 1
    torch.testing.assert_close(w[0], torch.tensor(want))
    same = awr_head_weights(a_r, a_c, beta=2.0, lambdas=[], mode="code")
    torch.testing.assert_close(same[0], torch.tensor([math.exp(1.0), math.exp(0.5)]))  # default β_c = β
    assert config(implementation="code", beta_cost=4.0).loss_settings().beta_cost == 4.0
    with pytest.raises(ValueError, match="beta_cost is only used by implementation 'code'"):
        config(beta_cost=4.0).validate()


def test_code_mode_anneals_the_actor_lr_by_a_cosine_that_survives_a_restore() -> None:
    def learner(implementation: str):
        c = config(implementation=implementation)
        c.validate()
        return local_learner(c)

    def lrs(lrn) -> dict[str, float]:
        return {name.removeprefix("default_policy_"): opt.param_groups[0]["lr"]
                for name, opt in lrn._named_optimizers.items()}

    steps = 70  # crosses a Learner.update call boundary (RLlib resets scheduled lrs there)
    code, paper = learner("code"), learner("paper")
    for lrn in (code, paper):
        lrn.update_from_dataset(num_updates=steps)
    cosine = 3e-4 * (1 + math.cos(math.pi * steps / ACTOR_LR_COSINE_STEPS)) / 2
    assert lrs(code)["actor"] == pytest.approx(cosine, rel=1e-9) and lrs(code)["actor"] < 3e-4
    assert {k: v for k, v in lrs(code).items() if k != "actor"} == {k: 3e-4 for k in ("qr", "qc", "values")}
    assert lrs(paper) == {k: 3e-4 for k in ("actor", "qr", "qc", "values")}

    restored = learner("code")
    restored.set_state(code.get_state())
    for lrn in (code, restored):
        lrn.update_from_dataset(num_updates=10)
    cosine = 3e-4 * (1 + math.cos(math.pi * (steps + 10) / ACTOR_LR_COSINE_STEPS)) / 2
    assert lrs(restored)["actor"] == pytest.approx(lrs(code)["actor"], rel=1e-12)
    assert lrs(restored)["actor"] == pytest.approx(cosine, rel=1e-9)
