"""Paths at the boundary: RLlib hands checkpoint paths to pyarrow's filesystem resolution, which rejects a
relative local path ("URI has empty scheme"), so local paths are made absolute before they reach it."""

from __future__ import annotations

from pathlib import Path


def resolve_local(path: str | Path) -> str:
    """``path`` as an absolute local path; a URI (``s3://``, ``gs://``, ``file://``…) is returned unchanged."""
    text = str(path)
    return text if "://" in text else str(Path(text).expanduser().resolve())
