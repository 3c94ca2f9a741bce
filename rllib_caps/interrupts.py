"""Ctrl+C (SIGINT) and SIGTERM in the command-line tools (``interruptible``): one line that says what was kept and
how to go on, the Ray this process started shut down (no orphaned raylet, dashboard or runtime-env agent), and the
shell's exit status for the signal (130 for SIGINT, 143 for SIGTERM), within ``STOP_GRACE_S`` of the signal
(``rllib_caps.utils.signals``: the deadline, and ``tune``'s Tune loop stopped by the first signal).

Outputs are written atomically (``rllib_caps.utils.atomic``), so an interrupted command leaves no half-written file:
the temporary directory is removed as the interrupt unwinds through it.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

from rllib_caps.core.ray_session import shutdown_ray
from rllib_caps.utils.signals import DEADLINE, EXIT_STATUS, Interrupted, said


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    """``interruptible``'s handler of SIGINT and SIGTERM: the deadline starts, and the block unwinds."""
    DEADLINE.start(signum)
    raise Interrupted(signum)


@contextmanager
def interruptible(kept: str | Callable[[], str]) -> Iterator[None]:
    """Runs the block; on SIGINT or SIGTERM prints ``interrupted (SIGNAL): {kept}``, shuts Ray down if this process
    started it, and exits with 130 or 143, within ``STOP_GRACE_S`` of the signal. ``kept`` says what was kept and
    how to resume (a callable: said then)."""
    previous = {signum: signal.signal(signum, _interrupt) for signum in EXIT_STATUS}
    DEADLINE.kept = kept
    try:
        yield
    except KeyboardInterrupt as err:
        signum = err.signum if isinstance(err, Interrupted) else signal.SIGINT
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl+C must not cut the shutdown short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        DEADLINE.start(signum)
        shutdown_ray()
        print(f"interrupted ({signal.Signals(signum).name}): {said(kept)}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_STATUS[signum]) from None
    finally:
        DEADLINE.cancel()
        signal.signal(signal.SIGTERM, previous[signal.SIGTERM])
        if signal.getsignal(signal.SIGINT) is _interrupt:  # after an interrupt, Ctrl+C stays ignored to the end
            signal.signal(signal.SIGINT, previous[signal.SIGINT])
