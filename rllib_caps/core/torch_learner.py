"""The torch side of the in-memory offline learner: the gradient steps of a stacked batch inside one update call,
one finiteness check over all gradients per step (one kernel), a direct optimiser step when nothing postprocesses
the gradients, and the Polyak step of the target nets after every optimiser step.

On CUDA the whole gradient step (sampling, forward, losses, backward, optimisers, Polyak) is captured once as a
CUDA graph and replayed (``config.captured_step``, ``rllib_caps.core.captured_step``): the step then issues no
host work beyond one graph launch, and a step with non-finite gradients is skipped on the device. With
``config.torch_compile_learner`` the forward pass and losses run as one ``torch.compile``d program (its fused
kernels, inside the captured graph on CUDA)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Collection, Mapping
from typing import Any

import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.learner.learner import Learner
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.utils.annotations import override
from ray.rllib.utils.typing import ParamDict

from rllib_caps.core.captured_step import CapturedStep, NonFiniteSkip
from rllib_caps.core.learner import OfflineSafeLearner
from rllib_caps.core.optim import adam
from rllib_caps.core.precision import autocast, set_matmul_precision
from rllib_caps.core.ray_internals import (
    UpdateStepHook,
    non_finite_check_and_unscale_,
    optimizers,
    scales_or_schedules,
)

logger = logging.getLogger(__name__)

CAPTURED_ROWS = "captured_step_rows"  # the one column of a captured learner's training batch: its row count


def all_finite(tensors: list[torch.Tensor]) -> bool:
    """Whether every entry of ``tensors`` (on one device) is finite: one multi-tensor kernel and one device sync.

    It is the check ``torch.amp.GradScaler`` runs before each optimiser step, with an unscale factor of 1, so the
    tensors keep their values bit for bit; on CPU it is several times faster than a norm per tensor.
    """
    found = torch.zeros(1, device=tensors[0].device)
    non_finite_check_and_unscale_(tensors, found, torch.ones(1, device=found.device))
    return not bool(found)


def computes_pure_losses(learner_class: type) -> bool:
    """Whether the learner's loss step is the pure ``member_losses`` (learners whose step has side effects override
    ``compute_loss_for_module`` instead): what a population vmaps and a compiled learner compiles."""
    return learner_class.member_losses is not OfflineSafeTorchLearner.member_losses


def total_loss(terms: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """The sum of the loss terms that carry a gradient; the detached ones are metrics, logged beside them."""
    trained = [term for term in terms.values() if term.requires_grad]
    if not trained:
        raise ValueError(f"no loss term carries a gradient (terms: {', '.join(terms)})")
    return sum(trained[1:], trained[0])


class OfflineSafeTorchLearner(UpdateStepHook, TorchLearner, OfflineSafeLearner):
    """``TorchLearner`` plus the in-memory dataset of ``OfflineSafeLearner``.

    Loss terms are logged once per ``Learner.update`` call (the last step's, as RLlib's window of 1 keeps only
    that one anyway): ``record_losses`` keeps them, ``after_gradient_based_update`` logs them.

    With ``captures_steps`` the learner replays its captured step instead: the minibatches are drawn inside the
    step, so the batch that goes through RLlib's ``Learner.update`` only carries the row count (RLlib's step
    accounting stays as it is), and the optimisers are fused Adams that skip a step whose gradients are not finite
    (counted on the device, reported once per update call).
    """

    @override(TorchLearner)
    def build(self) -> None:
        super().build()
        set_matmul_precision(self.config.matmul_precision, self.device)
        if self.captures_steps:
            self._non_finite = NonFiniteSkip(self.device)
            self._non_finite.attach(list(optimizers(self)))

    def captured_step_blockers(self) -> list[str]:
        """Why this learner's step cannot be captured as a CUDA graph (none: it can); subclasses add their own."""
        blockers = []
        if self.device.type != "cuda":
            blockers.append(f"the learner's device is {self.device.type}, not CUDA")
        if not self._gradients_pass_through:
            blockers.append("its gradients are postprocessed on the host (grad_clip, gradient logging or an lr "
                            "scheduler)")
        if self.config.num_learners > 1:
            blockers.append("several learners average gradients with DDP")
        return blockers

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

    def register_adam_optimizers(self, module_id: str, groups: Mapping[str, tuple[Any, float]],
                                 unscheduled: Collection[str] = (), weight_decay: Mapping[str, float] | None = None,
                                 ) -> dict[str, torch.optim.Optimizer]:
        """One Adam per named group ``name -> (network or parameter list, learning rate)``, registered with RLlib,
        which keeps each at its learning rate; groups in ``unscheduled`` are left to the caller's own schedule,
        groups in ``weight_decay`` get AdamW (Adam with decoupled weight decay) with that decay."""
        optimizers = {}
        decay = weight_decay or {}
        for name, (net, lr) in groups.items():
            params = list(net.parameters()) if isinstance(net, torch.nn.Module) else list(net)
            optimizers[name] = adam(params, lr, weight_decay=decay.get(name))
            self.register_optimizer(module_id=module_id, optimizer_name=name, optimizer=optimizers[name],
                                    params=params, lr_or_lr_schedule=None if name in unscheduled else lr)
        return optimizers

    def member_losses(self, fwd_out: dict, batch: dict, config: Any,
                      hyperparameters: Mapping[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """The named loss terms of one module's step, as a pure function of its forward outputs and minibatch: the
        RLlib step sums them (``compute_loss_for_module``), and a population (``rllib_caps.core.population``)
        vmaps them over its members. Detached terms are metrics: logged with the losses, left out of the sum.
        ``hyperparameters``: a member's own values of the config's ``member_hyperparameters`` (tensors), where a
        population's members differ in them; only configs that declare some get any. A learner whose step has
        side effects overrides ``compute_loss_for_module`` instead, and cannot train as a population."""
        raise NotImplementedError(f"{type(self).__name__} computes its losses in compute_loss_for_module")

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

    @override(OfflineSafeLearner)
    def training_batch(self, steps: int) -> dict[str, torch.Tensor]:
        """A captured step draws its own minibatches on the device: the batch only says how many rows (steps × B)."""
        if not self.captures_steps:
            return super().training_batch(steps)
        rows = steps * self.config.train_batch_size_per_learner
        return {CAPTURED_ROWS: torch.zeros(rows, dtype=torch.uint8, device=self.device)}

    @override(UpdateStepHook)
    def update_step(self, batch: dict[str, Any]) -> tuple[Any, Any, Any]:
        """One gradient step per minibatch of the stacked batch (``OfflineSafeLearner.update_from_dataset``: rows
        ``[i B, (i + 1) B)`` are step i's, B = ``train_batch_size_per_learner``): RLlib's torch update step (forward,
        losses, backward, ``apply_gradients``) on each slice in order; returns the last step's outputs."""
        size = self.config.train_batch_size_per_learner
        rows = len(next(iter(next(iter(batch.values())).values())))
        if self.captures_steps:
            return self._captured_step(rows // size)
        for start in range(0, rows, size):
            minibatch = {mid: {key: column[start:start + size] for key, column in module_batch.items()}
                         for mid, module_batch in batch.items()}
            outputs = self.gradient_step(minibatch)
        return outputs

    def gradient_step(self, minibatch: dict[str, Any]) -> tuple[Any, Any, Any]:
        """RLlib's torch update step on one minibatch, in the config's ``matmul_precision``: under bf16 autocast
        for "bf16" on CUDA (the backward pass and the optimisers are on none of autocast's lists: their arithmetic
        follows the forward pass's dtypes and stays float32 for the parameters)."""
        with autocast(self.config.matmul_precision, self.device):
            if self._compiled_losses is None:
                return self.rllib_update_step(minibatch)
            return self._compiled_update_step(minibatch)

    @functools.cached_property
    def _compiled_losses(self) -> Callable[[dict], dict[str, torch.Tensor]] | None:
        """``module_losses`` compiled as one program (``fullgraph``, static shapes) when the config asks for
        ``torch_compile_learner``, the losses are pure (``computes_pure_losses``) and one learner trains; None
        otherwise, where RLlib's compile of ``forward_train`` alone applies (DDP-wrapped modules break graphs)."""
        if not (self.config.torch_compile_learner and computes_pure_losses(type(self))
                and self.config.num_learners <= 1):
            return None
        module = self.module[DEFAULT_MODULE_ID]
        config = self.config.get_config_for_module(DEFAULT_MODULE_ID)
        return torch.compile(functools.partial(self.module_losses, module, config=config), fullgraph=True,
                             dynamic=False, backend=self.config.torch_compile_learner_dynamo_backend,
                             mode=self.config.torch_compile_learner_dynamo_mode)

    def _compiled_update_step(self, minibatch: dict[str, Any]) -> tuple[Any, Any, Any]:
        """RLlib's torch update step (losses, backward, ``apply_gradients``) with the forward pass and losses as the
        one compiled program of ``_compiled_losses``."""
        losses = self._compiled_losses(minibatch[DEFAULT_MODULE_ID])
        self.record_losses(DEFAULT_MODULE_ID, losses)
        loss_per_module = {DEFAULT_MODULE_ID: total_loss(losses)}
        self.apply_gradients(self.postprocess_gradients(self.compute_gradients(loss_per_module)))
        return {}, loss_per_module, {}

    @override(TorchLearner)
    def set_state(self, state: dict[str, Any]) -> None:
        """RLlib's, then a new capture: a restored optimiser holds new state tensors, which a graph recorded before
        would not see."""
        super().set_state(state)
        self.__dict__.pop("_captured_step", None)

    @functools.cached_property
    def _captured_step(self) -> CapturedStep:
        return CapturedStep(self._sampled_update_step, generators=[self._generator])

    def _sampled_update_step(self) -> tuple[Any, Any, Any]:
        """One gradient step on a freshly sampled minibatch: what ``_captured_step`` records."""
        minibatch = {DEFAULT_MODULE_ID: self.sample_minibatch(self.config.train_batch_size_per_learner)}
        return self.gradient_step(minibatch)

    @functools.cached_property
    def _gradients_pass_through(self) -> bool:
        """True when the gradients ``compute_gradients`` returns are the parameters' own ``.grad`` and RLlib's
        postprocessing and ``apply_gradients`` would only regroup and re-assign them before the optimiser steps:
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
        """The optimiser step, then the Polyak step (every gradient step, as the paper's τ assumes).

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
