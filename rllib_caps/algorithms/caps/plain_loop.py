"""CAPS's reference loop for ``python -m rllib_caps.bench`` and the learner's step-for-step test: the CAPS module,
losses, optimisers and Polyak step of ``CAPSTorchLearner`` in a bare PyTorch loop, without RLlib's machinery."""

from __future__ import annotations

from typing import Any

import torch

from rllib_caps.algorithms.caps.torch.caps_torch_learner import BACKBONE_LOSSES, caps_minibatch, optimizer_groups
from rllib_caps.core.losses import polyak_update
from rllib_caps.core.optim import adam
from rllib_caps.core.precision import autocast
from rllib_caps.data import TransitionDataset


class PlainLoop:
    """The same module, losses, optimisers and Polyak step as the learner, in a bare PyTorch loop.

    ``initial_state`` (a module state dict with targets) and ``seed`` (of the minibatch sampler) let it start
    where a learner starts, so it can serve as the learner's step-for-step reference.
    """

    def __init__(self, config: Any, *, initial_state: dict | None = None, seed: int = 0,
                 device: str = "cpu") -> None:
        self.config = config
        self.module = config.get_rl_module_spec().build()
        self.module.make_target_networks()
        if initial_state is not None:
            self.module.load_state_dict(initial_state)
        self.module.to(device)
        self.optimizers = [adam(params, lr)  # as the learner's
                           for params, lr in optimizer_groups(self.module, config).values()]
        self.dataset = TransitionDataset.from_parquet(config.input_, device=device)
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.settings = config.loss_settings()

    def __call__(self, n: int) -> None:
        for _ in range(n):
            batch = caps_minibatch(self.dataset, self.config.train_batch_size_per_learner, self.generator, self.config)
            with autocast(self.config.matmul_precision, self.generator.device):
                losses = BACKBONE_LOSSES[self.config.backbone](self.module.forward_train(batch), batch, self.settings)
            for optimizer in self.optimizers:
                optimizer.zero_grad(set_to_none=True)
            sum(losses.values()).backward()
            for optimizer in self.optimizers:
                optimizer.step()
            for online, target in self.module.get_target_network_pairs():
                polyak_update(online, target, self.config.tau)
