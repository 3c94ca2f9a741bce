"""The in-memory offline learner: the dataset lives on the learner's device, minibatches are sampled there,
and target networks get their Polyak step after every gradient step."""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.learner.learner import Learner
from ray.rllib.core.rl_module.apis import TargetNetworkAPI
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import NUM_TARGET_UPDATES
from ray.rllib.utils.typing import ResultDict

from rllib_caps.core.losses import polyak_update
from rllib_caps.data import TransitionDataset


class OfflineSafeLearner(Learner):
    """Holds the offline dataset on the learner's device (``config.input_``) and samples it there.

    One ``Learner.update`` runs per gradient step, so RLlib's ``after_gradient_based_update`` gives every
    target net its Polyak step every step (the paper: τ = 0.005 each step). With ``num_learners > 1`` every
    learner loads the dataset and draws its own minibatches from a generator seeded with ``(config.seed,
    learner index)``; DDP averages the gradients, so the effective batch is ``train_batch_size_per_learner ×
    num_learners``, as everywhere in RLlib.
    """

    @override(Learner)
    def build(self) -> None:
        super().build()
        self.module.foreach_module(
            lambda _mid, mod: mod.make_target_networks() if isinstance(mod, TargetNetworkAPI) else None
        )
        self.dataset = TransitionDataset.from_parquet(self.config.input_, device=self._device)
        seed = (self.config.seed or 0) * 1000 + self._learner_index
        self._generator = torch.Generator(device=self._device).manual_seed(seed)

    def update_from_dataset(self, *, num_updates: int, timesteps: dict[str, Any] | None = None) -> ResultDict:
        """Runs ``num_updates`` gradient steps on uniformly sampled minibatches; returns reduced metrics."""
        batch_size = self.config.train_batch_size_per_learner
        results = None
        for i in range(num_updates):
            sample = self.dataset.sample(batch_size, self._generator)
            batch = MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(sample)}, env_steps=batch_size)
            results = self.update(batch=batch, timesteps=timesteps, _no_metrics_reduce=i < num_updates - 1)
        return results

    @override(Learner)
    def after_gradient_based_update(self, *, timesteps: dict[str, Any]) -> None:
        """Polyak-averages every target net after every gradient step."""
        super().after_gradient_based_update(timesteps=timesteps)
        for module_id, module in self.module._rl_modules.items():
            if not isinstance(module.unwrapped(), TargetNetworkAPI):
                continue
            tau = self.config.get_config_for_module(module_id).tau
            for online, target in module.unwrapped().get_target_network_pairs():
                polyak_update(online, target, tau)
            self.metrics.log_value((module_id, NUM_TARGET_UPDATES), 1, reduce="lifetime_sum")
