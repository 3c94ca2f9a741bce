"""The in-memory offline learner: the dataset lives on the learner's device, minibatches are sampled there,
and target networks get their Polyak step after every gradient step.

Several gradient steps run inside one ``Learner.update`` call: ``update_from_dataset`` stacks
``STEPS_PER_CALL`` fresh minibatches into one batch, RLlib converts and accounts for it once, and the torch
learner (``rllib_caps.core.torch_learner``) runs RLlib's update step on each minibatch in turn. So
RLlib's fixed cost per call (batch wrapping, minibatch iteration, step metrics, hooks, metrics reduction) is paid
once per ``STEPS_PER_CALL`` steps, not every step; the Polyak step sits in ``apply_gradients``, after each
optimiser step.
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.learner.learner import Learner
from ray.rllib.core.rl_module.apis import TargetNetworkAPI
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import NUM_TARGET_UPDATES
from ray.rllib.utils.typing import ResultDict

from rllib_caps.core.losses import polyak_update
from rllib_caps.core.ray_internals import learner_index, update_learner
from rllib_caps.data import MinibatchDraw, TransitionDataset

STEPS_PER_CALL = 64  # gradient steps per Learner.update call (the stacked batch holds this many minibatches)
RANDOM_STATE = "random_state"  # the learner state's entry for its random number generators


class OfflineSafeLearner(Learner):
    """Holds the offline dataset on the learner's device (``config.input_``) and samples it there.

    Every gradient step has a fresh minibatch, and the torch learner gives every target net its Polyak step
    after it (the paper: τ = 0.005 each step). With ``num_learners > 1`` every
    learner loads the dataset and draws its own minibatches from a generator seeded with ``(config.seed,
    learner index)``; DDP averages the gradients, so the effective batch is ``train_batch_size_per_learner ×
    num_learners``, as everywhere in RLlib.
    """

    @override(Learner)
    def build(self) -> None:
        super().build()
        self.module.foreach_module(
            lambda _mid, mod: mod.make_target_networks() if isinstance(mod, TargetNetworkAPI) else None
        )
        self.dataset = TransitionDataset.from_parquet(self.config.input_, device=self.device)
        seed = (self.config.seed or 0) * 1000 + learner_index(self)
        self._generator = torch.Generator(device=self.device).manual_seed(seed)

    @override(Learner)
    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        """RLlib's learner state plus the random state of its step: the minibatch generator's, and torch's global
        generator's (the baselines' forward passes draw their noise there). So a trial restored from a checkpoint
        (Tune's retry of a killed trial, ``--resume``) continues exactly as it would have uninterrupted."""
        state = super().get_state(components, not_components=not_components, **kwargs)
        if self._check_component(RANDOM_STATE, components, not_components):
            state[RANDOM_STATE] = {"minibatches": self._generator.get_state().numpy(),
                                   "torch": torch.get_rng_state().numpy()}
            if self.device.type == "cuda":
                state[RANDOM_STATE]["cuda"] = torch.cuda.get_rng_state(self.device).numpy()
        return state

    @override(Learner)
    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        if RANDOM_STATE in state:
            random_state = {key: torch.as_tensor(value, dtype=torch.uint8)
                            for key, value in state[RANDOM_STATE].items()}
            self._generator.set_state(random_state["minibatches"])
            torch.set_rng_state(random_state["torch"])
            if "cuda" in random_state and self.device.type == "cuda":
                torch.cuda.set_rng_state(random_state["cuda"], self.device)

    def update_from_dataset(self, *, num_updates: int, timesteps: dict[str, Any] | None = None) -> ResultDict:
        """Runs ``num_updates`` gradient steps, each on a fresh uniformly sampled minibatch (sampled in the same
        order as one step at a time), ``STEPS_PER_CALL`` per ``Learner.update`` call; returns reduced metrics."""
        batch_size = self.config.train_batch_size_per_learner
        results, done = None, 0
        while done < num_updates:
            steps = min(STEPS_PER_CALL, num_updates - done)
            batch = MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(self.training_batch(steps))},
                                    env_steps=steps * batch_size)
            done += steps
            results = update_learner(self, batch, timesteps=timesteps, reduce_metrics=done >= num_updates)
            for module_id in self.module.keys():
                self.metrics.log_value((module_id, NUM_TARGET_UPDATES), steps, reduce="lifetime_sum")
        return results

    def training_batch(self, steps: int) -> dict[str, torch.Tensor]:
        """What one ``Learner.update`` call trains on: ``steps`` fresh minibatches stacked, rows ``[i B, (i + 1) B)``
        being step i's (B = ``train_batch_size_per_learner``)."""
        samples = [self.sample_minibatch(self.config.train_batch_size_per_learner) for _ in range(steps)]
        return {key: torch.cat([s[key] for s in samples]) for key in samples[0]}

    def sample_minibatch(self, batch_size: int, generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """One step's minibatch (``draw_minibatch``) from ``generator``, by default the learner's own."""
        return self.draw_minibatch(batch_size, self._generator if generator is None else generator).gather()

    def draw_minibatch(self, batch_size: int, generator: torch.Generator) -> MinibatchDraw:
        """The random draws of one step's minibatch, in this order from ``generator``: uniformly sampled rows of
        the dataset, then ``draw_extras``. So every random number of a trial comes from its own generator, and a
        population (``rllib_caps.core.population``) gathers its members' rows at once."""
        rows = self.dataset.draw_rows(batch_size, generator)
        return MinibatchDraw(self.dataset, rows, self.draw_extras(batch_size, generator))

    def draw_extras(self, batch_size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """The step's random draws besides its rows (none here): a learner whose step draws noise adds it."""
        return {}

    def polyak_update_targets(self) -> None:
        """θ' ← τ θ + (1 − τ) θ' for every target net; called after every optimiser step."""
        for module_id, module in self.module.items():
            if not isinstance(module.unwrapped(), TargetNetworkAPI):
                continue
            tau = self.config.get_config_for_module(module_id).tau
            for online, target in module.unwrapped().get_target_network_pairs():
                polyak_update(online, target, tau)
