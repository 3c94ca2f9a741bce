"""FQE (``rllib_caps.algorithms.caps.fqe``): the loss by hand, the fitted Q̂ against the exact Q^π of fixed head
policies on a small finite CMDP (exact DP of ``tests/cmdp.py``), and the critic override of the switching rule."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from cmdp import CMDP, policy_cost, random_cmdp
from test_caps_module import OBS, make_module

from benchmarks.rule_critic_ensemble import main as rule_critic_ensemble_main
from rllib_caps.algorithms.caps.fqe import FQECritics, FQESettings, fit_fqe, fit_module_fqe, fitted_heads, fqe_loss
from rllib_caps.core.time_limit import remaining_time
from rllib_caps.data import TransitionDataset
from rllib_caps.data.schema import ACTIONS, COSTS, DTYPES, EPS_ID, NEXT_OBS, REWARDS, TERMINATEDS, TRUNCATEDS, T
from rllib_caps.data.schema import OBS as OBS_COLUMN

BUNDLED = Path(__file__).resolve().parents[1] / "datasets" / "BallCircle"


def test_fqe_loss_by_hand() -> None:
    q1, q2 = torch.tensor([1.0, 2.0]), torch.tensor([0.0, 1.0])
    next_q1, next_q2 = torch.tensor([10.0, 10.0]), torch.tensor([20.0, 20.0])
    signal, ends = torch.tensor([1.0, 1.0]), torch.tensor([0.0, 1.0])
    # twin 1 targets: 1 + 0.5·10 = 6, and 1 (ended); twin 2: 1 + 0.5·20 = 11, and 1
    expected = 0.5 * (((1 - 6) ** 2 + (2 - 1) ** 2) / 2 + ((0 - 11) ** 2 + (1 - 1) ** 2) / 2)
    assert fqe_loss(q1, q2, next_q1, next_q2, signal, ends, 0.5).item() == pytest.approx(expected)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="steps must be >= 1"):
        FQESettings(steps=0)
    with pytest.raises(ValueError, match="tau"):
        FQESettings(tau=0.0)
    with pytest.raises(ValueError, match="critic must be one of"):
        fit_module_fqe(make_module(), TransitionDataset({}), ["fqe"], FQESettings())


# ------------------------------------------------------------------------- FQE against exact Q^π on a CMDP

def exact_q(m: CMDP, signal: np.ndarray, policy: np.ndarray) -> np.ndarray:
    """Exact undiscounted finite-horizon Q^π_t(s, a) (T, S, A) of the stationary ``policy`` (S,) for the per-step
    ``signal`` (S, A) of nonnegative integers, no terminal value: V^π from ``cmdp.policy_cost``."""
    m = dataclasses.replace(m, step_cost=signal, terminal_cost=np.zeros(m.n_states, dtype=np.int64),
                            max_cost=int(signal.max()))
    v = policy_cost(m, lambda t, states, spent: policy[states])[:, :, 0]  # (T + 1, S), nothing spent yet
    return signal[None] + np.einsum("sax,tx->tsa", m.transitions, v[1:])


def cmdp_dataset(m: CMDP, rewards: np.ndarray, episodes: int, rng: np.random.Generator) -> TransitionDataset:
    """Episodes of a uniform behaviour policy from uniform start states, one-hot observations and actions, cut
    by a time-out after T steps (as DSRL's data are)."""
    rows: dict[str, list] = {name: [] for name in DTYPES}
    eye_s, eye_a = np.eye(m.n_states), np.eye(m.n_actions)
    for episode in range(episodes):
        s = int(rng.integers(m.n_states))
        for t in range(m.horizon):
            a = int(rng.integers(m.n_actions))
            s_next = int(rng.choice(m.n_states, p=m.transitions[s, a]))
            for name, value in ((OBS_COLUMN, eye_s[s]), (ACTIONS, eye_a[a]), (REWARDS, rewards[s, a]),
                                (COSTS, m.step_cost[s, a]), (NEXT_OBS, eye_s[s_next]), (TERMINATEDS, False),
                                (TRUNCATEDS, t == m.horizon - 1), (EPS_ID, episode), (T, t)):
                rows[name].append(value)
            s = s_next
    return TransitionDataset({name: torch.from_numpy(np.asarray(v, dtype=DTYPES[name])) for name, v in rows.items()})


@pytest.mark.slow  # ~20 s of pure-torch FQE on a loaded 2-core machine
def test_fqe_recovers_the_exact_q_of_each_head_on_a_finite_cmdp() -> None:
    torch.manual_seed(0)
    rng = np.random.default_rng(3)
    m = random_cmdp(rng, n_states=5, n_actions=3, horizon=4, stochastic=True, state_cost=False, max_cost=2)
    rewards = rng.integers(0, 4, size=(m.n_states, m.n_actions))
    policies = np.stack([rewards.argmax(1), m.step_cost.argmin(1)])  # head 0 greedy in reward, head 1 in cost
    data = cmdp_dataset(m, rewards, episodes=3000, rng=rng)

    def actor(obs: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        return torch.eye(m.n_actions)[torch.from_numpy(policies)[:, obs.argmax(-1)].T]  # (B, K, A)

    def critic_input(obs: torch.Tensor, step: torch.Tensor | None) -> torch.Tensor:
        return torch.cat([obs, remaining_time(step, m.horizon)], dim=-1)

    critics = fit_fqe(actor, critic_input, data, hidden=[64, 64], gamma=1.0, cost_gamma=1.0, time_limit="time_aware",
                      variants=["fqe-both", "fqe-fallback"],
                      settings=FQESettings(steps=2000, batch_size=256, lr=1e-3, tau=0.05),
                      progress=False)

    # Every (t, s, a) on the time-aware grid, against the exact Q^π_k of every head, reward and cost.
    t, s, a = (g.ravel() for g in np.meshgrid(np.arange(m.horizon), np.arange(m.n_states), np.arange(m.n_actions),
                                              indexing="ij"))
    x = critic_input(torch.eye(m.n_states)[s], torch.from_numpy(t))
    relative_errors, other_head_errors = [], []
    with torch.no_grad():
        for k in range(2):
            for nets, signal in ((critics.reward, rewards), (critics.cost, m.step_cost)):
                truth, other = (exact_q(m, signal, policies[j])[t, s, a] for j in (k, 1 - k))
                q1, q2 = (q.numpy() for q in nets[str(k)](x, torch.eye(m.n_actions)[a]))
                spread = truth.max() - truth.min()  # the values span several units
                relative_errors.append(max(np.abs(q1 - truth).max(), np.abs(q2 - truth).max()) / spread)
                other_head_errors.append(np.abs(q1 - other).max() / spread)
    assert max(relative_errors) < 0.08, relative_errors
    assert min(other_head_errors) > 0.15, other_head_errors  # each head's Q̂ is its own head's Q^π

    # The override the switching rule reads: Q̂^r_k(s, π_k(s)) against the exact V^π_k; heads differ there.
    with torch.no_grad():
        means = actor(torch.eye(m.n_states)[s], torch.from_numpy(t))
        q_reward, q_cost = critics.replace(x, means, torch.zeros(len(s), 2), torch.zeros(len(s), 2))
        kept_reward, kept_cost = critics.variant("fqe-reward").replace(x, means, torch.zeros(len(s), 2),
                                                                       torch.full((len(s), 2), 7.0))
        given_reward, fallback_cost = critics.variant("fqe-fallback").replace(x, means, torch.full((len(s), 2), 7.0),
                                                                              torch.zeros(len(s), 2))
    for k in range(2):
        v_reward = exact_q(m, rewards, policies[k])[t, s, policies[k][s]]
        v_cost = exact_q(m, m.step_cost, policies[k])[t, s, policies[k][s]]
        np.testing.assert_allclose(q_reward[:, k].numpy(), v_reward, atol=0.08 * np.ptp(v_reward))
        np.testing.assert_allclose(q_cost[:, k].numpy(), v_cost, atol=0.08 * np.ptp(v_cost))
        # fqe-fallback: head k's action once, then the cost head (head 1) ever after
        then_fallback = exact_q(m, m.step_cost, policies[1])[t, s, policies[k][s]]
        np.testing.assert_allclose(fallback_cost[:, k].numpy(), then_fallback, atol=0.08 * np.ptp(then_fallback))
    assert np.abs(exact_q(m, m.step_cost, policies[1])[t, s, policies[0][s]]
                  - exact_q(m, m.step_cost, policies[0])[t, s, policies[0][s]]).max() > 0.2  # the two differ here
    assert torch.equal(kept_reward, q_reward) and torch.all(kept_cost == 7.0)  # fqe-reward keeps the given Q^c
    assert torch.all(given_reward == 7.0)  # fqe-fallback keeps the given Q^r


def test_module_switching_reads_the_override() -> None:
    module = make_module(num_heads=3)
    obs, zeros = torch.randn(8, OBS), torch.zeros(8)
    critics = FQECritics(OBS, 2, [8], num_heads=3, variants=["fqe-both"])
    with torch.no_grad():
        for nets, bias in ((critics.reward, (0.0, 5.0, 1.0)), (critics.cost, (0.0, 0.5, 0.25))):
            for k, twin in enumerate(nets.values()):
                for q in twin.members:
                    q[-1].weight.zero_()
                    q[-1].bias.fill_(bias[k])
        _, q_reward, q_cost = module.head_values(obs, zeros, critics)
        _, heads = module.switching_actions(obs, zeros, zeros, 1.0, critics)
    assert torch.all(q_reward == torch.tensor([0.0, 5.0, 1.0])) and torch.all(q_cost == torch.tensor([0.0, 0.5, 0.25]))
    assert torch.all(heads == 1)  # every head feasible (Q̂^c < threshold): the highest Q̂^r wins
    _, offline_reward, offline_cost = module.head_values(obs, zeros)
    _, kept_reward, kept_cost = module.head_values(obs, zeros, critics.variant("fqe-reward"))
    assert torch.equal(kept_cost, offline_cost) and not torch.equal(kept_reward, offline_reward)
    _, kept_reward, fallback_cost = module.head_values(obs, zeros, critics.variant("fqe-fallback"))
    assert torch.equal(kept_reward, offline_reward) and torch.all(fallback_cost == 0.25)  # the last head's Q̂^c
    with pytest.raises(ValueError, match="this fit left out"):
        FQECritics(OBS, 2, [8], num_heads=3, variants=["fqe-reward"]).variant("fqe-fallback")
    with pytest.raises(ValueError, match="this fit left out"):
        FQECritics(OBS, 2, [8], num_heads=3, variants=["fqe-fallback"]).variant("fqe-both")


def test_a_fit_holds_only_the_critics_its_variants_read() -> None:
    assert fitted_heads(["fqe-reward"], 3) == ([0, 1, 2], [])
    assert fitted_heads(["fqe-fallback"], 3) == ([], [2])  # the cost head's Q̂^c only
    assert fitted_heads(["fqe-fallback", "fqe-reward"], 3) == ([0, 1, 2], [2])
    assert fitted_heads(["fqe-both", "fqe-fallback"], 3) == ([0, 1, 2], [0, 1, 2])
    critics = FQECritics(OBS, 2, [8], num_heads=3, variants=["fqe-fallback"])
    assert list(critics.reward) == [] and list(critics.cost) == ["2"]
    q_reward, q_cost = torch.full((4, 3), 7.0), torch.zeros(4, 3)
    obs, actions = torch.randn(4, OBS), torch.randn(4, 3, 2)
    with torch.no_grad():
        kept, fallback = critics.replace(obs, actions, q_reward, q_cost)
        for k in range(3):  # head k's action under the cost head's critic
            assert torch.equal(fallback[:, k], torch.max(*critics.cost["2"](obs, actions[:, k])))
    assert torch.equal(kept, q_reward)


@pytest.mark.slow
def test_evaluate_cli_switches_with_fqe_critics_of_a_trained_checkpoint(ray_session, tmp_path, monkeypatch,
                                                                       capsys) -> None:
    from rllib_caps.algorithms.registry import build_config
    from rllib_caps.evaluate import main as evaluate_main
    from rllib_caps.train import train

    monkeypatch.setenv("RLLIB_CAPS_SMOKE_TEST", "1")
    algo, _ = train(build_config("caps", "BallCircle", BUNDLED, steps=20, heads=2, seed=0), progress=False)
    algo.save_to_path(tmp_path / "ckpt")
    algo.stop()
    monkeypatch.chdir(tmp_path)
    assert evaluate_main(["--checkpoint", "ckpt", "--critic", "fqe-reward", "--data", str(BUNDLED)]) == 0
    assert "BallCircle (fqe-reward critics)" in capsys.readouterr().out
    out = tmp_path / "results" / "fqe.json"
    assert evaluate_main(["--checkpoint", "ckpt", "--critic", "offline", "fqe-both", "--data", str(BUNDLED),
                          "--thresholds", "20", "--out", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert set(saved) == {"offline", "fqe-both", "scale"} and list(saved["fqe-both"]["thresholds"]) == ["20"]
    assert saved["scale"]["reward"] == "normalised" and saved["scale"]["range_source"] == "dsrl"
    assert saved["offline"]["cost_shift"] >= 0.0  # the checkpoint's Q^c shift, with the results that read it
    assert [p.name for p in out.parent.iterdir()] == ["fqe.json"]  # nothing temporary left behind
    # The default --data is datasets/<task> under the working directory: here there is none, and it says so.
    assert evaluate_main(["--checkpoint", "ckpt", "--critic", "fqe-reward"]) == 2
    assert "datasets/BallCircle" in capsys.readouterr().err
    assert evaluate_main(["--checkpoint", "ckpt", "--critic", "fqe-reward", "--head", "0", "--data", str(BUNDLED)]) == 2
    assert "--head acts with one head" in capsys.readouterr().err
    # The rule's cost critic refit at its own expectile, then calibrated: its shift is the new critic's.
    refit = tmp_path / "results" / "refit.json"
    assert evaluate_main(["--checkpoint", "ckpt", "--rule-cost-expectile", "0.1", "--calibrate-cost", "pessimism",
                          "--data", str(BUNDLED), "--thresholds", "20", "--out", str(refit)]) == 0
    saved = json.loads(refit.read_text())
    assert saved["rule_cost_expectile"] == 0.1 and saved["cost_shift"] >= 0.0 and "20" in saved["thresholds"]
    assert (saved["rule_cost_members"], saved["rule_cost_reading"]) == (1, "max")
    assert evaluate_main(["--checkpoint", "ckpt", "--rule-cost-expectile", "0.1", "--rule-cost-members", "2",
                          "--rule-cost-reading", "mean", "--calibrate-cost", "pessimism", "--data", str(BUNDLED),
                          "--thresholds", "20", "--out", str(refit)]) == 0
    saved = json.loads(refit.read_text())
    assert (saved["rule_cost_members"], saved["rule_cost_reading"]) == (2, "mean")
    # The benchmark that shares one fit across checkpoints gives what evaluate gives each of them.
    assert rule_critic_ensemble_main(["--data", str(BUNDLED), "--checkpoints", "ckpt", "ckpt", "--expectile", "0.1",
                                      "--members", "2", "--readings", "mean", "--thresholds", "20", "--episodes",
                                      str(saved["thresholds"]["20"]["episodes"]), "--out-dir", "shared"]) == 0
    shared = json.loads((tmp_path / "shared" / "ckpt-mean.json").read_text())
    assert shared["thresholds"] == saved["thresholds"] and shared["cost_shift"] == saved["cost_shift"]
    for bad, says in ((["--rule-cost-expectile", "0.1"], "give --calibrate-cost"),
                      (["--rule-cost-members", "2"], "give --rule-cost-expectile"),
                      (["--rule-cost-expectile", "0.1", "--calibrate-cost", "pessimism", "--rule-cost-members", "0"],
                       "--rule-cost-members must be >= 1"),
                      (["--rule-cost-expectile", "1.5", "--calibrate-cost", "pessimism"], "must be in (0, 1)"),
                      (["--rule-cost-expectile", "0.1", "--calibrate-cost", "pessimism", "--head", "1"],
                       "leave out --rule-cost-expectile")):
        assert evaluate_main(["--checkpoint", "ckpt", "--data", str(BUNDLED), *bad]) == 2
        assert says in capsys.readouterr().err
