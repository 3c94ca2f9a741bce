"""Env-to-module connector that feeds the switching rule the cost spent so far and the step index."""

from __future__ import annotations

from typing import Any

from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.utils.annotations import override

from rllib_caps.caps.keys import COST_SPENT, STEP


class CostBudget(ConnectorV2):
    """Adds ``cost_spent`` (c_<t, the sum of ``info["cost"]`` so far) and ``step`` (t) to the batch.

    The running sum lives in ``episode.custom_data`` and is advanced incrementally, so a long episode
    costs O(1) per step.
    """

    @override(ConnectorV2)
    def __call__(self, *, rl_module: Any, batch: dict[str, Any], episodes: list[Any], explore: bool | None = None,
                 shared_data: dict | None = None, **kwargs) -> Any:
        for episode in self.single_agent_episode_iterator(episodes, agents_that_stepped_only=True):
            step = len(episode)
            counted, spent = episode.custom_data.get(COST_SPENT, (0, 0.0))
            if step > counted:
                infos = episode.get_infos(slice(counted + 1, step + 1))  # infos[0] is the reset info
                spent += sum(float(info.get("cost", 0.0)) for info in infos)
                episode.custom_data[COST_SPENT] = (step, spent)
            self.add_batch_item(batch, COST_SPENT, spent, single_agent_episode=episode)
            self.add_batch_item(batch, STEP, float(step), single_agent_episode=episode)
        return batch
