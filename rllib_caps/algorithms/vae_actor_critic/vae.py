"""The conditional VAE behaviour model of BEAR-Lag and CPQ (Fujimoto et al.'s BCQ VAE, as OSRL builds it):
encoder (s, a) → μ, σ over a latent of size 2|A|, decoder (s, z) → tanh action; no Ray import."""

from __future__ import annotations

import torch
from torch import nn

from rllib_caps.core.nets import OutputLinear, mlp

LOG_STD_MIN, LOG_STD_MAX = -4.0, 15.0  # clamp of the encoder's log σ (OSRL)
PRIOR_CLIP = 0.5  # prior samples z ~ N(0, I) are clipped to ±0.5 when decoding without an encoder


class ConditionalVAE(nn.Module):
    """q(z | s, a) = N(μ, σ²) and a deterministic decoder a = tanh(D(s, z))."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: list[int]) -> None:
        super().__init__()
        self.latent_dim = 2 * act_dim
        self.encoder = mlp(obs_dim + act_dim, hidden, None)
        self.mean = OutputLinear(hidden[-1], self.latent_dim)
        self.log_std = OutputLinear(hidden[-1], self.latent_dim)
        self.decoder = mlp(obs_dim + self.latent_dim, hidden, act_dim)

    def encode(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(μ, σ) of q(z | s, a), each shape ``(..., 2|A|)``."""
        features = self.encoder(torch.cat([obs, actions], dim=-1))
        return self.mean(features), self.log_std(features).clamp(LOG_STD_MIN, LOG_STD_MAX).exp()

    def decode_raw(self, obs: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """The decoder's pre-tanh output D(s, z)."""
        return self.decoder(torch.cat([obs, z], dim=-1))

    def forward(self, obs: torch.Tensor, actions: torch.Tensor, noise: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Reconstruction tanh(D(s, z)) with z = μ + σ ε (reparameterised; ε is ``noise``, standard normal, shaped
        as μ), and (μ, σ)."""
        mean, std = self.encode(obs, actions)
        z = mean + std * noise
        return torch.tanh(self.decode_raw(obs, z)), mean, std

    def sample_raw(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """Pre-tanh behaviour actions from the clipped prior, one per latent of ``noise`` (standard normal,
        ``(B, N, 2|A|)``), shape ``(B, N, |A|)``."""
        z = noise.clamp(-PRIOR_CLIP, PRIOR_CLIP)
        return self.decode_raw(obs.unsqueeze(1).expand(-1, noise.shape[1], -1), z)


def gaussian_kl(mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """KL(N(μ, σ²) ‖ N(0, I)) averaged over the latent dimensions (OSRL's convention), shape ``mean.shape[:-1]``:
    −½ mean_j(1 + log σ_j² − μ_j² − σ_j²)."""
    return -0.5 * (1.0 + torch.log(std.pow(2)) - mean.pow(2) - std.pow(2)).mean(-1)


def vae_loss(recon: torch.Tensor, actions: torch.Tensor, mean: torch.Tensor, std: torch.Tensor,
             kl_weight: float) -> torch.Tensor:
    """The negative ELBO as OSRL weights it: MSE(recon, a) + β · mean KL (β = 0.5)."""
    return (recon - actions).pow(2).mean() + kl_weight * gaussian_kl(mean, std).mean()
