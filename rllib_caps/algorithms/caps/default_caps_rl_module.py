"""Framework-agnostic part of the CAPS RLModule: column names, model-config keys, inference API.

The torch implementation lives in ``torch/default_caps_torch_rl_module.py`` (like RLlib's IQL).
"""

from __future__ import annotations

import abc

from ray.rllib.core.rl_module.apis import InferenceOnlyAPI, TargetNetworkAPI
from ray.rllib.core.rl_module.rl_module import RLModule
from ray.rllib.utils.annotations import override

from rllib_caps.core.cost_threshold_api import CostThresholdAPI


class DefaultCAPSRLModule(RLModule, InferenceOnlyAPI, TargetNetworkAPI, CostThresholdAPI, abc.ABC):
    """One actor with K heads, twin Q^r/Q^c critics with targets, and V^r/V^c.

    ``model_config`` keys (filled in by ``CAPSConfig``): ``hidden`` (list of ints), ``num_heads``,
    ``shared_actor``, ``learn_std``, ``cost_maximize`` (True when the cost critics are trained on −c),
    ``backbone`` ("iql", or "sacbc": squashed-Gaussian heads and a learned temperature ``log_alpha`` starting at
    ``initial_alpha``, no value nets), ``clamp_cost_q`` (Q^c ≥ 0 at act time),
    ``gamma`` and ``horizon`` (for the switching threshold conversion), ``time_limit`` (with
    ``"time_aware"`` the critics also take (T − t)/T), and ``task`` (the registry name, so a deployed
    checkpoint knows its task).

    The inference-only copy (used by EnvRunners) keeps the actor and the online Q critics, which the
    switching rule needs at act time; value functions, the temperature and target nets are training-only.
    """

    @override(InferenceOnlyAPI)
    def get_non_inference_attributes(self) -> list[str]:
        return ["values", "log_alpha", "qr_target", "qc_target"]
