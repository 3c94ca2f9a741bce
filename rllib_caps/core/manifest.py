"""Checkpoint integrity: every checkpoint an offline safe algorithm saves gets ``manifest.json`` with the sha256 of
each file, and loading verifies it, so a corrupt or truncated file is one clear error, not a pickle traceback."""

from __future__ import annotations

import json
from pathlib import Path

from rllib_caps.core.atomic import atomic_file
from rllib_caps.data.validation import file_sha256

MANIFEST = "manifest.json"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message names the file."""


def write_manifest(directory: Path) -> None:
    """Records the sha256 of every file under ``directory`` (relative paths) in ``directory/manifest.json``."""
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST)
    manifest = {str(p.relative_to(directory)): file_sha256(p) for p in files}
    with atomic_file(directory / MANIFEST) as tmp:
        tmp.write_text(json.dumps({"sha256": manifest}, indent=1, sort_keys=True) + "\n")


def verify_manifest(directory: Path) -> bool:
    """Checks every file listed in ``directory/manifest.json``; False when there is no manifest (an older or
    foreign checkpoint), True when all match. Raises ``CheckpointError`` naming a missing or changed file."""
    manifest_file = directory / MANIFEST
    if not manifest_file.is_file():
        return False
    try:
        recorded = json.loads(manifest_file.read_text())["sha256"]
    except (OSError, ValueError, KeyError) as err:
        raise CheckpointError(f"{manifest_file}: unreadable ({err})") from err
    for name, digest in recorded.items():
        path = directory / name
        if not path.is_file():
            raise CheckpointError(f"{path}: missing from the checkpoint (listed in {MANIFEST})")
        if file_sha256(path) != digest:
            raise CheckpointError(f"{path}: corrupt or modified (its sha256 differs from {MANIFEST})")
    return True
