"""CDT's transformer without Ray (Liu et al., 2023, as OSRL builds it): per step the tokens (R̂_t, Ĉ_t, s_t, a_t),
each a linear embedding plus a learned timestep embedding, through pre-LayerNorm causal self-attention blocks;
the action is read off the s_t output and the 2-class cost prediction off the a_t output. The RLModule and the
speed benchmark build it with the same class."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from rllib_caps.algorithms.cdt import keys as ck
from rllib_caps.data.sequences import COSTS_TO_GO, MASK, RETURNS_TO_GO, TIMESTEPS, WINDOW_ACTIONS, WINDOW_OBS

TOKENS_PER_STEP = 4  # R̂, Ĉ, s, a
STATE_TOKEN, ACTION_TOKEN = 2, 3


@dataclass(frozen=True)
class TransformerSettings:
    """The model's sizes and input transforms (the RLModule's ``model_config`` fills it)."""

    embedding_dim: int = 128
    num_layers: int = 3
    attention_heads: int = 8
    seq_len: int = 10  # L: steps per window
    horizon: int = 1000  # T: the timestep table has T + L rows (padding continues the timesteps)
    dropout: float = 0.1  # embedding, attention and residual dropout
    stochastic: bool = True  # Gaussian action head (else deterministic, trained by MSE)
    reward_scale: float = 0.1  # the return token is reward_scale · R̂
    cost_offset: float = 50.0  # the cost token is cost_offset − Ĉ (OSRL's cost_transform)
    init_temperature: float = 0.1


class CausalBlock(nn.Module):
    """Pre-LayerNorm block: x + Dropout(CausalMHA(LN(x))), then x + Dropout(MLP(LN(x))) with a 4× GELU MLP."""

    def __init__(self, dim: int, heads: int, dropout: float, tokens: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attention = nn.MultiheadAttention(dim, heads, dropout=dropout, batch_first=True)
        self.drop = nn.Dropout(dropout)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), nn.Dropout(dropout))
        self.register_buffer("causal_mask", ~torch.tril(torch.ones(tokens, tokens, dtype=torch.bool)),
                             persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.shape[1]
        normed = self.norm1(x)
        attended = self.attention(normed, normed, normed, attn_mask=self.causal_mask[:tokens, :tokens],
                                  need_weights=False)[0]
        x = x + self.drop(attended)
        return x + self.mlp(self.norm2(x))


class DecisionTransformer(nn.Module):
    """``forward(window)`` maps the window columns (``data.sequences``: raw R̂ and Ĉ, observations, actions,
    timesteps) to the action head's μ (and log σ) at every state token and the cost log-probabilities at every
    action token.

    Windows are right-padded: causal attention keeps padding out of every valid position, so (unlike OSRL) no
    key-padding mask is applied; outputs at padded positions are left to the loss masks.
    """

    def __init__(self, obs_dim: int, act_dim: int, s: TransformerSettings) -> None:
        super().__init__()
        self.settings = s
        dim = s.embedding_dim
        self.timestep_emb = nn.Embedding(s.horizon + s.seq_len, dim)
        self.return_emb, self.cost_emb = nn.Linear(1, dim), nn.Linear(1, dim)
        self.state_emb, self.action_emb = nn.Linear(obs_dim, dim), nn.Linear(act_dim, dim)
        self.emb_norm, self.emb_drop = nn.LayerNorm(dim), nn.Dropout(s.dropout)
        self.blocks = nn.ModuleList(CausalBlock(dim, s.attention_heads, s.dropout, TOKENS_PER_STEP * s.seq_len)
                                    for _ in range(s.num_layers))
        self.out_norm = nn.LayerNorm(dim)
        self.action_mean = nn.Linear(dim, act_dim)
        self.action_log_std = nn.Linear(dim, act_dim) if s.stochastic else None
        self.cost_head = nn.Linear(dim, 2)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        """GPT-style: N(0, 0.02) weights and zero biases for linear layers and embeddings (OSRL's init, which
        also overrides its action head's orthogonal init)."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, window: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        s = self.settings
        obs = window[WINDOW_OBS].float()
        batch, steps = obs.shape[:2]
        time = self.timestep_emb(window[TIMESTEPS].long().clamp(max=s.horizon + s.seq_len - 1))
        returns = s.reward_scale * window[RETURNS_TO_GO].float().unsqueeze(-1)
        costs = s.cost_offset - window[COSTS_TO_GO].float().unsqueeze(-1)
        tokens = torch.stack([self.return_emb(returns) + time, self.cost_emb(costs) + time,
                              self.state_emb(obs) + time, self.action_emb(window[WINDOW_ACTIONS].float()) + time],
                             dim=2).reshape(batch, TOKENS_PER_STEP * steps, -1)
        x = self.emb_drop(self.emb_norm(tokens))
        for block in self.blocks:
            x = block(x)
        x = self.out_norm(x).reshape(batch, steps, TOKENS_PER_STEP, -1)
        state_out, action_out = x[:, :, STATE_TOKEN], x[:, :, ACTION_TOKEN]
        out = {ck.ACTION_MEAN: self.action_mean(state_out),
               ck.COST_LOG_PROBS: torch.log_softmax(self.cost_head(action_out), dim=-1)}
        if self.action_log_std is not None:
            out[ck.ACTION_LOG_STD] = self.action_log_std(state_out)
        return out

    @torch.no_grad()
    def act(self, window: dict[str, torch.Tensor]) -> torch.Tensor:
        """The action at each window's last valid step: the head's mean clipped to [−1, 1] (OSRL's evaluation,
        on the normalised action space), (B, A)."""
        mean = self.forward(window)[ck.ACTION_MEAN]
        last = window[MASK].sum(-1).long().clamp(min=1) - 1
        return mean[torch.arange(mean.shape[0], device=mean.device), last].clamp(-1.0, 1.0)
