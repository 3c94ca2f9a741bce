"""The one error hierarchy for datasets, shared by the loaders here and by ``data_conversion/``."""

from __future__ import annotations


class DatasetError(ValueError):
    """A dataset file or directory that cannot be used as it is; the one-line message names the path (and the
    key or column) at fault and what to do."""
