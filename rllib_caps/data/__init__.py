"""Offline datasets: the converted-dataset schema (``schema``), the in-memory transition dataset a learner
samples from (``dataset``), and the one error type for bad datasets (``errors``). No Ray import."""

from rllib_caps.data.dataset import TransitionDataset, parquet_files
from rllib_caps.data.errors import DatasetError

__all__ = ["DatasetError", "TransitionDataset", "parquet_files"]
