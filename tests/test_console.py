"""Library notices go to the log file; every other warning still reaches the console."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from rllib_caps.core.console import divert_library_notices


def test_notices_go_to_the_log_and_other_warnings_to_the_console(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capfd: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("RLLIB_CAPS_LOG", str(tmp_path / "library.log"))
    assert divert_library_notices() == tmp_path / "library.log"
    divert_library_notices()  # idempotent: one filter per handler
    logging.getLogger("ray.tune.utils.util").warning("Install gputil for GPU system monitoring.")
    logging.getLogger("ray.rllib.algorithms.algorithm_config").warning("You are running X on the new API stack!")
    logging.getLogger("ray.rllib.core").warning("a learner lost its GPU")
    console = capfd.readouterr().err
    assert "a learner lost its GPU" in console
    assert "gputil" not in console and "new API stack" not in console
    log = (tmp_path / "library.log").read_text()
    assert log.count("gputil") == 1 and "new API stack" in log and "lost its GPU" not in log
