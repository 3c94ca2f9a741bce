"""The captured gradient step (``captured_step``): where it is on and off, and on a GPU that replaying the CUDA
graph trains exactly as the eager learner does, for every algorithm whose step has static shapes; and that a
learner whose forward pass and losses are compiled (``torch_compile_learner``) trains as the eager one does, on CPU
and, captured, on a GPU.

The ``cuda`` tests are deselected by default (``pyproject.toml``); ``benchmarks/gpu/run.sh`` runs them on a GPU
machine with ``-m cuda``."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from rllib_caps.algorithms.registry import build_config
from rllib_caps.bench import local_learner
from rllib_caps.core.learner import STEPS_PER_CALL
from rllib_caps.sweeps.packing import packable

BUNDLED = Path(__file__).resolve().parents[1] / "datasets" / "BallCircle"
ON_GPU = {"num_gpus_per_learner": 1}


def _config(algo: str, **settings):
    config = build_config(algo, "BallCircle", BUNDLED, steps=4, hidden=[32, 32], batch_size=16, eval_episodes=0,
                          seed=3, **settings)
    config.validate()
    return config


def test_auto_leaves_a_cpu_learner_eager() -> None:
    learner = local_learner(_config("caps", heads=2))
    assert not learner.captures_steps
    assert "not CUDA" in learner.captured_step_blockers()[0]
    learner.update_from_dataset(num_updates=3)


def test_asking_for_a_captured_step_where_there_is_none_names_the_reason() -> None:
    with pytest.raises(ValueError, match="captured_step=True, but .* device is cpu, not CUDA"):
        local_learner(_config("caps", heads=2, captured_step=True))


@pytest.mark.parametrize("setting, value", [("captured_step", "yes"), ("matmul_precision", "tf32")])
def test_bad_settings_are_refused_by_name(setting: str, value: str) -> None:
    with pytest.raises(ValueError, match=setting):
        _config("caps", **{setting: value})


def test_host_side_steps_block_the_capture() -> None:
    assert any("cosine" in reason for reason in
               local_learner(_config("caps", heads=2, implementation="code")).captured_step_blockers())
    per_tensor_clip = _config("cdt")  # RLlib's "norm" clip compares each norm on the host
    per_tensor_clip.grad_clip_by = "norm"
    assert any("postprocessed" in reason for reason in local_learner(per_tensor_clip).captured_step_blockers())


def test_cdt_clips_and_warms_up_on_the_device_so_only_the_device_blocks_its_capture() -> None:
    assert [reason for reason in local_learner(_config("cdt")).captured_step_blockers()
            if "not CUDA" not in reason] == []


CAPTURABLE = [("caps", {"heads": 3}), ("caps", {"heads": 2, "backbone": "sacbc"}),
              ("caps", {"heads": 2, "fused_critics": True}), ("bc-all", {}), ("bearl", {"cost_limit": 20}),
              ("cpq", {"cost_limit": 20}), ("coptidice", {"cost_limit": 20}), ("cdt", {})]


def _assert_trains_as_the_eager_learner(algo: str, settings: dict, device: dict) -> None:
    """A learner of ``settings`` and an eager, uncompiled one from the same start take the same steps."""
    steps = STEPS_PER_CALL + 6  # crosses an update call, and warm-up, capture and replays
    eager = local_learner(_config(algo, **{**settings, "captured_step": False, "compile": False}, **device))
    other = local_learner(_config(algo, **settings, **device))
    assert not eager.captures_steps and eager._compiled_losses is None
    assert other.captures_steps == (settings.get("captured_step") is True)
    assert (other._compiled_losses is not None) == settings.get("compile", False)  # forward and losses: one program
    module, reference = other.module["default_policy"], eager.module["default_policy"]
    module.load_state_dict(reference.state_dict())  # the same start, targets included
    initial = {name: value.clone() for name, value in module.state_dict().items()}
    for learner in (eager, other):  # the same global random state, should a step draw from it
        torch.manual_seed(0)
        learner.update_from_dataset(num_updates=steps)
    learned, expected = module.state_dict(), reference.state_dict()
    for name in expected:
        torch.testing.assert_close(learned[name], expected[name], rtol=1e-4, atol=1e-5,
                                   msg=lambda message, name=name: f"{name}: {message}")
    assert sum(not torch.equal(learned[n], initial[n]) for n in expected) > len(expected) // 2


@pytest.mark.cuda
@pytest.mark.parametrize("algo, settings", CAPTURABLE, ids=[f"{a}-{'-'.join(map(str, s.values()))}"
                                                             for a, s in CAPTURABLE])
def test_captured_steps_train_as_the_eager_steps_do(algo: str, settings: dict) -> None:
    _assert_trains_as_the_eager_learner(algo, {**settings, "captured_step": True}, ON_GPU)


COMPILABLE = [(algo, settings) for algo, settings in CAPTURABLE if packable(algo)]  # pure losses: compiled whole
TINY_CDT = {"embedding_dim": 16, "num_layers": 1, "attention_heads": 2, "seq_len": 4}


@pytest.mark.slow
def test_a_compiled_learner_trains_as_the_eager_one_does() -> None:
    """On CPU the forward pass and losses are captured as one ``fullgraph`` program with ``aot_eager`` (the same
    capture, forward and backward, without generating C++ kernels); the CUDA tests below compile with inductor."""
    _assert_trains_as_the_eager_learner("caps", {"heads": 3, "compile": True, "compile_backend": "aot_eager"}, {})


@pytest.mark.slow
def test_a_compiled_cdt_learner_trains_as_the_eager_one_does() -> None:
    """CDT's losses are pure: its transformer's forward pass, dropout included (its masks come with the minibatch),
    and its losses are one program."""
    _assert_trains_as_the_eager_learner("cdt", {"compile": True, "compile_backend": "aot_eager", **TINY_CDT}, {})


@pytest.mark.cuda
@pytest.mark.parametrize("algo, settings", COMPILABLE, ids=[f"{a}-{'-'.join(map(str, s.values()))}"
                                                             for a, s in COMPILABLE])
def test_compiled_captured_steps_train_as_the_eager_steps_do(algo: str, settings: dict) -> None:
    """In IEEE fp32: inductor's fused kernels and the eager ops round TF32 products differently."""
    _assert_trains_as_the_eager_learner(algo, {**settings, "captured_step": True, "compile": True,
                                               "matmul_precision": "highest"}, ON_GPU)


@pytest.mark.cuda
def test_a_captured_step_with_non_finite_gradients_is_skipped_and_reported(caplog: pytest.LogCaptureFixture
                                                                           ) -> None:
    learner = local_learner(_config("caps", heads=2, captured_step=True, **ON_GPU))
    module = learner.module["default_policy"]
    with torch.no_grad():
        next(module.actor.parameters()).view(-1)[0] = float("nan")  # every actor gradient turns NaN
    before = {name: p.detach().clone() for name, p in module.actor.named_parameters()}
    with caplog.at_level(logging.WARNING):
        learner.update_from_dataset(num_updates=10)
    assert "10 gradient step(s) of this update call were skipped" in caplog.text
    for name, p in module.actor.named_parameters():
        assert torch.equal(p, before[name]) or torch.isnan(before[name]).any(), name
