"""Ctrl+C and SIGTERM (``rllib_caps.interrupts``, ``rllib_caps.utils.signals``): one line saying what was kept,
exit 130 or 143, nothing half-written, and no Ray process left behind."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from rllib_caps import interrupts
from rllib_caps.interrupts import interruptible
from rllib_caps.utils.signals import Interrupted, signals_held, tune_stops_on_interrupt

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def ray_shutdowns(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Records ``shutdown_ray`` calls instead of shutting down this test process's Ray, which the session's other
    tests share (the subprocess tests below check that the CLIs' own Ray is really gone)."""
    calls: list[int] = []
    monkeypatch.setattr(interrupts, "shutdown_ray", lambda: calls.append(1))
    return calls


def test_ctrl_c_exits_130_with_what_was_kept(capsys: pytest.CaptureFixture, ray_shutdowns: list[int]) -> None:
    with pytest.raises(SystemExit) as exit_info, interruptible("nothing kept"):
        raise KeyboardInterrupt
    assert exit_info.value.code == 130
    assert capsys.readouterr().err.strip() == "interrupted (SIGINT): nothing kept"
    assert ray_shutdowns == [1]
    signal.signal(signal.SIGINT, signal.default_int_handler)


def test_sigterm_unwinds_like_ctrl_c_and_exits_143(capsys: pytest.CaptureFixture, ray_shutdowns: list[int]) -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as exit_info, interruptible("the checkpoint at X"):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises in the main thread before this ends
    assert exit_info.value.code == 143
    assert "interrupted (SIGTERM): the checkpoint at X" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before
    assert ray_shutdowns == [1]
    signal.signal(signal.SIGINT, signal.default_int_handler)


def test_tune_stops_on_the_first_signal_and_the_command_unwinds_once_it_has(monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGINT and SIGTERM alike: the first asks the running Tune loop to stop (its SIGUSR1 handler, installed here as
    ``Tuner.fit`` installs it) and unwinding waits for ``fit`` to return; a second one unwinds at once."""
    monkeypatch.delenv("TUNE_DISABLE_SIGINT_HANDLER", raising=False)
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    asked: list[int] = []
    with tune_stops_on_interrupt() as interrupt:
        assert os.environ["TUNE_DISABLE_SIGINT_HANDLER"] == "1"
        signal.signal(signal.SIGUSR1, lambda signum, _frame: asked.append(signum))  # Tune's loop is running
        signal.raise_signal(signal.SIGTERM)
        assert asked == [signal.SIGTERM] and interrupt.signum == signal.SIGTERM  # fit goes on to save its state
        with pytest.raises(Interrupted):
            signal.raise_signal(signal.SIGINT)  # a second signal does not wait
    with pytest.raises(Interrupted) as unwound:
        interrupt.raise_if_received()
    assert unwound.value.signum == signal.SIGTERM
    assert {s: signal.getsignal(s) for s in before} == before and "TUNE_DISABLE_SIGINT_HANDLER" not in os.environ


def test_a_signal_before_tunes_loop_starts_unwinds_at_once() -> None:
    with pytest.raises(Interrupted) as unwound, tune_stops_on_interrupt():
        signal.raise_signal(signal.SIGINT)
    assert unwound.value.signum == signal.SIGINT
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_signals_held_while_ray_starts_or_stops_take_effect_when_it_is_done() -> None:
    """``signals_held`` (around ``ray.init`` and ``ray.shutdown``): a signal inside waits for the block's end, then
    reaches the handler in force; the handlers are as before."""
    received: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: received.append(signum))
    try:
        with signals_held():
            signal.raise_signal(signal.SIGTERM)
            assert received == []
        assert received == [signal.SIGTERM]
        with pytest.raises(KeyboardInterrupt), signals_held():
            signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGTERM, previous)


def ray_processes(marker: str) -> list[str]:
    """Command lines of live processes that name ``marker`` (the run's Ray temp directory)."""
    lines = subprocess.run(["ps", "-eww", "-o", "stat=,args="], capture_output=True, text=True).stdout.splitlines()
    return [line for line in lines if marker in line and not line.lstrip().startswith("Z")]


@contextmanager
def ray_of_its_own(prefix: str) -> Iterator[str]:
    """A short ``RAY_TMPDIR`` (Ray's socket paths have a length limit) for a command that starts its own Ray. When
    the block ends, no process of that Ray may be left (waiting up to 30 s for them to go); whatever is left, even
    after a failure, is killed."""
    ray_tmp = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    try:
        yield ray_tmp
        deadline = time.monotonic() + 30
        while ray_processes(ray_tmp) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not ray_processes(ray_tmp), ray_processes(ray_tmp)
    finally:
        subprocess.run(["pkill", "-9", "-f", ray_tmp])
        shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("signum, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupted_train_keeps_nothing_half_written_and_leaves_no_ray_process(tmp_path: Path, signum: int,
                                                                               status: int) -> None:
    out, log = tmp_path / "ckpt", tmp_path / "stderr.log"
    command = [sys.executable, "-m", "rllib_caps.train", "--task", "BallCircle", "--data",
               str(ROOT / "datasets" / "BallCircle"), "--out", str(out), "--steps", "100000", "--hidden", "32", "32",
               "--eval-episodes", "0"]
    with ray_of_its_own("rayint") as ray_tmp, log.open("w") as stderr:
        env = {**os.environ, "RAY_TMPDIR": ray_tmp, "RLLIB_CAPS_SMOKE_TEST": ""}
        process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        deadline = time.monotonic() + 180
        while "step/s" not in log.read_text() and "step]" not in log.read_text():  # tqdm's bar: training runs
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        assert ray_processes(ray_tmp), "Ray's processes should be running during training"
        process.send_signal(signum)
        assert process.wait(timeout=120) == status, log.read_text()
    text = log.read_text()
    assert f"interrupted ({signal.Signals(signum).name}): nothing was written to --out" in text
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".ckpt")]


def signal_train_when(reached: Callable[[Path, Path], bool], steps: str, signum: int, tmp_path: Path) -> int:
    """Runs ``train`` on a Ray of its own, in a session of its own, and sends ``signum`` to its process group (as
    Ctrl+C in a terminal does) as soon as ``reached(stderr log, out)``; returns its exit status once no Ray process
    of it is left (``ray_of_its_own``)."""
    out, log = tmp_path / "ckpt", tmp_path / "stderr.log"
    command = [sys.executable, "-m", "rllib_caps.train", "--task", "BallCircle", "--data",
               str(ROOT / "datasets" / "BallCircle"), "--out", str(out), "--steps", steps, "--hidden", "16", "16",
               "--updates-per-iteration", "30", "--eval-episodes", "0"]
    with ray_of_its_own("raysig") as ray_tmp, log.open("w") as stderr:
        env = {**os.environ, "RAY_TMPDIR": ray_tmp, "RLLIB_CAPS_SMOKE_TEST": ""}
        process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=stderr,
                                   start_new_session=True)
        deadline = time.monotonic() + 180
        while not reached(log, out):
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.02)
        os.killpg(process.pid, signum)
        return process.wait(timeout=120)


def ray_has_started(log: Path, _out: Path) -> bool:
    """Ray's processes run and the driver is connecting to them."""
    return "Started a local Ray instance" in log.read_text()


def checkpoint_is_written(_log: Path, out: Path) -> bool:
    """The checkpoint's manifest, written last, is in the temporary output: the algorithm and Ray stop next."""
    return any(out.parent.glob(f".{out.name}.*/manifest.json"))


@pytest.mark.slow
@pytest.mark.parametrize("reached, steps", [(ray_has_started, "100000"), (checkpoint_is_written, "60")],
                         ids=["at-start-up", "while-train-exits"])
def test_ctrl_c_to_train_as_ray_starts_or_stops_exits_130_and_leaves_no_ray_process(
        tmp_path: Path, reached: Callable[[Path, Path], bool], steps: str) -> None:
    """Ctrl+C (SIGINT to the process group) just after Ray's processes have started (the driver was connecting:
    it segfaulted at exit) or while ``train`` stops its algorithm and Ray (Ray's agents were left behind): exit 130
    with the one line, nothing at --out, and no process of that Ray left."""
    status = signal_train_when(reached, steps, signal.SIGINT, tmp_path)
    text = (tmp_path / "stderr.log").read_text()
    assert status == 130, text
    assert "interrupted (SIGINT): nothing was written to --out" in text
    assert not (tmp_path / "ckpt").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".ckpt")]
