"""How critics treat the episode time limit (Pardo et al., "Time Limits in Reinforcement Learning", 2018).

- ``"bootstrap"``: a time-out is a truncation; TD targets bootstrap through it. The critics then estimate an
  infinite-horizon discounted return, which the finite-horizon budget conversion of the switching rule
  undercounts by up to 1/(1 − γ^{T−t}) near the end of an episode (docs/paper.md, choice 7).
- ``"terminal"``: a time-out ends the bootstrap like a termination (the authors' code). States near the
  time limit alias with the same states mid-episode.
- ``"time_aware"``: time-outs are terminal and the critics see the remaining-time fraction (T − t)/T, so the
  target is the finite-horizon return the budget conversion assumes.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from rllib_caps.core.keys import TIME_LIMITS
from rllib_caps.data.schema import TERMINATEDS, TRUNCATEDS


def episode_ends(batch: Mapping[str, torch.Tensor], time_limit: str) -> torch.Tensor:
    """1.0 where a TD target stops bootstrapping: terminations, and with ``"terminal"``/``"time_aware"`` also
    time-outs (``truncateds``); else 0.0. Shape ``(B,)``."""
    if time_limit == "bootstrap":
        return batch[TERMINATEDS].float()
    if time_limit in ("terminal", "time_aware"):
        return (batch[TERMINATEDS] | batch[TRUNCATEDS]).float()
    raise ValueError(f"time_limit must be one of {TIME_LIMITS}, got {time_limit!r}")


def remaining_time(step: torch.Tensor, horizon: int) -> torch.Tensor:
    """(T − t)/T clamped to [0, 1], shape ``(B, 1)``: the extra input of time-aware critics at step t."""
    return torch.clamp((horizon - step.float()) / float(horizon), 0.0, 1.0).unsqueeze(-1)
