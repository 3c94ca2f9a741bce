"""Opening a file never runs code: a pickle payload planted in every pickled file of a checkpoint (its manifest
recomputed, as an attacker would) or of a sweep directory runs under none of the readers a user points at shared
files (``CAPSPolicy.from_checkpoint``, ``evaluate``, ``export``, ``report``); they read only the safetensors
weights, the policy's JSON spec and JSON results. A spec naming another class is refused, and a file the manifest
does not list is an integrity error."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest

from rllib_caps.algorithms.caps.policy import CAPSPolicy
from rllib_caps.core.deployment import POLICY_DIR, SPEC_FILE
from rllib_caps.evaluate import main as evaluate_main
from rllib_caps.export import main as export_main
from rllib_caps.report.__main__ import main as report_main
from rllib_caps.sweeps.state_backup import BACKUP_FILE
from rllib_caps.utils.manifest import CheckpointError, verify_manifest, write_manifest

BUNDLED = Path(__file__).resolve().parents[1] / "datasets" / "BallCircle"
SWEEP = Path(__file__).parent / "fixtures" / "report_results" / "experiment"


class Payload:
    """Unpickling it creates the directory ``marker``: proof that a reader ran code from a file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (str(self.marker),)


def plant(root: Path, marker: Path) -> list[Path]:
    """Replaces every pickled file under ``root`` (``*.pkl``, Tune's ``*state-*.json``) with the payload."""
    planted = [p for p in root.rglob("*") if p.is_file() and (p.suffix == ".pkl" or "state-" in p.name)]
    for path in planted:
        path.write_bytes(pickle.dumps(Payload(marker)))
    return planted


@pytest.fixture(scope="module")
def checkpoint(ray_session, tmp_path_factory) -> Path:
    """A tiny CAPS checkpoint from the train CLI (RLLIB_CAPS_SMOKE_TEST)."""
    from rllib_caps.train import main as train_main

    out = tmp_path_factory.mktemp("payload") / "ckpt"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RLLIB_CAPS_SMOKE_TEST", "1")
        assert train_main(["--task", "BallCircle", "--data", str(BUNDLED), "--out", str(out),
                           "--eval-episodes", "0"]) == 0
    return out


@pytest.fixture
def poisoned(checkpoint: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of ``checkpoint`` whose pickles are payloads, with a recomputed manifest; and the marker path."""
    copy, marker = tmp_path / "shared-ckpt", tmp_path / "code-ran"
    shutil.copytree(checkpoint, copy)
    assert plant(copy, marker), "the checkpoint has no pickled file to plant a payload in"
    write_manifest(copy)
    return copy, marker


def test_deploying_a_checkpoint_with_payload_pickles_runs_no_code(poisoned: tuple[Path, Path], tmp_path: Path,
                                                                  capsys) -> None:
    ckpt, marker = poisoned
    policy = CAPSPolicy.from_checkpoint(ckpt)
    policy.reset(20.0)
    assert policy.act(policy.module.observation_space.sample()).shape == policy.module.action_space.shape
    assert evaluate_main(["--checkpoint", str(ckpt), "--thresholds", "20", "--episodes", "1"]) == 0
    assert export_main(["--checkpoint", str(ckpt), "--format", "onnx", "--out", str(tmp_path / "p.onnx")]) == 0
    assert "BallCircle" in (tmp_path / "p.md").read_text()
    assert not marker.exists()


def test_a_sweep_directory_with_payload_pickles_reports_without_running_them(tmp_path: Path) -> None:
    sweep, marker = tmp_path / "sweep", tmp_path / "code-ran"
    shutil.copytree(SWEEP, sweep)
    for trial in (p for p in sweep.iterdir() if p.is_dir()):
        (trial / "params.pkl").write_bytes(b"")  # Tune writes one per trial
    (sweep / "experiment_state-2026-11-27_00-00-00.json").write_bytes(b"")
    (sweep / BACKUP_FILE).parent.mkdir()
    (sweep / BACKUP_FILE).write_bytes(b"")
    assert len(plant(sweep, marker)) > 2
    assert report_main([str(sweep), "--out", str(tmp_path / "report")]) == 0
    assert not marker.exists()


def test_a_spec_naming_another_class_is_refused(checkpoint: Path, tmp_path: Path) -> None:
    copy = tmp_path / "ckpt"
    shutil.copytree(checkpoint, copy)
    spec_file = copy / POLICY_DIR / SPEC_FILE
    spec = json.loads(spec_file.read_text())
    spec["module_class"] = "os.system"
    spec_file.write_text(json.dumps(spec))
    write_manifest(copy)
    with pytest.raises(CheckpointError, match="holds a os.system, not one of .*DefaultCAPSTorchRLModule"):
        CAPSPolicy.from_checkpoint(copy)


def test_a_file_the_manifest_does_not_list_is_an_integrity_error(checkpoint: Path, tmp_path: Path) -> None:
    copy = tmp_path / "ckpt"
    shutil.copytree(checkpoint, copy)
    verify_manifest(copy)
    (copy / POLICY_DIR / "extra.pkl").write_bytes(b"planted")
    with pytest.raises(CheckpointError, match="extra.pkl: not listed in manifest.json"):
        CAPSPolicy.from_checkpoint(copy)
