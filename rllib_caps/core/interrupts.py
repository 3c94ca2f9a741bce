"""Ctrl+C (SIGINT) and SIGTERM in the command-line tools: one line that says what was kept and how to go on, the Ray
this process started shut down (no orphaned raylet, dashboard or runtime-env agent), and the shell's exit status for
the signal (130 for SIGINT, 143 for SIGTERM).

Outputs are written atomically (``rllib_caps.utils.atomic``), so an interrupted command leaves no half-written file:
the temporary directory is removed as the interrupt unwinds through it.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

EXIT_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}  # 128 + the signal's number, as shells report it


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread when SIGTERM arrives, so it unwinds like Ctrl+C does."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_interrupted(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted(signum)


@contextmanager
def interruptible(kept: str) -> Iterator[None]:
    """Runs the block; on SIGINT or SIGTERM prints ``interrupted (SIGNAL): {kept}``, shuts Ray down if this process
    started it, and exits with 130 or 143. ``kept`` says what was kept and how to resume."""
    previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        yield
    except KeyboardInterrupt as err:
        signum = err.signum if isinstance(err, Interrupted) else signal.SIGINT
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl+C must not cut the shutdown short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        shutdown_ray()
        print(f"interrupted ({signal.Signals(signum).name}): {kept}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_STATUS[signum]) from None
    finally:
        signal.signal(signal.SIGTERM, previous)


def init_ray(**options: Any) -> Any:
    """``ray.init(**options)``, keeping the SIGTERM handler in force before it: Ray's driver installs a handler of
    its own that aborts the process (exit -6) instead of letting ``interruptible`` shut Ray down."""
    import ray

    handler = signal.getsignal(signal.SIGTERM)
    context = ray.init(**options)
    signal.signal(signal.SIGTERM, handler)
    return context


def shutdown_ray() -> None:
    """``ray.shutdown()`` if Ray is imported and initialised in this process (it stops the processes it started)."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
