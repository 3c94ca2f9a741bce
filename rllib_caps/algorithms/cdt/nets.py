"""CDT's transformer without Ray (Liu et al., 2023, as OSRL builds it): per step the tokens (R̂_t, Ĉ_t, s_t, a_t),
each a linear embedding plus a learned timestep embedding, through pre-LayerNorm causal self-attention blocks;
the action is read off the s_t output and the 2-class cost prediction off the a_t output. The RLModule and the
speed benchmark build it with the same class.

Dropout (OSRL's, on the embeddings, the attention weights and the residuals) is applied from keep masks that come
with the training batch (``dropout_masks``, drawn with the minibatch from the trial's generator), not drawn inside
the forward pass from torch's global generator: so a population's member (``torch.func.vmap``, which refuses a
random draw inside) takes the masks its trial alone would, and a captured step replays them. A forward pass
without masks (acting, or ``dropout`` 0) applies none."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from rllib_caps.algorithms.cdt import keys as ck
from rllib_caps.data.sequences import COSTS_TO_GO, MASK, RETURNS_TO_GO, TIMESTEPS, WINDOW_ACTIONS, WINDOW_OBS

TOKENS_PER_STEP = 4  # R̂, Ĉ, s, a
STATE_TOKEN, ACTION_TOKEN = 2, 3
EMBEDDING_KEEP = "dropout_keep_embedding"  # (B, 4L, D): the embeddings' keep mask


def block_keep_keys(layer: int) -> tuple[str, str, str]:
    """The batch columns of block ``layer``'s keep masks: attention weights (B, H, 4L, 4L), the attention's residual
    and the MLP's (B, 4L, D)."""
    return (f"dropout_keep_attention_{layer}", f"dropout_keep_residual_{layer}", f"dropout_keep_mlp_{layer}")


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


def dropped(x: torch.Tensor, keep: torch.Tensor | None, p: float) -> torch.Tensor:
    """Inverted dropout with a given keep mask: x · keep / (1 − p), as ``nn.Dropout`` scales; x where no mask."""
    return x if keep is None else x * keep.to(x.dtype) * (1.0 / (1.0 - p))


def dropout_masks(s: TransformerSettings, batch_size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """One training step's keep masks (kept with probability 1 − ``dropout``), drawn from ``generator`` in a fixed
    order: the embeddings', then each block's (``block_keep_keys``). None at ``dropout`` 0."""
    if s.dropout == 0:
        return {}
    tokens, dim, device = TOKENS_PER_STEP * s.seq_len, s.embedding_dim, generator.device

    def keep(*shape: int) -> torch.Tensor:
        return torch.rand((batch_size, *shape), generator=generator, device=device) >= s.dropout

    masks = {EMBEDDING_KEEP: keep(tokens, dim)}
    for layer in range(s.num_layers):
        attention, residual, mlp = block_keep_keys(layer)
        masks |= {attention: keep(s.attention_heads, tokens, tokens), residual: keep(tokens, dim),
                  mlp: keep(tokens, dim)}
    return masks


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with ``nn.MultiheadAttention``'s parameters, names and initialisation
    (``in_proj_weight``/``in_proj_bias`` for Q, K, V and ``out_proj``), its dropout on the attention weights taken
    from a keep mask: without one, ``scaled_dot_product_attention``; with one, softmax(QKᵀ/√d + causal) · keep / (1 −
    p) · V."""

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.in_proj_weight = nn.Parameter(torch.empty(3 * dim, dim))
        self.in_proj_bias = nn.Parameter(torch.empty(3 * dim))
        self.out_proj = nn.Linear(dim, dim)
        nn.init.xavier_uniform_(self.in_proj_weight)
        nn.init.zeros_(self.in_proj_bias)
        nn.init.zeros_(self.out_proj.bias)

    def forward(self, x: torch.Tensor, causal: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        """``x`` (B, T, D); ``causal`` (T, T), True where a token may attend; ``keep`` (B, H, T, T) or None."""
        batch, tokens, dim = x.shape
        q, k, v = (part.view(batch, tokens, self.heads, dim // self.heads).transpose(1, 2)
                   for part in F.linear(x, self.in_proj_weight, self.in_proj_bias).chunk(3, dim=-1))
        if keep is None:
            attended = F.scaled_dot_product_attention(q, k, v, attn_mask=causal)
        else:
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(dim // self.heads))
            weights = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
            attended = dropped(weights, keep, self.dropout) @ v
        return self.out_proj(attended.transpose(1, 2).reshape(batch, tokens, dim))


class CausalBlock(nn.Module):
    """Pre-LayerNorm block: x + Dropout(CausalMHA(LN(x))), then x + Dropout(MLP(LN(x))) with a 4× GELU MLP."""

    def __init__(self, dim: int, heads: int, dropout: float, tokens: int) -> None:
        super().__init__()
        self.dropout = dropout
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attention = CausalSelfAttention(dim, heads, dropout)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.register_buffer("causal", torch.tril(torch.ones(tokens, tokens, dtype=torch.bool)), persistent=False)

    def forward(self, x: torch.Tensor, keep: tuple[torch.Tensor | None, ...] = (None, None, None)) -> torch.Tensor:
        """``keep``: the keep masks of the attention weights, its residual and the MLP's (``block_keep_keys``)."""
        attention_keep, residual_keep, mlp_keep = keep
        tokens = x.shape[1]
        attended = self.attention(self.norm1(x), self.causal[:tokens, :tokens], attention_keep)
        x = x + dropped(attended, residual_keep, self.dropout)
        return x + dropped(self.mlp(self.norm2(x)), mlp_keep, self.dropout)


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
        self.emb_norm = nn.LayerNorm(dim)
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
        """The heads' outputs; dropout where ``window`` carries ``dropout_masks``' columns (training)."""
        s = self.settings
        obs = window[WINDOW_OBS].float()
        batch, steps = obs.shape[:2]
        time = self.timestep_emb(window[TIMESTEPS].long().clamp(max=s.horizon + s.seq_len - 1))
        returns = s.reward_scale * window[RETURNS_TO_GO].float().unsqueeze(-1)
        costs = s.cost_offset - window[COSTS_TO_GO].float().unsqueeze(-1)
        tokens = torch.stack([self.return_emb(returns) + time, self.cost_emb(costs) + time,
                              self.state_emb(obs) + time, self.action_emb(window[WINDOW_ACTIONS].float()) + time],
                             dim=2).reshape(batch, TOKENS_PER_STEP * steps, -1)
        x = dropped(self.emb_norm(tokens), window.get(EMBEDDING_KEEP), s.dropout)
        for layer, block in enumerate(self.blocks):
            x = block(x, tuple(window.get(key) for key in block_keep_keys(layer)))
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
