"""The torch RLModule base of every algorithm here: RLlib's ``TorchRLModule`` without its per-step module walk,
and with a ``set_state`` that leaves no parameter unset."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ray.rllib.core.rl_module.rl_module import RLModule
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override
from ray.rllib.utils.torch_utils import convert_to_torch_tensor


class OfflineTorchRLModule(TorchRLModule):
    """``TorchRLModule`` whose ``forward_train`` switches to train mode only when the module is not in it.

    RLlib's calls ``self.train()`` before every training forward pass, which walks every submodule (about 80 for
    CAPS with K = 2): a fixed cost of every gradient step, the same at any network width. ``eval()`` and
    ``train()`` (``forward_inference``/``forward_exploration`` restore train mode) always act on the whole
    module, so checking the top module's flag is enough.

    RLlib's ``set_state`` loads with ``strict=False`` and checks for missing keys only in inference-only modules: a
    checkpoint whose layer names differ from the module's (one saved by an earlier release, say) would leave those
    layers at their random initialisation, silently. Here ``set_state`` ignores keys the module does not have (a
    full state loaded into an inference-only module, target nets built later) and raises if any of the module's
    own keys is missing.
    """

    extension_path: ClassVar[str] = ""  # "module:Class" of its algorithm's AlgorithmExtension (core.extension)

    @override(TorchRLModule)
    def set_state(self, state: Mapping[str, Any]) -> None:
        missing, _ = self.load_state_dict(convert_to_torch_tensor(dict(state)), strict=False)
        if missing:
            shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
            raise ValueError(f"the module state has no values for {shown}: it was saved by another layout of "
                             f"{type(self).__name__} (state keys: {', '.join(list(state)[:6])}, …); retrain it with "
                             "this release")

    @override(TorchRLModule)
    def forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        if not self.training:
            self.train()
        return RLModule.forward_train(self, batch, **kwargs)
