"""OSRL's per-task CDT settings (``examples/configs/cdt_configs.py``): the return target R for each of three cost
targets κ, and the augmentation's polynomial degree, reward ceiling and reward decrease; and the return target
for any κ, interpolated or extrapolated from those three (docs/baselines.md "CDT"). No Ray, no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CDTTaskSettings:
    """(κ, R) target pairs in raw units, and ``deg``/``max_reward``/``max_rew_decrease`` of the augmentation."""

    targets: tuple[tuple[float, float], ...]
    deg: int
    max_reward: float
    max_rew_decrease: float


def _same(costs: Sequence[float], returns: Sequence[float], deg: int, max_reward: float,
          decrease: float) -> CDTTaskSettings:
    return CDTTaskSettings(tuple(zip(map(float, costs), map(float, returns), strict=True)), deg, max_reward, decrease)


BULLET, GYM = (10, 20, 40), (20, 40, 80)
# OSRL's base config, used for the tasks it has no entry for (CarCircle, mediumdense): note the cost 50.
DEFAULT = _same((10, 20, 50), (450, 500, 550), 4, 600, 100)
TASK_SETTINGS: dict[str, CDTTaskSettings] = {
    "AntRun": _same(BULLET, (700, 750, 800), 3, 1000, 150),
    "DroneRun": _same(BULLET, (400, 500, 600), 1, 700, 100),
    "DroneCircle": _same(BULLET, (700, 750, 800), 1, 1000, 100),
    "CarRun": _same(BULLET, (575, 575, 575), 0, 600, 100),
    "AntCircle": _same(BULLET, (300, 350, 400), 2, 500, 100),
    "BallRun": _same(BULLET, (500, 500, 700), 2, 1400, 200),
    "BallCircle": _same(BULLET, (700, 750, 800), 2, 1000, 200),
    "CarButton1": _same(GYM, (35, 35, 35), 0, 45, 10),
    "CarButton2": _same(GYM, (40, 40, 40), 0, 50, 10),
    "CarCircle1": _same(GYM, (20, 22.5, 25), 1, 30, 10),
    "CarCircle2": _same(GYM, (20, 21, 22), 1, 30, 10),
    "CarGoal1": _same(GYM, (40, 40, 40), 1, 50, 5),
    "CarGoal2": _same(GYM, (30, 30, 30), 1, 35, 5),
    "CarPush1": _same(GYM, (15, 15, 15), 0, 20, 5),
    "CarPush2": _same(GYM, (12, 12, 12), 0, 15, 3),
    "PointButton1": _same(GYM, (40, 40, 40), 0, 45, 5),
    "PointButton2": _same(GYM, (40, 40, 40), 0, 50, 10),
    "PointCircle1": _same(GYM, (50, 52.5, 55), 1, 65, 5),
    "PointCircle2": _same(GYM, (45, 47.5, 50), 1, 55, 5),
    "PointGoal1": _same(GYM, (30, 30, 30), 0, 35, 5),
    "PointGoal2": _same(GYM, (30, 30, 30), 1, 35, 5),
    "PointPush1": _same(GYM, (15, 15, 15), 0, 20, 5),
    "PointPush2": _same(GYM, (12, 12, 12), 0, 15, 3),
    "AntVelocity": _same(GYM, (2800,) * 3, 1, 3000, 500),
    "HalfCheetahVelocity": _same(GYM, (3000,) * 3, 1, 3000, 500),
    "HopperVelocity": _same(GYM, (1750,) * 3, 1, 2000, 300),
    "SwimmerVelocity": _same(GYM, (160,) * 3, 1, 250, 50),
    "Walker2dVelocity": _same(GYM, (2800,) * 3, 1, 3600, 800),
    **{f"easy{traffic}": _same(BULLET, (300, 350, 400), 2, 500, 100) for traffic in ("sparse", "mean", "dense")},
    **{f"medium{traffic}": _same(BULLET, (300, 300, 300), 0, 300, 100) for traffic in ("sparse", "mean")},
    **{f"hard{traffic}": _same(BULLET, (300, 350, 400), 1, 500, 100) for traffic in ("sparse", "mean", "dense")},
}


def task_settings(task: str | None) -> CDTTaskSettings:
    """OSRL's settings of a task (short name), its base default for a task without an entry or a custom env."""
    return TASK_SETTINGS.get(task or "", DEFAULT)


def return_target(targets: Sequence[tuple[float, float]], kappa: float) -> float:
    """The return target for cost target κ: piecewise-linear through the (κ, R) pairs, extended beyond the
    smallest and largest κ along the first and last segments (the paper interpolated or extrapolated OSRL's
    three targets for its other cost sets; it does not say how)."""
    costs, returns = np.array([c for c, _ in targets], float), np.array([r for _, r in targets], float)
    order = np.argsort(costs)
    costs, returns = costs[order], returns[order]
    if len(costs) == 1:
        return float(returns[0])
    segment = int(np.clip(np.searchsorted(costs, kappa, side="right") - 1, 0, len(costs) - 2))
    slope = (returns[segment + 1] - returns[segment]) / (costs[segment + 1] - costs[segment])
    return float(returns[segment] + slope * (kappa - costs[segment]))
