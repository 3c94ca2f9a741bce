"""The offline transition dataset, held in memory on the learner's device and sampled there.

Reads the Parquet written by ``python -m data_conversion.dsrl_to_parquet`` (RLlib's row schema plus
``costs``). Holding the few million rows of a DSRL task as device tensors and sampling indices there
is much cheaper than RLlib's ``OfflineData`` pipeline (see the benchmark in the README).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import torch
from ray.rllib.core.columns import Columns

COLUMNS = ("obs", "actions", "rewards", "costs", "new_obs", "terminateds", "truncateds")
BATCH_KEYS = {"obs": Columns.OBS, "new_obs": Columns.NEXT_OBS, "actions": Columns.ACTIONS,
              "rewards": Columns.REWARDS, "terminateds": Columns.TERMINATEDS,
              "truncateds": Columns.TRUNCATEDS, "costs": "costs"}


class DatasetError(ValueError):
    """A dataset directory that cannot be trained on; the message names the path and the problem."""


def parquet_files(path: str | Path) -> Path:
    """Resolves a converted dataset directory (with ``data/``) or a Parquet directory/file."""
    path = Path(path)
    if (path / "data").is_dir():
        path = path / "data"
    if not path.exists():
        raise DatasetError(f"{path}: no such dataset (convert one with `python -m data_conversion.dsrl_to_parquet`)")
    return path


def _column_to_numpy(table: pa.Table, name: str, source: Path) -> np.ndarray:
    if name not in table.column_names:
        raise DatasetError(f"{source}: missing column {name!r} (found {table.column_names})")
    column = table.column(name).combine_chunks()
    if pa.types.is_list(column.type) or pa.types.is_fixed_size_list(column.type):
        width = len(column[0]) if len(column) else 0
        return column.flatten().to_numpy(zero_copy_only=False).reshape(len(column), width)
    return column.to_numpy(zero_copy_only=False)


@dataclass
class TransitionDataset:
    """All transitions as tensors: obs, actions, rewards, costs, new_obs, terminateds, truncateds."""

    tensors: dict[str, torch.Tensor]

    @classmethod
    def from_parquet(cls, path: str | Path, device: torch.device | str = "cpu") -> TransitionDataset:
        source = parquet_files(path)
        table = pads.dataset(str(source), format="parquet").to_table(columns=list(COLUMNS))
        if table.num_rows == 0:
            raise DatasetError(f"{source}: dataset has no rows")
        tensors = {}
        for name in COLUMNS:
            array = _column_to_numpy(table, name, source)
            dtype = torch.bool if name in ("terminateds", "truncateds") else torch.float32
            tensors[name] = torch.from_numpy(np.array(array)).to(device=device, dtype=dtype)
        return cls(tensors)

    def __len__(self) -> int:
        return self.tensors["rewards"].shape[0]

    def sample(self, batch_size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """Uniformly sampled transitions (with replacement) keyed by RLlib's ``Columns`` names."""
        device = self.tensors["rewards"].device
        idx = torch.randint(len(self), (batch_size,), generator=generator, device=device)
        return {BATCH_KEYS[name]: t[idx] for name, t in self.tensors.items()}
