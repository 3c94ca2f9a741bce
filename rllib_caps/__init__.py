"""rllib-caps: CAPS (Constraint-Adaptive Policy Switching) for offline safe RL on Ray RLlib.

Layers, lowest first (a module imports only from its own layer or lower ones; ``docs/architecture.md``):
``envs``, ``data`` -> ``core`` -> ``algorithms`` -> ``sweeps``, ``report`` -> the CLIs
(``python -m rllib_caps.{tasks,train,evaluate,export,tune,report,bench}``).

``CAPSConfig``, ``CAPS`` and ``CAPSPolicy`` are imported lazily, so ``import rllib_caps`` stays light.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CAPS", "CAPSConfig", "CAPSPolicy"]


def __getattr__(name: str) -> Any:
    if name in ("CAPS", "CAPSConfig"):
        from rllib_caps.algorithms.caps import caps

        return getattr(caps, name)
    if name == "CAPSPolicy":
        from rllib_caps.algorithms.caps.policy import CAPSPolicy

        return CAPSPolicy
    raise AttributeError(f"module 'rllib_caps' has no attribute {name!r}")
