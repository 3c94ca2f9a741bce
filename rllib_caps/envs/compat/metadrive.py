"""Run metadrive-simulator 0.4.3 offline and headless.

Each fix below is a small function named after what it stops. ``import_metadrive`` applies them all
(idempotent); ``rllib_caps.envs.metadrive`` calls it before creating any env.
"""

from __future__ import annotations

import importlib
import types


def _no_asset_pull() -> None:
    """Stands in for ``BaseEngine.try_pull_asset``: no download, no lock file, no log line."""


def _skip_asset_download() -> None:
    """The first engine start downloads ``assets.zip`` from GitHub; headless lidar/state obs need none of it."""
    from metadrive.engine.base_engine import BaseEngine

    BaseEngine.try_pull_asset = staticmethod(_no_asset_pull)


def import_metadrive() -> types.ModuleType:
    """Import MetaDrive with the fixes applied (idempotent). Rendering and image observations stay unusable,
    since they need the assets that are never downloaded."""
    module = importlib.import_module("metadrive")
    _skip_asset_download()
    return module
