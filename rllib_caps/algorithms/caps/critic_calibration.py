"""The report's cost-critic calibration (``CAPSExtension.report_sections``): for every CAPS trial, its Q^c on the
dataset it trained on against the realised discounted cost-to-go (``calibration``), with the shift it acts
with, and the reliability plots (``plot_calibration``, also the evaluate CLI's ``--calibration``). A user reads
there whether a conservative policy has an over-pessimistic critic (bias > 0, removable by a shift) or an
inaccurate one (a large centred RMSE, a low r). docs/paper.md, "Diagnostics" and "Calibrated Q^c".
"""

from __future__ import annotations

import logging
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from rllib_caps.algorithms.caps.calibration import CALIBRATION_COLUMNS, Calibration, dataset_calibration
from rllib_caps.core.extension import ReportSection
from rllib_caps.data import TransitionDataset
from rllib_caps.data.errors import DatasetError
from rllib_caps.utils.manifest import CheckpointError

logger = logging.getLogger("rllib_caps.report")


@dataclass(frozen=True)
class TrialCalibration:
    record: Any  # the report's TrialRecord: task, config, seed, checkpoint, data, trial_dir
    shift: float  # what the policy subtracts from Q^c as trained (its training's cost_calibration)
    calibration: Calibration  # of the Q^c it acts with


@cache
def calibration_columns(data: Path) -> dict[str, np.ndarray]:
    """The columns of the dataset at ``data`` that a calibration reads (``CALIBRATION_COLUMNS``), as numpy."""
    return TransitionDataset.from_parquet(data).numpy_columns(CALIBRATION_COLUMNS)


def calibrate_trials(records: Sequence[Any], *, verify: bool = True) -> list[TrialCalibration]:
    """The calibration of every CAPS trial record with a checkpoint and a recorded dataset; a checkpoint that fails
    its integrity check or a dataset that cannot be read is left out with a warning naming it."""
    from rllib_caps.algorithms.caps.policy import CAPSPolicy

    work = [r for r in records if r.checkpoint is not None and r.data is not None]
    calibrations = []
    for record in tqdm(work, desc="cost critic calibration", unit="checkpoint", disable=not work or None):
        try:
            policy = CAPSPolicy.from_checkpoint(record.checkpoint, verify=verify)
            calibration = dataset_calibration(policy, calibration_columns(record.data))
        except (CheckpointError, DatasetError, OSError) as err:
            logger.warning("%s; trial %s is left out of the calibration table", err, record.trial_dir.name)
            continue
        calibrations.append(TrialCalibration(record, policy.cost_shift, calibration))
    calibration_columns.cache_clear()
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


def calibration_section(records: Sequence[Any], *, verify: bool) -> list[ReportSection]:
    """The report's "Cost critic on its dataset": ``calibration.md`` and ``calibration_<Task>.png`` per task; none
    when no trial could be calibrated."""
    calibrations = calibrate_trials(records, verify=verify)
    if not calibrations:
        return []
    table = format_calibrations(calibrations)
    files = {"calibration.md": lambda path: path.write_text(table + "\n")}
    for task in dict.fromkeys(item.record.task for item in calibrations):
        of_task = {f"{i.record.config} seed {i.record.seed}": i.calibration
                   for i in calibrations if i.record.task == task}
        files[f"calibration_{task}.png"] = (lambda path, c=of_task, t=task:
                                            plot_calibration(c, path, f"{t}: cost critic on its dataset"))
    return [ReportSection("Cost critic on its dataset", table, files)]


def plot_calibration(calibrations: Mapping[str, Calibration], path: Path, title: str) -> None:
    """Reliability diagram of cost critics (label -> calibration): per quantile bin of the prediction, the mean
    realised discounted cost-to-go against the mean prediction, the diagonal of a calibrated critic, and each
    critic's bias, centred RMSE and correlation in the legend (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.8, 4.2))
    values = [v for c in calibrations.values() for v in (*c.bin_predicted, *c.bin_realised)]
    low = min(0.0, *values)
    high = max(*values, low + 1e-9)
    ax.plot([low, high], [low, high], color="grey", linestyle=":", label="calibrated")
    for label, c in calibrations.items():
        ax.plot(c.bin_predicted, c.bin_realised, marker="o",
                label=f"{label}{': ' if label else ''}bias {c.bias:+.3g}, centred RMSE {c.centred_rmse:.3g}, "
                      f"r {c.correlation:.2f}")
    ax.set_xlabel(r"predicted $Q^c(s, a)$, bin mean")
    ax.set_ylabel("realised discounted cost-to-go, bin mean")
    ax.legend(fontsize="small", loc="upper left")
    ax.grid(alpha=0.3)
    fig.suptitle(textwrap.fill(title, 64))  # about 7.5 px per character at 12 pt, as the report's plots
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight", pad_inches=0.1)
    plt.close(fig)
