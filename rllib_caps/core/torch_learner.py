"""The torch side of the in-memory offline learner: one finiteness check over all gradients per step, and the
Polyak step of the target nets after every optimiser step."""

from __future__ import annotations

import logging

import torch
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.utils.annotations import override
from ray.rllib.utils.typing import ParamDict

from rllib_caps.core.learner import OfflineSafeLearner

logger = logging.getLogger(__name__)


class OfflineSafeTorchLearner(TorchLearner, OfflineSafeLearner):
    """``TorchLearner`` plus the in-memory dataset of ``OfflineSafeLearner``.

    Loss terms are logged once per ``Learner.update`` call (the last step's, as RLlib's window of 1 keeps only
    that one anyway): ``record_losses`` keeps them, ``after_gradient_based_update`` logs them.
    """

    def register_adams(self, module_id: str, networks: dict[str, tuple[torch.nn.Module, float]]) -> None:
        """One Adam per network, named by its key: ``{name: (network, learning rate)}``."""
        for name, (net, lr) in networks.items():
            params = self.get_parameters(net)
            self.register_optimizer(module_id=module_id, optimizer_name=name, optimizer=torch.optim.Adam(params),
                                    params=params, lr_or_lr_schedule=lr)

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
