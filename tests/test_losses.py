"""CAPS(IQL) losses and the shared critic losses against hand-computed values, plus gradient isolation."""

from __future__ import annotations

import copy
import inspect
import math

import numpy as np
import pytest
import torch
from torch import nn

from rllib_caps.algorithms.caps import keys as m
from rllib_caps.algorithms.caps.iql.losses import (
    IQLLossSettings,
    awr_actor_loss,
    awr_head_weights,
    caps_iql_losses,
    gaussian_log_prob,
)
from rllib_caps.algorithms.caps.shared_losses import default_lambdas, head_coefficients
from rllib_caps.core.losses import critic_pair_losses, expectile_loss, polyak_update
from rllib_caps.data import schema

HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


# ------------------------------------------------------------------------------------------ λ and coefficients


def test_default_lambdas() -> None:
    assert default_lambdas(2) == []
    assert default_lambdas(4) == pytest.approx([2 / 3, 4 / 3])
    assert default_lambdas(8) == pytest.approx([k / 3.5 for k in range(1, 7)])
    assert len(default_lambdas(3)) == 1 and default_lambdas(3)[0] == pytest.approx(1.0)
    with pytest.raises(ValueError):
        default_lambdas(1)


def test_head_coefficients() -> None:
    like = torch.zeros((), dtype=torch.float64)
    assert [c.tolist() for c in head_coefficients([], like)] == [[1.0, 0.0], [0.0, 1.0]]
    reward, cost = head_coefficients([2 / 3, 4 / 3], like)
    assert reward.tolist() == [1.0, 1.0, 1.0, 0.0]
    assert cost.tolist() == pytest.approx([0.0, 2 / 3, 4 / 3, 1.0])
    assert reward.dtype == cost.dtype == torch.float64
    reward, cost = head_coefficients(default_lambdas(8), like)
    assert len(reward) == len(cost) == 8
    assert reward[0] == 1.0 and cost[0] == 0.0  # π^r: A^r only
    assert reward[-1] == 0.0 and cost[-1] == 1.0  # π^c: A^{−c} only
    as_tensor = head_coefficients(torch.tensor([2 / 3, 4 / 3], dtype=torch.float64), like)  # a member's λ_k
    torch.testing.assert_close(as_tensor, head_coefficients([2 / 3, 4 / 3], like), rtol=0, atol=0)


# ------------------------------------------------------------------------------------------------- expectile


def test_expectile_loss_by_hand() -> None:
    # u = [2, −1, 0] with τ = 0.7: weights [0.7, 0.3, 0.3] → (0.7·4 + 0.3·1 + 0) / 3.
    assert expectile_loss(t(2.0, -1.0, 0.0), 0.7).item() == pytest.approx(3.1 / 3)
    # τ = 0.5 is plain halved MSE.
    assert expectile_loss(t(2.0, -1.0, 3.0), 0.5).item() == pytest.approx(0.5 * 14 / 3)
    # τ = 0.9 penalises positive residuals 9× more than negative ones.
    assert expectile_loss(t(1.0), 0.9).item() == pytest.approx(0.9)
    assert expectile_loss(t(-1.0), 0.9).item() == pytest.approx(0.1)


# ------------------------------------------------------------------------------------------ critic pair (IQL)

# A B = 3 batch. Row 1 is terminated; rows 0 and 2 are not (a time-out looks exactly like row 0).
PAIR = dict(
    q1=t(1.0, 2.0, 3.0), q2=t(1.5, 1.0, 4.0), q1_target=t(2.0, 0.0, 5.0), q2_target=t(1.0, 1.0, 4.0),
    v=t(0.5, 0.5, 5.0), v_next=t(10.0, 20.0, 30.0), signal=t(1.0, 2.0, 3.0),
    terminateds=torch.tensor([False, True, False]), gamma=0.5, expectile=0.7,
)
# TD target: signal + γ (1 − d) V(s') = [1 + 5, 2 + 0, 3 + 15] = [6, 2, 18].
# q1 − y = [−5, 0, −15] → MSE 250/3; q2 − y = [−4.5, −1, −14] → MSE 217.25/3; q_loss = ½ (sum) = 77.875.
PAIR_Q_LOSS = 0.5 * (250.0 + 217.25) / 3


def test_critic_pair_maximize_by_hand() -> None:
    out = critic_pair_losses(**PAIR, maximize=True)
    # Pessimistic target = min twin = [1, 0, 4]; u = target − V = [0.5, −0.5, −1].
    assert out.v_loss.item() == pytest.approx((0.7 * 0.25 + 0.3 * 0.25 + 0.3 * 1.0) / 3)
    assert out.q_loss.item() == pytest.approx(PAIR_Q_LOSS)
    np.testing.assert_allclose(out.advantage.numpy(), [0.5, -0.5, -1.0])


def test_critic_pair_minimize_by_hand() -> None:
    out = critic_pair_losses(**PAIR, maximize=False)
    # Pessimistic target = max twin = [2, 1, 5]; u = −(target − V) = [−1.5, −0.5, 0] → all weighted 1 − τ.
    assert out.v_loss.item() == pytest.approx((0.3 * 2.25 + 0.3 * 0.25 + 0.0) / 3)
    assert out.q_loss.item() == pytest.approx(PAIR_Q_LOSS)  # the TD regression ignores the direction
    # Goodness advantage −(Q̂ − V): larger is cheaper.
    np.testing.assert_allclose(out.advantage.numpy(), [-1.5, -0.5, 0.0])


def test_critic_pair_minimize_learns_a_lower_expectile() -> None:
    """Minimising: V above the target is penalised with τ, below with 1 − τ, so V drifts to a low expectile
    of Q (the cheap actions), mirroring the maximising case."""
    base = dict(PAIR, q1_target=t(0.0, 0.0, 0.0), q2_target=t(0.0, 0.0, 0.0))
    above = critic_pair_losses(**dict(base, v=t(1.0, 1.0, 1.0)), maximize=False).v_loss.item()
    below = critic_pair_losses(**dict(base, v=t(-1.0, -1.0, -1.0)), maximize=False).v_loss.item()
    assert above == pytest.approx(0.7) and below == pytest.approx(0.3)
    above = critic_pair_losses(**dict(base, v=t(1.0, 1.0, 1.0)), maximize=True).v_loss.item()
    below = critic_pair_losses(**dict(base, v=t(-1.0, -1.0, -1.0)), maximize=True).v_loss.item()
    assert above == pytest.approx(0.3) and below == pytest.approx(0.7)


def test_only_terminated_stops_bootstrapping() -> None:
    """There is no truncation input: a time-out (terminated = False) bootstraps like any other step."""
    assert not any("trunc" in name for name in inspect.signature(critic_pair_losses).parameters)
    zero_q = dict(PAIR, q1=t(0.0, 0.0, 0.0), q2=t(0.0, 0.0, 0.0))
    for d, want in (([False] * 3, [6.0, 12.0, 18.0]), ([True] * 3, [1.0, 2.0, 3.0])):
        out = critic_pair_losses(**dict(zero_q, terminateds=torch.tensor(d)), maximize=True)
        assert out.q_loss.item() == pytest.approx(float(np.mean(np.square(want))))
    # Float 0/1 terminateds work the same as bools.
    as_float = critic_pair_losses(**dict(PAIR, terminateds=t(0.0, 1.0, 0.0)), maximize=True)
    assert as_float.q_loss.item() == pytest.approx(PAIR_Q_LOSS)


def test_critic_pair_gradients_stop_at_targets() -> None:
    leaves = {k: v.clone().requires_grad_(True) for k, v in PAIR.items() if isinstance(v, torch.Tensor)
              and v.is_floating_point()}
    out = critic_pair_losses(**dict(PAIR, **leaves), maximize=True)
    assert not out.advantage.requires_grad
    grads = torch.autograd.grad(out.v_loss, list(leaves.values()), retain_graph=True, allow_unused=True)
    touched = {k for k, g in zip(leaves, grads, strict=True) if g is not None and g.abs().sum() > 0}
    assert touched == {"v"}
    grads = torch.autograd.grad(out.q_loss, list(leaves.values()), allow_unused=True)
    touched = {k for k, g in zip(leaves, grads, strict=True) if g is not None and g.abs().sum() > 0}
    assert touched == {"q1", "q2"}


# ---------------------------------------------------------------------------------------------- head weights


def test_head_weights_paper_by_hand() -> None:
    a_r, a_c = t(0.1, 1.0, 2.5), t(0.2, -0.5, 1.0)  # a_c is the goodness advantage A^{−c}
    w = awr_head_weights(a_r, a_c, beta=2.0, lambdas=[2 / 3, 4 / 3], max_weight=100.0, mode="paper")
    e = math.exp
    want = [
        [e(0.2), e(2 * (0.1 + 2 / 3 * 0.2)), e(2 * (0.1 + 4 / 3 * 0.2)), e(0.4)],
        [e(2.0), e(2 * (1.0 - 2 / 3 * 0.5)), e(2 * (1.0 - 4 / 3 * 0.5)), e(-1.0)],
        [100.0, 100.0, 100.0, e(2.0)],  # exp(5), exp(6.33), exp(7.67) are clipped at max_weight
    ]
    np.testing.assert_allclose(w.numpy(), want, rtol=1e-12)


def test_head_weights_code_by_hand() -> None:
    a_r, a_c = t(0.1, 1.0, 2.5), t(0.2, -0.5, 3.0)
    w = awr_head_weights(a_r, a_c, beta=2.0, lambdas=[2 / 3, 4 / 3], max_weight=100.0, mode="code")
    e = math.exp
    w_r = [e(0.2), e(2.0), 100.0]  # exp(5) clipped
    w_c = [e(0.4), e(-1.0), 100.0]  # exp(6) clipped
    want = [[w_r[i], w_r[i] + 2 / 3 * w_c[i], w_r[i] + 4 / 3 * w_c[i], w_c[i]] for i in range(3)]
    np.testing.assert_allclose(w.numpy(), want, rtol=1e-12)
    # The clip applies to w_r and w_c separately, so a middle head may exceed max_weight.
    assert w[2, 1].item() == pytest.approx(100.0 + 200.0 / 3)


def test_head_weights_modes_agree_on_extreme_heads() -> None:
    rng = np.random.default_rng(0)
    a_r, a_c = torch.from_numpy(rng.normal(size=50) * 2), torch.from_numpy(rng.normal(size=50) * 2)
    kw = dict(beta=3.0, lambdas=default_lambdas(8), max_weight=100.0)
    paper, code = awr_head_weights(a_r, a_c, mode="paper", **kw), awr_head_weights(a_r, a_c, mode="code", **kw)
    assert paper.shape == code.shape == (50, 8)
    torch.testing.assert_close(paper[:, 0], code[:, 0])
    torch.testing.assert_close(paper[:, -1], code[:, -1])
    assert paper.max().item() <= 100.0
    with pytest.raises(ValueError):
        awr_head_weights(a_r, a_c, mode="other", **kw)


# --------------------------------------------------------------------------------------------- actor pieces


def test_gaussian_log_prob_unit_std_is_scaled_mse() -> None:
    rng = np.random.default_rng(1)
    actions = torch.from_numpy(rng.normal(size=(4, 3)))
    mean = torch.from_numpy(rng.normal(size=(4, 2, 3)))
    want = -0.5 * ((actions[:, None, :] - mean) ** 2).sum(-1) - 3 * HALF_LOG_2PI
    for log_std in (torch.zeros(2, 3, dtype=torch.float64), torch.zeros((), dtype=torch.float64)):
        got = gaussian_log_prob(actions, mean, log_std)
        assert got.shape == (4, 2)
        torch.testing.assert_close(got, want)


def test_gaussian_log_prob_with_std_by_hand() -> None:
    actions = t(1.0, -1.0).reshape(1, 2)
    mean = t(0.0, 0.0, 1.0, 1.0).reshape(1, 2, 2)
    log_std = t(math.log(2.0), 0.0).reshape(1, 1, 2)  # σ = (2, 1) for both heads
    got = gaussian_log_prob(actions, mean, log_std)
    head0 = -(1 / 8 + math.log(2.0)) - 1 / 2 - 2 * HALF_LOG_2PI  # residuals (1, −1)
    head1 = -(0.0 + math.log(2.0)) - 2.0 - 2 * HALF_LOG_2PI  # residuals (0, −2)
    np.testing.assert_allclose(got.numpy(), [[head0, head1]], rtol=1e-12)


def test_actor_loss_by_hand() -> None:
    log_probs = t(-1.0, -2.0, -3.0, -4.0).reshape(2, 2).requires_grad_(True)
    weights = t(1.0, 2.0, 3.0, 0.5).reshape(2, 2).requires_grad_(True)
    loss = awr_actor_loss(log_probs, weights)
    # −Σ_k mean_b w·logπ = −(mean(−1, −9) + mean(−4, −2)) = 8.
    assert loss.item() == pytest.approx(8.0)
    loss.backward()
    assert weights.grad is None  # the weights are detached
    np.testing.assert_allclose(log_probs.grad.numpy(), -weights.detach().numpy() / 2)


def test_polyak_update() -> None:
    online, target = nn.Linear(3, 2), nn.Linear(3, 2)
    with torch.no_grad():
        for p in online.parameters():
            p.fill_(1.0)
        for p in target.parameters():
            p.fill_(-1.0)
    polyak_update(online, target, tau=0.25)
    for p, p_t in zip(online.parameters(), target.parameters(), strict=True):
        torch.testing.assert_close(p_t, torch.full_like(p_t, 0.25 * 1.0 + 0.75 * -1.0))
        torch.testing.assert_close(p, torch.ones_like(p))  # the online net is untouched
        assert p_t.grad is None
    polyak_update(online, target, tau=0.0)
    assert all(torch.all(p == -0.5) for p in target.parameters())
    polyak_update(online, target, tau=1.0)
    assert all(torch.all(p == 1.0) for p in target.parameters())
    with pytest.raises(ValueError):
        polyak_update(online, nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 2)), tau=0.5)


# ---------------------------------------------------------------------------------------- full CAPS(IQL) loss


def test_code_mode_maximises_negated_cost() -> None:
    assert not IQLLossSettings(**SETTINGS, implementation="paper").cost_maximize
    assert IQLLossSettings(**SETTINGS, implementation="code").cost_maximize


def _tiny_batch() -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """B = 2, K = 3 heads (λ = 0.5), A = 1. Row 1 is terminated."""
    batch = {
        schema.REWARDS: t(10.0, 20.0), schema.COSTS: t(1.0, 0.0), schema.TERMINATEDS: torch.tensor([False, True]),
        schema.ACTIONS: t(0.5, -1.0).reshape(2, 1),
    }
    fwd_out = {
        m.QR_PREDS: t(1.0, 3.0), m.QR_TWIN_PREDS: t(2.0, 2.0),
        m.QR_TARGET_PREDS: t(1.5, 2.5), m.QR_TARGET_TWIN_PREDS: t(1.0, 3.0),
        m.VR_PREDS: t(1.0, 2.0), m.VR_PREDS_NEXT: t(4.0, 8.0),
        m.QC_PREDS: t(2.0, 0.0), m.QC_TWIN_PREDS: t(1.0, 1.0),
        m.QC_TARGET_PREDS: t(2.0, 0.5), m.QC_TARGET_TWIN_PREDS: t(1.0, 1.0),
        m.VC_PREDS: t(1.0, 0.5), m.VC_PREDS_NEXT: t(2.0, 6.0),
        # Heads 0 and 1 reproduce the dataset action, head 2 is off by 1 in both rows.
        m.HEAD_MEANS: t(0.5, 0.5, 1.5, -1.0, -1.0, 0.0).reshape(2, 3, 1),
        m.HEAD_LOG_STD: torch.zeros(3, 1, dtype=torch.float64),
    }
    return fwd_out, batch


SETTINGS = dict(gamma=0.5, reward_scale=0.1, expectile_reward=0.7, expectile_cost=0.7, beta=1.0, max_weight=100.0,
                lambdas=(0.5,), time_limit="bootstrap", cost_gamma=0.5)


# rel=1e-6 below, not 1e-12: expectile_loss builds its τ / 1 − τ weights from Python floats with
# torch.where, which yields float32 weights even for float64 inputs (0.7 → 0.699999988).


def test_caps_iql_losses_paper_by_hand() -> None:
    fwd_out, batch = _tiny_batch()
    losses = caps_iql_losses(fwd_out, batch, IQLLossSettings(**SETTINGS, implementation="paper"))
    assert set(losses) == {"actor_loss", "qr_loss", "vr_loss", "qc_loss", "vc_loss"}
    # Reward: r = 0.1 · [10, 20] = [1, 2]; y = [1 + 0.5 · 4, 2] = [3, 2];
    # q − y = [−2, 1] and [−1, 0] → ½ (2.5 + 0.5) = 1.5. min target = [1, 2.5], u = [0, 0.5] → 0.7 · 0.25 / 2.
    e = math.exp
    want = {"qr_loss": 1.5, "vr_loss": 0.0875}
    # Cost (+c, minimised): y = [1 + 0.5 · 2, 0] = [2, 0]; q − y = [0, 0] and [−1, 1] → ½ (0 + 1) = 0.5.
    # max target = [2, 1], u = −(target − V) = [−1, −0.5] → 0.3 · (1 + 0.25) / 2; A^{−c} = [−1, −0.5].
    want |= {"qc_loss": 0.5, "vc_loss": 0.1875}
    # Actor, A^r = [0, 0.5]: head 0 w = exp(A^r), head 1 w = exp(A^r − 0.5 A^c) = exp([−0.5, 0.25]),
    # head 2 w = exp(A^{−c}) = exp([−1, −0.5]); log π = −½ log 2π for heads 0, 1 and −½ − ½ log 2π for head 2.
    L = HALF_LOG_2PI
    want["actor_loss"] = (L * (1 + e(0.5)) + L * (e(-0.5) + e(0.25)) + (0.5 + L) * (e(-1.0) + e(-0.5))) / 2
    for key, value in want.items():
        assert losses[key].item() == pytest.approx(value, rel=1e-6), key
    assert sum(losses.values()).item() == pytest.approx(sum(want.values()), rel=1e-6)


def test_caps_iql_losses_code_by_hand() -> None:
    fwd_out, batch = _tiny_batch()
    losses = caps_iql_losses(fwd_out, batch, IQLLossSettings(**SETTINGS, implementation="code"))
    want = {"qr_loss": 1.5, "vr_loss": 0.0875}  # the reward pair does not depend on the implementation
    # Cost (−c, maximised): y = [−1 + 0.5 · 2, 0] = [0, 0]; q − y = [2, 0] and [1, 1] → ½ (2 + 1) = 1.5.
    # min target = [1, 0.5] = V → v_loss 0 and A^{−c} = [0, 0].
    want |= {"qc_loss": 1.5, "vc_loss": 0.0}
    # Actor: w_r = exp(A^r) = [1, e^0.5], w_c = exp(0) = 1; head 1 = w_r + 0.5 w_c, head 2 = w_c; averaged over
    # the K = 3 heads (the authors' code), where the paper mode sums.
    L, e = HALF_LOG_2PI, math.exp
    want["actor_loss"] = (L * (1 + e(0.5)) + L * (1.5 + e(0.5) + 0.5) + (0.5 + L) * 2) / 2 / 3
    for key, value in want.items():
        assert losses[key].item() == pytest.approx(value, rel=1e-6), key
    assert sum(losses.values()).item() == pytest.approx(sum(want.values()), rel=1e-6)


@pytest.mark.parametrize(("implementation", "cost_sign"), [("paper", 1.0), ("code", -1.0)])
def test_cost_critics_regress_on_signed_cost(implementation: str, cost_sign: float) -> None:
    """The cost TD target is ±c + γ (1 − d) V^c(s'): the q loss vanishes exactly at the target of its own
    convention ("paper": +c, "code": −c) and not at the other one."""
    fwd_out, batch = _tiny_batch()
    settings = IQLLossSettings(**SETTINGS, implementation=implementation)
    not_done = 1.0 - batch[schema.TERMINATEDS].double()

    def qc_loss_at(sign: float) -> float:
        y = sign * batch[schema.COSTS] + settings.gamma * not_done * fwd_out[m.VC_PREDS_NEXT]
        return caps_iql_losses(dict(fwd_out, **{m.QC_PREDS: y, m.QC_TWIN_PREDS: y}), batch, settings)["qc_loss"].item()

    assert qc_loss_at(cost_sign) == 0.0
    assert qc_loss_at(-cost_sign) > 0.5  # costs [1, 0] → at least one target is off by 2


def test_caps_iql_losses_ignore_truncation() -> None:
    fwd_out, batch = _tiny_batch()
    settings = IQLLossSettings(**SETTINGS, implementation="paper")
    plain = caps_iql_losses(fwd_out, batch, settings)
    truncated = caps_iql_losses(fwd_out, dict(batch, truncateds=torch.tensor([True, True])), settings)
    for key in plain:
        assert truncated[key].item() == plain[key].item()


class _Nets(nn.Module):
    """Tiny stand-ins for the CAPS module: shared-body K-head actor, twin Q and V for reward and cost."""

    def __init__(self, obs_dim: int, act_dim: int, heads: int) -> None:
        super().__init__()
        self.k, self.a = heads, act_dim
        self.actor_body = nn.Sequential(nn.Linear(obs_dim, 8), nn.Tanh())
        self.actor_heads = nn.Linear(8, heads * act_dim)
        self.log_std = nn.Parameter(torch.full((heads, act_dim), -0.3))
        for name in ("qr1", "qr2", "qc1", "qc2"):
            setattr(self, name, nn.Sequential(nn.Linear(obs_dim + act_dim, 8), nn.Tanh(), nn.Linear(8, 1)))
        self.vr = nn.Sequential(nn.Linear(obs_dim, 8), nn.Tanh(), nn.Linear(8, 1))
        self.vc = nn.Sequential(nn.Linear(obs_dim, 8), nn.Tanh(), nn.Linear(8, 1))
        # Targets deliberately left trainable: the loss itself must not send them gradient.
        for name in ("qr1", "qr2", "qc1", "qc2"):
            setattr(self, name + "_target", copy.deepcopy(getattr(self, name)))

    def groups(self) -> dict[str, list[nn.Parameter]]:
        params = lambda *names: [p for n in names for p in getattr(self, n).parameters()]  # noqa: E731
        return {
            "actor_loss": params("actor_body", "actor_heads") + [self.log_std],
            "qr_loss": params("qr1", "qr2"), "vr_loss": params("vr"),
            "qc_loss": params("qc1", "qc2"), "vc_loss": params("vc"),
            "targets": params("qr1_target", "qr2_target", "qc1_target", "qc2_target"),
        }

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        obs, next_obs, act = batch[schema.OBS], batch[schema.NEXT_OBS], batch[schema.ACTIONS]
        sa = torch.cat([obs, act], -1)
        q = {name: getattr(self, name)(sa).squeeze(-1) for name in
             ("qr1", "qr2", "qc1", "qc2", "qr1_target", "qr2_target", "qc1_target", "qc2_target")}
        return {
            m.HEAD_MEANS: self.actor_heads(self.actor_body(obs)).reshape(-1, self.k, self.a),
            m.HEAD_LOG_STD: self.log_std,
            m.QR_PREDS: q["qr1"], m.QR_TWIN_PREDS: q["qr2"],
            m.QR_TARGET_PREDS: q["qr1_target"], m.QR_TARGET_TWIN_PREDS: q["qr2_target"],
            m.QC_PREDS: q["qc1"], m.QC_TWIN_PREDS: q["qc2"],
            m.QC_TARGET_PREDS: q["qc1_target"], m.QC_TARGET_TWIN_PREDS: q["qc2_target"],
            m.VR_PREDS: self.vr(obs).squeeze(-1), m.VR_PREDS_NEXT: self.vr(next_obs).squeeze(-1),
            m.VC_PREDS: self.vc(obs).squeeze(-1), m.VC_PREDS_NEXT: self.vc(next_obs).squeeze(-1),
        }


@pytest.mark.parametrize("implementation", ["paper", "code"])
def test_loss_terms_touch_disjoint_parameters(implementation: str) -> None:
    """One backward pass on the sum gives every network exactly the gradient of its own loss term."""
    torch.manual_seed(0)
    nets = _Nets(obs_dim=3, act_dim=2, heads=4)
    # Perturb the targets so they differ from the online twins (as after some training).
    with torch.no_grad():
        for p in nets.groups()["targets"]:
            p.add_(0.1 * torch.randn_like(p))
    b = 6
    batch = {
        schema.OBS: torch.randn(b, 3), schema.NEXT_OBS: torch.randn(b, 3), schema.ACTIONS: torch.randn(b, 2),
        schema.REWARDS: torch.randn(b), schema.COSTS: torch.randint(0, 2, (b,)).float(),
        schema.TERMINATEDS: torch.tensor([False, True, False, False, True, False]),
    }
    settings = IQLLossSettings(**{**SETTINGS, "lambdas": tuple(default_lambdas(4))}, implementation=implementation)
    losses = caps_iql_losses(nets(batch), batch, settings)
    groups = nets.groups()
    everything = [p for ps in groups.values() for p in ps]
    total_grads = torch.autograd.grad(sum(losses.values()), everything, retain_graph=True, allow_unused=True)
    total = dict(zip(map(id, everything), total_grads, strict=True))
    for name, loss in losses.items():
        own = torch.autograd.grad(loss, everything, retain_graph=True, allow_unused=True)
        for p, g in zip(everything, own, strict=True):
            if any(p is q for q in groups[name]):
                assert g is not None and g.abs().sum() > 0, name
                torch.testing.assert_close(total[id(p)], g, rtol=0, atol=0)
            else:
                assert g is None or torch.count_nonzero(g) == 0, (name, p.shape)
    assert all(total[id(p)] is None for p in groups["targets"])  # targets get no gradient at all
