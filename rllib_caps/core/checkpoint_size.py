"""The disk space one checkpoint takes, known before training from the size of the config's RLModule.

An RLlib checkpoint of an offline safe algorithm holds its learner's state: the module's state (its parameters and
the target networks the learner makes, ``module_state.pkl``) and Adam's two moments of every trainable parameter
(``learner/state.pkl``); the pickle-free copy of the module's state (``policy/weights.safetensors``); and small files
(the pickled classes and constructor arguments, JSON metadata, the manifest, ``evaluation.json``). So

    bytes = 2 × module state + 2 × trainable parameters + ``SMALL_FILES_BYTES``

Measured (Ray 2.60.0, BallCircle, ``du -sb`` and ``du -sk`` of ``train --steps 10 --eval-episodes 0``): CAPS with
hidden 256 256, 757k numbers of module state of which 481k trainable, 10,002,282 bytes (9.6 MiB in blocks); bc-all
with hidden 256 256, 69k trainable and no targets, 1,179,733 bytes; the smoke-test sizes (hidden 16 16) 163,501
(CAPS), 89,141 (bc-all) and 204,656 bytes (CDT). The formula's two large terms leave 82-98 kB in every one of them
(136-151 KiB in 4 KiB blocks) for the 18 small files; ``SMALL_FILES_BYTES`` rounds that up. The estimate is then
within 1% of CAPS's checkpoint at hidden 256 256 (10,101,000 bytes estimated, 10,055,680 in blocks) and 1.2-1.4
times the smoke checkpoints' blocks.
"""

from __future__ import annotations

from typing import Any

from rllib_caps.utils.disk import OutputEstimate

SMALL_FILES_BYTES = 192 * 2**10


def checkpoint_bytes(module_state_bytes: int, trainable_bytes: int) -> int:
    """The size on disk of one checkpoint of a module whose state (targets included) takes ``module_state_bytes``
    and whose trainable parameters take ``trainable_bytes`` (the formula above)."""
    return 2 * module_state_bytes + 2 * trainable_bytes + SMALL_FILES_BYTES


def module_sizes(config: Any) -> tuple[int, int]:
    """The bytes of the state (with target networks) and of the trainable parameters of ``config``'s RLModule,
    built on torch's meta device: shapes and dtypes only, so no memory is taken and no weights are initialised,
    however large the module."""
    import torch
    from ray.rllib.core.rl_module.apis import TargetNetworkAPI

    config.validate()  # fills the spaces from the task registry
    with torch.device("meta"):
        module = config.get_rl_module_spec().build()
        if isinstance(module, TargetNetworkAPI):
            module.make_target_networks()
    state = sum(t.numel() * t.element_size() for t in module.state_dict().values())
    trainable = sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)
    return state, trainable


def config_checkpoint_bytes(config: Any) -> int:
    """The estimated size on disk of one checkpoint of an algorithm built from ``config``."""
    return checkpoint_bytes(*module_sizes(config))


def training_run_estimate(config: Any) -> OutputEstimate:
    """What ``train`` writes: one checkpoint (with ``--force`` the old one is already on the disk, so the free space
    needs to hold only the new one)."""
    return OutputEstimate(runs=1, run_noun="run", checkpoints=1, checkpoint_bytes=config_checkpoint_bytes(config))
