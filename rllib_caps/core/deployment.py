"""What the Ray-free deployable policies (``CAPSPolicy``, ``CDTPolicy``) share: the deployable policy files every
checkpoint carries, their loading, the observation checks and the mapping of actions to the env's bounds.

A checkpoint's ``policy/`` holds the trained RLModule as data only: ``weights.safetensors`` (every tensor of its
state) and ``spec.json`` (its class name, spaces, ``model_config`` and training data). Loading them runs no code
from the files, unlike RLlib's own pickled module files, so a checkpoint can be deployed, evaluated, exported and
reported on from an untrusted source; the class must be one the caller names (the registry's deployable modules).
Both files are checked against the checkpoint's ``manifest.json`` first.

Ray 2.60's ``RLModule.__init__`` builds a deprecated ``RLModuleConfig`` itself on every construction (rl_module.py,
line 463), so the first module of every process logs RLlib's "``RLModule(config=[RLModuleConfig object])`` has
been deprecated" although the module is built with the keywords it asks for (``RLModuleSpec.build``: observation
space, action space, model config). ``build_module`` tells Ray's ``log_once`` that the notice was given, so
``evaluate``, ``report`` and ``CAPSPolicy.from_checkpoint`` print nothing for a call they do not make; every other
notice is untouched.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.core.rl_module.rl_module import RLModule, RLModuleSpec
from ray.rllib.utils.spaces.space_utils import unsquash_action
from ray.util import log_once
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from rllib_caps.utils.manifest import CheckpointError, verify_manifest
from rllib_caps.utils.paths import resolve_local

POLICY_DIR = "policy"  # in every checkpoint: the deployable module, pickle-free
WEIGHTS_FILE = "weights.safetensors"
SPEC_FILE = "spec.json"
SPEC_FORMAT = "rllib-caps-policy/1"
RLMODULE_CONFIG_NOTICE = "RLModule(config=[RLModuleConfig object])"  # the log_once key of RLlib's notice


def class_name(cls: type) -> str:
    """``module.QualName``: how ``spec.json`` names a module class (data, never imported from the file)."""
    return f"{cls.__module__}.{cls.__qualname__}"


def _box(space: gym.Space) -> dict[str, Any]:
    if not isinstance(space, gym.spaces.Box):
        raise CheckpointError(f"a deployable policy needs Box spaces, got {space}")
    return {"low": space.low.tolist(), "high": space.high.tolist(), "dtype": str(space.dtype)}


def _space(spec: dict[str, Any]) -> gym.spaces.Box:
    return gym.spaces.Box(np.asarray(spec["low"], spec["dtype"]), np.asarray(spec["high"], spec["dtype"]),
                          dtype=spec["dtype"])


def save_module_files(module: RLModule, directory: Path, **extra: Any) -> None:
    """Writes ``module`` as data only: ``directory/weights.safetensors`` (every tensor of its state) and
    ``directory/spec.json`` (its class name, spaces, ``model_config``, ``inference_only`` where it is one, and the
    JSON fields ``extra``). Written in place; `load_module_files` reads them back without running any code."""
    spec = {"format": SPEC_FORMAT, "module_class": class_name(type(module)),
            "observation_space": _box(module.observation_space), "action_space": _box(module.action_space),
            "model_config": dict(module.model_config), **extra}
    if module.inference_only:  # absent: a full module, as every checkpoint's policy is
        spec["inference_only"] = True
    try:
        text = json.dumps(spec, indent=1, sort_keys=True, allow_nan=True)
    except TypeError as err:
        raise CheckpointError(f"{type(module).__name__}'s model_config is not JSON ({err})") from err
    tensors = {name: value.detach().to("cpu", copy=True).contiguous() for name, value in module.state_dict().items()}
    directory.mkdir(exist_ok=True)
    save_file(tensors, str(directory / WEIGHTS_FILE))
    (directory / SPEC_FILE).write_text(text + "\n")


def save_policy(module: RLModule, checkpoint: Path, *, training_data: str) -> None:
    """Writes ``checkpoint/policy/`` (`save_module_files`), with the dataset the module was trained on
    (``training_data``, recorded for the policy card). Written in place, as RLlib writes the rest of the checkpoint:
    the manifest written after them covers both files, so a save cut short is refused on load."""
    save_module_files(module, checkpoint / POLICY_DIR, training_data=training_data)


def checkpoint_root(path: str | Path) -> Path:
    """The checkpoint directory of ``path``: a checkpoint, or its ``policy/`` directory."""
    path = Path(resolve_local(path))
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such checkpoint directory")
    if path.name == POLICY_DIR and (path / SPEC_FILE).is_file():
        return path.parent
    if not (path / POLICY_DIR / SPEC_FILE).is_file():
        raise FileNotFoundError(f"{path}: not a checkpoint with a deployable policy (no {POLICY_DIR}/{SPEC_FILE}; "
                                "one saved by an earlier release of rllib-caps must be retrained)")
    return path


def read_spec(spec_file: Path) -> dict[str, Any]:
    """The module spec `save_module_files` wrote to ``spec_file``; CheckpointError naming the file if it is not one."""
    try:
        spec = json.loads(spec_file.read_text())
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{spec_file}: unreadable ({err})") from err
    if not isinstance(spec, dict) or spec.get("format") != SPEC_FORMAT:
        raise CheckpointError(f"{spec_file}: not a policy spec of format {SPEC_FORMAT}")
    return spec


def policy_spec(path: str | Path) -> dict[str, Any]:
    """The ``spec.json`` of the checkpoint at ``path`` (not checked against its manifest: ``load_module`` is)."""
    return read_spec(checkpoint_root(path) / POLICY_DIR / SPEC_FILE)


def build_module(spec: RLModuleSpec) -> RLModule:
    """``spec.build()``, the keyword construction RLlib asks for, with its notice about a ``config=`` construction
    that no caller made (RLlib's own ``RLModuleConfig``, see the module's docstring) marked as given."""
    log_once(RLMODULE_CONFIG_NOTICE)
    return spec.build()


def load_module_files(directory: Path, module_classes: Sequence[type[RLModule]]) -> RLModule:
    """The module `save_module_files` wrote to ``directory``, on CPU, built as one of ``module_classes`` (its spec
    names which) from the spec and the weights. Nothing in the files is executed; a file that does not fit, or weights
    with NaN or inf, raise CheckpointError naming the file."""
    spec_file = directory / SPEC_FILE
    spec = read_spec(spec_file)
    known = {class_name(cls): cls for cls in module_classes}
    module_class = known.get(spec.get("module_class"))
    if module_class is None:
        raise CheckpointError(f"{spec_file}: holds a {spec.get('module_class')}, not one of {', '.join(known)}")
    weights = directory / WEIGHTS_FILE
    try:
        module = build_module(RLModuleSpec(
            module_class=module_class, observation_space=_space(spec["observation_space"]),
            action_space=_space(spec["action_space"]), model_config=spec["model_config"],
            inference_only=spec.get("inference_only", False)))
        module.set_state(load_file(str(weights)))
    except (OSError, SafetensorError, KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{weights}: cannot load the module ({type(err).__name__}: {err}); if another "
                              "release of rllib-caps saved it, make it again with this one (retrain a checkpoint, "
                              "re-collect a behaviour policy snapshot)") from err
    bad = [name for name, value in module.state_dict().items() if value.is_floating_point()
           and not torch.isfinite(value).all()]
    if bad:
        raise CheckpointError(f"{weights}: NaN or inf in {', '.join(bad[:4])}: a diverged training; refusing to act")
    return module.to("cpu")


def load_module(path: str | Path, module_classes: Sequence[type[RLModule]], *, verify: bool = True) -> RLModule:
    """The module of the checkpoint at ``path`` (`load_module_files` of its ``policy/``), after checking the files
    against the checkpoint's ``manifest.json`` (``verify=False``: not checked, with a warning)."""
    root = checkpoint_root(path)
    verify_manifest(root, verify=verify)
    return load_module_files(root / POLICY_DIR, module_classes)


class DeployedPolicy:
    """Base of the deployable policies: ``module`` (on CPU, eval mode) and what the rollouts and the evaluate CLI
    read of it. ``module_class`` is the RLModule class a subclass deploys. ``last_outputs``: name -> per-env array
    of what the last ``act`` computed besides the actions, which the module's extension turns into extra results
    (``core.extension.AlgorithmExtension.episode_metrics``; none by default)."""

    module_class: ClassVar[type[RLModule]]

    def __init__(self, module: RLModule) -> None:
        self.module = module.eval()
        self.last_outputs: dict[str, np.ndarray] = {}

    @classmethod
    def from_checkpoint(cls, path: str | Path, *, verify: bool = True) -> Any:
        """Loads the module from a checkpoint directory's pickle-free ``policy/`` files, after checking them
        against the checkpoint's ``manifest.json`` (``verify=False``: not checked, logged)."""
        return cls(load_module(path, [cls.module_class], verify=verify))

    @property
    def task(self) -> str | None:
        """The registry name of the task the bundle was trained on (None for a custom env)."""
        return self.module.model_config.get("task")

    @property
    def training_seed(self) -> int | None:
        """The seed the bundle was trained with (None for checkpoints that predate recording it)."""
        return self.module.model_config.get("seed")

    def observation_batch(self, obs: np.ndarray, num_envs: int) -> np.ndarray:
        """``obs`` (one observation or a batch ``(N, D)``) as a float32 batch, checked against the module's
        observation space, ``num_envs`` and finiteness."""
        obs_batch = np.atleast_2d(np.asarray(obs, dtype=np.float32))
        expected = (num_envs, *self.module.observation_space.shape)
        if obs_batch.shape != expected:
            raise ValueError(f"obs has shape {np.shape(obs)}; expected {expected[1:]} per env for {num_envs} env(s) "
                             "(reset(threshold, batch_size=N) sets the number of envs)")
        if not np.isfinite(obs_batch).all():
            raise ValueError("obs contains NaN or inf")
        return obs_batch

    def env_actions(self, actions: np.ndarray, single: bool) -> np.ndarray:
        """Normalised actions in [−1, 1] mapped to the env's bounds, the mapping RLlib's EnvRunners apply with
        ``normalize_actions=True``; one action when ``single``."""
        env_actions = unsquash_action(actions, self.module.action_space).astype(np.float32)
        return env_actions[0] if single else env_actions
