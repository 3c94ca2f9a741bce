"""The one seam to RLlib's, Tune's and torch's private members: no other module of rllib_caps names them.

Pinned to Ray 2.60.0 and torch 2.13.0 (requirements.txt); ``tests/test_ray_internals.py`` fails on another Ray
and checks that every member in ``REQUIRED`` still exists (``missing_internals``), so an upgrade breaks here, by
name, rather than silently elsewhere. Each private member, why we need it, and what would replace it:

- ``AlgorithmConfig._model_config_auto_includes`` (property): the settings RLlib copies into ``model_config``,
  i.e. what the RLModule sees of the config. ``ConfigHooks.model_config_settings`` is our public hook for it;
  RLlib has no public one (its own algorithms override the property too).
- ``AlgorithmConfig._value_error``: the validation error RLlib raises (or only logs, under
  ``experimental(_validate_config=False)``); ``ConfigHooks.config_error``. Else: raise ``ValueError``.
- ``AlgorithmConfig._is_online``: read by the public ``is_online``/``is_offline``, without a public setter;
  ``ConfigHooks.mark_offline`` clears it, as RLlib's MARWIL does in its constructor.
- ``TorchLearner._update``: RLlib's in-graph update step (forward, losses, backward, ``apply_gradients``).
  Our learner runs several of them per ``Learner.update`` call, or replays one captured as a CUDA graph, so it
  replaces it (``route_update_step``: ``_update`` calls the learner's ``update_step``) and calls RLlib's
  (``rllib_update_step``). RLlib has no public per-step hook; if one comes, ``route_update_step`` moves to it.
- ``Learner.update(_no_metrics_reduce=...)``: skips the metrics reduction of all but the last of the update
  calls of one ``update_from_dataset``; ``metrics_reduce_kwargs``. Else: reduce every call (slower, same numbers).
- ``Learner._learner_index``: seeds each learner's own minibatch generator; ``learner_index``. Else:
  ``torch.distributed.get_rank()`` where the learners are distributed, 0 otherwise.
- ``Learner._optimizer_parameters``: every registered optimiser in registration order, stepped directly when
  nothing postprocesses the gradients (as ``TorchLearner.apply_gradients`` iterates them); ``optimizers``.
  Else: ``get_optimizers_for_module`` over the module ids.
- ``TorchLearner._grad_scalers``, ``TorchLearner._lr_scheduler_classes``: whether a grad scaler or torch lr
  scheduler steps with the optimisers (then the direct step must not bypass RLlib);
  ``scales_or_schedules``. Else: the settings they come from,
  ``experimental(_torch_grad_scaler_class=..., _torch_lr_scheduler_classes=...)``.
- ``Repeater._trial_id_to_group`` (Tune): the seed group of a trial, whose scores ``SeedRepeater`` averages
  its own way; ``trial_group``. Else: keep the groups ourselves in ``suggest``.
- ``torch._foreach_lerp_``: the Polyak step, one fused kernel per device; ``foreach_lerp_``. Else:
  ``target.lerp_(online, tau)`` per tensor (many small kernels).
- ``torch._foreach_norm``, ``torch._foreach_mul_``: the global-norm gradient clip on the device, one kernel per
  stage (``core.optim.clip_global_norm_``); ``foreach_norm``, ``foreach_mul_``. Else: ``torch.linalg.vector_norm``
  and ``mul_`` per tensor (many small kernels).
- ``ray._private.services.ConsolePopen``: the ``Popen`` that ``ray.init`` starts local Ray's processes (GCS,
  raylet, dashboard, log monitor) with; ``ray_processes_in_own_session`` has them start a session of their own, so
  that a signal to the driver's process group (``kill -TERM -PGID``, as Slurm and systemd send it) reaches the
  driver alone, which then stops Tune and shuts Ray down in order. Ray has no setting for it; else: start the head
  with ``ray start --head`` in a session of its own and join it.
- ``ray.tune.execution.class_cache.ENV_VARS_TO_PROPAGATE``: the driver's variables that Tune passes to every
  trainable through ``runtime_env`` env_vars, ``AWS_SECRET_ACCESS_KEY`` among them, which Ray's runtime-env agent
  writes to its log; ``stop_tune_forwarding`` takes names out of it. Else: nothing (Ray has no setting for it).
- ``ray.air._internal.usage._count_callbacks``: Tune's usage tag of a run's callbacks (``tag_callbacks``, on every
  ``Tuner.fit``) imports Ray's W&B, MLflow, Comet and Aim integrations, and W&B and MLflow with them, only to learn
  their class names: a smoke sweep's driver took 8.35 s of CPU with it and 6.53 s without (2-core development
  machine, docs/testing.md). ``count_tune_callbacks_by_name`` has it count by the names alone
  (``INTEGRATION_CALLBACKS``), as Ray's does. Else: nothing (the tag is recorded whether or not usage stats are
  enabled).
- ``torch._amp_foreach_non_finite_check_and_unscale_``: the finiteness check of all gradients in one kernel
  (``torch.amp.GradScaler``'s, with a scale of 1); ``non_finite_check_and_unscale_``. Else:
  ``torch.isfinite`` per tensor (a device sync each).

It imports no Ray at module level (``losses`` and ``captured_step`` stay Ray-free): the hooks are mixins placed
before the RLlib class they extend or class decorators, and the functions that need a Ray class (``missing_internals``,
``rllib_update_step``) import it when called.

Private members with a public equivalent are not used: ``Learner._device`` (``Learner.device``),
``Learner._module`` (``Learner.module``), ``MultiRLModule._rl_modules`` (``MultiRLModule.items()``),
``LearnerGroup._learner`` (``LearnerGroup.foreach_learner``: ``local_learner``); ``PUBLIC_INSTEAD`` lists them
so the test keeps them out of the code.

RLModule's ``_forward_inference``, ``_forward_exploration`` and ``_forward_train`` are the hooks RLlib documents
for every RLModule to implement (``OverrideToImplementCustomLogic``), so each module overrides them directly;
``missing_internals`` checks them too (``OVERRIDE_HOOKS``).
"""

from __future__ import annotations

import collections
import importlib
import inspect
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from ray.rllib.core.learner.learner import Learner
    from ray.rllib.core.learner.learner_group import LearnerGroup
    from ray.rllib.core.learner.torch.torch_learner import TorchLearner
    from ray.tune.search import Repeater

# owner (a class, a function's keyword arguments, or a module, by import path) -> the private members we use.
REQUIRED: dict[str, tuple[str, ...]] = {
    "ray.rllib.algorithms.algorithm_config.AlgorithmConfig": (
        "_model_config_auto_includes", "_value_error", "_is_online"),
    "ray.rllib.core.learner.learner.Learner": ("_learner_index", "_optimizer_parameters"),
    "ray.rllib.core.learner.learner.Learner.update": ("_no_metrics_reduce",),
    "ray.rllib.core.learner.torch.torch_learner.TorchLearner": ("_update", "_grad_scalers", "_lr_scheduler_classes"),
    "ray.tune.search.Repeater": ("_trial_id_to_group",),
    "torch": ("_foreach_lerp_", "_amp_foreach_non_finite_check_and_unscale_", "_foreach_norm", "_foreach_mul_"),
    "ray._private.services": ("ConsolePopen",),
    "ray.tune.execution.class_cache": ("ENV_VARS_TO_PROPAGATE",),
    "ray.air._internal.usage": ("_count_callbacks",),
}
# The class names of the callbacks of Ray's tracking integrations, as Tune's usage tag counts them.
INTEGRATION_CALLBACKS = ("WandbLoggerCallback", "MLflowLoggerCallback", "CometLoggerCallback", "AimLoggerCallback")
# RLlib's documented underscore hooks, overridden in every RLModule: checked, not routed.
OVERRIDE_HOOKS: dict[str, tuple[str, ...]] = {
    "ray.rllib.core.rl_module.rl_module.RLModule": ("_forward_inference", "_forward_exploration", "_forward_train"),
}
# private member -> the public API used instead.
PUBLIC_INSTEAD: dict[str, str] = {
    "_device": "Learner.device",
    "_module": "Learner.module",
    "_rl_modules": "MultiRLModule.items() / keys() / [module_id]",
    "_learner": "rllib_caps.core.ray_internals.local_learner (LearnerGroup.foreach_learner)",
}


class ConfigHooks:
    """Mixin before ``AlgorithmConfig``: public names for the private members a config of ours uses."""

    def model_config_settings(self) -> dict[str, Any]:
        """The settings RLlib copies into ``model_config`` (after its own); a subclass extends its parent's."""
        return {}

    @property
    def _model_config_auto_includes(self) -> dict[str, Any]:
        return super()._model_config_auto_includes | self.model_config_settings()

    def config_error(self, message: str) -> None:
        """RLlib's validation error: ``ValueError`` (a warning only where config validation is switched off)."""
        self._value_error(message)

    def mark_offline(self) -> None:
        """No training EnvRunners: ``is_online`` False (RLlib has no public setter)."""
        self._is_online = False


def route_update_step(learner_class: type) -> type:
    """Class decorator for a ``TorchLearner`` subclass: RLlib's in-graph step of one ``Learner.update`` call
    (``TorchLearner._update``) becomes the class's public ``update_step``; RLlib's own stays callable as
    ``rllib_update_step``."""

    def _update(self: Any, batch: dict[str, Any]) -> tuple[Any, Any, Any]:
        return self.update_step(batch)

    learner_class._update = _update
    return learner_class


def rllib_update_step(learner: TorchLearner, batch: dict[str, Any]) -> tuple[Any, Any, Any]:
    """RLlib's torch update step on ``batch``: forward, losses, backward, ``apply_gradients``; returns (forward
    outputs, losses per module, metrics)."""
    from ray.rllib.core.learner.torch.torch_learner import TorchLearner

    return TorchLearner._update(learner, batch)


def metrics_reduce_kwargs(reduce_metrics: bool) -> dict[str, Any]:
    """The keyword arguments of ``Learner.update`` for ``reduce_metrics``: without it the call's metrics stay
    unreduced for a later call, and it returns None."""
    return {"_no_metrics_reduce": not reduce_metrics}


def learner_index(learner: Learner) -> int:
    """The learner's index in its learner group (0 for a local learner)."""
    return learner._learner_index


def optimizers(learner: Learner) -> Iterable[torch.optim.Optimizer]:
    """Every optimiser registered with ``learner``, in registration order."""
    return learner._optimizer_parameters


def scales_or_schedules(learner: TorchLearner) -> bool:
    """Whether a torch grad scaler or lr scheduler (``experimental(_torch_...)``) steps with the optimisers."""
    return learner._grad_scalers is not None or learner._lr_scheduler_classes is not None


def local_learner(learner_group: LearnerGroup) -> Learner:
    """The learner of a local learner group (built in this process)."""
    if not learner_group.is_local:
        raise ValueError("the learner group has remote learners, not a local one")
    (call,) = learner_group.foreach_learner(lambda learner: learner)
    return call.get()


def trial_group(repeater: Repeater, trial_id: str) -> Any:
    """The group of repeated trials (one per seed) that ``trial_id`` belongs to, in a Tune ``Repeater``."""
    return repeater._trial_id_to_group[trial_id]


def foreach_lerp_(targets: Sequence[torch.Tensor], sources: Sequence[torch.Tensor], weight: float) -> None:
    """``target ← target + weight (source − target)`` for every pair, in place (one fused kernel per device)."""
    torch._foreach_lerp_(targets, sources, weight)


def foreach_norm(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The L2 norm of every tensor, each a 0-d tensor on its device (no host read)."""
    return list(torch._foreach_norm(tensors, 2))


def foreach_mul_(tensors: Sequence[torch.Tensor], factor: torch.Tensor) -> None:
    """Multiplies every tensor by the 0-d tensor ``factor`` in place."""
    torch._foreach_mul_(tensors, factor)


def non_finite_check_and_unscale_(tensors: Sequence[torch.Tensor], found_inf: torch.Tensor,
                                  inv_scale: torch.Tensor) -> None:
    """Multiplies ``tensors`` by ``inv_scale`` in place and sets ``found_inf`` to 1 if any entry is not finite
    (one kernel; ``torch.amp.GradScaler``'s check)."""
    torch._amp_foreach_non_finite_check_and_unscale_(tensors, found_inf, inv_scale)


@contextmanager
def ray_processes_in_own_session() -> Iterator[None]:
    """While the block runs, every process that Ray starts from this one (``ray.init``'s GCS, raylet, dashboard and
    log monitor; the raylet's workers and agents follow the raylet) begins a session of its own (``setsid``): a
    signal to this process's group reaches this process alone. They still end with it (Ray's parent-death signal)."""
    from ray._private import services

    popen = services.ConsolePopen

    class OwnSessionPopen(popen):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **{**kwargs, "start_new_session": True})

    services.ConsolePopen = OwnSessionPopen
    try:
        yield
    finally:
        services.ConsolePopen = popen


def stop_tune_forwarding(excluded: Callable[[str], bool]) -> None:
    """Tune no longer passes those of the driver's environment variables to its trainables (``runtime_env``)
    whose name is ``excluded``."""
    from ray.tune.execution import class_cache

    class_cache.ENV_VARS_TO_PROPAGATE = {name for name in class_cache.ENV_VARS_TO_PROPAGATE if not excluded(name)}


def count_tune_callbacks_by_name() -> None:
    """Tune's usage tag of a run's callbacks counts them by class name without importing Ray's tracking
    integrations (and W&B and MLflow with them) to learn those names: a callback whose class is built in (one of
    ``INTEGRATION_CALLBACKS`` or Tune's default loggers) under its name, any other ``LoggerCallback`` as
    ``CustomLoggerCallback``, any other ``Callback`` as ``CustomCallback``, as Ray's own count does."""
    from ray.air._internal import usage
    from ray.tune import Callback
    from ray.tune.logger import LoggerCallback
    from ray.tune.utils.callback import DEFAULT_CALLBACK_CLASSES

    built_in = {*INTEGRATION_CALLBACKS, *(cls.__name__ for cls in DEFAULT_CALLBACK_CLASSES)}

    def count_callbacks(callbacks: Sequence[Any] | None) -> dict[str, int]:
        counts: dict[str, int] = collections.defaultdict(int)
        for callback in callbacks or []:
            if isinstance(callback, Callback):
                name = type(callback).__name__
                counts[name if name in built_in else "CustomLoggerCallback"
                       if isinstance(callback, LoggerCallback) else "CustomCallback"] += 1
        return counts

    usage._count_callbacks = count_callbacks


def missing_internals() -> list[str]:
    """The members of ``REQUIRED`` and ``OVERRIDE_HOOKS`` that the installed Ray and torch lack, as
    ``owner.name`` (empty on the pinned versions)."""
    tables = (*REQUIRED.items(), *OVERRIDE_HOOKS.items())
    return [f"{owner}.{name}" for owner, names in tables for name in names if not _has(_resolve(owner), name)]


def _resolve(path: str) -> Any:
    """The object at an import path such as ``package.module.Class.method``."""
    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:]:
            obj = getattr(obj, attribute)
        return obj
    raise ImportError(path)


def _has(owner: Any, name: str) -> bool:
    """A keyword argument of a function, an attribute of a class or module, or an instance attribute that the
    class (or a base) assigns as ``self.<name>``."""
    if inspect.isfunction(owner):
        return name in inspect.signature(owner).parameters
    if hasattr(owner, name):
        return True
    assignment = re.compile(rf"\bself\.{re.escape(name)}\s*(:[^=\n]*)?=[^=]")
    return inspect.isclass(owner) and any(assignment.search(_source(cls)) for cls in owner.__mro__)


def _source(cls: type) -> str:
    try:
        return inspect.getsource(cls)
    except (OSError, TypeError):  # builtins
        return ""
