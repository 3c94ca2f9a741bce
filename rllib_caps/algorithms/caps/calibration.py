"""Calibration of a cost critic on its own dataset: predicted Q^c(s, a) against the discounted cost-to-go that the
dataset's episodes realised from (s, a) (docs/paper.md, "Diagnostics"). Pure numpy, no Ray.

The two numbers that tell the failure modes apart: the **bias** (mean predicted − mean realised; > 0 is
pessimism, which makes the switching rule pick the cost head too often) and the **centred error** (the RMSE after
the bias is removed: how badly the critic ranks states, which no constant shift repairs). A critic can be
over-pessimistic yet accurate (large bias, small centred error) or unbiased yet inaccurate.

The realised cost-to-go stops at the end of the recorded episode: at a time-out a critic trained with
``time_limit="bootstrap"`` predicts beyond it, so rows near a time-out measure that truncation as well.
"""

from __future__ import annotations

import abc
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from rllib_caps.data.schema import ACTIONS, COSTS, EPS_ID, OBS, T

CHUNK_ROWS = 65_536  # dataset rows per critic call
CALIBRATIONS = ("none", "mean", "pessimism")  # calibration_shift's modes
CALIBRATION_COLUMNS = (OBS, ACTIONS, COSTS, EPS_ID, T)  # the dataset columns a calibration reads


def discounted_cost_to_go(costs: np.ndarray, episode_ids: np.ndarray, steps: np.ndarray,
                          gamma: float) -> np.ndarray:
    """Σ_{k≥0} γ^k c_{t+k} for every row, summed up to the last recorded step of the row's episode.

    ``costs``, ``episode_ids`` and ``steps`` are per-row arrays in any order; rows are ordered by (episode, step)
    internally and the result is returned in the input order.
    """
    costs = np.asarray(costs, dtype=np.float64)
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    order = np.lexsort((np.asarray(steps), np.asarray(episode_ids)))
    sorted_costs, sorted_ids = costs[order], np.asarray(episode_ids)[order]
    to_go = np.empty_like(sorted_costs)
    running = 0.0
    for i in range(len(sorted_costs) - 1, -1, -1):
        if i == len(sorted_costs) - 1 or sorted_ids[i + 1] != sorted_ids[i]:
            running = 0.0
        running = sorted_costs[i] + gamma * running
        to_go[i] = running
    result = np.empty_like(to_go)
    result[order] = to_go
    return result


@dataclass(frozen=True)
class Calibration:
    """Predicted against realised cost-to-go over ``rows`` dataset rows, overall and per quantile bin of the
    prediction (the reliability diagram)."""

    rows: int
    mean_predicted: float
    mean_realised: float
    bias: float  # mean predicted − mean realised: > 0 pessimistic, < 0 optimistic
    rmse: float
    centred_rmse: float  # the RMSE once the bias is removed: the part no constant shift repairs
    correlation: float  # Pearson's r (NaN when either side is constant)
    bin_predicted: tuple[float, ...]  # per bin, mean prediction
    bin_realised: tuple[float, ...]  # per bin, mean realised cost-to-go

    def as_dict(self) -> dict[str, object]:
        """Its fields, for JSON (the bins' tuples serialise as lists)."""
        return asdict(self)


def calibrate(predicted: np.ndarray, realised: np.ndarray, bins: int = 10) -> Calibration:
    """The calibration of ``predicted`` against ``realised`` (same length, at least one row), with ``bins``
    quantile bins of the prediction."""
    predicted, realised = np.asarray(predicted, np.float64), np.asarray(realised, np.float64)
    if predicted.shape != realised.shape or predicted.ndim != 1 or len(predicted) == 0:
        raise ValueError(f"need two equally long non-empty 1-D arrays, got {predicted.shape} and {realised.shape}")
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    error = predicted - realised
    bias = float(error.mean())
    constant = predicted.std() == 0 or realised.std() == 0
    order = np.argsort(predicted, kind="stable")
    groups = [g for g in np.array_split(order, min(bins, len(order))) if len(g)]
    return Calibration(
        rows=len(predicted), mean_predicted=float(predicted.mean()), mean_realised=float(realised.mean()),
        bias=bias, rmse=float(np.sqrt(np.mean(error**2))), centred_rmse=float(np.sqrt(np.mean((error - bias) ** 2))),
        correlation=float("nan") if constant else float(np.corrcoef(predicted, realised)[0, 1]),
        bin_predicted=tuple(float(predicted[g].mean()) for g in groups),
        bin_realised=tuple(float(realised[g].mean()) for g in groups))


class CostCriticAPI(abc.ABC):
    """Implemented by a deployable policy whose switching reads a cost critic (CAPS): its Q^c at dataset rows, and
    ``last_actions``, the normalised actions ``(N, A)`` its last ``act`` took (evaluation compares Q^c at an
    episode's first state and action with the cost the episode then incurred)."""

    last_actions: np.ndarray

    @property
    @abc.abstractmethod
    def cost_gamma(self) -> float:
        """The cost critic's discount."""

    @abc.abstractmethod
    def predicted_cost(self, obs: np.ndarray, actions: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """Q^c(s, a) in cost units, as the switching rule reads it (the pessimistic twin), for rows of
        observations ``(N, D)``, dataset actions ``(N, A)`` and episode steps ``(N,)``."""

    @property
    @abc.abstractmethod
    def cost_shift(self) -> float:
        """What the switching rule subtracts from Q^c as trained (``set_cost_shift``; 0 when never set)."""

    @abc.abstractmethod
    def set_cost_shift(self, shift: float) -> None:
        """From now on the switching rule (and ``predicted_cost``) reads Q^c − ``shift`` (Q^c as trained: the
        previous shift is replaced, not added to)."""


def dataset_calibration(policy: CostCriticAPI, columns: dict[str, Any], bins: int = 10) -> Calibration:
    """The calibration of ``policy``'s cost critic on a dataset's rows: ``columns`` holds numpy arrays ``obs``,
    ``actions``, ``costs``, ``eps_id`` and ``t`` (``rllib_caps.data.schema`` names)."""
    rows = len(columns[COSTS])
    predicted = np.concatenate([policy.predicted_cost(columns[OBS][i:i + CHUNK_ROWS],
                                                      columns[ACTIONS][i:i + CHUNK_ROWS], columns[T][i:i + CHUNK_ROWS])
                                for i in range(0, rows, CHUNK_ROWS)])
    realised = discounted_cost_to_go(columns[COSTS], columns[EPS_ID], columns[T], policy.cost_gamma)
    return calibrate(predicted, realised, bins)


def calibration_shift(bias: float, mode: str) -> float:
    """What to subtract from Q^c given its ``bias`` on the dataset (mean predicted − mean realised discounted
    cost-to-go; docs/paper.md, "Calibrated Q^c"): ``"mean"`` removes the bias either way; ``"pessimism"`` removes
    only measured pessimism (``max(bias, 0)``), leaving an optimistic critic as trained; ``"none"``: 0."""
    if mode not in CALIBRATIONS:
        raise ValueError(f"cost calibration must be one of {CALIBRATIONS}, got {mode!r}")
    return {"none": 0.0, "mean": bias, "pessimism": max(bias, 0.0)}[mode]


def calibrate_cost_critic(policy: CostCriticAPI, columns: dict[str, Any], mode: str = "mean") -> float:
    """Sets ``policy``'s Q^c shift from the bias of its critic as trained on a dataset (``columns`` as for
    ``dataset_calibration``) by ``calibration_shift``: pessimism fitted to the data, in place of whatever the
    critic's training left (docs/paper.md, "Calibrated Q^c"). Returns the shift; calibrating again gives the same."""
    policy.set_cost_shift(0.0)
    shift = calibration_shift(dataset_calibration(policy, columns, bins=1).bias, mode) if mode != "none" else 0.0
    policy.set_cost_shift(finite_shift(shift))
    return shift


def finite_shift(shift: float) -> float:
    """``shift`` if it is finite; a ``ValueError`` otherwise. A NaN shift compares false against every budget, so
    the switching rule would act with the reward head even at κ = 0: a NaN is refused, never acted on."""
    if not math.isfinite(shift):
        raise ValueError(f"the cost critic's calibration shift is {shift}, not finite: Q^c or the dataset's costs "
                         "hold NaN or inf (check the dataset, or a diverged critic); refusing to switch on it")
    return float(shift)
