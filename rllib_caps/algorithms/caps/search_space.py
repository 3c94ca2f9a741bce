"""CAPS's Optuna search space (its registry entry's ``search_space``): β (``awr_beta``) and the K−2 middle heads' λ_k,
each log-uniform; λ sorted ascending so that head k trades more cost for reward as k grows (head 0: reward only,
head K−1: cost only). No Ray or Optuna import: the space is called with Optuna's trial."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_RANGES = {"awr_beta": (0.5, 10.0), "lambdas": (0.05, 5.0)}  # the paper: β = 3, λ_k ∈ (0, 2)


@dataclass(frozen=True)
class CAPSSearchSpace:
    """Optuna define-by-run space for K heads: ``search/awr_beta`` and K−2 sorted ``search/lambdas``."""

    num_heads: int
    awr_beta: tuple[float, float] = DEFAULT_RANGES["awr_beta"]
    lambdas: tuple[float, float] = DEFAULT_RANGES["lambdas"]

    def __call__(self, trial: Any) -> dict[str, Any] | None:
        trial.suggest_float("search/awr_beta", *self.awr_beta, log=True)
        values = [trial.suggest_float(f"search/lambda_{k}", *self.lambdas, log=True)
                  for k in range(1, self.num_heads - 1)]
        return {"search/lambdas": sorted(values)} if values else None


def caps_search_space(axes: Mapping[str, Any], ranges: Mapping[str, Any]) -> CAPSSearchSpace:
    """The space for a trial's K (``axes["num_heads"]``) from the sweep YAML's ``search_space`` ranges
    (``awr_beta``/``lambdas``: [low, high]); a ValueError names the range at fault."""
    unknown = set(ranges) - set(DEFAULT_RANGES)
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}; valid: {', '.join(DEFAULT_RANGES)}, seed")
    bounds = {}
    for key, default in DEFAULT_RANGES.items():
        low, high = ranges.get(key, default)
        if not 0 < low < high:
            raise ValueError(f"{key}: need 0 < low < high, got [{low}, {high}]")
        bounds[key] = (float(low), float(high))
    return CAPSSearchSpace(int(axes["num_heads"]), **bounds)
