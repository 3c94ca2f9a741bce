"""Loading a trained RLModule from a checkpoint without Ray, for the deployable policies (``CAPSPolicy``,
``CDTPolicy``): the module directory inside an Algorithm checkpoint, checked against its ``manifest.json``."""

from __future__ import annotations

from pathlib import Path

from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_LEARNER_GROUP, COMPONENT_RL_MODULE, DEFAULT_MODULE_ID
from ray.rllib.core.rl_module.rl_module import RLModule

from rllib_caps.core.manifest import CheckpointError, verify_manifest
from rllib_caps.core.paths import resolve_local


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
    raise FileNotFoundError(f"{path}: not a CAPS checkpoint (no {nested.relative_to(path)} inside)")


def load_module(path: str | Path) -> RLModule:
    """The module of an ``Algorithm`` checkpoint directory (or of its RLModule subdirectory) on CPU, after
    checking the files against the checkpoint's ``manifest.json`` when it has one."""
    given = Path(resolve_local(path))
    module_dir = module_checkpoint_dir(given)
    # manifest.json sits at the root of the Algorithm checkpoint, four levels above the module directory.
    verify_manifest(given if module_dir != given or len(given.parts) < 5 else given.parents[3])
    try:
        module = RLModule.from_checkpoint(module_dir)
    except Exception as err:  # unpickling a damaged file raises almost anything
        hint = (" (saved by a release before the rllib_caps.algorithms layout: retrain it with this release)"
                if "rllib_caps.caps" in str(err) else "")
        raise CheckpointError(f"{module_dir}: cannot load the module ({type(err).__name__}: {err}){hint}") from err
    return module.to("cpu")
