"""The torch side of the in-memory offline learner: the gradient steps of a stacked batch inside one update call,
one finiteness check over all gradients per step, and the Polyak step of the target nets after every optimiser
step."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any

import torch
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.utils.annotations import override
from ray.rllib.utils.typing import ParamDict

from rllib_caps.core.learner import OfflineSafeLearner
from rllib_caps.core.optim import adam

logger = logging.getLogger(__name__)


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

    @override(TorchLearner)
    def apply_gradients(self, gradients_dict: ParamDict) -> None:
        """RLlib's optimiser step, then the Polyak step (every gradient step, as the paper's τ assumes).

        RLlib checks every parameter's gradient for NaN/inf with one device sync each; here one norm over all
        gradients is checked instead (``OfflineSafeConfig`` sets ``torch_skip_nan_gradients`` so RLlib skips
        its own check), and non-finite gradients are zeroed with a warning, as RLlib does.
        """
        grads = [g for g in gradients_dict.values() if g is not None]
        if grads and not bool(torch.isfinite(torch.stack(torch._foreach_norm(grads))).all()):
            logger.warning("non-finite gradients: setting NaN/inf entries to zero for this step")
            gradients_dict = {pid: torch.nan_to_num(g) for pid, g in gradients_dict.items()}
        super().apply_gradients(gradients_dict)
        self.polyak_update_targets()
