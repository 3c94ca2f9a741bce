"""``python -m rllib_caps.bench``: the matrix prints as JSON, and flag combinations that would time the wrong thing
are refused."""

from __future__ import annotations

import json

import pytest

from rllib_caps.bench import main


def test_cpu_clock_is_refused_where_cpu_time_is_not_the_steps_time(capsys: pytest.CaptureFixture) -> None:
    assert main(["--clock", "cpu", "--threads", "2"]) == 2
    assert "--clock cpu needs --device cpu and --threads 1" in capsys.readouterr().err


@pytest.mark.slow
def test_matrix_by_cpu_time_as_json(capsys: pytest.CaptureFixture) -> None:
    assert main(["--hidden", "16", "--heads", "2", "--batch", "8", "--steps", "2", "--repetitions", "1",
                 "--warmup", "1", "--clock", "cpu", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["setup"]["clock"] == "cpu"
    (row,) = printed["rows"]
    assert (row["hidden"], row["heads"]) == (16, 2)
    assert all(row[f"{loop}_median"] > 0 for loop in ("rllib_unfused", "plain_unfused", "rllib_fused", "plain_fused"))
