"""The offline transition dataset, held in memory on the learner's device and sampled there.

Reads the Parquet written by ``python -m data_conversion.dsrl_to_parquet`` (see ``rllib_caps.data.schema``).
Holding the few million rows of a DSRL task as device tensors and sampling indices there is much cheaper than
RLlib's ``OfflineData`` pipeline. ``eps_id`` and ``t`` are kept, so algorithms that need whole episodes or
the time step (time-aware critics) have them.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import torch

from rllib_caps.data.errors import DatasetError
from rllib_caps.data.schema import COLUMNS, DATA_DIR, DTYPES, OBS, REWARDS, T
from rllib_caps.data.values import dataset_problem, size_problem


def parquet_files(path: str | Path) -> Path:
    """Resolves a converted dataset directory (with ``data/``) or a Parquet directory/file."""
    path = Path(path)
    if (path / DATA_DIR).is_dir():
        path = path / DATA_DIR
    if not path.exists():
        raise DatasetError(f"{path}: no such dataset (convert one with `python -m data_conversion.dsrl_to_parquet`)")
    return path


def column_to_numpy(table: pa.Table, name: str, source: Path) -> np.ndarray:
    """Column ``name`` of ``table`` as numpy, vector columns as ``(rows, width)``."""
    if name not in table.column_names:
        raise DatasetError(f"{source}: missing column {name!r} (found {table.column_names})")
    column = table.column(name).combine_chunks()
    if pa.types.is_list(column.type) or pa.types.is_fixed_size_list(column.type):
        width = len(column[0]) if len(column) else 0
        return column.flatten().to_numpy(zero_copy_only=False).reshape(len(column), width)
    return column.to_numpy(zero_copy_only=False)


def _fingerprint(source: Path) -> tuple[tuple[str, int, int], ...]:
    """Each file of a Parquet dataset with its modification time and size: a rewritten dataset is a new one."""
    files = sorted(p for p in source.rglob("*") if p.is_file()) if source.is_dir() else [source]
    return tuple((str(p.resolve()), stat.st_mtime_ns, stat.st_size) for p, stat in ((p, p.stat()) for p in files))


# (files, device) -> the dataset loaded from them, while anything holds it (``TransitionDataset.from_parquet``)
_LOADED: weakref.WeakValueDictionary[tuple, TransitionDataset] = weakref.WeakValueDictionary()


@dataclass
class TransitionDataset:
    """Every column of the schema as a tensor, keyed by its column name (= RLlib's ``Columns`` value)."""

    tensors: dict[str, torch.Tensor]

    @classmethod
    def from_parquet(cls, path: str | Path, device: torch.device | str = "cpu") -> TransitionDataset:
        """The dataset at ``path`` on ``device``. Loads of the same unchanged files onto the same device share one
        copy while anything holds it: a population's members (``rllib_caps.core.population``), whose learners
        each load their trial's dataset, hold it once, not P times. So its tensors are read-only: derive a new
        dataset (as ``safe_episodes`` does) rather than write into them."""
        source = parquet_files(path)
        key = (_fingerprint(source), str(torch.device(device)))
        dataset = _LOADED.get(key)
        if dataset is None:
            dataset = _LOADED[key] = cls._read(source, device)
        return dataset

    @classmethod
    def _read(cls, source: Path, device: torch.device | str) -> TransitionDataset:
        schema = pads.dataset(str(source), format="parquet").schema
        missing = [name for name in COLUMNS if name not in schema.names]
        if missing:
            raise DatasetError(f"{source}: missing columns {missing} (found {schema.names}); re-convert it with "
                               "`python -m data_conversion.dsrl_to_parquet`")
        table = pads.dataset(str(source), format="parquet").to_table(columns=list(COLUMNS))
        arrays = {name: np.array(column_to_numpy(table, name, source), dtype=DTYPES[name]) for name in COLUMNS}
        problem = size_problem(table.num_rows) or dataset_problem(arrays)
        if problem:
            raise DatasetError(f"{source}: {problem}")
        return cls({name: torch.from_numpy(array).to(device=device) for name, array in arrays.items()})

    def __len__(self) -> int:
        return self.tensors[REWARDS].shape[0]

    def numpy_columns(self, names: Sequence[str] = COLUMNS) -> dict[str, np.ndarray]:
        """The columns ``names`` (default: every one) as NumPy arrays on the CPU, for the analyses outside the
        learner's tensors (Q^c's calibration, the switching arms)."""
        return {name: self.tensors[name].cpu().numpy() for name in names}

    def sample(self, batch_size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """Uniformly sampled transitions (with replacement), every column."""
        return self.rows(self.draw_rows(batch_size, generator))

    def draw_rows(self, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        """Indices of ``batch_size`` uniformly sampled rows (with replacement): ``sample``'s random draw."""
        return torch.randint(len(self), (batch_size,), generator=generator, device=self.tensors[REWARDS].device)

    def rows(self, index: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every column at the rows ``index``, of any shape: ``(B,)`` gives ``(B, ...)`` columns, ``(P, B)`` the
        ``(P, B, ...)`` columns of P minibatches in one gather per column."""
        return {name: t[index] for name, t in self.tensors.items()}

    @functools.cached_property
    def _initial_row_indices(self) -> torch.Tensor:
        return torch.nonzero(self.tensors[T] == 0).squeeze(-1)

    def initial_rows(self) -> torch.Tensor:
        """Indices of the episodes' first transitions (``t == 0``), found once per dataset (sampling initial states
        every gradient step must not scan every row each time)."""
        rows = self._initial_row_indices
        if rows.numel() == 0:
            raise DatasetError("the dataset has no initial transitions (no row with t == 0)")
        return rows

    def sample_initial_obs(self, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        """Observations of uniformly sampled (with replacement) initial transitions: draws from the data's p₀."""
        rows = self.initial_rows()
        idx = torch.randint(rows.numel(), (batch_size,), generator=generator, device=rows.device)
        return self.tensors[OBS][rows[idx]]


class Rows(Protocol):
    """What a minibatch is gathered from: a ``TransitionDataset``'s rows, or the windows of CDT's episode sampler."""

    def rows(self, index: torch.Tensor) -> dict[str, torch.Tensor]:
        """The columns at ``index``: ``(B, ...)`` gives one minibatch, ``(P, B, ...)`` P of them."""


@dataclass
class MinibatchDraw:
    """The random draws of one gradient step's minibatch: the ``rows`` of ``dataset`` it trains on and the step's
    other draws (``extras``, e.g. action noise), all from the trial's generator. ``gather`` makes the minibatch;
    ``stacked`` makes the minibatches of a population's members at once."""

    dataset: Rows
    rows: torch.Tensor
    extras: dict[str, torch.Tensor]

    def gather(self) -> dict[str, torch.Tensor]:
        return self.dataset.rows(self.rows) | self.extras

    @staticmethod
    def stacked(draws: list[MinibatchDraw]) -> dict[str, torch.Tensor]:
        """The minibatches of ``draws`` stacked, each column ``(P, B, ...)``: where every draw is from one dataset
        (a population's seeds, κ or search samples share its one copy), one gather per column for all of them
        instead of one per member and column, with the same values."""
        if all(draw.dataset is draws[0].dataset for draw in draws):
            columns = draws[0].dataset.rows(torch.stack([draw.rows for draw in draws]))
        else:  # e.g. BC-Safe's members, each with the data its κ selects
            parts = [draw.dataset.rows(draw.rows) for draw in draws]
            columns = {key: torch.stack([part[key] for part in parts]) for key in parts[0]}
        return columns | {key: torch.stack([draw.extras[key] for draw in draws]) for key in draws[0].extras}
