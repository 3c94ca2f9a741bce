"""Atomic output directories: write into a temporary sibling, then rename; never overwrite silently."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class OutputExistsError(FileExistsError):
    """The output path exists and ``--force`` was not given."""


@contextmanager
def atomic_directory(out: str | Path, *, force: bool = False) -> Iterator[Path]:
    """Yields a temporary directory beside ``out`` that becomes ``out`` only if the block succeeds."""
    out = Path(out).resolve()
    if out.exists() and not force:
        raise OutputExistsError(f"{out}: already exists (use --force to overwrite)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        yield tmp
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
