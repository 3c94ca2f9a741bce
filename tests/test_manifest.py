"""Checkpoint manifests: written with the sha256 of every file, verified on load, naming the damaged file."""

from __future__ import annotations

from pathlib import Path

import pytest

from rllib_caps.utils.manifest import MANIFEST, CheckpointError, verify_manifest, write_manifest


def make_checkpoint(root: Path) -> Path:
    (root / "learner_group" / "learner").mkdir(parents=True)
    (root / "learner_group" / "learner" / "state.pkl").write_bytes(bytes(range(256)) * 4)
    (root / "algorithm_state.pkl").write_bytes(b"state")
    write_manifest(root)
    return root


def test_an_intact_checkpoint_verifies(tmp_path: Path) -> None:
    ckpt = make_checkpoint(tmp_path / "ckpt")
    assert (ckpt / MANIFEST).is_file()
    verify_manifest(ckpt)


def test_a_checkpoint_without_manifest_is_refused_unless_verify_is_off(tmp_path: Path, caplog) -> None:
    """Deleting manifest.json does not switch the check off; only an explicit verify=False does, and it is logged."""
    ckpt = make_checkpoint(tmp_path / "ckpt")
    (ckpt / MANIFEST).unlink()
    with pytest.raises(CheckpointError, match="no manifest.json.*--no-verify"):
        verify_manifest(ckpt)
    verify_manifest(ckpt, verify=False)
    assert "integrity NOT checked" in caplog.text


def test_a_flipped_byte_or_a_truncated_or_missing_file_is_named(tmp_path: Path) -> None:
    ckpt = make_checkpoint(tmp_path / "ckpt")
    state = ckpt / "learner_group" / "learner" / "state.pkl"
    data = bytearray(state.read_bytes())
    data[100] ^= 1
    state.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="state.pkl: corrupt or modified"):
        verify_manifest(ckpt)
    state.write_bytes(bytes(data[:10]))
    with pytest.raises(CheckpointError, match="state.pkl: corrupt or modified"):
        verify_manifest(ckpt)
    state.unlink()
    with pytest.raises(CheckpointError, match="state.pkl: missing"):
        verify_manifest(ckpt)
