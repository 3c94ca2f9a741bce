"""The report's cost-critic calibration: for every trial whose policy switches on a cost critic (CAPS), its Q^c on the
dataset it trained on against the realised discounted cost-to-go (``core.calibration``), with the shift it acts
with. A user reads there whether a conservative policy has an over-pessimistic critic (bias > 0, removable by a
shift) or an inaccurate one (a large centred RMSE, a low r). docs/paper.md, "Diagnostics" and "Calibrated Q^c".
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
from tqdm import tqdm

from rllib_caps.algorithms.registry import get_algorithm
from rllib_caps.core.calibration import CALIBRATION_COLUMNS, Calibration, dataset_calibration
from rllib_caps.data import TransitionDataset
from rllib_caps.data.errors import DatasetError
from rllib_caps.report.records import TrialRecord
from rllib_caps.utils.manifest import CheckpointError

logger = logging.getLogger("rllib_caps.report")


@dataclass(frozen=True)
class TrialCalibration:
    record: TrialRecord
    shift: float  # what the policy subtracts from Q^c as trained (its training's cost_calibration)
    calibration: Calibration  # of the Q^c it acts with


@cache
def _columns(data: Path) -> dict[str, np.ndarray]:
    tensors = TransitionDataset.from_parquet(data).tensors
    return {name: tensors[name].numpy() for name in CALIBRATION_COLUMNS}


def calibrate_trials(records: Sequence[TrialRecord], *, verify: bool = True) -> list[TrialCalibration]:
    """The calibration of every cost-critic trial with a checkpoint and a recorded dataset; a checkpoint that fails
    its integrity check or a dataset that cannot be read is left out with a warning naming it."""
    work = [r for r in records
            if r.checkpoint is not None and r.data is not None and get_algorithm(r.algo).reads_cost_critic]
    calibrations = []
    for record in tqdm(work, desc="cost critic calibration", unit="checkpoint", disable=not work or None):
        try:
            policy = get_algorithm(record.algo).policy_class.from_checkpoint(record.checkpoint, verify=verify)
            calibration = dataset_calibration(policy, _columns(record.data))
        except (CheckpointError, DatasetError, OSError) as err:
            logger.warning("%s; trial %s is left out of the calibration table", err, record.trial_dir.name)
            continue
        calibrations.append(TrialCalibration(record, policy.cost_shift, calibration))
    _columns.cache_clear()
    return calibrations


def format_calibrations(calibrations: Sequence[TrialCalibration]) -> str:
    """Markdown: per trial the shift and the calibration of the Q^c it acts with."""
    lines = ["| Task | config | seed | Q^c shift | mean Q^c | mean realised | bias | centred RMSE | r |",
             "|:---|:---|---:|---:|---:|---:|---:|---:|---:|"]
    for item in calibrations:
        r, c = item.record, item.calibration
        lines.append(f"| {r.task} | {r.config} | {r.seed} | {item.shift:.3g} | {c.mean_predicted:.3g} | "
                     f"{c.mean_realised:.3g} | {c.bias:+.3g} | {c.centred_rmse:.3g} | {c.correlation:.2f} |")
    return "\n".join(lines) + ("\n\nQ^c as the switching rule reads it (shifted) on the dataset the trial trained on, "
                               "against the discounted cost-to-go its episodes realised. Bias > 0: pessimistic "
                               "(a shift removes it); a large centred RMSE or a low r: inaccurate (no shift "
                               "repairs it). Plots: calibration_<Task>.png.")
