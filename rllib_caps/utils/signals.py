"""SIGINT and SIGTERM below the command-line tools: ``Interrupted`` (SIGTERM unwinding like Ctrl+C), the deadline
that ends a signalled command within ``STOP_GRACE_S`` when Ray does not stop, a Tune loop asked to stop by the
first signal (``tune_stops_on_interrupt``) and signals held while Ray starts or stops (``signals_held``). What a
command says and its exit status are the CLIs' (``rllib_caps.interrupts``). Standard library only.

``tune`` follows Tune's own Ctrl+C behaviour for SIGINT and SIGTERM alike (``tune_stops_on_interrupt``): the first
signal asks the running Tune loop to stop, Tune saves the experiment state one last time, and the command then
exits, saying ``--resume``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

EXIT_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}  # 128 + the signal's number, as shells report it
STOP_GRACE_S = 20.0  # from the first signal to the command's end, at most (a clean stop takes a few seconds)


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread when SIGTERM arrives, so it unwinds like Ctrl+C does."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def said(kept: str | Callable[[], str]) -> str:
    return kept() if callable(kept) else kept


@dataclass
class Deadline:
    """Ends the process ``STOP_GRACE_S`` after the first signal if it has not ended by then (Ray's driver waits a
    minute for a GCS that was signalled too), while ``kept`` is set (by the CLIs' ``interruptible``), and says
    it."""

    kept: str | Callable[[], str] | None = None
    timer: threading.Timer | None = None

    def start(self, signum: int) -> None:
        if self.kept is not None and self.timer is None:
            self.timer = threading.Timer(STOP_GRACE_S, self._end, args=(signum, self.kept))
            self.timer.daemon = True
            self.timer.start()

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.kept = self.timer = None

    @staticmethod
    def _end(signum: int, kept: str | Callable[[], str]) -> None:
        print(f"interrupted ({signal.Signals(signum).name}): {said(kept)} (Ray had not stopped {STOP_GRACE_S:g} s "
              "after the signal; its processes end with this one)", file=sys.stderr, flush=True)
        os._exit(EXIT_STATUS[signum])


DEADLINE = Deadline()


@dataclass
class DeferredInterrupt:
    """The signal that asked Tune to stop, if one did."""

    signum: int | None = None

    def raise_if_received(self) -> None:
        """Unwinds as the signal would have (``Interrupted``), once Tune has stopped and saved its state."""
        if self.signum is not None:
            raise Interrupted(self.signum)


@contextmanager
def tune_stops_on_interrupt() -> Iterator[DeferredInterrupt]:
    """Around ``Tuner.fit()``: the first SIGINT or SIGTERM asks the running Tune loop to stop, as Tune's own Ctrl+C
    does (through its SIGUSR1 handler: Tune saves the experiment state one last time and returns), and is recorded;
    call ``raise_if_received`` after ``fit``. A second signal, or one before Tune's loop has started, unwinds at once.
    Tune's own SIGINT handler is off inside (``TUNE_DISABLE_SIGINT_HANDLER``) so that both signals behave alike."""
    deferred = DeferredInterrupt()

    def ask_tune_to_stop(signum: int, frame: FrameType | None) -> None:
        tune_handler = signal.getsignal(signal.SIGUSR1)
        if deferred.signum is not None or not callable(tune_handler):
            raise Interrupted(signum)
        deferred.signum = signum
        DEADLINE.start(signum)
        tune_handler(signum, frame)

    saved_env = os.environ.get("TUNE_DISABLE_SIGINT_HANDLER")
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)  # callable only once this fit's Tune loop has installed its own
    signal.signal(signal.SIGINT, ask_tune_to_stop)
    signal.signal(signal.SIGTERM, ask_tune_to_stop)
    try:
        yield deferred
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
        if saved_env is None:
            os.environ.pop("TUNE_DISABLE_SIGINT_HANDLER", None)
        else:
            os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = saved_env


@contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait while the block runs, then take effect as if they came at its end: Ray must not be
    cut off while it starts (a driver interrupted while it connects segfaults at exit) or stops (Ray's agents would
    be left behind). Off the main thread, where Python takes no signals, the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    for signum in saved:
        signal.signal(signum, lambda signum, _frame: received.append(signum))
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(received):
            signal.raise_signal(signum)
