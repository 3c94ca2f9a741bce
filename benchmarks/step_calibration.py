"""The per-time-step calibration of a CAPS checkpoint's cost critic (``calibrate_cost_critic_per_step``), as a table.

    .venv/bin/python benchmarks/step_calibration.py --checkpoint CKPT --data DATA --out T.json

Per time bin (``STEP_BINS`` equal bins of the horizon): on the held-out episodes the table is fitted on, the rows,
mean Q^c as trained, mean realised discounted cost-to-go and the shift of each per-step mode; on the other episodes
(which the fit did not read; the critic trained on all of them), the bias left per bin by the per-step shift and by
the constant one (``"mean"``). Also the constant shift of ``"mean"`` and ``"pessimism"`` for comparison.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def step_table(checkpoint: Path, data: Path) -> dict:
    """The table for one checkpoint (see the module docstring)."""
    import torch

    from rllib_caps.algorithms.caps.calibration import (
        STEP_CALIBRATIONS,
        calibrate_cost_critic,
        calibrate_cost_critic_per_step,
        dataset_predictions,
        fit_step_calibration,
        held_out_episodes,
    )
    from rllib_caps.algorithms.caps.critic_calibration import calibration_columns
    from rllib_caps.algorithms.caps.policy import CAPSPolicy

    torch.set_num_threads(1)
    columns, policy = calibration_columns(data), CAPSPolicy.from_checkpoint(checkpoint)
    held_out = held_out_episodes(columns["eps_id"])
    rest = {name: values[~held_out] for name, values in columns.items()}
    result: dict = {"checkpoint": str(checkpoint), "data": str(data), "horizon": policy.horizon,
                    "episodes": int(len(np.unique(columns["eps_id"]))),
                    "held_out_episodes": int(len(np.unique(columns["eps_id"][held_out]))),
                    "constant_shift": {mode: calibrate_cost_critic(policy, columns, mode)
                                       for mode in ("mean", "pessimism")}}
    left = {}
    for mode in ("mean", *STEP_CALIBRATIONS):
        fit = calibrate_cost_critic(policy, columns, mode) if mode == "mean" else \
            calibrate_cost_critic_per_step(policy, columns, mode)
        if mode != "mean":
            result[mode] = fit.as_dict()
        predicted, realised = dataset_predictions(policy, rest)
        left[mode] = fit_step_calibration(predicted, realised, rest["t"], policy.horizon, "per_step").shift
    result["bias_left_on_the_other_episodes"] = left
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True, help="the converted dataset the checkpoint trained on")
    parser.add_argument("--out", type=Path, required=True, help="JSON to write")
    args = parser.parse_args(argv)
    from rllib_caps.utils.atomic import atomic_file

    table = step_table(args.checkpoint, args.data)
    with atomic_file(args.out) as tmp:
        tmp.write_text(json.dumps(table, indent=1) + "\n")
    print(json.dumps(table["constant_shift"]), json.dumps(table["per_step"]["shift"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
