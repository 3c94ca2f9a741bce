"""The random draws of a BEAR-Lag or CPQ step, as batch columns (no Ray): every standard-normal sample of the
training forward (the VAE's latent, the policy's and the prior's samples) is drawn from the trial's generator with
its minibatch, so a trial alone and its population member (vmapped, ``randomness="error"``) draw the same numbers,
and a captured step replays them. Each algorithm's ``forward.py`` declares its columns and their shapes."""

from __future__ import annotations

from collections.abc import Mapping

import torch


def standard_normal_draws(shapes: Mapping[str, tuple[int, ...]], generator: torch.Generator
                          ) -> dict[str, torch.Tensor]:
    """One standard-normal tensor per column of ``shapes`` (in its order) from ``generator``, on its device."""
    return {key: torch.randn(shape, generator=generator, device=generator.device) for key, shape in shapes.items()}


def reparameterised(dist: torch.distributions.Normal, noise: torch.Tensor) -> torch.Tensor:
    """The sample μ + σ ε of ``dist`` for the standard-normal ``noise`` ε (``rsample`` with given ε; ``noise`` may
    have leading sample dimensions)."""
    return dist.loc + noise * dist.scale
