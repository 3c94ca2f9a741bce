"""CDT: episode windows and their return/cost-to-go, the Pareto relabelling, OSRL's return targets and their
interpolation, the losses against hand computations, the transformer's causality, the running targets at
deployment (context window, EnvRunner connector, CDTPolicy), the learner's warm-up and clip (fast); a checkpoint
round trip and a short learning run on the bundled BallCircle in which a lower cost target gives a lower
realised cost (slow)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.torch_utils import clip_gradients

from rllib_caps.algorithms.cdt import keys as ck
from rllib_caps.algorithms.cdt.connector import CDTContext
from rllib_caps.algorithms.cdt.context import ContextWindow
from rllib_caps.algorithms.cdt.losses import CDTLossSettings, cdt_losses, cost_prediction_nll, gaussian_terms
from rllib_caps.algorithms.cdt.nets import EMBEDDING_KEEP, DecisionTransformer, TransformerSettings, dropout_masks
from rllib_caps.algorithms.cdt.policy import CDTPolicy
from rllib_caps.algorithms.cdt.relabel import (
    AugmentationSettings,
    episode_weights,
    grid_filter,
    nearest_sources,
    pareto_front,
    relabel,
)
from rllib_caps.algorithms.cdt.targets import DEFAULT, TASK_SETTINGS, return_target, task_settings
from rllib_caps.algorithms.cdt.torch.cdt_torch_learner import warmup_lr
from rllib_caps.algorithms.registry import ALGORITHMS, build_config, load_policy
from rllib_caps.bench import local_learner
from rllib_caps.core.optim import clip_global_norm_
from rllib_caps.core.rollout import evaluate_policy
from rllib_caps.data import DatasetError, TransitionDataset, schema
from rllib_caps.data.sequences import (
    COSTS_TO_GO,
    MASK,
    RETURNS_TO_GO,
    TIMESTEPS,
    WINDOW_ACTIONS,
    WINDOW_COSTS,
    WINDOW_OBS,
    EpisodeSequences,
)
from rllib_caps.envs import get_task
from rllib_caps.evaluate import main as evaluate_main

BUNDLED = Path(__file__).resolve().parents[1] / "datasets" / "BallCircle"
TINY = {"embedding_dim": 16, "num_layers": 1, "attention_heads": 2, "seq_len": 4, "batch_size": 8}


def tiny_dataset(steps: np.ndarray, eps_id: np.ndarray) -> TransitionDataset:
    """Rows given in any order; reward = 10 × row index, cost = row index % 2, obs = [row index]."""
    rows = len(steps)
    index = np.arange(rows, dtype=np.float32)
    return TransitionDataset({
        schema.OBS: torch.tensor(index[:, None]), schema.ACTIONS: torch.tensor(np.stack([index, -index], 1)),
        schema.REWARDS: torch.tensor(10 * index), schema.COSTS: torch.tensor(index % 2),
        schema.EPS_ID: torch.tensor(eps_id), schema.T: torch.tensor(steps)})


# ------------------------------------------------------------------------------------------------ sequences

def test_episodes_are_ordered_by_step_with_undiscounted_returns_and_costs_to_go() -> None:
    # episode 7 has rows 3, 0, 2 at t = 0, 1, 2; episode 4 has rows 1, 4 at t = 1, 0 (stored out of order)
    data = tiny_dataset(np.array([1, 1, 2, 0, 0]), np.array([7, 4, 7, 7, 4]))
    seq = EpisodeSequences.from_dataset(data)
    assert seq.rows.tolist() == [4, 1, 3, 0, 2] and seq.starts.tolist() == [0, 2] and seq.lengths.tolist() == [2, 3]
    # episode 4: rewards 40, 10 -> R̂ 50, 10; costs 0, 1 -> Ĉ 1, 1. Episode 7: rewards 30, 0, 20; costs 1, 0, 0
    assert seq.returns_to_go.tolist() == [50, 10, 50, 20, 20] and seq.costs_to_go.tolist() == [1, 1, 1, 0, 0]
    assert seq.episode_returns.tolist() == [50, 50] and seq.episode_costs.tolist() == [1, 1]
    window = seq.windows(torch.tensor([1, 0]), torch.tensor([1, 0]), 3)
    assert window[WINDOW_OBS][:, :, 0].tolist() == [[0, 2, 0], [4, 1, 0]]  # right padding is zero
    assert window[WINDOW_ACTIONS][0, :, 1].tolist() == [0, -2, 0]
    assert window[RETURNS_TO_GO].tolist() == [[20, 20, 0], [50, 10, 0]]
    assert window[COSTS_TO_GO].tolist() == [[0, 0, 0], [1, 1, 0]] and window[WINDOW_COSTS][1].tolist() == [0, 1, 0]
    assert window[MASK].tolist() == [[1, 1, 0], [1, 1, 0]]
    assert window[TIMESTEPS].tolist() == [[1, 2, 3], [0, 1, 2]]  # timesteps continue on the padding (OSRL)


def test_an_episode_with_a_gap_in_its_steps_is_a_clear_error() -> None:
    with pytest.raises(DatasetError, match="episode 3 does not have the steps 0, 1, ..."):
        EpisodeSequences.from_dataset(tiny_dataset(np.array([0, 2]), np.array([3, 3])))


# ------------------------------------------------------------------------------------------------ relabelling

def test_pareto_front_keeps_the_undominated_points_and_ties() -> None:
    costs = np.array([0.0, 1.0, 1.0, 2.0, 3.0, 3.0, 0.0])
    rewards = np.array([1.0, 5.0, 4.0, 5.0, 9.0, 9.0, 0.5])
    # (1, 4) is beaten by (1, 5); (2, 5) by (1, 5); (0, 0.5) by (0, 1); the two (3, 9) tie and both stay
    assert pareto_front(costs, rewards).tolist() == [0, 1, 4, 5]


def test_grid_filter_drops_sparse_bins_and_caps_crowded_ones() -> None:
    s = AugmentationSettings(cost_bins=2, reward_bins=2, max_per_bin=3, min_per_bin=2)
    # costs over [0, 10] in bins of 5, rewards over [0, 10] in bins of 5; the maxima (10) get a bin of their own
    costs = np.array([0, 1, 2, 3, 4, 6, 7, 6, 10.0])
    rewards = np.array([0, 1, 2, 1, 0, 9, 9, 9, 10.0])
    kept = grid_filter(costs, rewards, s, np.random.default_rng(0))
    low = set(kept.tolist()) & {0, 1, 2, 3, 4}
    assert len(low) == 3 and set(kept.tolist()) - low == {5, 6, 7}  # 5 points capped at 3; the lone max dropped


def test_targets_pair_with_the_nearest_cheaper_episode_and_duplicates_move_to_neighbours() -> None:
    costs, rewards = np.array([0.0, 5.0, 10.0, 4.0]), np.array([0.0, 10.0, 20.0, 9.0])
    s = AugmentationSettings(max_rew_decrease=2.0, beta=1.0)
    targets = np.array([[9.0, 30.0], [6.0, 11.0], [6.0, 12.0]])
    sources = nearest_sources(costs, rewards, targets, s, np.random.default_rng(0))
    # (9, 30): only episodes costing <= 9 qualify -> (5, 10); (6, 11) -> (5, 10) again, a duplicate: its
    # substitute costs <= 5 and returns >= 10 - 2, i.e. episode 1 or 3; the same for the third
    assert sources[0] == 1 and set(sources[1:].tolist()) <= {1, 3}


def test_relabelled_episodes_start_above_the_front_within_the_data_costs() -> None:
    rng = np.random.default_rng(1)
    costs = rng.uniform(0, 60, 400)
    rewards = 5 * costs + rng.normal(0, 20, 400)
    s = AugmentationSettings(deg=1, max_reward=600.0, fraction=0.2)
    out = relabel(costs, rewards, s, np.random.default_rng(2))
    assert 0 < len(out.sources) <= 80
    assert np.all(np.diff(out.costs) > 0) and out.costs.min() >= costs.min() and out.costs.max() <= costs.max()
    assert np.all(out.returns >= np.polyval(out.frontier, out.costs) + s.min_reward) and np.all(out.returns <= 600)
    assert np.all(costs[out.sources] <= out.costs + 1e-9)  # each pairs with an episode no costlier than its C̃
    assert out.frontier[0] == pytest.approx(5.0, rel=0.2)  # the front of R ≈ 5C + noise has slope ≈ 5


def test_episodes_costing_the_cap_or_more_are_never_sampled() -> None:
    assert episode_weights(np.array([0.0, 20.0, 70.0, 90.0])).tolist() == [70.0, 50.0, 0.0, 0.0]


# ------------------------------------------------------------------------------------------------ return targets

def test_osrl_targets_cover_every_task_and_interpolate_in_kappa() -> None:
    from rllib_caps.envs.tasks import TASKS

    assert set(TASKS) - set(TASK_SETTINGS) == {"CarCircle", "mediumdense"}  # OSRL's base default serves both
    assert task_settings("CarCircle") is DEFAULT and DEFAULT.targets == ((10, 450), (20, 500), (50, 550))
    ball = task_settings("BallCircle")
    assert ball.targets == ((10, 700), (20, 750), (40, 800)) and (ball.deg, ball.max_reward) == (2, 1000)
    assert [return_target(ball.targets, k) for k in (10, 15, 20, 30, 40)] == [700, 725, 750, 775, 800]
    assert return_target(ball.targets, 5) == 675  # extrapolated along the first segment (slope 5)
    assert return_target(ball.targets, 60) == 850  # ... and the last (slope 2.5)
    assert return_target(task_settings("BallRun").targets, 30) == 600
    assert return_target([(20.0, 40.0)], 80) == 40


# ------------------------------------------------------------------------------------------------ losses

def test_gaussian_terms_average_over_valid_steps_and_dimensions() -> None:
    mean = torch.tensor([[[0.0, 1.0], [5.0, 5.0]]])
    log_std = torch.tensor([[[0.0, math.log(2.0)], [9.0, 9.0]]])
    actions = torch.tensor([[[1.0, 1.0], [0.0, 0.0]]])
    mask = torch.tensor([[1.0, 0.0]])  # the second step is padding
    log_likelihood, entropy = gaussian_terms(mean, log_std, actions, mask)
    by_hand = (-0.5 - 0.5 * math.log(2 * math.pi) + (-math.log(2.0) - 0.5 * math.log(2 * math.pi))) / 2
    assert log_likelihood.item() == pytest.approx(by_hand)
    normal = torch.distributions.Normal(mean[0, 0], log_std[0, 0].exp())
    assert log_likelihood.item() == pytest.approx(normal.log_prob(actions[0, 0]).mean().item())
    assert entropy.item() == pytest.approx(normal.entropy().mean().item())


def test_cost_nll_counts_padding_in_the_mean_as_osrl() -> None:
    log_probs = torch.log(torch.tensor([[[0.8, 0.2], [0.4, 0.6], [0.5, 0.5]]]))
    costs, mask = torch.tensor([[0.0, 1.0, 1.0]]), torch.tensor([[1.0, 1.0, 0.0]])
    assert cost_prediction_nll(log_probs, costs, mask).item() == pytest.approx(-(math.log(0.8) + math.log(0.6)) / 3)


def test_cdt_losses_by_hand() -> None:
    batch = {MASK: torch.tensor([[1.0, 0.0]]), WINDOW_ACTIONS: torch.tensor([[[0.5], [0.0]]]),
             WINDOW_COSTS: torch.tensor([[1.0, 0.0]])}
    log_temperature = torch.tensor(math.log(0.5), requires_grad=True)
    out = {ck.ACTION_MEAN: torch.tensor([[[0.0], [3.0]]]), ck.ACTION_LOG_STD: torch.zeros(1, 2, 1),
           ck.COST_LOG_PROBS: torch.log(torch.tensor([[[0.25, 0.75], [0.5, 0.5]]])),
           ck.LOG_TEMPERATURE: log_temperature}
    losses, metrics = cdt_losses(out, batch, CDTLossSettings(stochastic=True, cost_weight=0.02, target_entropy=-1.0))
    log_p = -0.125 - 0.5 * math.log(2 * math.pi)  # N(0, 1) at 0.5
    entropy = 0.5 + 0.5 * math.log(2 * math.pi)
    assert losses["action_loss"].item() == pytest.approx(-(log_p + 0.5 * entropy))
    assert losses["cost_loss"].item() == pytest.approx(0.02 * -math.log(0.75) / 2)
    assert losses["temperature_loss"].item() == pytest.approx(0.5 * (entropy + 1.0))
    losses["temperature_loss"].backward()  # entropy above target: the temperature falls
    assert log_temperature.grad.item() > 0 and metrics["cost_accuracy"].item() == 1.0
    deterministic, _ = cdt_losses(out, batch, CDTLossSettings(stochastic=False, cost_weight=0.0, target_entropy=-1.0))
    assert deterministic["action_loss"].item() == pytest.approx(0.25 / 2) and "temperature_loss" not in deterministic


# ------------------------------------------------------------------------------------------------ module

@pytest.fixture(scope="module")
def learner():
    torch.manual_seed(0)
    config = build_config("cdt", "BallCircle", BUNDLED, steps=4, eval_episodes=0, seed=1, warmup_steps=4, **TINY)
    config.validate()
    return local_learner(config)


def test_the_transformer_is_causal_and_reads_the_last_valid_step(learner) -> None:
    module = learner.module["default_policy"].eval()
    window = learner.sample_minibatch(3)
    out = module.transformer(window)[ck.ACTION_MEAN]
    changed = {k: v.clone() for k, v in window.items()}
    changed[WINDOW_OBS][:, 2:] += 5.0
    changed[RETURNS_TO_GO][:, 2:] -= 50.0
    again = module.transformer(changed)[ck.ACTION_MEAN]
    assert torch.allclose(out[:, :2], again[:, :2], atol=1e-6) and not torch.allclose(out[:, 2:], again[:, 2:])
    window[MASK] = torch.tensor([[1.0, 1.0, 0.0, 0.0]] * 3)
    assert torch.allclose(module.transformer.act(window), out[:, 1].clamp(-1, 1))


def test_learner_warms_up_the_learning_rate_and_clips_only_the_transformer(learner) -> None:
    optimizer = learner.get_optimizer("default_policy", "transformer")
    assert isinstance(optimizer, torch.optim.AdamW) and optimizer.defaults["weight_decay"] == 1e-4
    rates = []
    for _ in range(5):
        learner.update_from_dataset(num_updates=1)
        rates.append(optimizer.param_groups[0]["lr"])
    assert rates == pytest.approx([1e-4 * k / 4 for k in (1, 2, 3, 4, 4)])  # lr · min((k + 1)/warmup, 1)
    module = learner.module["default_policy"]
    grads = {learner.get_param_ref(p): torch.full_like(p, 10.0) for p in module.parameters()}
    clipped = learner.postprocess_gradients_for_module(module_id="default_policy", config=learner.config,
                                                       module_gradients_dict=grads)
    transformer = torch.stack([g.norm() for ref, g in clipped.items()
                               if learner._params[ref] is not module.log_temperature]).norm()
    assert transformer.item() == pytest.approx(0.25, rel=1e-4)
    assert clipped[learner.get_param_ref(module.log_temperature)].item() == 10.0


@pytest.mark.parametrize("scale", [1e-3, 1.0, 100.0, float("nan")])  # below, around and above the clip; non-finite
def test_the_clip_on_the_device_is_rllibs_global_norm_clip_bit_for_bit(scale: float) -> None:
    generator = torch.Generator().manual_seed(0)
    grads = [torch.randn(shape, generator=generator) * (1.0 if math.isnan(scale) else scale)
             for shape in ((64, 64), (128,), (7, 3, 5), ())]
    if math.isnan(scale):
        grads += [torch.tensor([math.nan, 1.0]), torch.tensor([math.inf, -2.0])]
    ours, rllibs = [g.clone() for g in grads], [g.clone() for g in grads]
    norm = clip_global_norm_(ours, 0.25)
    expected = clip_gradients(dict(enumerate(rllibs)), grad_clip=0.25, grad_clip_by="global_norm")
    torch.testing.assert_close(norm, expected, rtol=0, atol=0)
    torch.testing.assert_close(ours, rllibs, rtol=0, atol=0, equal_nan=True)
    assert not torch.equal(ours[0], grads[0]) if scale != 1e-3 else torch.equal(ours[0], grads[0])


def test_the_warm_up_rate_is_the_same_on_the_host_and_on_the_device() -> None:
    """A float rate (CPU) is replaced by a float; a tensor rate (CUDA's fused AdamW reads it on the device) is
    written in place from the optimiser's step count tensor, with no host read."""
    for step in (None, torch.tensor(0.0), torch.tensor(2.0), torch.tensor(9.0)):
        host = warmup_lr(0.5, step, 1e-4, 4)
        rate = torch.tensor(1.0)
        assert warmup_lr(rate, step, 1e-4, 4) is rate and rate.item() == pytest.approx(host, rel=1e-6)
        assert host == pytest.approx(1e-4 * min((0 if step is None else int(step)) + 1, 4) / 4)


def test_every_step_draws_windows_of_one_shape_padded_at_episode_ends(learner) -> None:
    """Static shapes (what a captured step needs): a window that runs past its episode's end is right-padded
    and masked, never shortened."""
    windows = [learner.sample_minibatch(512) for _ in range(3)]
    shapes = [{key: tuple(value.shape) for key, value in window.items()} for window in windows]
    assert shapes[0] == shapes[1] == shapes[2]
    columns = {WINDOW_OBS, WINDOW_ACTIONS, WINDOW_COSTS, RETURNS_TO_GO, COSTS_TO_GO, TIMESTEPS, MASK}
    assert all(shapes[0][key][:2] == (512, 4) for key in columns)
    assert shapes[0][EMBEDDING_KEEP] == (512, 16, 16)  # and the dropout masks, B × 4L tokens × D
    assert any(bool((window[MASK] == 0).any()) for window in windows)


def test_the_transformer_vmaps_as_its_members_alone_with_each_members_dropout_masks() -> None:
    """What lets CDT's trials train as a population: its dropout masks come with the batch (``dropout_masks``, from
    each member's generator), so under ``torch.func.vmap`` over stacked parameters (``randomness="error"``: no random
    draw inside) each member computes what it computes alone with its masks; and the masks are dropout's: a tenth
    of each is off, and different masks give a different output."""
    settings = TransformerSettings(embedding_dim=16, num_layers=2, attention_heads=2, seq_len=4, horizon=50)
    members = [DecisionTransformer(3, 2, settings) for _ in range(2)]
    params, buffers = torch.func.stack_module_state(members)
    windows = {WINDOW_OBS: torch.randn(2, 5, 4, 3), WINDOW_ACTIONS: torch.randn(2, 5, 4, 2),
               RETURNS_TO_GO: torch.randn(2, 5, 4), COSTS_TO_GO: torch.randn(2, 5, 4),
               TIMESTEPS: torch.arange(4).expand(2, 5, 4), MASK: torch.ones(2, 5, 4)}
    masks = [dropout_masks(settings, 5, torch.Generator().manual_seed(seed)) for seed in (0, 1)]
    batch = windows | {key: torch.stack([own[key] for own in masks]) for key in masks[0]}
    run = torch.func.vmap(lambda p, b, x: torch.func.functional_call(members[0], (p, b), (x,)), randomness="error")
    out = run(params, buffers, batch)
    for i, member in enumerate(members):
        alone = member({key: value[i] for key, value in batch.items()})
        for key, value in alone.items():
            torch.testing.assert_close(out[key][i], value, rtol=1e-5, atol=1e-6)
    assert len(masks[0]) == 1 + 3 * settings.num_layers
    assert abs(float(masks[0][EMBEDDING_KEEP].float().mean()) - 0.9) < 0.02
    first = {key: value[0] for key, value in windows.items()}
    other = members[0](first | masks[1])[ck.ACTION_MEAN]
    assert not torch.allclose(members[0](first | masks[0])[ck.ACTION_MEAN], other)
    assert dropout_masks(TransformerSettings(dropout=0.0), 5, torch.Generator()) == {}


def test_relabelled_windows_shift_returns_and_costs_to_go(learner) -> None:
    sampler = learner.sampler
    assert sampler.num_relabelled > 0 and len(sampler.episodes) == 314 + sampler.num_relabelled
    view = 314  # the first relabelled copy
    weights = sampler.weights
    sampler.weights = torch.zeros_like(weights)
    sampler.weights[view] = 1.0
    window = sampler.rows(sampler.draw_rows(2, torch.Generator().manual_seed(0)))
    sampler.weights = weights
    plain = sampler.sequences.windows(sampler.episodes[[view, view]], window[TIMESTEPS][:, 0], 4)
    valid = window[MASK]
    assert torch.allclose(window[RETURNS_TO_GO], plain[RETURNS_TO_GO] + sampler.return_shift[view] * valid)
    assert torch.allclose(window[COSTS_TO_GO], plain[COSTS_TO_GO] + sampler.cost_shift[view] * valid)
    assert torch.equal(window[WINDOW_OBS], plain[WINDOW_OBS])  # states, actions and costs are unchanged


# ------------------------------------------------------------------------------------------------ deployment

def test_context_targets_fall_by_the_reward_and_cost_received() -> None:
    context = ContextWindow(seq_len=3, act_dim=1, return_target=100.0, cost_target=10.0)
    context.start(np.array([0.0]))
    assert context.window()[RETURNS_TO_GO].tolist() == [100, 0, 0] and context.window()[MASK].tolist() == [1, 0, 0]
    for t, (reward, cost) in enumerate([(5.0, 1.0), (2.5, 0.0), (1.0, 2.0)]):
        context.record(np.array([t + 0.5]), reward, cost, np.array([t + 1.0]))
    window = context.window()  # the last 3 of 4 steps
    assert window[RETURNS_TO_GO].tolist() == [95, 92.5, 91.5] and window[COSTS_TO_GO].tolist() == [9, 9, 7]
    assert window[WINDOW_OBS][:, 0].tolist() == [1, 2, 3] and window[WINDOW_ACTIONS][:, 0].tolist() == [1.5, 2.5, 0]
    assert window[TIMESTEPS].tolist() == [1, 2, 3] and window[MASK].tolist() == [1, 1, 1]


def test_connector_keeps_each_episodes_context_from_what_it_received(learner) -> None:
    module = learner.module["default_policy"]
    module.set_cost_threshold(15.0)  # BallCircle: R̂₀ = 700 + 5 · (15 − 10)
    episode = SingleAgentEpisode()
    episode.add_env_reset(observation=np.zeros(8, np.float32), infos={})
    connector = CDTContext()
    first = connector(rl_module=module, batch={}, episodes=[episode])
    assert next(iter(first[RETURNS_TO_GO].values()))[0][0] == 725.0
    for t, (reward, cost) in enumerate([(3.0, 1.0), (4.0, 0.0)]):
        episode.add_env_step(observation=np.full(8, t + 1.0, np.float32), action=np.array([0.1, -0.1], np.float32),
                             reward=reward, infos={"cost": cost})
    batch = connector(rl_module=module, batch={}, episodes=[episode])
    window = {key: next(iter(value.values()))[0] for key, value in batch.items()}
    assert window[RETURNS_TO_GO].tolist()[:3] == [725.0, 722.0, 718.0]
    assert window[COSTS_TO_GO].tolist()[:3] == [15, 14, 14]
    assert window[MASK].tolist() == [1, 1, 1, 0] and window[WINDOW_ACTIONS][1].tolist() == pytest.approx([0.1, -0.1])


def test_policy_targets_fall_by_the_reward_and_cost_it_is_given(learner) -> None:
    policy = CDTPolicy(learner.module["default_policy"])
    with pytest.raises(RuntimeError, match="call reset"):
        policy.act(np.zeros(8))
    policy.reset(threshold=20.0)
    policy.act(np.zeros(8))
    policy.act(np.ones(8), 1.0, reward=6.0)
    action = policy.act(np.ones(8), 0.0, reward=4.0)
    window = policy.contexts[0].window()
    assert window[RETURNS_TO_GO].tolist()[:3] == [750.0, 744.0, 740.0]
    assert window[COSTS_TO_GO].tolist()[:3] == [20, 19, 19]
    assert action.shape == (2,) and np.all(np.abs(action) <= 1)


def test_every_algorithm_that_takes_kappa_at_deployment_has_a_deployable_policy() -> None:
    assert {n for n, e in ALGORITHMS.items() if e.threshold_at_deployment} == {"caps", "cdt"}
    assert all(e.policy_path for e in ALGORITHMS.values() if e.threshold_at_deployment)


# ------------------------------------------------------------------------------------------------ slow

@pytest.mark.slow
@pytest.mark.timeout(300)
def test_checkpoint_round_trip_deploys_the_same_policy(ray_session, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    config = build_config("cdt", "BallCircle", BUNDLED, steps=4, updates_per_iteration=4, eval_episodes=1,
                          thresholds=[10.0], **TINY)
    algo = config.build_algo()
    try:
        result = algo.train()
        evaluated = result["evaluation"]["dsrl"]["thresholds"]["10"]
        assert evaluated["episodes"] == 1  # the connector fed the runner
        assert not {"head_usage", "predicted_cost"} & set(evaluated)  # no head to count, no cost critic: no extras
        algo.save_to_path(tmp_path / "ckpt")
        module = algo.get_module()
    finally:
        algo.stop()
    policy = load_policy(tmp_path / "ckpt")
    assert isinstance(policy, CDTPolicy) and policy.task == "BallCircle"
    with pytest.raises(ValueError, match="not the module of caps"):
        load_policy(tmp_path / "ckpt", algo="caps")
    policy.reset(threshold=30.0)
    obs = np.linspace(-1, 1, 8).astype(np.float32)
    action = policy.act(obs)
    module.set_cost_threshold(30.0)
    context = ContextWindow(4, 2, *module.initial_targets())
    context.start(obs)
    batch = {k: torch.from_numpy(v[None]) for k, v in context.window().items()}
    assert np.allclose(action, module.eval().transformer.act(batch).numpy()[0], atol=1e-6)
    assert evaluate_main(["--checkpoint", str(tmp_path / "ckpt"), "--critic", "fqe-reward"]) == 2
    assert "--critic: " in (err := capsys.readouterr().err) and "CDTPolicy, whose algorithm takes no --critic" in err
    assert evaluate_main(["--checkpoint", str(tmp_path / "ckpt"), "--head", "0"]) == 2  # CAPS's flag: refused
    assert "takes no --head" in capsys.readouterr().err
    assert evaluate_main(["--checkpoint", str(tmp_path / "ckpt"), "--thresholds", "10", "--episodes", "1",
                          "--json"]) == 0
    ray_free = json.loads(capsys.readouterr().out)["thresholds"]["10"]
    assert ray_free["episodes"] == 1 and not {"head_usage", "predicted_cost", "cost_shift"} & set(ray_free)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_lower_cost_target_gives_a_lower_realised_cost() -> None:
    """3000 steps of a 1-block width-32 transformer (batch 64, lr 1e-3, deterministic head) on the bundled
    BallCircle. With the return target fixed, only the cost-to-go token differs between κ = 0 and κ = 60; with
    return targets following the data's front (R 250 at κ 0 to 450 at κ 60), both move."""
    torch.manual_seed(0)
    config = build_config("cdt", "BallCircle", BUNDLED, steps=3000, batch_size=64, eval_episodes=0, seed=0,
                          embedding_dim=32, num_layers=1, attention_heads=2, lr=1e-3, warmup_steps=100,
                          stochastic=False, return_targets=[(0.0, 250.0), (60.0, 450.0)])
    config.validate()
    learner = local_learner(config)
    learner.update_from_dataset(num_updates=3000)
    policy = CDTPolicy(learner.module["default_policy"])
    task = get_task("BallCircle")
    front = evaluate_policy(policy, task, [0.0, 60.0], episodes=10, progress=False)["thresholds"]
    assert front["0"]["cost"] < front["60"]["cost"] and front["0"]["reward"] < front["60"]["reward"]
    policy.module.model_config["return_targets"] = [[0.0, 350.0]]
    fixed = evaluate_policy(policy, task, [0.0, 60.0], episodes=10, progress=False)["thresholds"]
    assert fixed["0"]["cost"] < fixed["60"]["cost"]
