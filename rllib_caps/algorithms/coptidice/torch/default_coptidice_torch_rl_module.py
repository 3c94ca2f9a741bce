"""Torch COptiDICE RLModule: the networks of ``coptidice.nets``; ``_forward_train`` is
``coptidice.forward.coptidice_training_outputs``."""

from __future__ import annotations

import math
from typing import Any

from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis import InferenceOnlyAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override

from rllib_caps.algorithms.coptidice.default_coptidice_rl_module import DefaultCOptiDICERLModule
from rllib_caps.algorithms.coptidice.forward import coptidice_training_outputs
from rllib_caps.algorithms.coptidice.nets import NETWORKS, add_networks
from rllib_caps.core.torch_rl_module import OfflineTorchRLModule


class DefaultCOptiDICETorchRLModule(OfflineTorchRLModule, InferenceOnlyAPI, DefaultCOptiDICERLModule):
    """``model_config`` keys (filled by the config): ``hidden``, ``implementation``, ``data_noise``. The
    inference-only copy (EnvRunners) keeps the actor alone, which acts with tanh(μ) (OSRL's evaluation)."""

    framework: str = "torch"

    @override(TorchRLModule)
    def setup(self) -> None:
        cfg = self.model_config
        self.osrl = cfg["implementation"] == "osrl"
        self.data_noise = float(cfg["data_noise"])
        add_networks(self, obs_dim=int(math.prod(self.observation_space.shape)),
                     act_dim=int(math.prod(self.action_space.shape)), hidden=list(cfg["hidden"]),
                     inference_only=self.inference_only)

    @override(InferenceOnlyAPI)
    def get_non_inference_attributes(self) -> list[str]:
        return [name for name in NETWORKS if name != "actor"] + ["stats"]

    @override(TorchRLModule)
    def _forward_inference(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        obs = batch[Columns.OBS].float()
        return {Columns.ACTIONS: self.actor.deterministic(obs)}

    @override(TorchRLModule)
    def _forward_exploration(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return self._forward_inference(batch, **kwargs)  # offline training never explores

    @override(TorchRLModule)
    def _forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return coptidice_training_outputs(self, batch)
