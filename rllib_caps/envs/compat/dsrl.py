"""Read dsrl's per-task constants without importing the dsrl package.

``import dsrl`` imports every simulator suite (failing on gymnasium 1.x), registers gymnasium ids and
creates ``~/.dsrl/datasets``; ``dsrl/infos.py`` itself is plain data, so it is loaded from its file.
"""

import importlib.util
from functools import cache
from pathlib import Path
from types import ModuleType


@cache
def load_infos() -> ModuleType:
    """Return dsrl's ``infos`` module (URLs, episode lengths, reward/cost ranges) loaded from its file."""
    spec = importlib.util.find_spec("dsrl")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("dsrl is not installed: pip install --no-deps dsrl==0.1.0")
    path = Path(next(iter(spec.submodule_search_locations))) / "infos.py"
    infos_spec = importlib.util.spec_from_file_location("rllib_caps.envs.compat._dsrl_infos", path)
    if infos_spec is None or infos_spec.loader is None:
        raise ImportError(f"cannot load dsrl's task constants from {path}")
    module = importlib.util.module_from_spec(infos_spec)
    infos_spec.loader.exec_module(module)
    return module
