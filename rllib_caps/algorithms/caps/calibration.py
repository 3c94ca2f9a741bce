"""Calibration of a cost critic on its own dataset: predicted Q^c(s, a) against the discounted cost-to-go that the
dataset's episodes realised from (s, a) (docs/paper.md, "Diagnostics"). Pure numpy, no Ray.

The two numbers that tell the failure modes apart: the **bias** (mean predicted − mean realised; > 0 is
pessimism, which makes the switching rule pick the cost head too often) and the **centred error** (the RMSE after
the bias is removed: how badly the critic ranks states, which no constant shift repairs). A critic can be
over-pessimistic yet accurate (large bias, small centred error) or unbiased yet inaccurate.

The realised cost-to-go stops at the end of the recorded episode: at a time-out a critic trained with
``time_limit="bootstrap"`` predicts beyond it, so rows near a time-out measure that truncation as well.

A constant shift corrects the level of Q^c on average over the dataset; the per-step modes fit one shift per equal
time bin of the episode (``STEP_BINS``: one multiply finds a step's bin in the switching rule and the ONNX graph,
and DSRL-style episodes that run to the time-out fill the bins evenly), on a seeded 20 % of the episodes
(``held_out_episodes``). "Held out" means held out from the rows the fit is then checked on: the critic trained on
every episode, so the fit is not out of the critic's training sample.
"""

from __future__ import annotations

import abc
import hashlib
import logging
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from rllib_caps.data.schema import ACTIONS, COSTS, EPS_ID, OBS, T

logger = logging.getLogger(__name__)

CHUNK_ROWS = 65_536  # dataset rows per critic call
SCALAR_CALIBRATIONS = ("none", "mean", "pessimism")  # calibration_shift's modes: one shift for every step
STEP_CALIBRATIONS = ("per_step", "per_step_pessimism")  # step_shift_table's modes: a shift per time bin
CALIBRATIONS = SCALAR_CALIBRATIONS + STEP_CALIBRATIONS
STEP_BINS = 16  # equal-width time bins over the horizon of a per-step shift table (the module's buffer's length)
HELD_OUT_FRACTION = 0.2  # of the dataset's episodes, the per-step table is fitted on (``held_out_episodes``)
HELD_OUT_SEED = 0
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
    episode's first state and action with the cost the episode then incurred), and ``horizon``."""

    last_actions: np.ndarray
    horizon: int  # the episode length T the per-step table's bins divide (``step_bins``)

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
        previous shift, a per-step table's too, is replaced, not added to)."""

    @property
    @abc.abstractmethod
    def cost_step_shifts(self) -> np.ndarray:
        """The per-step shift table, ``STEP_BINS`` values (``set_cost_step_shifts``; zeros when never set)."""

    @abc.abstractmethod
    def set_cost_step_shifts(self, shifts: np.ndarray) -> None:
        """From now on the rule reads Q^c − ``shifts[step_bins(t)]`` at step t (Q^c as trained: the previous shift,
        scalar or table, is replaced)."""


def dataset_predictions(policy: CostCriticAPI, columns: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """``policy``'s Q^c (as the rule reads it) and the realised discounted cost-to-go at every row of ``columns``:
    numpy arrays ``obs``, ``actions``, ``costs``, ``eps_id`` and ``t`` (``rllib_caps.data.schema`` names)."""
    rows = len(columns[COSTS])
    predicted = np.concatenate([policy.predicted_cost(columns[OBS][i:i + CHUNK_ROWS],
                                                      columns[ACTIONS][i:i + CHUNK_ROWS], columns[T][i:i + CHUNK_ROWS])
                                for i in range(0, rows, CHUNK_ROWS)])
    return predicted, discounted_cost_to_go(columns[COSTS], columns[EPS_ID], columns[T], policy.cost_gamma)


def dataset_calibration(policy: CostCriticAPI, columns: dict[str, Any], bins: int = 10) -> Calibration:
    """The calibration of ``policy``'s cost critic on a dataset's rows (``columns`` as for
    ``dataset_predictions``)."""
    return calibrate(*dataset_predictions(policy, columns), bins)


def held_out_episodes(episode_ids: np.ndarray, fraction: float = HELD_OUT_FRACTION,
                      seed: int = HELD_OUT_SEED) -> np.ndarray:
    """Per row, whether its episode is held out: a seeded hash of the episode id (BLAKE2b of ``"seed:id"``) below
    ``fraction`` of its range, so the split is the same in any row order, on any machine."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"the held-out fraction must be in (0, 1), got {fraction}")
    ids, inverse = np.unique(np.asarray(episode_ids), return_inverse=True)
    draws = np.array([int.from_bytes(hashlib.blake2b(f"{seed}:{i}".encode(), digest_size=8).digest(), "little")
                      / 2.0**64 for i in ids.tolist()])
    return (draws < fraction)[inverse.reshape(-1)]


def step_bins(steps: Any, horizon: int, bins: int = STEP_BINS) -> Any:
    """The time bin of each step t: ``floor(t · bins / horizon)``, clipped to ``[0, bins − 1]``; equal widths, so
    the switching rule finds a step's bin with one multiply (numpy arrays and torch tensors alike; the caller casts
    the float result to an index)."""
    return (steps * bins // horizon).clip(0, bins - 1)


@dataclass(frozen=True)
class StepCalibration:
    """Per time bin (``step_bins``), the rows, mean predicted Q^c and mean realised cost-to-go of the rows it was
    fitted on, and the shift it sets (``shift``; a bin without rows takes its nearest fitted bin's bias)."""

    rows: tuple[int, ...]
    predicted: tuple[float, ...]
    realised: tuple[float, ...]
    shift: tuple[float, ...]

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def fit_step_calibration(predicted: np.ndarray, realised: np.ndarray, steps: np.ndarray, horizon: int, mode: str,
                         bins: int = STEP_BINS) -> StepCalibration:
    """Per time bin, the critic's bias (mean predicted − mean realised) as the shift (``"per_step"``), or only
    where it is > 0 (``"per_step_pessimism"``)."""
    if mode not in STEP_CALIBRATIONS:
        raise ValueError(f"a per-step cost calibration must be one of {STEP_CALIBRATIONS}, got {mode!r}")
    predicted, realised = np.asarray(predicted, np.float64), np.asarray(realised, np.float64)
    if not len(predicted):
        raise ValueError("a per-step cost calibration needs at least one row")
    index = step_bins(np.asarray(steps, np.float64), horizon, bins).astype(np.int64)
    rows = np.bincount(index, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_predicted = np.bincount(index, predicted, bins) / rows
        mean_realised = np.bincount(index, realised, bins) / rows
    fitted = np.flatnonzero(rows)
    nearest = fitted[np.abs(np.arange(bins)[:, None] - fitted[None, :]).argmin(axis=1)]
    bias = (mean_predicted - mean_realised)[nearest]
    shift = bias if mode == "per_step" else np.maximum(bias, 0.0)
    return StepCalibration(tuple(int(r) for r in rows), tuple(mean_predicted.tolist()),
                           tuple(mean_realised.tolist()), tuple(float(finite_shift(v)) for v in shift))


def calibration_shift(bias: float, mode: str) -> float:
    """What to subtract from Q^c given its ``bias`` on the dataset (mean predicted − mean realised discounted
    cost-to-go; docs/paper.md, "Calibrated Q^c"): ``"mean"`` removes the bias either way; ``"pessimism"`` removes
    only measured pessimism (``max(bias, 0)``), leaving an optimistic critic as trained; ``"none"``: 0."""
    if mode not in SCALAR_CALIBRATIONS:
        raise ValueError(f"cost calibration must be one of {SCALAR_CALIBRATIONS}, got {mode!r}")
    return {"none": 0.0, "mean": bias, "pessimism": max(bias, 0.0)}[mode]


def calibrate_cost_critic(policy: CostCriticAPI, columns: dict[str, Any], mode: str = "mean") -> float:
    """Sets ``policy``'s Q^c shift from the bias of its critic as trained on a dataset (``columns`` as for
    ``dataset_calibration``) by ``calibration_shift``: pessimism fitted to the data, in place of whatever the
    critic's training left (docs/paper.md, "Calibrated Q^c"); a per-step mode sets a table by
    ``calibrate_cost_critic_per_step``. Returns the shift (a table's mean over its bins); calibrating again gives the
    same."""
    if mode in STEP_CALIBRATIONS:
        return float(np.mean(calibrate_cost_critic_per_step(policy, columns, mode).shift))
    policy.set_cost_shift(0.0)
    shift = calibration_shift(dataset_calibration(policy, columns, bins=1).bias, mode) if mode != "none" else 0.0
    policy.set_cost_shift(finite_shift(shift))
    return shift


def calibrate_cost_critic_per_step(policy: CostCriticAPI, columns: dict[str, Any], mode: str = "per_step",
                                   fraction: float = HELD_OUT_FRACTION) -> StepCalibration:
    """Sets ``policy``'s per-step Q^c shift table (``fit_step_calibration``), fitted on the dataset's held-out
    episodes (``held_out_episodes``); returns the fit. Held out from the fit's complement only: the critic itself
    trained on every episode."""
    policy.set_cost_shift(0.0)
    held_out = held_out_episodes(columns[EPS_ID], fraction)
    if not held_out.any():  # too few episodes for a split: fit on all of them, and say so
        logger.warning("none of the dataset's %d episodes falls in the held-out %.0f%%: the per-step cost "
                       "calibration is fitted on every episode, the ones its critic trained on",
                       len(np.unique(columns[EPS_ID])), 100 * fraction)
        held_out[:] = True
    episodes = {name: np.asarray(values)[held_out] for name, values in columns.items()}
    predicted, realised = dataset_predictions(policy, episodes)
    fit = fit_step_calibration(predicted, realised, episodes[T], policy.horizon, mode)
    policy.set_cost_step_shifts(np.asarray(fit.shift))
    return fit


def finite_shift(shift: float) -> float:
    """``shift`` if it is finite; a ``ValueError`` otherwise. A NaN shift compares false against every budget, so
    the switching rule would act with the reward head even at κ = 0: a NaN is refused, never acted on."""
    if not math.isfinite(shift):
        raise ValueError(f"the cost critic's calibration shift is {shift}, not finite: Q^c or the dataset's costs "
                         "hold NaN or inf (check the dataset, or a diverged critic); refusing to switch on it")
    return float(shift)
