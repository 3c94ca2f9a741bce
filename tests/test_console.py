"""Library notices go to the log file; every other warning still reaches the console."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from rllib_caps.utils.console import divert_library_notices


def _record(name: str, message: str) -> logging.LogRecord:
    return logging.LogRecord(name, logging.WARNING, __file__, 1, message, None, None)


def test_notices_go_to_the_log_and_other_warnings_to_the_console(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLLIB_CAPS_LOG", str(tmp_path / "earlier.log"))
    divert_library_notices()  # e.g. an earlier command in the same process
    monkeypatch.setenv("RLLIB_CAPS_LOG", str(tmp_path / "library.log"))
    assert divert_library_notices() == tmp_path / "library.log"
    divert_library_notices()  # idempotent: one filter per handler
    consoles = [h for name in ("ray", "ray.rllib") for h in logging.getLogger(name).handlers]
    assert consoles
    assert all(sum(type(f).__name__ == "_DivertNotices" for f in h.filters) == 1 for h in consoles)
    notices = [_record("ray.tune.utils.util", "Install gputil for GPU system monitoring."),
               _record("ray.rllib.algorithms.algorithm_config", "You are running X on the new API stack!")]
    problem = _record("ray.rllib.core", "a learner lost its GPU")
    for handler in consoles:
        assert all(not handler.filter(r) for r in notices)  # kept off the console
        assert handler.filter(problem)  # reaches it
    log = (tmp_path / "library.log").read_text()
    assert "gputil" in log and "new API stack" in log and "lost its GPU" not in log
    assert not (tmp_path / "earlier.log").exists()  # the earlier filter no longer writes
