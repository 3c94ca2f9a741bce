"""Checkpoint integrity: every checkpoint an offline safe algorithm saves gets ``manifest.json`` with the sha256 of
each file, and loading verifies it, so a corrupt or truncated file is one clear error, not a pickle traceback. A
checkpoint without a manifest is refused (deleting it must not switch the check off) unless the caller opts out with
``verify=False`` (``--no-verify`` on the CLIs), which is logged."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from rllib_caps.data.validation import file_sha256
from rllib_caps.utils.atomic import atomic_file

MANIFEST = "manifest.json"

logger = logging.getLogger("rllib_caps.integrity")


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message names the file."""


def write_manifest(directory: Path) -> None:
    """Records the sha256 of every file under ``directory`` (relative paths) in ``directory/manifest.json``."""
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST)
    manifest = {str(p.relative_to(directory)): file_sha256(p) for p in files}
    with atomic_file(directory / MANIFEST) as tmp:
        tmp.write_text(json.dumps({"sha256": manifest}, indent=1, sort_keys=True) + "\n")


def verify_manifest(directory: Path, *, verify: bool = True) -> None:
    """Checks every file listed in ``directory/manifest.json``; raises ``CheckpointError`` naming a missing or
    changed file, or the checkpoint when it has no manifest. ``verify=False`` skips the check with a warning."""
    manifest_file = directory / MANIFEST
    if not verify:
        logger.warning("%s: checkpoint integrity NOT checked (verify=False, --no-verify)", directory)
        return
    if not manifest_file.is_file():
        raise CheckpointError(f"{directory}: no {MANIFEST}, so its files cannot be checked (corrupt, modified or "
                              "not saved by rllib_caps); pass --no-verify (verify=False) to load it anyway")
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
