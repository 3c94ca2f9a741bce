"""Read dsrl's per-task constants without importing the dsrl package, with DSRL's current download host.

``import dsrl`` imports every simulator suite (failing on gymnasium 1.x), registers gymnasium ids and
creates ``~/.dsrl/datasets``; ``dsrl/infos.py`` itself is plain data, so it is loaded from its file.

dsrl 0.1.0's ``DATASET_URLS`` point at a host that is gone. In November 2025 DSRL moved the same files, under
the same names, to the Hugging Face Hub dataset repo ``YYY-45/DSRL`` (DSRL commit 71064f2, "Switch to the
huggingface host", changed only these URLs); `load_infos` returns those URLs, on ``$HF_ENDPOINT`` when it is
set (a Hub mirror), as huggingface_hub does.
"""

import importlib.util
import os
from functools import cache
from pathlib import Path
from types import ModuleType

HF_REPO_ID = "YYY-45/DSRL"  # repo_type "dataset"
HF_REVISION = "main"
HF_DEFAULT_ENDPOINT = "https://huggingface.co"


def hub_url_prefix() -> str:
    """Where DSRL's files are: the repo's resolve URL on ``$HF_ENDPOINT`` (default the Hub), ending in ``/``."""
    endpoint = os.environ.get("HF_ENDPOINT") or HF_DEFAULT_ENDPOINT
    return f"{endpoint.rstrip('/')}/datasets/{HF_REPO_ID}/resolve/{HF_REVISION}/"


@cache
def load_infos() -> ModuleType:
    """Return dsrl's ``infos`` module (URLs, episode lengths, reward/cost ranges) loaded from its file, its
    ``DATASET_URLS`` moved to DSRL's current host (`hub_url_prefix` + the same file names)."""
    spec = importlib.util.find_spec("dsrl")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("dsrl is not installed: pip install --no-deps dsrl==0.1.0")
    path = Path(next(iter(spec.submodule_search_locations))) / "infos.py"
    infos_spec = importlib.util.spec_from_file_location("rllib_caps.envs.compat._dsrl_infos", path)
    if infos_spec is None or infos_spec.loader is None:
        raise ImportError(f"cannot load dsrl's task constants from {path}")
    module = importlib.util.module_from_spec(infos_spec)
    infos_spec.loader.exec_module(module)
    prefix = hub_url_prefix()
    module.DATASET_URLS = {name: prefix + url.rsplit("/", 1)[-1] for name, url in module.DATASET_URLS.items()}
    return module


def dataset_file_name(task_name: str) -> str:
    """DSRL's file name of a task's dataset, e.g. ``SafetyBallCircle-v0-80-886.hdf5`` for ``BallCircle``."""
    return load_infos().DATASET_URLS[task_name].rsplit("/", 1)[-1]
