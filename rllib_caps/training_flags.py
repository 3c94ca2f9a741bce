"""The training flags ``train`` and ``tune`` share (``registry.COMMON_TRAIN_FLAGS``), added to either parser by
``add_training_flags``: each sets the training setting of its name, and its help shows the config classes'
declared defaults (``registry.defaults_text``), so ``--help`` imports no RLlib."""

from __future__ import annotations

from typing import Any

from rllib_caps.algorithms.registry import COMMON_TRAIN_FLAGS, HELP_DEFAULTS, defaults_text


def add_training_flags(parser: Any, note: str = "") -> None:
    """``--steps``, ``--hidden``, ``--batch-size``, ... on ``parser`` (an argparse parser or group), each flag's
    help followed by ``note`` (which may name the setting as ``{setting}``, e.g. ``overrides training.{setting}``)."""
    for flag in COMMON_TRAIN_FLAGS:
        default = f" [{defaults_text(flag.setting)}]" if flag.setting in HELP_DEFAULTS else ""
        extra = f" ({note.format(setting=flag.setting)})" if note else ""
        parser.add_argument(flag.flag, dest=flag.setting, type=flag.kind, choices=flag.choices or None,
                            nargs=flag.nargs, help=f"{flag.help}{extra}{default}")
