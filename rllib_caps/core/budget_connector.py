"""Env-to-module connector that gives the module the cost spent so far and the step index of every episode."""

from __future__ import annotations

from typing import Any

from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.utils.annotations import override

from rllib_caps.core.budget import BudgetTracker, info_cost
from rllib_caps.core.keys import COST_SPENT, STEP

BUDGET = "budget"  # the episode's BudgetTracker in episode.custom_data


class CostBudget(ConnectorV2):
    """Adds ``cost_spent`` (c_<t, the sum of ``info["cost"]`` so far) and ``step`` (t) to the batch.

    Each episode keeps a one-env ``BudgetTracker`` in ``episode.custom_data`` and records only the steps it
    has not seen, so a long episode costs O(1) per step. A new episode (also under autoreset) is a new
    episode object with a fresh tracker.
    """

    @override(ConnectorV2)
    def __call__(self, *, rl_module: Any, batch: dict[str, Any], episodes: list[Any], explore: bool | None = None,
                 shared_data: dict | None = None, **kwargs) -> Any:
        for episode in self.single_agent_episode_iterator(episodes, agents_that_stepped_only=True):
            if BUDGET not in episode.custom_data:
                episode.custom_data[BUDGET] = BudgetTracker(1)
            tracker = episode.custom_data[BUDGET]
            step = len(episode)
            if step > tracker.step[0]:
                for info in episode.get_infos(slice(int(tracker.step[0]) + 1, step + 1)):  # infos[0]: reset
                    tracker.record(info_cost(info))
            self.add_batch_item(batch, COST_SPENT, float(tracker.spent[0]), single_agent_episode=episode)
            self.add_batch_item(batch, STEP, float(tracker.step[0]), single_agent_episode=episode)
        return batch
