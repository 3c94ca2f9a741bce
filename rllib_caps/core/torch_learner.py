"""The torch side of the in-memory offline learner: the gradient steps of a stacked batch inside one update call,
one finiteness check over all gradients per step (one kernel), a direct optimiser step when nothing postprocesses
the gradients, and the Polyak step of the target nets after every optimiser step."""

from __future__ import annotations

import functools
import logging
from collections.abc import Collection, Mapping
from typing import Any

import torch
from ray.rllib.core.learner.learner import Learner
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.utils.annotations import override
from ray.rllib.utils.typing import ParamDict

from rllib_caps.core.learner import OfflineSafeLearner
from rllib_caps.core.optim import adam

logger = logging.getLogger(__name__)


def all_finite(tensors: list[torch.Tensor]) -> bool:
    """Whether every entry of ``tensors`` (on one device) is finite: one multi-tensor kernel and one device sync.

    It is the check ``torch.amp.GradScaler`` runs before each optimiser step, with an unscale factor of 1, so the
    tensors keep their values bit for bit; on CPU it is several times faster than a norm per tensor.
    """
    found = torch.zeros(1, device=tensors[0].device)
    torch._amp_foreach_non_finite_check_and_unscale_(tensors, found, torch.ones(1, device=found.device))
    return not bool(found)


class OfflineSafeTorchLearner(TorchLearner, OfflineSafeLearner):
    """``TorchLearner`` plus the in-memory dataset of ``OfflineSafeLearner``.

    Loss terms are logged once per ``Learner.update`` call (the last step's, as RLlib's window of 1 keeps only
    that one anyway): ``record_losses`` keeps them, ``after_gradient_based_update`` logs them.
    """

    def register_adam_optimizers(self, module_id: str, groups: Mapping[str, tuple[Any, float]],
                                 unscheduled: Collection[str] = (), weight_decay: Mapping[str, float] | None = None,
                                 ) -> dict[str, torch.optim.Optimizer]:
        """One Adam per named group ``name -> (network or parameter list, learning rate)``, registered with RLlib,
        which keeps each at its learning rate; groups in ``unscheduled`` are left to the caller's own schedule,
        groups in ``weight_decay`` get AdamW (Adam with decoupled weight decay) with that decay."""
        optimizers = {}
        decay = weight_decay or {}
        for name, (net, lr) in groups.items():
            params = list(net.parameters()) if isinstance(net, torch.nn.Module) else list(net)
            optimizers[name] = (torch.optim.AdamW(params, lr=lr, weight_decay=decay[name], foreach=True)
                                if name in decay else adam(params, lr))
            self.register_optimizer(module_id=module_id, optimizer_name=name, optimizer=optimizers[name],
                                    params=params, lr_or_lr_schedule=None if name in unscheduled else lr)
        return optimizers

    def record_losses(self, module_id: str, losses: dict[str, torch.Tensor]) -> None:
        """Keeps this step's loss terms (detached) to be logged at the end of the update call."""
        self._recorded_losses = getattr(self, "_recorded_losses", {})
        self._recorded_losses[module_id] = {k: v.detach() for k, v in losses.items()}

    @override(TorchLearner)
    def after_gradient_based_update(self, *, timesteps: dict) -> None:
        super().after_gradient_based_update(timesteps=timesteps)
        for module_id, losses in getattr(self, "_recorded_losses", {}).items():
            self.metrics.log_dict(losses, key=module_id, window=1)

    @override(TorchLearner)
    def _update(self, batch: dict[str, Any]) -> tuple[Any, Any, Any]:
        """One gradient step per minibatch of the stacked batch (``OfflineSafeLearner.update_from_dataset``: rows
        ``[i B, (i + 1) B)`` are step i's, B = ``train_batch_size_per_learner``): RLlib's torch update step (forward,
        losses, backward, ``apply_gradients``) on each slice in order; returns the last step's outputs."""
        size = self.config.train_batch_size_per_learner
        rows = len(next(iter(next(iter(batch.values())).values())))
        for start in range(0, rows, size):
            outputs = super()._update({mid: {key: column[start:start + size] for key, column in module_batch.items()}
                                       for mid, module_batch in batch.items()})
        return outputs

    @functools.cached_property
    def _gradients_pass_through(self) -> bool:
        """True when the gradients ``compute_gradients`` returns are the parameters' own ``.grad`` and RLlib's
        postprocessing and ``apply_gradients`` would only regroup and re-assign them before the optimiser steps:
        no module clips or logs gradients, no subclass computes or postprocesses them its own way, and no grad
        scaler or torch lr scheduler steps with the optimisers."""
        configs = [self.config.get_config_for_module(mid) for mid in self.module.keys()]
        own = type(self)
        return (all(c.grad_clip is None and not c.log_gradients for c in configs)
                and own.compute_gradients is TorchLearner.compute_gradients
                and own.postprocess_gradients_for_module is Learner.postprocess_gradients_for_module
                and self._grad_scalers is None and self._lr_scheduler_classes is None)

    @override(Learner)
    def postprocess_gradients(self, gradients_dict: ParamDict) -> ParamDict:
        """RLlib's, unless it would only regroup the gradients per optimiser (``_gradients_pass_through``)."""
        return gradients_dict if self._gradients_pass_through else super().postprocess_gradients(gradients_dict)

    @override(TorchLearner)
    def apply_gradients(self, gradients_dict: ParamDict) -> None:
        """The optimiser step, then the Polyak step (every gradient step, as the paper's τ assumes).

        RLlib checks every parameter's gradient for NaN/inf with one device sync each; here ``all_finite`` checks
        them all at once (``OfflineSafeConfig`` sets ``torch_skip_nan_gradients`` so RLlib skips its own check),
        and non-finite entries are replaced in place (NaN by 0) with a warning, as RLlib does. With
        ``_gradients_pass_through`` the optimisers step directly, without RLlib's per-parameter re-assignment;
        otherwise RLlib's ``apply_gradients`` does it.
        """
        grads = [g for g in gradients_dict.values() if g is not None]
        if grads and not all_finite(grads):
            logger.warning("non-finite gradients: setting NaN/inf entries to zero for this step")
            for grad in grads:
                grad.nan_to_num_()
        if self._gradients_pass_through:
            for optimizer in self._optimizer_parameters:
                optimizer.step()
        else:
            super().apply_gradients(gradients_dict)
        self.polyak_update_targets()
