"""Ctrl+C (SIGINT) and SIGTERM in the command-line tools: one line that says what was kept and how to go on, the Ray
this process started shut down (no orphaned raylet, dashboard or runtime-env agent), and the shell's exit status for
the signal (130 for SIGINT, 143 for SIGTERM).

``tune`` follows Tune's own Ctrl+C behaviour for SIGINT and SIGTERM alike (``tune_stops_on_interrupt``): the first
signal asks the running Tune loop to stop, Tune saves the experiment state one last time, and the command then
exits as above, saying ``--resume``.

A local Ray's processes run in a session of their own (``init_ray``), so a signal to the command's process group
(Ctrl+C; ``kill -TERM -PGID``) reaches the command alone, which stops Tune and shuts Ray down in order. Where Ray's
processes are signalled too (Slurm's ``scancel`` and systemd signal every process of the job), Ray's driver would
wait a minute for its GCS before failing: once signalled, the command ends within ``STOP_GRACE_S`` regardless,
with the same line and status (Tune's state and the checkpoints are on disk already; Ray's processes end with it).

Outputs are written atomically (``rllib_caps.utils.atomic``), so an interrupted command leaves no half-written file:
the temporary directory is removed as the interrupt unwinds through it.
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
from typing import Any

from rllib_caps.utils.smoke import SMOKE_TEST_ENV, smoke_test

EXIT_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}  # 128 + the signal's number, as shells report it
STOP_GRACE_S = 20.0  # from the first signal to the command's end, at most (a clean stop takes a few seconds)


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread when SIGTERM arrives, so it unwinds like Ctrl+C does."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    """``interruptible``'s handler of SIGINT and SIGTERM: the deadline starts, and the block unwinds."""
    _DEADLINE.start(signum)
    raise Interrupted(signum)


def _said(kept: str | Callable[[], str]) -> str:
    return kept() if callable(kept) else kept


@dataclass
class _Deadline:
    """Ends the process ``STOP_GRACE_S`` after the first signal if it has not ended by then (Ray's driver waits a
    minute for a GCS that was signalled too), inside ``interruptible`` only, whose ``kept`` it says."""

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
        print(f"interrupted ({signal.Signals(signum).name}): {_said(kept)} (Ray had not stopped {STOP_GRACE_S:g} s "
              "after the signal; its processes end with this one)", file=sys.stderr, flush=True)
        os._exit(EXIT_STATUS[signum])


_DEADLINE = _Deadline()


@contextmanager
def interruptible(kept: str | Callable[[], str]) -> Iterator[None]:
    """Runs the block; on SIGINT or SIGTERM prints ``interrupted (SIGNAL): {kept}``, shuts Ray down if this process
    started it, and exits with 130 or 143, within ``STOP_GRACE_S`` of the signal. ``kept`` says what was kept and
    how to resume (a callable: said then)."""
    previous = {signum: signal.signal(signum, _interrupt) for signum in EXIT_STATUS}
    _DEADLINE.kept = kept
    try:
        yield
    except KeyboardInterrupt as err:
        signum = err.signum if isinstance(err, Interrupted) else signal.SIGINT
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl+C must not cut the shutdown short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _DEADLINE.start(signum)
        shutdown_ray()
        print(f"interrupted ({signal.Signals(signum).name}): {_said(kept)}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_STATUS[signum]) from None
    finally:
        _DEADLINE.cancel()
        signal.signal(signal.SIGTERM, previous[signal.SIGTERM])
        if signal.getsignal(signal.SIGINT) is _interrupt:  # after an interrupt, Ctrl+C stays ignored to the end
            signal.signal(signal.SIGINT, previous[signal.SIGINT])


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
        _DEADLINE.start(signum)
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


def init_ray(**options: Any) -> Any:
    """``ray.init(**options)`` with SIGINT and SIGTERM held until it returns (``signals_held``) and the SIGTERM
    handler kept (Ray's driver installs one of its own that aborts the process, exit -6, instead of letting
    ``interruptible`` shut Ray down). The processes of a local Ray start in a session of their own, so that a
    signal to this process's group (``kill -TERM -PGID``) reaches this process alone and Ray is shut down in order.
    No credential goes through a ``runtime_env`` (``core.secrets``). With ``RLLIB_CAPS_SMOKE_TEST`` set, the
    job's workers get it too: on a cluster this process joins, they have the environment their node started with,
    not this one's."""
    import ray

    from rllib_caps.core.ray_internals import ray_processes_in_own_session
    from rllib_caps.core.secrets import keep_secrets_out_of_tune

    keep_secrets_out_of_tune()
    if smoke_test():
        options.setdefault("runtime_env", {"env_vars": {SMOKE_TEST_ENV: os.environ[SMOKE_TEST_ENV]}})
    with signals_held(), ray_processes_in_own_session():
        return ray.init(**options)


@contextmanager
def ray_started(**options: Any) -> Iterator[None]:
    """Ray for the block: ``init_ray(**options)`` unless this process has Ray already, and at the end the Ray it
    started shut down (``shutdown_ray``), before the block's outputs are kept."""
    import ray

    started = not ray.is_initialized()
    if started:
        init_ray(**options)
    try:
        yield
    finally:
        if started:
            shutdown_ray()


def shutdown_ray() -> None:
    """``ray.shutdown()``, whole (``signals_held``), if Ray is imported and initialised in this process (it stops
    the processes it started)."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        with signals_held():
            ray.shutdown()
