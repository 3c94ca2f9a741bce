"""The collector's scripted MetaDrive drivers (``--idm-speeds``, ``--idm-slowdowns``) on the real MetaDrive
simulator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from data_conversion.collect import main
from data_conversion.idm_drivers import idm_drivers
from rllib_caps.envs import make_env
from rllib_caps.envs.tasks import get_task

TASK = get_task("easysparse")


def _episodes(path: Path) -> list[dict[str, np.ndarray]]:
    import h5py

    with h5py.File(path, "r") as f:
        data = {key: f[key][:] for key in f}
    ends = np.flatnonzero(data["terminals"] | data["timeouts"]) + 1
    return [{key: value[a:b] for key, value in data.items()} for a, b in zip(np.r_[0, ends[:-1]], ends, strict=True)]


def test_drivers_are_refused_off_metadrive_and_named_by_speed() -> None:
    with pytest.raises(ValueError, match="--idm-speeds.*'BallCircle' is not a MetaDrive task"):
        idm_drivers(get_task("BallCircle"), [10.0])
    assert idm_drivers(get_task("BallCircle"), []) == []
    assert [driver.label for driver in idm_drivers(TASK, [10, 12.5], [(30, 10)])] == [
        "IDM → 10 km/h", "IDM → 12.5 km/h", "IDM 30 → 10 km/h"
    ]  # fmt: skip
    with pytest.raises(ValueError, match="--idm-slowdowns.*'BallCircle' is not a MetaDrive task"):
        idm_drivers(get_task("BallCircle"), [], [(30.0, 10.0)])
    with pytest.raises(ValueError, match="--idm-slowdowns: every FAST:SLOW needs FAST > SLOW > 0, got 30:10, 10:30"):
        idm_drivers(TASK, [], [(30.0, 10.0), (10.0, 30.0)])


def test_cli_refuses_bad_idm_flags_before_writing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "d.hdf5"
    assert main(["--task", "BallCircle", "--idm-speeds", "10", "--out", str(out)]) == 2
    assert "--idm-speeds" in capsys.readouterr().err and not out.exists() and not out.with_suffix(".png").exists()
    refused = (
        (["--idm-speeds", "0"], "positive speeds"),
        (["--idm-slowdowns", "10:30"], "FAST > SLOW > 0"),
        (["--idm-slowdowns", "30-10"], "FAST:SLOW"),
        ([], "nothing to collect"),
    )
    for argv, message in refused:
        with pytest.raises(SystemExit) as exit_info:
            main(["--task", "easysparse", "--penalties", "", *argv, "--out", str(out)])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.slow
def test_idm_drivers_span_the_velocity_cost_and_their_actions_replay(tmp_path: Path) -> None:
    """A slow driver earns less at almost no velocity cost, a fast one finishes the route at a cost, and a slow-down
    driver pays the fast rate until its drawn step and nothing once it has braked; each episode's recorded actions,
    replayed from its reset seed, reproduce it, so the file holds the actions that were applied."""
    out = tmp_path / "idm.hdf5"
    argv = ["--task", "easysparse", "--penalties", "", "--idm-speeds", "8,20", "--idm-slowdowns", "30:8"]
    assert main([*argv, "--episodes-per-snapshot", "1", "--seed", "1", "--out", str(out)]) == 0
    slow, fast, slowing = _episodes(out)
    rng = np.random.default_rng([1, 2, 0])  # episode 0 of behaviour 2 draws its reset seed, then its switch's step
    rng.integers(2**31)
    switch = int(rng.integers(TASK.max_episode_steps // 2))
    assert 50 < switch < 400  # this seed's draw: fast, then slow, within the route
    at_30_kmh = slowing["costs"][switch - 40 : switch]  # 0.01 per km/h over 10 km/h, per step
    np.testing.assert_allclose(at_30_kmh, 0.2, atol=0.03)
    assert slowing["costs"][switch + 40 :].sum() < 0.1 and len(slowing["rewards"]) == TASK.max_episode_steps
    assert slow["costs"].sum() < 1.0 and len(slow["rewards"]) == TASK.max_episode_steps and slow["timeouts"][-1]
    assert fast["costs"].sum() > 20.0 and fast["terminals"][-1]
    assert fast["rewards"].sum() > slow["rewards"].sum() + 100
    env = make_env(TASK)
    try:
        seed = int(np.random.default_rng([1, 0, 0]).integers(2**31))  # episode 0 of behaviour 0 (collect's rule)
        obs, _ = env.reset(seed=seed)
        np.testing.assert_array_equal(obs, slow["observations"][0])
        replayed = [env.step(action)[1] for action in slow["actions"][:200]]  # float32 actions, as stored
    finally:
        env.close()
    np.testing.assert_allclose(replayed, slow["rewards"][:200], rtol=1e-4, atol=1e-6)
