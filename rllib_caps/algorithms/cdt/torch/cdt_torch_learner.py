"""Torch CDT learner: windows of whole episodes and their Pareto-relabelled copies sampled on the learner's
device, AdamW with OSRL's linear warm-up and gradient clip for the transformer, Adam for the temperature. The step
has static shapes and no host read, so on CUDA it is captured (``captured_step``) and can be compiled whole."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.learner.learner import Learner
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.utils.annotations import override
from ray.rllib.utils.torch_utils import clip_gradients
from ray.rllib.utils.typing import ModuleID, ParamDict

from rllib_caps.algorithms.cdt.losses import cdt_losses
from rllib_caps.algorithms.cdt.nets import dropout_masks
from rllib_caps.algorithms.cdt.relabel import episode_weights, relabel
from rllib_caps.core.learner import OfflineSafeTorchLearner
from rllib_caps.core.optim import clip_global_norm_
from rllib_caps.core.ray_internals import scales_or_schedules
from rllib_caps.data import DatasetError, MinibatchDraw
from rllib_caps.data.sequences import COSTS_TO_GO, MASK, RETURNS_TO_GO, EpisodeSequences

logger = logging.getLogger(__name__)


def warmup_lr(current: float | torch.Tensor, step: torch.Tensor | None, lr: float, warmup_steps: int
              ) -> float | torch.Tensor:
    """OSRL's linear warm-up, lr · min((k + 1) / warmup_steps, 1) at AdamW's k-th step (``step``: its step count,
    None before the first). A ``current`` rate that is a tensor (CUDA: the fused AdamW reads it on the device) is
    written in place from the device's step count, with no host read; a float rate is replaced by a float."""
    if not isinstance(current, torch.Tensor):
        return lr * min(((0 if step is None else int(step)) + 1) / warmup_steps, 1.0)
    if step is None:
        return current.fill_(lr * min(1 / warmup_steps, 1.0))
    return current.copy_(torch.clamp((step + 1) / warmup_steps, max=1.0) * lr)


class EpisodeSampler:
    """The training episodes: every dataset episode and every relabelled copy (``relabel.relabel``), each a view
    (episode, return shift, cost shift) sampled with probability ∝ ``relabel.episode_weights`` of its (relabelled)
    cost; a window starts at a uniform step of its episode (OSRL's ``SequenceDataset``). It draws and gathers
    minibatches as a ``TransitionDataset`` does its rows (``draw_rows``, ``rows``), so a ``MinibatchDraw`` of it
    makes a trial's minibatch and a population's."""

    def __init__(self, sequences: EpisodeSequences, config: Any, seed: int) -> None:
        self.sequences, self.seq_len = sequences, config.seq_len
        costs = sequences.episode_costs.double().cpu().numpy()
        returns = sequences.episode_returns.double().cpu().numpy()
        augmented = relabel(costs, returns, config.augmentation_settings(), np.random.default_rng(seed))
        self.num_relabelled = len(augmented.sources)
        episodes = np.concatenate([np.arange(len(costs)), augmented.sources])
        return_shift = np.concatenate([np.zeros(len(costs)), augmented.returns - returns[augmented.sources]])
        cost_shift = np.concatenate([np.zeros(len(costs)), augmented.costs - costs[augmented.sources]])
        weights = episode_weights(costs[episodes] + cost_shift, config.cost_cap)
        if not weights.sum() > 0:
            raise DatasetError(f"{config.input_}: every episode costs {config.cost_cap:g} or more, and CDT samples "
                               "episodes with probability ∝ max(0, cost_cap − C): raise cost_cap")
        device = sequences.starts.device
        self.episodes = torch.as_tensor(episodes, dtype=torch.long, device=device)
        self.return_shift = torch.as_tensor(return_shift, dtype=torch.float32, device=device)
        self.cost_shift = torch.as_tensor(cost_shift, dtype=torch.float32, device=device)
        self.weights = torch.as_tensor(weights, dtype=torch.float32, device=device)

    def draw_rows(self, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        """A step's random draws, (B, 2): each window's view and first step."""
        views = torch.multinomial(self.weights, batch_size, replacement=True, generator=generator)
        lengths = self.sequences.lengths[self.episodes[views]]
        first = (torch.rand(batch_size, generator=generator, device=lengths.device) * lengths).long()
        return torch.stack([views, torch.minimum(first, lengths - 1)], dim=-1)

    def rows(self, index: torch.Tensor) -> dict[str, torch.Tensor]:
        """The windows of ``draw_rows``' draws, of any leading shape: (B, 2) gives (B, L, ...) columns, (P, B, 2)
        the (P, B, L, ...) columns of P minibatches."""
        views, first = index.reshape(-1, 2).unbind(-1)
        window = self.sequences.windows(self.episodes[views], first, self.seq_len)
        window[RETURNS_TO_GO] = window[RETURNS_TO_GO] + self.return_shift[views, None] * window[MASK]
        window[COSTS_TO_GO] = window[COSTS_TO_GO] + self.cost_shift[views, None] * window[MASK]
        return {key: value.reshape(*index.shape[:-1], *value.shape[1:]) for key, value in window.items()}


class CDTTorchLearner(OfflineSafeTorchLearner):
    """One backward pass on the sum of the losses: the action loss sees the temperature detached and the
    temperature loss the entropy detached, so each optimiser gets its own loss's gradient, as in OSRL's two
    sequential steps on one forward pass.

    Its step runs on the device alone: windows of fixed shape (B, L), the global-norm clip as device ops
    (``clip_global_norm_``) and, on CUDA, the warm-up's learning rate as a device tensor (``warmup_lr``). Its
    dropout masks come with the minibatch (``draw_extras``), so its trials train as populations (the population
    clips each member's transformer gradients to their own norm and warms up its AdamW as the learner does)."""

    CLIPPED_OPTIMIZERS = ("transformer",)  # OSRL clips the model, not the temperature

    @override(OfflineSafeTorchLearner)
    def build(self) -> None:
        super().build()
        sequences = EpisodeSequences.from_dataset(self.dataset)
        horizon = self.config.resolved_horizon
        longest = int(sequences.lengths.max())
        if longest > horizon:
            raise DatasetError(f"{self.config.input_}: an episode has {longest} steps, more than the horizon "
                               f"{horizon} that CDT's timestep embedding covers (set .training(horizon=...))")
        # Every learner relabels alike (the training seed alone); each then draws its own windows.
        self.sampler = EpisodeSampler(sequences, self.config, seed=self.config.seed or 0)
        logger.info("CDT: %d episodes and %d relabelled copies", len(sequences), self.sampler.num_relabelled)

    @override(OfflineSafeTorchLearner)
    def draw_minibatch(self, batch_size: int, generator: torch.Generator) -> MinibatchDraw:
        """Windows of relabelled episodes (``EpisodeSampler``), not rows, then the step's dropout masks
        (``draw_extras``), all from ``generator``."""
        return MinibatchDraw(self.sampler, self.sampler.draw_rows(batch_size, generator),
                             self.draw_extras(batch_size, generator))

    @override(OfflineSafeTorchLearner)
    def draw_extras(self, batch_size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """The transformer's dropout keep masks (``nets.dropout_masks``): drawn with the minibatch from the trial's
        generator, so a population member draws the masks its trial alone would."""
        module = self.module[DEFAULT_MODULE_ID].unwrapped()
        return dropout_masks(module.transformer.settings, batch_size, generator)

    @override(TorchLearner)
    def configure_optimizers_for_module(self, module_id: ModuleID, config: Any = None) -> None:
        module = self.module[module_id]
        self.register_adam_optimizers(
            module_id, {"transformer": (module.transformer, config.lr),
                        "temperature": ([module.log_temperature], config.temperature_lr)},
            unscheduled=("transformer",), weight_decay={"transformer": config.weight_decay})

    @override(Learner)
    def postprocess_gradients_for_module(self, *, module_id: ModuleID, config: Any = None,
                                         module_gradients_dict: ParamDict) -> ParamDict:
        """Clips the transformer's gradients (``CLIPPED_OPTIMIZERS``) to global norm ``grad_clip`` on the device
        (``clip_global_norm_``); RLlib's clip for the other ``grad_clip_by``."""
        if config.grad_clip:
            clipped = {ref: grad for name in self.CLIPPED_OPTIMIZERS
                       for ref, grad in self.filter_param_dict_for_optimizer(
                           module_gradients_dict, self.get_optimizer(module_id, name)).items()}
            if config.grad_clip_by == "global_norm":
                clip_global_norm_([g for g in clipped.values() if g is not None], config.grad_clip)
            else:
                clip_gradients(clipped, grad_clip=config.grad_clip, grad_clip_by=config.grad_clip_by)
            module_gradients_dict.update(clipped)
        return module_gradients_dict

    @override(OfflineSafeTorchLearner)
    def postprocesses_gradients_on_host(self) -> bool:
        """Only RLlib's per-tensor "norm" clip (it compares each norm on the host) or an lr scheduler: the global-norm
        clip and the warm-up run on the device."""
        configs = [self.config.get_config_for_module(module_id) for module_id in self.module.keys()]
        return scales_or_schedules(self) or any(c.grad_clip and c.grad_clip_by == "norm" for c in configs)

    @override(OfflineSafeTorchLearner)
    def schedule_learning_rates(self, optimizers: Mapping[str, torch.optim.Optimizer]) -> None:
        """Sets the transformer's learning rate of this step, lr · min((k + 1) / warmup_steps, 1) at its k-th step
        (OSRL's LambdaLR; k is AdamW's own step count, so a restored run continues the warm-up). On CUDA the rate is
        a device tensor (made at the first step, and again after a restore, which gives it back as a number),
        written from the device's step count: no host read, and a captured step replays the warm-up."""
        config = self.config.get_config_for_module(DEFAULT_MODULE_ID)
        optimizer = optimizers["transformer"]
        first = optimizer.param_groups[0]["params"][0]
        step = optimizer.state.get(first, {}).get("step")
        for group in optimizer.param_groups:
            if first.is_cuda and not isinstance(group["lr"], torch.Tensor):
                group["lr"] = torch.tensor(float(group["lr"]), device=first.device)
            group["lr"] = warmup_lr(group["lr"], step, config.lr, config.warmup_steps)

    @override(TorchLearner)
    def apply_gradients(self, gradients_dict: ParamDict) -> None:
        """The warm-up's learning rate of this step (``schedule_learning_rates``), then the step."""
        self.schedule_learning_rates(dict(self.get_optimizers_for_module(DEFAULT_MODULE_ID)))
        super().apply_gradients(gradients_dict)

    @override(OfflineSafeTorchLearner)
    def member_losses(self, fwd_out: dict, batch: dict, config: Any,
                      hyperparameters: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """``cdt_losses``: the loss terms and, detached, the metrics logged beside them."""
        losses, metrics = cdt_losses(fwd_out, batch, config.loss_settings())
        return losses | metrics
