"""Checkpoint integrity: every checkpoint an offline safe algorithm saves gets ``manifest.json`` with the sha256 of
each file, and loading verifies it, so a corrupt, truncated or added file is one clear error, not a pickle traceback.
A checkpoint without a manifest is refused (deleting it must not switch the check off) unless the caller opts out
with ``verify=False`` (``--no-verify`` on the CLIs), which is logged. The manifest guards against accidents and
mix-ups, not attackers (who can rewrite it): what keeps a shared checkpoint from running code is that the readers
of the deployable policy read only safetensors and JSON (``rllib_caps.core.deployment``)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from rllib_caps.utils.atomic import atomic_file
from rllib_caps.utils.checksum import file_sha256

MANIFEST = "manifest.json"

logger = logging.getLogger("rllib_caps.integrity")


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message names the file."""


def _files(directory: Path) -> list[str]:
    """Every file under ``directory`` but the manifest itself, as sorted relative paths."""
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*")
                  if p.is_file() and p != directory / MANIFEST)


def write_manifest(directory: Path) -> None:
    """Records the sha256 of every file under ``directory`` (relative paths) in ``directory/manifest.json``."""
    manifest = {name: file_sha256(directory / name) for name in _files(directory)}
    with atomic_file(directory / MANIFEST) as tmp:
        tmp.write_text(json.dumps({"sha256": manifest}, indent=1, sort_keys=True) + "\n")


def verify_manifest(directory: Path, *, verify: bool = True) -> None:
    """Checks that ``directory`` holds exactly the files listed in ``directory/manifest.json``, each with its
    sha256; raises ``CheckpointError`` naming a missing, changed or unlisted file (a file planted beside the listed
    ones is refused, not ignored), or the checkpoint when it has no manifest. ``verify=False`` skips the check with
    a warning."""
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
    unlisted = sorted(set(_files(directory)) - set(recorded))
    if unlisted:
        raise CheckpointError(f"{directory / unlisted[0]}: not listed in {MANIFEST} (added after the checkpoint was "
                              "saved); remove it, or pass --no-verify (verify=False) if you trust it")
    for name, digest in recorded.items():
        path = directory / name
        if not path.is_file():
            raise CheckpointError(f"{path}: missing from the checkpoint (listed in {MANIFEST})")
        if file_sha256(path) != digest:
            raise CheckpointError(f"{path}: corrupt or modified (its sha256 differs from {MANIFEST})")
