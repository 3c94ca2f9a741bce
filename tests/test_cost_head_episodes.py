"""``cost_head_episode_limit``: the cost head K−1, the fallback, learns from the episodes within a total cost only
(``training_data``, ``shared_losses.head_row_weights``), in both backbones; the critics and the other heads read
every row."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from test_losses import HALF_LOG_2PI, SETTINGS, _tiny_batch

from rllib_caps.algorithms.caps import keys as m
from rllib_caps.algorithms.caps.iql.losses import IQLLossSettings, caps_iql_losses
from rllib_caps.algorithms.caps.sacbc.losses import sacbc_actor_loss
from rllib_caps.algorithms.caps.shared_losses import head_row_weights
from rllib_caps.algorithms.caps.training_data import cost_head_rows
from rllib_caps.data.episodes import episode_costs
from rllib_caps.data.schema import COSTS, EPS_ID

DATA = Path(__file__).resolve().parents[1] / "datasets" / "BallCircle"


def test_the_rows_are_those_of_the_episodes_within_the_limit() -> None:
    eps_id = torch.tensor([7, 7, 3, 3, 3, 9])
    costs = torch.tensor([1.0, 2.0, 0.0, 0.0, 1.0, 5.0])  # episode totals: 7 → 3, 3 → 1, 9 → 5
    assert cost_head_rows(eps_id, costs, 3.0).tolist() == [1, 1, 1, 1, 1, 0]
    assert cost_head_rows(eps_id, costs, 1.0).tolist() == [0, 0, 1, 1, 1, 0]
    with pytest.raises(ValueError,
                       match=r"total cost <= cost_head_episode_limit 0.5 \(the cheapest costs 1\); raise the limit"):
        cost_head_rows(eps_id, costs, 0.5)


def test_only_the_cost_head_reweighs_its_rows_to_a_mean_over_them() -> None:
    assert head_row_weights({}, 3) is None
    weights = head_row_weights({m.COST_HEAD_ROWS: torch.tensor([1.0, 0.0, 1.0, 0.0])}, 3)
    assert weights.tolist() == [[1, 1, 2], [1, 1, 0], [1, 1, 2], [1, 1, 0]]
    none = head_row_weights({m.COST_HEAD_ROWS: torch.zeros(4)}, 2)
    assert none.tolist() == [[1, 0]] * 4  # a minibatch without such a row: no gradient for the head, and no NaN


def test_iql_cost_head_regresses_on_its_rows_only_by_hand() -> None:
    """``test_losses.test_caps_iql_losses_paper_by_hand`` with row 1 outside the cost head's episodes: the last
    head's AWR term reads row 0 alone; every other term is unchanged."""
    fwd_out, batch = _tiny_batch()
    settings = IQLLossSettings(**SETTINGS, implementation="paper")
    plain = caps_iql_losses(fwd_out, batch, settings)
    rows = caps_iql_losses(fwd_out, batch | {m.COST_HEAD_ROWS: torch.tensor([1.0, 0.0], dtype=torch.float64)},
                           settings)
    L, e = HALF_LOG_2PI, math.exp
    want = (L * (1 + e(0.5)) + L * (e(-0.5) + e(0.25))) / 2 + (0.5 + L) * e(-1.0)  # head 2: row 0, weight 2 / 2
    assert rows["actor_loss"].item() == pytest.approx(want, rel=1e-6)
    assert rows["actor_loss"].item() != pytest.approx(plain["actor_loss"].item(), rel=1e-3)
    for name in ("qr_loss", "vr_loss", "qc_loss", "vc_loss"):
        assert torch.equal(rows[name], plain[name]), name


def test_sacbc_cost_head_gets_no_gradient_from_rows_outside() -> None:
    torch.manual_seed(0)
    b, k, a = 4, 3, 2
    q_heads, log_probs = torch.randn(b, k), torch.randn(b, k)
    pi_actions, actions = torch.randn(b, k, a, requires_grad=True), torch.randn(b, a)
    weights = head_row_weights({m.COST_HEAD_ROWS: torch.tensor([1.0, 0.0, 0.0, 1.0])}, k)
    plain = torch.autograd.grad(sacbc_actor_loss(q_heads, log_probs, pi_actions, actions, torch.tensor(0.1), 2.5),
                                pi_actions)[0]
    masked = torch.autograd.grad(sacbc_actor_loss(q_heads, log_probs, pi_actions, actions, torch.tensor(0.1), 2.5,
                                                  weights), pi_actions)[0]
    torch.testing.assert_close(masked[:, :-1], plain[:, :-1])  # the other heads: every row, as before
    assert not masked[[1, 2], -1].any() and plain[[1, 2], -1].abs().sum() > 0
    torch.testing.assert_close(masked[[0, 3], -1], 2 * plain[[0, 3], -1])  # a mean over its 2 rows of 4


@pytest.mark.parametrize("backbone", ["iql", "sacbc"])
def test_the_learner_marks_the_rows_of_the_cheap_episodes_and_trains(backbone: str) -> None:
    from rllib_caps.algorithms.registry import build_config
    from rllib_caps.bench import local_learner

    config = build_config("caps", "BallCircle", DATA, steps=1, heads=2, hidden=[16, 16], batch_size=32,
                          eval_episodes=0, seed=0)
    config.training(backbone=backbone, cost_head_episode_limit=10.0)
    config.validate()
    learner = local_learner(config)
    tensors = learner.dataset.tensors
    per_row, totals = episode_costs(tensors[EPS_ID], tensors[COSTS])
    rows = tensors[m.COST_HEAD_ROWS].numpy()
    np.testing.assert_array_equal(rows, (per_row <= 10.0).numpy().astype(np.float32))
    assert 0 < rows.mean() < 1 and (totals <= 10).any() and (totals > 10).any()  # the limit splits the data
    assert learner.update_from_dataset(num_updates=2) is not None
    for value in (-1.0, math.nan):
        with pytest.raises(ValueError, match="cost_head_episode_limit must be a total episode cost >= 0"):
            config.copy(copy_frozen=False).training(cost_head_episode_limit=value).validate()
