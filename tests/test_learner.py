"""The in-memory learner runs several gradient steps per ``Learner.update`` call with per-step semantics: a fresh
minibatch each step, the Polyak step after each optimiser step, the same losses. So it must match a plain
PyTorch loop over the same minibatches step for step, for both backbones."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from rllib_caps.algorithms.caps.plain_loop import PlainLoop
from rllib_caps.algorithms.registry import build_config
from rllib_caps.bench import local_learner
from rllib_caps.core.captured_step import all_finite
from rllib_caps.core.learner import STEPS_PER_CALL
from rllib_caps.core.losses import total_loss
from rllib_caps.core.optim import adam
from rllib_caps.data import TransitionDataset

BUNDLED = Path(__file__).resolve().parents[1] / "datasets" / "BallCircle"


@pytest.mark.parametrize("backbone", ["iql", "sacbc"])
def test_amortised_learner_updates_equal_a_plain_per_step_loop(backbone: str) -> None:
    steps = STEPS_PER_CALL + 6  # crosses a call boundary
    config = build_config("caps", "BallCircle", BUNDLED, steps=steps, heads=3, hidden=[16, 16], batch_size=32,
                          eval_episodes=0, seed=3, backbone=backbone)
    config.validate()
    learner = local_learner(config)
    module = learner.module["default_policy"]

    initial = {name: value.clone() for name, value in module.state_dict().items()}
    plain = PlainLoop(config, initial_state=module.state_dict(), seed=config.seed * 1000)  # the learner's seed
    torch.manual_seed(0)
    plain(steps)

    torch.manual_seed(1)  # every random draw (SAC+BC's action noise too) comes from the learner's own generator
    results = learner.update_from_dataset(num_updates=steps)
    assert results is not None
    learned, reference = module.state_dict(), plain.module.state_dict()
    assert learned.keys() == reference.keys() and any(name.startswith("qr_target") for name in reference)
    for name in reference:  # every online and target parameter, step for step
        torch.testing.assert_close(learned[name], reference[name], rtol=1e-5, atol=1e-6, msg=name)
        trained = not name.endswith("log_std") and not name.startswith("cost_offset")  # Q^c shifts: at evaluation
        assert not torch.equal(learned[name], initial[name]) or not trained, name


def test_multi_tensor_adam_is_bit_identical_to_the_per_parameter_loop() -> None:
    torch.manual_seed(0)
    nets = [torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 1)) for _ in range(2)]
    nets[1].load_state_dict(nets[0].state_dict())
    optimizers = [adam(nets[0].parameters(), 1e-2), torch.optim.Adam(nets[1].parameters(), lr=1e-2, foreach=False)]
    for _ in range(20):
        x = torch.randn(16, 5)
        for net, optimizer in zip(nets, optimizers, strict=True):
            optimizer.zero_grad()
            net(x).pow(2).mean().backward()
            optimizer.step()
    for a, b in zip(nets[0].parameters(), nets[1].parameters(), strict=True):
        assert torch.equal(a, b)
    assert optimizers[0].defaults["foreach"] is True


def test_forward_train_restores_train_mode_after_evaluation() -> None:
    config = build_config("caps", "BallCircle", BUNDLED, steps=1, heads=2, hidden=[8, 8], batch_size=4,
                          eval_episodes=0)
    config.validate()
    module = config.get_rl_module_spec().build()
    module.make_target_networks()
    batch = TransitionDataset.from_parquet(config.input_).sample(4, torch.Generator().manual_seed(0))
    module.eval()
    assert not any(m.training for m in module.modules())
    module.forward_train(batch)
    assert all(m.training for m in module.modules())


def _learner(algo: str = "caps", **settings):
    config = build_config(algo, "BallCircle", BUNDLED, steps=4, hidden=[8, 8], batch_size=8, eval_episodes=0,
                          **settings)
    config.validate()
    return local_learner(config)


def test_optimisers_step_directly_only_when_nothing_postprocesses_the_gradients() -> None:
    assert _learner("caps", heads=2)._gradients_pass_through
    assert not _learner("cdt")._gradients_pass_through  # CDT clips its transformer's gradients (grad_clip 0.25)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_all_finite_finds_a_bad_entry_in_any_tensor_and_leaves_the_values_alone(bad: float) -> None:
    tensors = [torch.randn(64, 8), torch.randn(3), torch.randn(2, 2, dtype=torch.float64)]
    originals = [t.clone() for t in tensors]
    assert all_finite(tensors)
    assert all(torch.equal(t, o) for t, o in zip(tensors, originals, strict=True))  # unscaled by 1: bit for bit
    for t in tensors:
        t.view(-1)[-1] = bad
        assert not all_finite(tensors)
        t.view(-1)[-1] = 0.0


def test_non_finite_gradients_are_replaced_and_the_step_still_happens(caplog: pytest.LogCaptureFixture) -> None:
    learner = _learner("caps", heads=2)
    module = learner.module["default_policy"]
    batch = {"default_policy": TransitionDataset.from_parquet(learner.config.input_).sample(
        8, torch.Generator().manual_seed(0))}
    fwd_out = learner.module.forward_train(batch)
    gradients = learner.compute_gradients(learner.compute_losses(fwd_out=fwd_out, batch=batch))
    poisoned = next(g for g in gradients.values() if g is not None and g.numel() > 1)
    poisoned.view(-1)[0] = float("nan")
    before = {name: p.detach().clone() for name, p in module.named_parameters()}
    with caplog.at_level("WARNING"):
        learner.apply_gradients(learner.postprocess_gradients(gradients))
    assert "non-finite gradients" in caplog.text
    assert all(torch.isfinite(p).all() for p in module.parameters())
    assert sum(not torch.equal(p, before[name]) for name, p in module.named_parameters()) > 0


def test_learners_of_one_dataset_share_one_copy_until_its_files_change(tmp_path: Path) -> None:
    """A population's members each build a learner on their trial's dataset: they hold one copy between them. A
    rewritten dataset (another modification time) is loaded afresh, and BC-Safe's filtered data is its own."""
    import shutil

    data = tmp_path / "BallCircle"
    shutil.copytree(BUNDLED, data)
    first, second = TransitionDataset.from_parquet(data), TransitionDataset.from_parquet(data / "data")
    assert second is first and second.tensors["obs"] is first.tensors["obs"]
    for file in (data / "data").rglob("*.parquet"):
        stat = file.stat()
        os.utime(file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    rewritten = TransitionDataset.from_parquet(data)
    assert rewritten is not first
    torch.testing.assert_close(rewritten.tensors["obs"], first.tensors["obs"])
    learners = [local_learner(_validated(build_config("bc-safe", "BallCircle", data, steps=2, hidden=[8],
                                                      batch_size=8, eval_episodes=0, seed=seed, cost_limit=limit)))
                for seed, limit in ((0, 10), (1, 40))]
    assert learners[0].dataset is not rewritten and len(learners[0].dataset) < len(learners[1].dataset)
    assert len(TransitionDataset.from_parquet(data)) == len(rewritten)  # filtering left the shared copy alone


def _validated(config: Any) -> Any:
    config.validate()
    return config


def test_the_total_loss_sums_the_terms_that_carry_a_gradient_and_refuses_none() -> None:
    weight = torch.tensor(2.0, requires_grad=True)
    terms = {"qr_loss": weight * 3, "actor_loss": weight * 4, "mean_qc": torch.tensor(100.0)}
    assert total_loss(terms).item() == 14.0
    with pytest.raises(ValueError, match="no loss term carries a gradient.*mean_qc"):
        total_loss({"mean_qc": torch.tensor(1.0)})
