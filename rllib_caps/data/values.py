"""The value checks of a dataset, the one rule for the converter (DSRL HDF5), ``train``/``tune`` on Parquet
(``check_dataset``) and the Python API's loader (``TransitionDataset``): every float is finite, costs are not
negative, normalised actions lie in [−1, 1], and there are at least ``MIN_ROWS`` transitions.

One NaN is enough to make a cost critic, and so the calibrated shift of CAPS's switching rule, NaN; a NaN shift
compares false against every budget, and the policy then acts with the reward head even at κ = 0. So a dataset with
one bad value is refused before any training, naming the column and the first row at fault.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from rllib_caps.data.schema import ACTIONS, COSTS, NEXT_OBS, OBS, REWARDS

MIN_ROWS = 100  # fewer transitions than this is a truncated file or a wrong filter, not a dataset to learn from
ACTION_BOUND = 1.0  # the converter maps the task's action bounds onto [-1, 1] (``normalize_actions``)
ACTION_TOLERANCE = 1e-6  # float32 rounding of the normalisation
FLOAT_COLUMNS = (OBS, NEXT_OBS, ACTIONS, REWARDS, COSTS)  # the schema's columns that ``dataset_problem`` reads


def column_problem(values: np.ndarray, *, first_row: int = 0, cost: bool = False,
                   normalised_action: bool = False) -> str | None:
    """What is wrong with a float column's ``values`` (rows from ``first_row`` on), or None: NaN or inf anywhere,
    a negative value where it is a ``cost``, a value outside [−1, 1] where it is a ``normalised_action``."""
    rows = np.asarray(values).reshape(len(values), -1)
    for problem, bad in (
        ("NaN or inf", ~np.isfinite(rows)),
        ("negative cost", rows < 0 if cost else None),
        (f"action outside the normalised [-{ACTION_BOUND:g}, {ACTION_BOUND:g}]",
         np.abs(rows) > ACTION_BOUND + ACTION_TOLERANCE if normalised_action else None),
    ):
        if bad is not None and bad.any():
            row = int(np.flatnonzero(bad.any(axis=1))[0])
            return f"{problem} at row {first_row + row} (value {float(rows[row][bad[row]][0])!r})"
    return None


def size_problem(rows: int) -> str | None:
    """What is wrong with a dataset of ``rows`` transitions, or None."""
    if rows < MIN_ROWS:
        return f"only {rows} transitions (at least {MIN_ROWS} are needed; a truncated file or an over-strict filter?)"
    return None


def dataset_problem(columns: Mapping[str, np.ndarray], first_row: int = 0) -> str | None:
    """What is wrong with the values of a converted dataset's rows (``rllib_caps.data.schema`` names, rows from
    ``first_row`` on), naming the column, or None."""
    for name in FLOAT_COLUMNS:
        problem = column_problem(columns[name], first_row=first_row, cost=name == COSTS,
                                 normalised_action=name == ACTIONS)
        if problem:
            return f"column {name!r}: {problem}"
    return None
