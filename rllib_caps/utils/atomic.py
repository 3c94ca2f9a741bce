"""Atomic outputs, the one helper for them: write into a temporary sibling, then rename into place.

A failed or interrupted write leaves the old output (if any) untouched and nothing half-written behind,
not even the parent directories it had to create. Existing outputs are replaced only with ``force``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class OutputExistsError(FileExistsError):
    """The output path exists and ``--force`` was not given."""


class OutputNotWritableError(PermissionError):
    """The output's directory cannot be created (read-only, or a file in the way); the message names it."""


def temporary_sibling(path: Path, suffix: str = ".tmp") -> Path:
    """A fresh hidden name beside ``path`` (same filesystem, so the final rename is atomic)."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex}{suffix}")


@contextmanager
def _cleanup_on_failure(out: Path, tmp: Path) -> Iterator[None]:
    created = [p for p in (out.parent, *out.parent.parents) if not p.exists()]
    blocking = next((p for p in (out.parent, *out.parent.parents) if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise OutputNotWritableError(f"{out}: cannot write there ({blocking} is a file, not a directory)")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputNotWritableError(f"{out}: cannot write there ({err.strerror})") from err
    try:
        yield
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink(missing_ok=True)
        for parent in created:  # deepest first
            with contextlib.suppress(OSError):
                parent.rmdir()
        raise


@contextmanager
def atomic_directory(out: str | Path, *, force: bool = False) -> Iterator[Path]:
    """Yields an empty temporary directory beside ``out`` that becomes ``out`` only if the block succeeds.

    An existing ``out`` (``force=True``) is moved aside first and deleted after the rename.
    """
    out = Path(out).resolve()
    if out.exists() and not force:
        raise OutputExistsError(f"{out}: already exists (use --force to overwrite)")
    tmp = temporary_sibling(out)
    with _cleanup_on_failure(out, tmp):
        try:
            tmp.mkdir()
        except OSError as err:
            raise OutputNotWritableError(f"{out}: cannot write there ({err.strerror})") from err
        yield tmp
        old = temporary_sibling(out, ".old")
        if out.exists():
            out.rename(old)
        try:
            tmp.rename(out)
        except OSError:
            if old.exists():
                old.rename(out)
            raise
        shutil.rmtree(old, ignore_errors=True)


@contextmanager
def atomic_file(out: str | Path, *, force: bool = True) -> Iterator[Path]:
    """Yields a temporary path beside ``out`` to write; it replaces ``out`` only if the block succeeds."""
    out = Path(out).resolve()
    if out.exists() and not force:
        raise OutputExistsError(f"{out}: already exists (use --force to overwrite)")
    tmp = temporary_sibling(out, ".tmp" + out.suffix)
    with _cleanup_on_failure(out, tmp):
        yield tmp
        os.replace(tmp, out)
