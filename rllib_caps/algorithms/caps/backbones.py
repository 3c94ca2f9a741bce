"""The CAPS backbones by name: the one place that picks one, for the config (``CAPSConfig.backbone_spec``) and for
the module (its model config's ``backbone``, recorded in checkpoints)."""

from __future__ import annotations

from rllib_caps.algorithms.caps.backbone import Backbone
from rllib_caps.algorithms.caps.iql.backbone import IQL
from rllib_caps.algorithms.caps.sacbc.backbone import SACBC

BACKBONES: dict[str, Backbone] = {backbone.name: backbone for backbone in (IQL, SACBC)}
