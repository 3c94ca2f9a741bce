"""CAPS's reference loop for ``python -m rllib_caps.bench`` and the learner's step-for-step test: the CAPS module,
losses, optimisers and Polyak step of ``CAPSTorchLearner`` in a bare PyTorch loop, without RLlib's machinery."""

from __future__ import annotations

from typing import Any

import torch

from rllib_caps.algorithms.caps.training_data import training_dataset
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
        self.config, self.backbone = config, config.backbone_spec
        self.module = config.get_rl_module_spec().build()
        self.module.make_target_networks()
        if initial_state is not None:
            self.module.load_state_dict(initial_state)
        self.module.to(device)
        self.optimizers = [adam(params, lr)  # as the learner's
                           for params, lr in self.backbone.optimizer_groups(self.module, config).values()]
        self.dataset = training_dataset(TransitionDataset.from_parquet(config.input_, device=device), config)
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.settings = self.backbone.settings_on(config, device)

    def minibatch(self) -> dict[str, torch.Tensor]:
        """A step's minibatch: uniformly sampled transitions, then the backbone's extra draws, all from the loop's
        generator (as the learner draws them)."""
        size = self.config.train_batch_size_per_learner
        return (self.dataset.sample(size, self.generator)
                | self.backbone.draw_extras(self.dataset, size, self.generator, self.config))

    def __call__(self, n: int) -> None:
        for _ in range(n):
            batch = self.minibatch()
            with autocast(self.config.matmul_precision, self.generator.device):
                losses = self.backbone.loss_terms(self.module.forward_train(batch), batch, self.settings)
            for optimizer in self.optimizers:
                optimizer.zero_grad(set_to_none=True)
            sum(losses.values()).backward()
            for optimizer in self.optimizers:
                optimizer.step()
            for online, target in self.module.get_target_network_pairs():
                polyak_update(online, target, self.config.tau)
