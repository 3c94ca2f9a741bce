"""The path of one gradient step, read from the call stack as the loss function runs: from
``OfflineSafeAlgorithm.training_step`` to CAPS's loss it passes through four project files (issue 39), RLlib's
``Learner.update`` and update step in between, and the update seam of ``core/ray_internals.py`` for RLlib's
private ``TorchLearner._update``."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

import pytest

from rllib_caps.algorithms.caps.iql.losses import caps_iql_losses
from rllib_caps.algorithms.caps.sacbc.losses import caps_sacbc_losses
from rllib_caps.algorithms.registry import build_config

BUNDLED = Path(__file__).resolve().parents[1] / "datasets" / "BallCircle"
PACKAGE = Path(__file__).resolve().parents[1] / "rllib_caps"
SEAM = "core/ray_internals.py"


def project_frames(loss_function, **settings) -> list[tuple[str, str]]:
    """(file relative to the package, function) of every project frame on the stack when ``loss_function`` is
    entered during one ``training_step`` of a CAPS algorithm (local learner), outermost first."""
    config = build_config("caps", "BallCircle", BUNDLED, steps=2, updates_per_iteration=2, hidden=[8, 8],
                          batch_size=16, eval_episodes=0, seed=0, **settings)
    algo = config.build_algo()
    stacks = []

    def on_call(frame, event, arg):
        if event == "call" and frame.f_code is loss_function.__code__ and not stacks:
            stacks.append(traceback.extract_stack(frame))

    sys.setprofile(on_call)
    try:
        algo.training_step()
    finally:
        sys.setprofile(None)
        algo.stop()
    assert stacks, f"{loss_function.__name__} did not run in training_step"
    return [(Path(frame.filename).resolve().relative_to(PACKAGE).as_posix(), frame.name) for frame in stacks[0]
            if Path(frame.filename).resolve().is_relative_to(PACKAGE)]


def files_in_order(frames: list[tuple[str, str]]) -> list[str]:
    files: list[str] = []
    for file, _ in frames:
        if file != SEAM and file not in files:
            files.append(file)
    return files


@pytest.mark.parametrize(("backbone", "loss_function"), [("iql", caps_iql_losses), ("sacbc", caps_sacbc_losses)])
def test_training_step_reaches_the_loss_through_four_project_files(ray_session, backbone, loss_function) -> None:
    frames = project_frames(loss_function, backbone=backbone)
    assert frames[0] == ("core/offline.py", "training_step")
    assert files_in_order(frames) == ["core/offline.py", "core/learner.py",
                                      "algorithms/caps/torch/caps_torch_learner.py",
                                      f"algorithms/caps/{backbone}/losses.py"]
    # besides them, only the update seam's two adapters to RLlib's private update step
    assert [name for file, name in frames if file == SEAM] == ["_update", "rllib_update_step"]
