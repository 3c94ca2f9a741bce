"""What the Ray-free deployable policies (``CAPSPolicy``, ``CDTPolicy``) share: loading the trained RLModule from a
checkpoint (the module directory inside an Algorithm checkpoint, checked against its ``manifest.json``), the
observation checks and the mapping of actions to the env's bounds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_LEARNER_GROUP, COMPONENT_RL_MODULE, DEFAULT_MODULE_ID
from ray.rllib.core.rl_module.rl_module import RLModule
from ray.rllib.utils.spaces.space_utils import unsquash_action

from rllib_caps.utils.manifest import CheckpointError, verify_manifest
from rllib_caps.utils.paths import resolve_local


def module_checkpoint_dir(path: str | Path) -> Path:
    """The RLModule directory inside an Algorithm checkpoint (or ``path`` if it already is one)."""
    path = Path(resolve_local(path))
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such checkpoint directory")
    nested = path / COMPONENT_LEARNER_GROUP / COMPONENT_LEARNER / COMPONENT_RL_MODULE / DEFAULT_MODULE_ID
    if nested.is_dir():
        return nested
    if (path / "class_and_ctor_args.pkl").is_file():
        return path
    raise FileNotFoundError(f"{path}: not an algorithm or RLModule checkpoint (no {nested.relative_to(path)} inside)")


def load_module(path: str | Path, *, verify: bool = True) -> RLModule:
    """The module of an ``Algorithm`` checkpoint directory (or of its RLModule subdirectory) on CPU, after
    checking the files against the checkpoint's ``manifest.json`` (``verify=False``: not checked, with a warning)."""
    given = Path(resolve_local(path))
    module_dir = module_checkpoint_dir(given)
    # manifest.json sits at the root of the Algorithm checkpoint, four levels above the module directory.
    verify_manifest(given if module_dir != given or len(given.parts) < 5 else given.parents[3], verify=verify)
    try:
        module = RLModule.from_checkpoint(module_dir)
    except Exception as err:  # unpickling a damaged file raises almost anything
        raise CheckpointError(f"{module_dir}: cannot load the module ({type(err).__name__}: {err}); if another "
                              "release of rllib-caps saved it, retrain it with this one") from err
    return module.to("cpu")


class DeployedPolicy:
    """Base of the deployable policies: ``module`` (on CPU, eval mode) and what the rollouts and the evaluate CLI
    read of it."""

    def __init__(self, module: RLModule) -> None:
        self.module = module.eval()

    @classmethod
    def from_checkpoint(cls, path: str | Path, *, verify: bool = True) -> Any:
        """Loads the module from an ``Algorithm`` checkpoint directory (or its RLModule subdirectory), after
        checking the files against the checkpoint's ``manifest.json`` (``verify=False``: not checked, logged)."""
        return cls(load_module(path, verify=verify))

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
