"""The CAPS RLModule and cost-budget connector without Ray running: shapes, inference-only copy,
the switching rule wiring, and the shared vs independent actor."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rllib_caps.algorithms.caps.caps import CAPSConfig
from rllib_caps.algorithms.caps.keys import HEAD
from rllib_caps.algorithms.caps.policy import CAPSPolicy
from rllib_caps.algorithms.caps.switching import DEFAULT_HEAD_SELECTION, select_heads
from rllib_caps.algorithms.caps.torch.default_caps_torch_rl_module import DefaultCAPSTorchRLModule
from rllib_caps.core.budget import remaining_budget_threshold
from rllib_caps.core.budget_connector import CostBudget
from rllib_caps.core.keys import COST_SPENT, STEP

OBS, ACT = 6, 2


def make_module(num_heads: int = 4, shared: bool = True, inference_only: bool = False, implementation="paper",
                time_limit: str = "bootstrap", **extra):
    obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    act_space = gym.spaces.Box(-2.0, 2.0, (ACT,), np.float32)
    module = DefaultCAPSTorchRLModule(
        observation_space=obs_space, action_space=act_space, inference_only=inference_only,
        model_config={"hidden": [16, 16], "num_heads": num_heads, "shared_actor": shared,
                      "learn_std": implementation == "paper", "cost_maximize": implementation == "code",
                      "gamma": 0.99, "horizon": 50, "time_limit": time_limit, "task": None,
                      "head_selection": "q_reward", **extra},  # the paper's rule (Eq. 4), which these tests check
    )
    if not inference_only:
        module.make_target_networks()
    return module


def test_shared_actor_has_one_body_and_k_heads_independent_has_k_bodies():
    shared, independent = make_module(4, shared=True), make_module(4, shared=False)
    assert len(shared.actor.bodies) == 1 and len(shared.actor.heads) == 4
    assert len(independent.actor.bodies) == 4
    n_shared = sum(p.numel() for p in shared.actor.parameters())
    n_indep = sum(p.numel() for p in independent.actor.parameters())
    body = sum(p.numel() for p in shared.actor.bodies[0].parameters())
    assert n_indep - n_shared == 3 * body


def test_learned_std_only_in_paper_mode():
    assert isinstance(make_module(implementation="paper").actor.log_std, torch.nn.Parameter)
    code = make_module(implementation="code").actor
    assert not isinstance(code.log_std, torch.nn.Parameter) and torch.all(code.log_std == 0)


def test_inference_only_module_keeps_actor_and_q_critics_only():
    module = make_module(inference_only=True)
    assert hasattr(module, "qr") and hasattr(module, "qc") and hasattr(module, "actor")
    assert not hasattr(module, "values")
    full = make_module()
    state = full.get_state(inference_only=True)
    module.set_state(state)  # must not raise on missing/extra keys
    obs = torch.randn(5, OBS)
    np.testing.assert_array_equal(module.actor(obs).detach(), full.actor(obs).detach())


def test_forward_inference_is_the_switching_rule_on_head_values():
    torch.manual_seed(0)
    module = make_module(num_heads=4)
    module.set_cost_threshold(3.0)
    obs = torch.randn(64, OBS)
    spent, step = torch.rand(64) * 4, torch.randint(0, 50, (64,)).float()
    out = module.forward_inference({Columns.OBS: obs, COST_SPENT: spent, STEP: step})
    means, q_reward, q_cost = module.head_values(obs, step)
    expected = select_heads(q_reward, q_cost, remaining_budget_threshold(3.0, spent, step, 50, 0.99),
                            module.head_selection)
    torch.testing.assert_close(out[HEAD], expected)
    torch.testing.assert_close(out[Columns.ACTIONS], means[torch.arange(64), expected])
    assert out[Columns.ACTIONS].abs().max() <= 1.0
    assert module.forward_exploration({Columns.OBS: obs, COST_SPENT: spent, STEP: step})[HEAD].equal(expected)


class KeptCritics:
    """A critic override that gives the module's own values back (``CriticOverride``)."""

    def replace(self, critic_obs, head_actions, q_reward, q_cost):
        return q_reward, q_cost


class CloserTwins(torch.nn.Module):
    """The reward twins with the second moved towards the first (by ``closer``): untrained twins disagree by a
    constant far above their heads' gaps, which would make "q_trust" head order everywhere."""

    def __init__(self, twins: torch.nn.Module, closer: float) -> None:
        super().__init__()
        self.twins, self.closer = twins, closer

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q1, q2 = self.twins(obs, actions)
        return q1, q1 + (q2 - q1) / self.closer


def test_q_trust_reads_the_reward_twins_disagreement_and_refuses_a_critic_override():
    """"q_trust" is ``select_heads`` on the min twin and |Q^r_1 − Q^r_2| at each head's action; it differs from
    both other rankings; an override (FQE's) has no twins here, so it refuses to act."""
    torch.manual_seed(0)
    module = make_module(num_heads=4, head_selection="q_trust")
    module.qr = CloserTwins(module.qr, closer=100.0)
    obs, spent, step = torch.randn(256, OBS), torch.rand(256) * 4, torch.randint(0, 50, (256,)).float()
    means, q_reward, q_cost, spread = module.head_values_and_spread(obs, step)
    q1, q2 = module.qr(obs.unsqueeze(1).expand(-1, 4, -1), means)
    torch.testing.assert_close(spread, (q1 - q2).abs())
    torch.testing.assert_close(q_reward, torch.min(q1, q2))
    threshold = remaining_budget_threshold(3.0, spent, step, 50, 0.99)
    _, heads = module.switching_actions(obs, spent, step, 3.0)
    assert torch.equal(heads, select_heads(q_reward, q_cost, threshold, "q_trust", spread))
    for other in ("q_reward", "head_order"):
        assert not torch.equal(heads, select_heads(q_reward, q_cost, threshold, other))
    assert module.head_values_and_spread(obs, step, KeptCritics())[3] is None
    with pytest.raises(ValueError, match="'q_trust' needs q_reward_spread"):
        module.switching_actions(obs, spent, step, 3.0, KeptCritics())


def test_cost_estimate_is_pessimistic_in_both_sign_conventions():
    for implementation, sign in (("paper", 1.0), ("code", -1.0)):
        module = make_module(implementation=implementation)
        obs = torch.randn(8, OBS)
        means, _, q_cost = module.head_values(obs, torch.zeros(8))
        obs_k = obs.unsqueeze(1).expand(-1, module.num_heads, -1)
        q1, q2 = module.qc(obs_k, means)
        torch.testing.assert_close(q_cost, torch.max(sign * q1, sign * q2))


@pytest.mark.parametrize("backbone", ["iql", "sacbc"])
def test_clamp_cost_q_makes_no_head_feasible_once_the_budget_is_spent(backbone):
    """With the clamp (the authors' SAC+BC code) a negative Q^c cannot pass the strict `< 0` of a spent budget, so
    the min-cost head acts; without it a head whose Q^c estimate is negative still counts as feasible."""
    torch.manual_seed(0)
    extra = {"backbone": backbone, "initial_alpha": 0.1}
    plain, clamped = make_module(**extra), make_module(clamp_cost_q=True, **extra)
    clamped.load_state_dict(plain.state_dict())
    with torch.no_grad():  # every Q^c estimate negative
        for q in (*plain.qc.members, *clamped.qc.members):
            q[-1].bias.fill_(-5.0)
    obs, step, spent = torch.randn(16, OBS), torch.zeros(16), torch.full((16,), 10.0)
    _, _, q_cost = plain.head_values(obs, step)
    assert (q_cost < 0).all() and (clamped.head_values(obs, step)[2] == 0).all()
    threshold = remaining_budget_threshold(5.0, spent, step, 50, 0.99)  # κ = 5 already spent: 0
    _, q_reward, _ = plain.head_values(obs, step)
    _, heads = plain.switching_actions(obs, spent, step, 5.0)
    torch.testing.assert_close(heads, q_reward.argmax(-1))  # all "feasible": best Q^r
    assert (heads != 0).any()  # so the clamped choice below is a different one
    _, heads = clamped.switching_actions(obs, spent, step, 5.0)
    torch.testing.assert_close(heads, torch.zeros(16, dtype=torch.long))  # none feasible: argmin of all-0 = head 0
    assert (threshold == 0).all()


def test_cost_budget_connector_accumulates_info_cost_and_counts_steps():
    episode = SingleAgentEpisode(observations=[np.zeros(OBS, np.float32)], infos=[{}],
                                 observation_space=gym.spaces.Box(-1, 1, (OBS,)),
                                 action_space=gym.spaces.Box(-1, 1, (ACT,)))
    connector = CostBudget()
    costs = [0.0, 1.0, 0.0, 2.5]
    seen = []
    for t in range(len(costs) + 1):
        batch = connector(rl_module=None, batch={}, episodes=[episode])
        seen.append((list(batch[COST_SPENT].values())[0][0], list(batch[STEP].values())[0][0]))
        if t < len(costs):
            episode.add_env_step(np.zeros(OBS, np.float32), np.zeros(ACT, np.float32), 0.0,
                                 infos={"cost": costs[t]})
    assert seen == [(0.0, 0.0), (0.0, 1.0), (1.0, 2.0), (1.0, 3.0), (3.5, 4.0)]


@pytest.mark.parametrize(
    ("settings", "message"),
    [({"num_heads": 1}, "num_heads"), ({"num_heads": 4, "lambdas": [1.0]}, "lambdas"),
     ({"implementation": "other"}, "implementation"), ({"awr_beta": 0.0}, "awr_beta"),
     ({"expectile_cost": 1.0}, "expectile_cost")],
)
def test_config_rejects_bad_settings_naming_the_setting(settings, message, tmp_path):
    config = CAPSConfig().environment("BallCircle").offline_data(input_=str(tmp_path)).training(**settings)
    with pytest.raises(ValueError, match=message):
        config.validate()


def test_config_refuses_several_envs_per_evaluation_runner(tmp_path):
    config = (CAPSConfig().environment("BallCircle").offline_data(input_=str(tmp_path))
              .env_runners(num_envs_per_env_runner=2))
    with pytest.raises(ValueError, match="num_envs_per_env_runner = 1"):
        config.validate()


def test_config_requires_offline_input():
    with pytest.raises(ValueError, match="offline_data"):
        CAPSConfig().environment("BallCircle").validate()


def test_config_defaults_are_the_papers_and_spaces_come_from_the_registry(tmp_path):
    config = CAPSConfig().environment("BallCircle").offline_data(input_=str(tmp_path))
    config.validate()
    assert (config.awr_beta, config.expectile_reward, config.tau, config.gamma) == (3.0, 0.7, 0.005, 0.99)
    assert (config.train_batch_size_per_learner, config.hidden, config.num_heads) == (512, [512, 512], 2)
    assert config.thresholds == [10.0, 20.0, 40.0] and config.resolved_horizon == 200
    assert config.observation_space.shape == (8,) and config.action_space.shape == (2,)
    assert CAPSConfig().training(num_heads=4).resolved_lambdas == pytest.approx([2 / 3, 4 / 3])


def test_set_state_loads_every_weight_and_refuses_another_layout_with_a_retrain_error():
    """A state of today's layout loads with every weight in place; one saved under another layout (here the twins
    named ``q1``/``q2`` and the value nets ``vr``/``vc``, as before TwinQ/MLPPair) is refused with a message to
    retrain (RLlib's own ``set_state`` would leave those layers at their random initialisation)."""
    torch.manual_seed(0)
    source, target = make_module(2), make_module(2)
    target.set_state(source.state_dict())
    for key, value in source.state_dict().items():
        assert torch.equal(target.state_dict()[key], value), key
    old = {}
    for key, value in source.state_dict().items():
        key = re.sub(r"^(q[rc](?:_target)?)\.members\.([01])\.", lambda m: f"{m[1]}.q{int(m[2]) + 1}.", key)
        old[re.sub(r"^values\.members\.([01])\.", lambda m: f"v{'rc'[int(m[1])]}.", key)] = value
    with pytest.raises(ValueError, match=r"no values for qr\.members\.0\.0\.weight.*retrain it with this release"):
        make_module(2).set_state(old)


def test_head_order_selection_acts_with_the_first_feasible_head_and_can_be_set_at_deployment():
    """With an unlimited budget every head is feasible: "q_reward" picks by Q^r, "head_order" always head 0;
    ``CAPSPolicy.head_selection`` switches a trained module without retraining, and refuses an unknown name."""
    torch.manual_seed(0)
    module = make_module(num_heads=3)
    obs, zeros = torch.randn(256, OBS), torch.zeros(256)
    _, by_reward = module.switching_actions(obs, zeros, zeros, 1e9)
    assert by_reward.unique().numel() > 1  # untrained Q^r prefers different heads in different states
    policy = CAPSPolicy(module)
    assert policy.head_selection == "q_reward"
    policy.head_selection = "head_order"
    _, by_order = module.switching_actions(obs, zeros, zeros, 1e9)
    assert by_order.eq(0).all()
    with pytest.raises(ValueError, match="head_selection must be one of"):
        policy.head_selection = "best"


def test_head_selection_has_one_default():
    """``switching.DEFAULT_HEAD_SELECTION`` is the config's default, the rule's, and what a module whose
    ``model_config`` names none acts with."""
    import inspect

    assert CAPSConfig().head_selection == DEFAULT_HEAD_SELECTION == "head_order"
    assert inspect.signature(select_heads).parameters["selection"].default == DEFAULT_HEAD_SELECTION
    named = make_module()
    config = {k: v for k, v in named.model_config.items() if k != "head_selection"}
    module = DefaultCAPSTorchRLModule(observation_space=named.observation_space, action_space=named.action_space,
                                      model_config=config)
    assert module.head_selection == DEFAULT_HEAD_SELECTION
