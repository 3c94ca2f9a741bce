"""Whether an output's filesystem has room for what a run will write, checked before any work: a sweep or a training
run that fills the disk would otherwise find out only when it saves, hours later.

``OutputEstimate`` is the arithmetic (runs × checkpoints kept × bytes per checkpoint, plus results); the estimate of
a checkpoint comes from ``rllib_caps.core.checkpoint_size``. ``check_free_space`` is the one check the CLIs share.
"""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from rllib_caps.utils.atomic import OutputNotWritableError


class NotEnoughSpaceError(OutputNotWritableError):
    """The output's filesystem has less free space than the run is estimated to write."""


def format_bytes(size: float) -> str:
    """``size`` bytes in binary units, e.g. ``1.2 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


@dataclass(frozen=True)
class OutputEstimate:
    """What a run writes at most at once: ``runs`` (trials) × ``checkpoints`` kept of each × ``checkpoint_bytes``
    (the mean over the runs), plus ``other_bytes`` (results and logs), less ``written`` (what a resumed run has
    written already)."""

    runs: int
    run_noun: str
    checkpoints: int
    checkpoint_bytes: int
    other_bytes: int = 0
    written: int = 0

    @property
    def total(self) -> int:
        """The bytes still to be written (0 when the run has written that much already)."""
        return max(self.runs * self.checkpoints * self.checkpoint_bytes + self.other_bytes - self.written, 0)

    def describe(self) -> str:
        """How ``total`` is made, e.g. ``24 trials x 2 checkpoints x 25.0 MiB + 4.0 MiB of results``."""
        text = (f"{_plural(self.runs, self.run_noun)} x {_plural(self.checkpoints, 'checkpoint')} x "
                f"{format_bytes(self.checkpoint_bytes)}")
        text += f" + {format_bytes(self.other_bytes)} of results" if self.other_bytes else ""
        return text + (f" - {format_bytes(self.written)} already written" if self.written else "")


def mean_checkpoint_bytes(sizes: list[int]) -> int:
    """The mean of per-run checkpoint sizes, rounded up (so the estimate's product never falls below their sum)."""
    return math.ceil(sum(sizes) / len(sizes)) if sizes else 0


def free_bytes(path: str | Path) -> int:
    """The free space of the filesystem ``path`` will be on (its nearest existing ancestor's)."""
    path = Path(path).resolve()
    existing = next(p for p in (path, *path.parents) if p.exists())
    return shutil.disk_usage(existing).free


def bytes_under(path: str | Path) -> int:
    """The disk space the files under ``path`` take, in whole blocks as ``du`` counts it (0 when it does not
    exist)."""
    return sum(os.stat(Path(root) / name).st_blocks * 512 for root, _, names in os.walk(path) for name in names)


def space_shortfall(flag: str, path: str | Path, what: str, estimate: OutputEstimate, free: int) -> str | None:
    """The one-line refusal when ``estimate`` needs more than ``free`` bytes, else None."""
    if estimate.total <= free:
        return None
    return (f"{flag} {path}: {what} needs about {format_bytes(estimate.total)} ({estimate.describe()}), "
            f"{format_bytes(free)} free")


def check_free_space(flag: str, path: str | Path, what: str, estimate: OutputEstimate, *,
                     free: int | None = None) -> None:
    """Refuses, before any work, an output whose filesystem has less free space than ``estimate``: raises
    ``NotEnoughSpaceError`` naming ``flag``, the estimate and the free space. ``free`` defaults to the filesystem's
    reading (``free_bytes``)."""
    message = space_shortfall(flag, path, what, estimate, free_bytes(path) if free is None else free)
    if message:
        raise NotEnoughSpaceError(message)
