"""Env-to-module connector that keeps every episode's CDT context (``context.ContextWindow``) and gives the module
its window."""

from __future__ import annotations

from typing import Any

from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModule
from ray.rllib.utils.annotations import override

from rllib_caps.algorithms.cdt.context import ContextWindow
from rllib_caps.core.budget import info_cost

CONTEXT = "cdt_context"  # the episode's ContextWindow in episode.custom_data


class CDTContext(ConnectorV2):
    """Adds the window columns of ``data.sequences`` for every episode that stepped.

    A new episode starts its ``ContextWindow`` from the module's ``initial_targets()`` (the return target for the
    current κ, and κ); each later call records the steps the window has not seen (the action the module chose,
    the reward, ``info["cost"]``, the next observation), so the return-to-go and cost-to-go fall by what was
    actually received, O(1) per step.
    """

    @override(ConnectorV2)
    def __call__(self, *, rl_module: Any, batch: dict[str, Any], episodes: list[Any], explore: bool | None = None,
                 shared_data: dict | None = None, **kwargs) -> Any:
        module = rl_module[DEFAULT_MODULE_ID] if isinstance(rl_module, MultiRLModule) else rl_module
        for episode in self.single_agent_episode_iterator(episodes, agents_that_stepped_only=True):
            context = episode.custom_data.get(CONTEXT)
            if context is None:
                context = episode.custom_data[CONTEXT] = ContextWindow(module.seq_len, module.act_dim,
                                                                       *module.initial_targets())
                context.start(episode.get_observations(0))
            for step in range(context.steps, len(episode)):
                context.record(episode.get_actions(step), episode.get_rewards(step),
                               info_cost(episode.get_infos(step + 1)), episode.get_observations(step + 1))
            for column, value in context.window().items():
                self.add_batch_item(batch, column, value, single_agent_episode=episode)
        return batch
