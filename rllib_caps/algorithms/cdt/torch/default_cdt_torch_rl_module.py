"""Torch CDT RLModule: ``nets.DecisionTransformer`` and the entropy temperature."""

from __future__ import annotations

import math
from typing import Any

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override

from rllib_caps.algorithms.cdt import keys as ck
from rllib_caps.algorithms.cdt.default_cdt_rl_module import DefaultCDTRLModule
from rllib_caps.algorithms.cdt.nets import DecisionTransformer, TransformerSettings
from rllib_caps.core.torch_rl_module import OfflineTorchRLModule


def transformer_settings(model_config: dict[str, Any]) -> TransformerSettings:
    """The transformer's settings from the module's ``model_config`` (filled by ``CDTConfig``)."""
    return TransformerSettings(**{name: model_config[name] for name in TransformerSettings.__dataclass_fields__
                                  if name != "horizon"}, horizon=int(model_config["horizon"]))


class DefaultCDTTorchRLModule(OfflineTorchRLModule, DefaultCDTRLModule):
    """Inference reads the context window columns (``data.sequences``) that ``connector.CDTContext`` adds and
    acts with the action head's mean at the window's last step, clipped to [−1, 1] (OSRL's evaluation)."""

    framework: str = "torch"

    @override(TorchRLModule)
    def setup(self) -> None:
        settings = transformer_settings(self.model_config)
        self.act_dim = int(math.prod(self.action_space.shape))
        self.transformer = DecisionTransformer(int(math.prod(self.observation_space.shape)), self.act_dim, settings)
        self.log_temperature = torch.nn.Parameter(torch.tensor(math.log(settings.init_temperature)))

    @property
    def seq_len(self) -> int:
        return self.transformer.settings.seq_len

    @override(TorchRLModule)
    def _forward_inference(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return {Columns.ACTIONS: self.transformer.act(batch)}

    @override(TorchRLModule)
    def _forward_exploration(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return self._forward_inference(batch, **kwargs)  # offline training never explores

    @override(TorchRLModule)
    def _forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return self.transformer(batch) | {ck.LOG_TEMPERATURE: self.log_temperature}
