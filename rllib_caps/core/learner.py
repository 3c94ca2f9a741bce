"""The in-memory offline learner, one class on RLlib's ``TorchLearner``: the dataset lives on the learner's device,
every gradient step samples a fresh minibatch there, and the target nets take their Polyak step after every
optimiser step.

One gradient step, from ``OfflineSafeAlgorithm.training_step`` to an algorithm's loss function:

    training_step (core/offline.py)
      -> OfflineSafeTorchLearner.update_from_dataset: ``Learner.update`` once per ``STEPS_PER_CALL`` steps
      -> RLlib's ``Learner.update`` -> ``update_step`` (the update seam of ``core/ray_internals.py``)
      -> the step engine (``step_engine``): each step ``sampled_update_step``, eagerly or replayed as a CUDA graph
      -> ``gradient_step``: RLlib's torch update step (forward, losses, backward, ``apply_gradients``), or the
         forward pass and losses as one ``torch.compile``d program
      -> ``compute_loss_for_module`` -> the algorithm learner's ``member_losses`` -> its pure loss function.

RLlib's fixed cost per ``Learner.update`` call (batch wrapping, step metrics, hooks, metrics reduction) is paid once
per ``STEPS_PER_CALL`` steps: the batch that goes through RLlib only carries the row count (steps × B), and the
step draws its own minibatch on the device. On CUDA the whole step (sampling, forward, losses, backward,
optimisers, Polyak) is captured once as a CUDA graph and replayed (``config.captured_step``,
``rllib_caps.core.captured_step``); a population (``rllib_caps.core.population``) runs its vmapped step through the
same ``step_engine``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.learner.learner import Learner
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.core.rl_module.apis import TargetNetworkAPI
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import NUM_TARGET_UPDATES
from ray.rllib.utils.typing import ParamDict, ResultDict

from rllib_caps.core.captured_step import CapturedStep, NonFiniteSkip, all_finite
from rllib_caps.core.losses import polyak_update, total_loss
from rllib_caps.core.optim import adam
from rllib_caps.core.precision import autocast, set_matmul_precision
from rllib_caps.core.ray_internals import (
    learner_index,
    metrics_reduce_kwargs,
    optimizers,
    rllib_update_step,
    route_update_step,
    scales_or_schedules,
)
from rllib_caps.data import MinibatchDraw, TransitionDataset

logger = logging.getLogger(__name__)

STEPS_PER_CALL = 64  # gradient steps per Learner.update call
RANDOM_STATE = "random_state"  # the learner state's entry for its random number generators
STEP_ROWS = "step_rows"  # the one column of the batch that goes through Learner.update: its row count (steps × B)

Output = TypeVar("Output")


def step_engine(step: Callable[[], Output], *, captured: bool, generators: Sequence[torch.Generator] = ()
                ) -> Callable[[int], Output]:
    """``n -> `` the last output of ``n`` calls of ``step`` (one gradient step each, drawing its own minibatch):
    eagerly, or with ``captured`` replayed as a CUDA graph (``CapturedStep``, which advances ``generators`` as
    the eager calls would). The one engine of a learner's steps (eager or compiled) and a population's."""
    if captured:
        return CapturedStep(step, generators=generators)
    return functools.partial(_repeat, step)


def _repeat(step: Callable[[], Output], n: int) -> Output:
    output = None
    for _ in range(n):
        output = step()
    return output


def forms_populations(learner_class: type) -> bool:
    """Whether the learner's trials can train as one population: nothing in its step stands in the way (its
    ``population_blocker``; every learner's losses are the pure ``member_losses`` a population vmaps)."""
    return learner_class.population_blocker is None


def assign_state(buffers: Mapping[str, torch.Tensor], state_buffers: Mapping[str, str],
                 terms: Mapping[str, torch.Tensor]) -> None:
    """Copies each loss term named in ``state_buffers`` (term -> buffer name) into its buffer of ``buffers``: the
    state that pure losses return (``OfflineSafeTorchLearner.STATE_BUFFERS``), written after the step, by a learner
    into its module's buffers and by a population into its members' stacks."""
    with torch.no_grad():
        for term, name in state_buffers.items():
            buffers[name].copy_(terms[term])


@route_update_step
class OfflineSafeTorchLearner(TorchLearner):
    """RLlib's ``TorchLearner`` on an in-memory offline dataset (``config.input_``), sampled on its device.

    Every gradient step has a fresh minibatch, and every target net takes its Polyak step after it (the paper:
    τ = 0.005 each step). With ``num_learners > 1`` every learner loads the dataset and draws its own minibatches
    from a generator seeded with ``(config.seed, learner index)``; DDP averages the gradients, so the effective
    batch is ``train_batch_size_per_learner × num_learners``, as everywhere in RLlib.

    An algorithm's learner gives its optimisers (``configure_optimizers_for_module``, with
    ``register_adam_optimizers``) and its losses: the pure ``member_losses`` (what a compiled learner compiles and
    a population vmaps; state they update, such as Lagrange multipliers, they return: ``STATE_BUFFERS``). Loss
    terms are logged once per ``Learner.update`` call (the last step's: RLlib's window of 1 keeps only that one
    anyway).

    With ``captures_steps`` the steps replay a captured CUDA graph, and the optimisers are fused Adams that skip a
    step whose gradients are not finite (counted on the device, reported once per update call).
    """

    population_blocker: str | None = None  # why its pure losses still cannot train as a population (None: they can)
    # loss term -> module buffer: state that the pure losses update (e.g. Lagrange multipliers), returned as detached
    # terms (logged with the metrics) and written into the buffer after every step (``assign_state``)
    STATE_BUFFERS: Mapping[str, str] = {}
    # the optimisers whose parameters ``grad_clip`` clips, together, to one global norm (None: all of them, RLlib's)
    CLIPPED_OPTIMIZERS: Collection[str] | None = None

    @override(Learner)
    def configure_optimizers(self) -> None:
        """RLlib's, once the target nets are made: ``Learner.build`` calls it right after building the module (and
        ``TorchLearner.build`` wraps the module for DDP after it)."""
        self.module.foreach_module(
            lambda _mid, mod: mod.make_target_networks() if isinstance(mod, TargetNetworkAPI) else None
        )
        super().configure_optimizers()

    @override(TorchLearner)
    def build(self) -> None:
        super().build()
        self.dataset = TransitionDataset.from_parquet(self.config.input_, device=self.device)
        seed = (self.config.seed or 0) * 1000 + learner_index(self)
        self._generator = torch.Generator(device=self.device).manual_seed(seed)
        set_matmul_precision(self.config.matmul_precision, self.device)
        if self.captures_steps:
            self._non_finite = NonFiniteSkip(self.device)
            self._non_finite.attach(list(optimizers(self)))

    # -- the random state -------------------------------------------------------------------------------------

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

    @override(TorchLearner)
    def set_state(self, state: dict[str, Any]) -> None:
        """RLlib's, the random state, then a new step engine: a restored optimiser holds new state tensors, which a
        graph recorded before would not see."""
        super().set_state(state)
        if RANDOM_STATE in state:
            random_state = {key: torch.as_tensor(value, dtype=torch.uint8)
                            for key, value in state[RANDOM_STATE].items()}
            self._generator.set_state(random_state["minibatches"])
            torch.set_rng_state(random_state["torch"])
            if "cuda" in random_state and self.device.type == "cuda":
                torch.cuda.set_rng_state(random_state["cuda"], self.device)
        self.__dict__.pop("_step_engine", None)

    # -- minibatches --------------------------------------------------------------------------------------------

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

    # -- the steps ----------------------------------------------------------------------------------------------

    def update_from_dataset(self, *, num_updates: int, timesteps: dict[str, Any] | None = None) -> ResultDict:
        """Runs ``num_updates`` gradient steps, each on a fresh uniformly sampled minibatch, ``STEPS_PER_CALL`` per
        ``Learner.update`` call (whose batch only says how many rows: steps × B); returns reduced metrics."""
        batch_size = self.config.train_batch_size_per_learner
        results, done = None, 0
        while done < num_updates:
            steps = min(STEPS_PER_CALL, num_updates - done)
            rows = torch.zeros(steps * batch_size, dtype=torch.uint8, device=self.device)
            batch = MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch({STEP_ROWS: rows})}, env_steps=steps * batch_size)
            done += steps
            results = self.update(batch=batch, timesteps=timesteps, **metrics_reduce_kwargs(done >= num_updates))
            for module_id in self.module.keys():
                self.metrics.log_value((module_id, NUM_TARGET_UPDATES), steps, reduce="lifetime_sum")
        return results

    def update_step(self, batch: dict[str, Any]) -> tuple[Any, Any, Any]:
        """The in-graph work of one ``Learner.update`` call (RLlib's ``TorchLearner`` step, through the update seam
        of ``core/ray_internals.py``): ``rows / B`` gradient steps of the step engine; the last step's outputs."""
        rows = len(batch[DEFAULT_MODULE_ID][STEP_ROWS])
        return self._step_engine(rows // self.config.train_batch_size_per_learner)

    @functools.cached_property
    def _step_engine(self) -> Callable[[int], tuple[Any, Any, Any]]:
        return step_engine(self.sampled_update_step, captured=self.captures_steps, generators=[self._generator])

    def sampled_update_step(self) -> tuple[Any, Any, Any]:
        """One gradient step on a freshly sampled minibatch."""
        return self.gradient_step({DEFAULT_MODULE_ID: self.sample_minibatch(self.config.train_batch_size_per_learner)})

    def gradient_step(self, minibatch: dict[str, Any]) -> tuple[Any, Any, Any]:
        """RLlib's torch update step on one minibatch (or, with ``_compiled_losses``, the same step with the forward
        pass and losses as one compiled program), in the config's ``matmul_precision``: under bf16 autocast for
        "bf16" on CUDA (the backward pass and the optimisers are on none of autocast's lists: their arithmetic
        follows the forward pass's dtypes and stays float32 for the parameters)."""
        with autocast(self.config.matmul_precision, self.device):
            if self._compiled_losses is None:
                return rllib_update_step(self, minibatch)
            losses = self._compiled_losses(minibatch[DEFAULT_MODULE_ID])
            self.record_losses(DEFAULT_MODULE_ID, losses)
            loss_per_module = {DEFAULT_MODULE_ID: total_loss(losses)}
            self.apply_gradients(self.postprocess_gradients(self.compute_gradients(loss_per_module)))
            return {}, loss_per_module, {}

    def population_gradient_clips(self) -> list[tuple[list[str], float]]:
        """The clip a population applies to each member's gradients, as this learner's step does: (the optimisers
        whose parameters are clipped together, ``CLIPPED_OPTIMIZERS``, their largest global norm ``grad_clip``);
        none without ``grad_clip``. Another ``grad_clip_by`` than the global norm is refused (ValueError)."""
        config = self.config.get_config_for_module(DEFAULT_MODULE_ID)
        if not config.grad_clip:
            return []
        if config.grad_clip_by != "global_norm":
            raise ValueError(f"grad_clip_by={config.grad_clip_by!r}: a population clips each member's gradients by "
                             "their global norm only")
        names = self.CLIPPED_OPTIMIZERS or [name for name, _ in self.get_optimizers_for_module(DEFAULT_MODULE_ID)]
        return [(list(names), config.grad_clip)]

    def schedule_learning_rates(self, optimizers: Mapping[str, torch.optim.Optimizer]) -> None:
        """Sets this step's learning rate of each of ``optimizers`` (by name) that the algorithm schedules itself
        (none here): the learner before each of its steps, a population before its members'."""

    def captured_step_blockers(self) -> list[str]:
        """Why this learner's step cannot be captured as a CUDA graph (none: it can); subclasses add their own."""
        blockers = []
        if self.device.type != "cuda":
            blockers.append(f"the learner's device is {self.device.type}, not CUDA")
        if self.postprocesses_gradients_on_host():
            blockers.append("its gradients are postprocessed on the host (grad_clip, gradient logging or an lr "
                            "scheduler)")
        if self.config.num_learners > 1:
            blockers.append("several learners average gradients with DDP")
        return blockers

    def postprocesses_gradients_on_host(self) -> bool:
        """Whether work on the host stands between the backward pass and the optimisers: RLlib's postprocessing
        (its clip compares norms on the host, and gradient logging reads them) or an lr scheduler. Here whenever the
        gradients do not pass through (``_gradients_pass_through``); a learner that clips on the device says
        otherwise."""
        return not self._gradients_pass_through

    @functools.cached_property
    def captures_steps(self) -> bool:
        """Whether gradient steps replay a captured CUDA graph: ``config.captured_step`` True, or "auto" (the
        default) where nothing in ``captured_step_blockers`` stands in the way."""
        setting = self.config.captured_step
        if setting is False:
            return False
        blockers = self.captured_step_blockers()
        if setting is True and blockers:
            raise ValueError("captured_step=True, but this learner's step cannot be captured: " + "; ".join(blockers))
        return not blockers

    @functools.cached_property
    def _compiled_losses(self) -> Callable[[dict], dict[str, torch.Tensor]] | None:
        """``module_losses`` compiled as one program (``fullgraph``, static shapes) when the config asks for
        ``torch_compile_learner`` and one learner trains; None
        otherwise, where RLlib's compile of ``forward_train`` alone applies (DDP-wrapped modules break graphs)."""
        if not (self.config.torch_compile_learner and self.config.num_learners <= 1):
            return None
        module = self.module[DEFAULT_MODULE_ID]
        config = self.config.get_config_for_module(DEFAULT_MODULE_ID)
        return torch.compile(functools.partial(self.module_losses, module, config=config), fullgraph=True,
                             dynamic=False, backend=self.config.torch_compile_learner_dynamo_backend,
                             mode=self.config.torch_compile_learner_dynamo_mode)

    # -- the losses ---------------------------------------------------------------------------------------------

    def member_losses(self, fwd_out: dict, batch: dict, config: Any,
                      hyperparameters: Mapping[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """The named loss terms of one module's step, as a pure function of its forward outputs and minibatch: the
        RLlib step sums them (``compute_loss_for_module``), and a population (``rllib_caps.core.population``)
        vmaps them over its members. Detached terms are metrics: logged with the losses, left out of the sum; those
        named in ``STATE_BUFFERS`` are also the new values of module buffers.
        ``hyperparameters``: a member's own values of the config's ``member_hyperparameters`` (tensors), where a
        population's members differ in them; only configs that declare some get any. Every algorithm's learner
        defines it."""
        raise NotImplementedError(f"{type(self).__name__} must define member_losses, its step's loss terms")

    def module_losses(self, module: torch.nn.Module, batch: dict,
                      hyperparameters: Mapping[str, torch.Tensor] | None = None, *, config: Any
                      ) -> dict[str, torch.Tensor]:
        """``module.forward_train`` followed by ``member_losses``: one gradient step's loss terms as a pure function
        of the module's parameters and the minibatch, which a compiled learner compiles as one program and a
        population vmaps over its members."""
        own = (hyperparameters,) if hyperparameters else ()  # only learners whose configs declare some take them
        return self.member_losses(module.forward_train(batch), batch, config, *own)

    @override(TorchLearner)
    def compute_loss_for_module(self, *, module_id: str, config: Any, batch: dict, fwd_out: dict) -> torch.Tensor:
        """The sum of ``member_losses`` (``total_loss``), which are kept for the update call's metrics
        (``record_losses``)."""
        losses = self.member_losses(fwd_out, batch, config)
        self.record_losses(module_id, losses)
        return total_loss(losses)

    def record_losses(self, module_id: str, losses: dict[str, torch.Tensor]) -> None:
        """Keeps this step's loss terms (detached) to be logged at the end of the update call."""
        self._recorded_losses = getattr(self, "_recorded_losses", {})
        self._recorded_losses[module_id] = {k: v.detach() for k, v in losses.items()}

    @override(TorchLearner)
    def after_gradient_based_update(self, *, timesteps: dict) -> None:
        super().after_gradient_based_update(timesteps=timesteps)
        for module_id, losses in getattr(self, "_recorded_losses", {}).items():
            self.metrics.log_dict(losses, key=module_id, window=1)
        if self.captures_steps:
            skipped = self._non_finite.pop_skipped()  # the update call's one read of a device value
            if skipped:
                logger.warning("non-finite gradients: %d gradient step(s) of this update call were skipped", skipped)

    # -- the optimisers -----------------------------------------------------------------------------------------

    def register_adam_optimizers(self, module_id: str, groups: Mapping[str, tuple[Any, float]],
                                 unscheduled: Collection[str] = (), weight_decay: Mapping[str, float] | None = None,
                                 ) -> dict[str, torch.optim.Optimizer]:
        """One Adam per named group ``name -> (network or parameter list, learning rate)``, registered with RLlib,
        which keeps each at its learning rate; groups in ``unscheduled`` are left to the caller's own schedule,
        groups in ``weight_decay`` get AdamW (Adam with decoupled weight decay) with that decay."""
        registered = {}
        decay = weight_decay or {}
        for name, (net, lr) in groups.items():
            params = list(net.parameters()) if isinstance(net, torch.nn.Module) else list(net)
            registered[name] = adam(params, lr, weight_decay=decay.get(name))
            self.register_optimizer(module_id=module_id, optimizer_name=name, optimizer=registered[name],
                                    params=params, lr_or_lr_schedule=None if name in unscheduled else lr)
        return registered

    @functools.cached_property
    def _gradients_pass_through(self) -> bool:
        """True when the gradients ``compute_gradients`` returns are the parameters' own ``.grad`` and RLlib's
        postprocessing and ``apply_gradients`` would only regroup and re-assign them before the optimisers step:
        no module clips or logs gradients, no subclass computes or postprocesses them its own way, and no grad
        scaler or torch lr scheduler steps with the optimisers."""
        configs = [self.config.get_config_for_module(mid) for mid in self.module.keys()]
        own = type(self)
        return (all(c.grad_clip is None and not c.log_gradients for c in configs)
                and own.compute_gradients is TorchLearner.compute_gradients
                and own.postprocess_gradients_for_module is Learner.postprocess_gradients_for_module
                and not scales_or_schedules(self))

    @override(Learner)
    def postprocess_gradients(self, gradients_dict: ParamDict) -> ParamDict:
        """RLlib's, unless it would only regroup the gradients per optimiser (``_gradients_pass_through``)."""
        return gradients_dict if self._gradients_pass_through else super().postprocess_gradients(gradients_dict)

    @override(TorchLearner)
    def apply_gradients(self, gradients_dict: ParamDict) -> None:
        """The optimiser step, then the Polyak step (every gradient step, as the paper's τ assumes), then the losses'
        new state into the module's buffers (``STATE_BUFFERS``).

        RLlib checks every parameter's gradient for NaN/inf with one device sync each; here ``all_finite`` checks
        them all at once (``OfflineSafeConfig`` sets ``torch_skip_nan_gradients`` so RLlib skips its own check),
        and non-finite entries are replaced in place (NaN by 0) with a warning, as RLlib does. With
        ``_gradients_pass_through`` the optimisers step directly, without RLlib's per-parameter re-assignment;
        otherwise RLlib's ``apply_gradients`` does it.
        """
        grads = [g for g in gradients_dict.values() if g is not None]
        if self.captures_steps:  # no host branch: the fused optimisers read the flag and skip the step
            self._non_finite.check(grads)
        elif grads and not all_finite(grads):
            logger.warning("non-finite gradients: setting NaN/inf entries to zero for this step")
            for grad in grads:
                grad.nan_to_num_()
        if self._gradients_pass_through:
            for optimizer in optimizers(self):
                optimizer.step()
        else:
            super().apply_gradients(gradients_dict)
        self.polyak_update_targets()
        if self.STATE_BUFFERS:  # the step's state terms, kept by record_losses
            for module_id, terms in self._recorded_losses.items():
                assign_state(dict(self.module[module_id].unwrapped().named_buffers()), self.STATE_BUFFERS, terms)

    def polyak_update_targets(self) -> None:
        """θ' ← τ θ + (1 − τ) θ' for every target net; called after every optimiser step."""
        for module_id, module in self.module.items():
            if not isinstance(module.unwrapped(), TargetNetworkAPI):
                continue
            tau = self.config.get_config_for_module(module_id).tau
            for online, target in module.unwrapped().get_target_network_pairs():
                polyak_update(online, target, tau)
