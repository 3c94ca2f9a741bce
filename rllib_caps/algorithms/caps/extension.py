"""CAPS's hooks in the generic sweep: its critic variants (the paper's FQE ablation) evaluated after training."""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from rllib_caps.algorithms.caps.policy import CAPSPolicy
from rllib_caps.core.critic_variants import FQESettings
from rllib_caps.core.extension import AlgorithmExtension
from rllib_caps.core.rollout import episode_seed

logger = logging.getLogger("rllib_caps.tune")


class CAPSExtension(AlgorithmExtension):
    def evaluate_variants(self, algorithm: Any, variants: Sequence[str], settings: Mapping[str, Any]
                          ) -> dict[str, dict[str, Any]]:
        """The trained policy evaluated Ray-free with every critic variant on the same episodes (FQE fitted once
        on the trial's dataset, on CPU, for ``settings["fqe_steps"]`` steps)."""
        from rllib_caps.data import TransitionDataset

        config = algorithm.config
        policy = CAPSPolicy(copy.deepcopy(algorithm.get_module()).to("cpu"))
        fqe = FQESettings(steps=settings.get("fqe_steps") or FQESettings.steps, seed=int(config.seed or 0))
        logger.info("FQE for %s seed %s: %d steps, then evaluating critics %s", config.task.name, config.seed,
                    fqe.steps, list(variants))
        return policy.evaluate_critics(TransitionDataset.from_parquet(config.input_), config.task, config.thresholds,
                                       config.evaluation_duration, variants, fqe, seed=episode_seed(policy),
                                       progress=False)
