"""The torch RLModule base of every algorithm here: RLlib's ``TorchRLModule`` without its per-step module walk."""

from __future__ import annotations

from typing import Any

from ray.rllib.core.rl_module.rl_module import RLModule
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override


class OfflineTorchRLModule(TorchRLModule):
    """``TorchRLModule`` whose ``forward_train`` switches to train mode only when the module is not in it.

    RLlib's calls ``self.train()`` before every training forward pass, which walks every submodule (about 80 for
    CAPS with K = 2): a fixed cost of every gradient step, the same at any network width. ``eval()`` and
    ``train()`` (``forward_inference``/``forward_exploration`` restore train mode) always act on the whole
    module, so checking the top module's flag is enough.
    """

    @override(TorchRLModule)
    def forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        if not self.training:
            self.train()
        return RLModule.forward_train(self, batch, **kwargs)
