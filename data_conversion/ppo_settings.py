"""The PPO settings a collection may override (``collect --ppo-config KEY=VALUE``), parsed without importing RLlib.

Every key but ``reward_scale`` is an RLlib ``PPOConfig.training`` argument; ``reward_scale`` multiplies the
penalised reward PPO sees (``scale · (reward − λ·cost)``), which keeps the critic's targets in range at a long
horizon (γ = 0.9999 makes a return of a few hundred into values of thousands). The Lagrangian multiplier and
the recorded dataset see the unscaled reward and cost.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

PPO_DEFAULTS: dict[str, Any] = {  # the collector's PPO; a key left out keeps RLlib's default
    "lr": 3e-4,
    "gamma": 0.99,
    "lambda_": 0.95,
    "num_epochs": 10,
    "minibatch_size": 500,  # at most the batch (4,000 env steps per iteration)
    "clip_param": 0.2,
    "entropy_coeff": 0.0,
    "vf_clip_param": 1e4,  # episode returns reach several hundred; RLlib's default 10 clips the value loss
    "reward_scale": 1.0,
}


def _boolean(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise ValueError(f"expected true or false, not {text!r}")
    return text.lower() == "true"


PPO_KEYS: dict[str, Callable[[str], Any]] = {
    "lr": float,
    "gamma": float,
    "lambda_": float,
    "num_epochs": int,
    "minibatch_size": int,
    "clip_param": float,
    "entropy_coeff": float,
    "vf_clip_param": float,
    "vf_loss_coeff": float,
    "grad_clip": float,
    "use_kl_loss": _boolean,
    "kl_coeff": float,
    "reward_scale": float,
}


def parse_ppo_settings(items: Iterable[str]) -> dict[str, Any]:
    """``["gamma=0.9999", "lr=1e-4"]`` → ``{"gamma": 0.9999, "lr": 1e-4}``; ValueError naming the bad item."""
    settings: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in PPO_KEYS:
            raise ValueError(f"--ppo-config {item!r}: expected KEY=VALUE with KEY one of {', '.join(PPO_KEYS)}")
        try:
            settings[key] = PPO_KEYS[key](value)
        except ValueError as e:
            raise ValueError(f"--ppo-config {item!r}: {e}") from None
    return settings
