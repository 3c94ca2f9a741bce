"""rllib-caps: CAPS (Constraint-Adaptive Policy Switching) for offline safe RL on Ray RLlib.

``CAPSConfig``, ``CAPS`` and ``CAPSPolicy`` are imported lazily, so ``import rllib_caps.tasks`` and the
other Ray-free modules stay light.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CAPS", "CAPSConfig", "CAPSPolicy"]


def __getattr__(name: str) -> Any:
    if name in ("CAPS", "CAPSConfig"):
        from rllib_caps.caps import caps

        return getattr(caps, name)
    if name == "CAPSPolicy":
        from rllib_caps.policy import CAPSPolicy

        return CAPSPolicy
    raise AttributeError(f"module 'rllib_caps' has no attribute {name!r}")
