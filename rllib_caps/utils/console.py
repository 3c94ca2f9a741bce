"""Keeps library notices that say nothing about the user's run off the console.

Ray and RLlib log a few warnings on every run that need no action here: the new-API-stack notice, Ray's token
authentication notice, RLlib's deprecation of its own module construction, and the missing ``gputil``; Ray Tune,
where it wrote its results at a sweep's end and its ``Tuner.restore(...)`` hint on an interruption (the ``tune`` CLI
prints the sweep's own resume command); torch's ONNX exporter, that ``torchvision`` is not installed.
``divert_library_notices`` sends them to a log file instead (``~/.cache/rllib_caps/library.log``, or
``$RLLIB_CAPS_LOG``); every other warning still reaches the console.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

NOTICES = (
    "on the new API stack",
    "Token authentication is enabled",
    "`RLModule(config=[RLModuleConfig object])` has been deprecated",  # RLlib's own module construction
    "Install gputil",
    "torchvision is not installed",  # torch's ONNX exporter, on every export (rllib_caps.export)
    "Resume experiment with: Tuner.restore",  # Tune's hint on an interruption: the tune CLI prints its own command
    "Wrote the latest version of all result files",  # Tune's INFO line at the end of every sweep
)


def library_log_path() -> Path:
    return Path(os.environ.get("RLLIB_CAPS_LOG", Path.home() / ".cache" / "rllib_caps" / "library.log"))


class _DivertNotices(logging.Filter):
    """Passes a record on to the console unless it is one of ``NOTICES``; those go to the log file."""

    def __init__(self, log_file: logging.Handler) -> None:
        super().__init__()
        self.log_file = log_file

    def filter(self, record: logging.LogRecord) -> bool:
        if any(notice in record.getMessage() for notice in NOTICES):
            self.log_file.handle(record)
            return False
        return True


def divert_library_notices() -> Path:
    """Installs the filter on Ray's and RLlib's console handlers, replacing one installed before (so a later call
    with another ``$RLLIB_CAPS_LOG`` takes effect); returns the log file's path."""
    import ray.rllib  # noqa: F401  (sets up Ray's and RLlib's loggers and their console handlers)

    path = library_log_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    log_file = logging.FileHandler(path, delay=True)
    log_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    divert = _DivertNotices(log_file)
    for name in ("ray", "ray.rllib", "ray.data", "torch", "torch.onnx"):
        for handler in logging.getLogger(name).handlers:
            for earlier in [f for f in handler.filters if isinstance(f, _DivertNotices)]:
                handler.removeFilter(earlier)  # one filter per handler, writing to the current log path
            handler.addFilter(divert)
    return path


def aligned_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """``header`` and ``rows`` as left-aligned text columns, two spaces apart."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
                     for r in [header, *rows])
