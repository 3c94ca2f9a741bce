"""Offline datasets: the converted-dataset schema (``schema``), the in-memory transition dataset a learner
samples from (``dataset``), and the one error type for bad datasets (``errors``). No Ray import."""

from __future__ import annotations

from typing import Any

from rllib_caps.data.errors import DatasetError

__all__ = ["DatasetError", "MinibatchDraw", "TransitionDataset", "parquet_files"]


def __getattr__(name: str) -> Any:
    """``TransitionDataset``, ``MinibatchDraw`` and ``parquet_files`` on first use: they import torch, the schema
    does not."""
    if name in ("TransitionDataset", "MinibatchDraw", "parquet_files"):
        from rllib_caps.data import dataset

        return getattr(dataset, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
