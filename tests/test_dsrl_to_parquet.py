"""DSRL HDF5 -> RLlib Parquet: exact round trip, episode flags, validation, atomic output, RLlib reads it."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pyarrow.parquet as pq
import pytest
from test_dsrl_format import BROKEN_KINDS, dsrl_arrays, make_broken_file

from data_conversion.dsrl_format import DsrlFormatError, read_dsrl_hdf5, write_dsrl_hdf5
from data_conversion.dsrl_to_parquet import COLUMNS, ConversionError, DsrlFilter, convert, main
from rllib_caps.envs.tasks import get_task

BALL = get_task("BallCircle")  # obs 8, act 2
# Episode ends: (last row, terminal, timeout). Row 129 ends an episode with both flags; the last 20 rows
# are an unfinished episode. Read in chunks of 64 rows and written in parts of 150 rows, so episodes
# straddle both boundaries.
ENDS = ((49, False, True), (69, True, False), (129, True, True), (179, False, True), (279, False, True))
ROWS = 300
LOW, HIGH = np.array([-2.0, 0.0], np.float32), np.array([2.0, 4.0], np.float32)
BOUNDED = dataclasses.replace(BALL, action_low=tuple(LOW.tolist()), action_high=tuple(HIGH.tolist()))


def episode_arrays(obs_dim: int, act_dim: int, low: np.ndarray, high: np.ndarray) -> dict[str, np.ndarray]:
    """DSRL arrays with the episode ends in ENDS and actions drawn inside [low, high]."""
    rng = np.random.default_rng(1)
    terminals, timeouts = np.zeros(ROWS, bool), np.zeros(ROWS, bool)
    for row, terminal, timeout in ENDS:
        terminals[row], timeouts[row] = terminal, timeout
    return {
        "observations": rng.normal(size=(ROWS, obs_dim)).astype(np.float32),
        "next_observations": rng.normal(size=(ROWS, obs_dim)).astype(np.float32),
        "actions": rng.uniform(low, high, size=(ROWS, act_dim)).astype(np.float32),
        "rewards": rng.normal(size=ROWS).astype(np.float32),
        "costs": rng.integers(0, 3, size=ROWS).astype(np.float32),
        "terminals": terminals,
        "timeouts": timeouts,
    }


def read_rows(out: Path) -> dict[str, np.ndarray]:
    """All Parquet rows of a converted directory as numpy arrays (vectors stacked)."""
    table = pq.read_table(out / "data")
    return {
        name: np.stack(column.to_numpy(zero_copy_only=False))
        if name in ("obs", "new_obs", "actions")
        else column.to_numpy()
        for name, column in zip(table.column_names, table.columns, strict=True)
    }


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def expected_episodes() -> tuple[np.ndarray, np.ndarray]:
    """(eps_id, t) per row, counted row by row."""
    eps_id, t, episode, step = [], [], 0, 0
    ends = {row for row, _, _ in ENDS}
    for row in range(ROWS):
        eps_id.append(episode)
        t.append(step)
        step += 1
        if row in ends:
            episode, step = episode + 1, 0
    return np.array(eps_id), np.array(t)


@pytest.fixture
def bounded_h5(tmp_path: Path) -> Path:
    """A source for the task BOUNDED, whose action box is [-2, 2] x [0, 4]; one action entry lies outside."""
    src = episode_arrays(BOUNDED.obs_dim, BOUNDED.act_dim, LOW, HIGH)
    src["actions"][5] = [3.0, 1.0]  # above the bounds: clipped to 1, as RLlib's unsquash_action would clip it
    h5 = tmp_path / "src.hdf5"
    write_dsrl_hdf5(h5, src)
    return h5


def test_round_trip_is_exact(tmp_path: Path, bounded_h5: Path) -> None:
    src, h5 = read_dsrl_hdf5(bounded_h5), bounded_h5
    summary = convert(BOUNDED, h5, tmp_path / "out", chunk_rows=64, part_rows=150)

    assert summary.files == ("part-00000.parquet", "part-00001.parquet")
    rows = read_rows(tmp_path / "out")
    assert list(rows) == list(COLUMNS)
    for ours, theirs in (
        ("obs", "observations"),
        ("new_obs", "next_observations"),
        ("rewards", "rewards"),
        ("costs", "costs"),
    ):
        np.testing.assert_array_equal(rows[ours], src[theirs])  # new_obs keeps the true next obs at time-outs
    assert rows["actions"].dtype == np.float32 and np.abs(rows["actions"]).max() <= 1.0
    unsquashed = LOW + (rows["actions"] + 1.0) * (HIGH - LOW) / 2.0  # RLlib's unsquash_action (checked below)
    np.testing.assert_allclose(unsquashed, src["actions"].clip(LOW, HIGH), atol=1e-6)
    np.testing.assert_array_equal(rows["terminateds"], src["terminals"])
    truncated = src["timeouts"] & ~src["terminals"]
    truncated[-1] = True  # the unfinished last episode
    np.testing.assert_array_equal(rows["truncateds"], truncated)
    eps_id, t = expected_episodes()
    np.testing.assert_array_equal(rows["eps_id"], eps_id)
    np.testing.assert_array_equal(rows["t"], t)

    meta = json.loads((tmp_path / "out" / "metadata.json").read_text())
    returns = [src["costs"][eps_id == e].astype(np.float64).sum() for e in range(eps_id[-1] + 1)]
    assert meta["episode_cost_return"] == pytest.approx(
        {"min": min(returns), "max": max(returns), "mean": np.mean(returns), "std": np.std(returns)}
    )
    assert (meta["rows"], meta["episodes"], meta["terminated_episodes"], meta["truncated_episodes"]) == (ROWS, 6, 2, 4)
    assert meta["trailing_partial_episode_kept_as_truncated"] is True
    assert meta["actions"]["entries_clipped_to_bounds"] == 1
    assert meta["actions"]["env_low"] == [-2.0, 0.0]
    assert meta["source"] == {"file": "src.hdf5", "rows": ROWS, "sha256": hashlib.sha256(h5.read_bytes()).hexdigest()}
    assert meta["files"] == {name: hashlib.sha256((tmp_path / "out" / "data" / name).read_bytes()).hexdigest()
                             for name in summary.files}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "src.hdf5"]
    assert summary.warnings == ("1 action entries (0.17%) lay outside the task's bounds and were clipped",)


def test_suspicious_data_warns_and_strict_refuses_leaving_nothing(tmp_path: Path, bounded_h5: Path) -> None:
    src = read_dsrl_hdf5(bounded_h5)
    src["terminals"][:] = False
    src["timeouts"][:] = False
    flagless = tmp_path / "flagless.hdf5"
    write_dsrl_hdf5(flagless, src)
    summary = convert(BOUNDED, flagless, tmp_path / "loose")
    assert any("no terminal or time-out flags" in w for w in summary.warnings)
    assert any(f"longer than the task's {BOUNDED.max_episode_steps} steps" in w for w in summary.warnings)
    recorded = json.loads((tmp_path / "loose" / "metadata.json").read_text())["conversion_warnings"]
    assert recorded == list(summary.warnings)  # check_dataset repeats them whenever the dataset is used
    with pytest.raises(ConversionError, match="refused under --strict"):
        convert(BOUNDED, flagless, tmp_path / "strict", strict=True)
    assert not (tmp_path / "strict").exists() and not any(p.name.startswith(".strict") for p in tmp_path.iterdir())


@pytest.fixture
def ball_h5(tmp_path: Path) -> Path:
    h5 = tmp_path / "ball.hdf5"
    write_dsrl_hdf5(h5, episode_arrays(BALL.obs_dim, BALL.act_dim, -1.0, 1.0))
    return h5


def test_rerun_is_byte_identical_and_never_overwrites_without_force(
    tmp_path: Path, ball_h5: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    assert main(["--task", "BallCircle", "--h5", str(ball_h5), "--out", str(first)]) == 0
    assert main(["--task", "BallCircle", "--h5", str(ball_h5), "--out", str(second)]) == 0
    assert tree_bytes(first) == tree_bytes(second)
    assert f"to {first}" in capsys.readouterr().out

    (second / "data" / "part-00000.parquet").write_bytes(b"changed")
    assert main(["--task", "BallCircle", "--h5", str(ball_h5), "--out", str(second)]) == 2
    assert "already exists (use --force" in capsys.readouterr().err
    assert (second / "data" / "part-00000.parquet").read_bytes() == b"changed"

    assert main(["--task", "BallCircle", "--h5", str(ball_h5), "--out", str(second), "--force"]) == 0
    assert tree_bytes(first) == tree_bytes(second)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "ball.hdf5"]


def _assert_one_line_error(err: str, *parts: str) -> None:
    assert err.startswith("error: ") and err.count("\n") == 1, err
    for part in parts:
        assert part in err, (part, err)


@pytest.mark.parametrize("kind", [*BROKEN_KINDS, "obs size", "action size"])
def test_invalid_input_exits_2_naming_file_and_key_and_leaves_nothing(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    h5 = tmp_path / "in.hdf5"
    if kind in ("obs size", "action size"):
        obs_dim, act_dim = (BALL.obs_dim + 1, BALL.act_dim) if kind == "obs size" else (BALL.obs_dim, 3)
        write_dsrl_hdf5(h5, dsrl_arrays(obs_dim=obs_dim, act_dim=act_dim))
        key, problem = ("observations" if kind == "obs size" else "actions"), "does not match the task"
    else:
        key, problem = make_broken_file(h5, kind, BALL.obs_dim, BALL.act_dim)
    out = tmp_path / "nested" / "out"

    assert main(["--task", "BallCircle", "--h5", str(h5), "--out", str(out)]) == 2

    _assert_one_line_error(capsys.readouterr().err, str(h5), problem, *([f"'{key}'"] if key else []))
    assert [p.name for p in tmp_path.iterdir()] == ["in.hdf5"]  # no out, temp or created parent dir


def test_library_raises_typed_errors(tmp_path: Path, ball_h5: Path) -> None:
    with pytest.raises(DsrlFormatError):
        convert("BallCircle", tmp_path / "missing.hdf5", tmp_path / "out")
    with pytest.raises(ConversionError, match="unknown task 'BallCirc'.*BallCircle"):
        convert("BallCirc", ball_h5, tmp_path / "out")
    with pytest.raises(ConversionError, match="no density filter.*0.5"):
        convert("BallCircle", ball_h5, tmp_path / "out", dsrl_filter=DsrlFilter(density=0.3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ball.hdf5"]


FILTER_EPISODES, FILTER_LENGTH = 300, 20  # outliers put up to 19 unit costs in one episode


@pytest.fixture
def spread_h5(tmp_path: Path) -> Path:
    """300 twenty-step episodes whose returns spread over reward [0, 900] and cost [0, 80]."""
    rows = FILTER_EPISODES * FILTER_LENGTH
    src = dsrl_arrays(rows=rows, obs_dim=BALL.obs_dim, act_dim=BALL.act_dim)
    rng = np.random.default_rng(2)
    src["rewards"] = np.repeat(rng.uniform(0, 45, FILTER_EPISODES), FILTER_LENGTH)
    src["costs"] = np.repeat(rng.uniform(0, 4, FILTER_EPISODES), FILTER_LENGTH)
    src["terminals"][:] = 0
    src["timeouts"] = np.arange(rows) % FILTER_LENGTH == FILTER_LENGTH - 1
    h5 = tmp_path / "src.hdf5"
    write_dsrl_hdf5(h5, src)
    return h5


def test_density_filter_keeps_whole_episodes_reproducibly(
    tmp_path: Path, spread_h5: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dsrl's own pre_process_data thins episodes; output episodes are source episodes, renumbered."""
    monkeypatch.chdir(tmp_path)  # dsrl saves a plot into the working directory: none must appear
    for out in ("a", "b"):
        assert main(["--task", "BallCircle", "--h5", str(spread_h5), "--out", out, "--density", "0.5"]) == 0
    assert tree_bytes(tmp_path / "a") == tree_bytes(tmp_path / "b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "src.hdf5"]

    src = read_dsrl_hdf5(spread_h5)
    rows = read_rows(tmp_path / "a")
    source_row = {obs.tobytes(): i for i, obs in enumerate(src["observations"])}
    kept = np.array([source_row[obs.tobytes()] for obs in rows["obs"]])
    assert 0 < len(kept) < len(src["observations"]) and np.all(np.diff(kept) > 0)
    starts = kept[rows["t"] == 0]
    assert np.all(starts % FILTER_LENGTH == 0) and len(kept) == len(starts) * FILTER_LENGTH
    np.testing.assert_array_equal(rows["eps_id"], np.repeat(np.arange(len(starts)), FILTER_LENGTH))
    np.testing.assert_array_equal(rows["costs"], src["costs"][kept])
    meta = json.loads((tmp_path / "a" / "metadata.json").read_text())
    assert meta["dsrl_filter"] == {"density": 0.5, "outliers_percent": None, "target_cost": None}
    assert meta["episodes"] == len(starts)


def test_outlier_filter_rewrites_episodes_as_dsrl_does(tmp_path: Path, spread_h5: Path) -> None:
    """dsrl turns 2% of high-reward, high-cost episodes into cheap ones with 1.5x reward; the rest stay."""
    spec = DsrlFilter(outliers_percent=0.02, target_cost=20)
    convert("BallCircle", spread_h5, tmp_path / "a", dsrl_filter=spec)
    convert("BallCircle", spread_h5, tmp_path / "b", dsrl_filter=spec)
    assert tree_bytes(tmp_path / "a") == tree_bytes(tmp_path / "b")

    src, rows = read_dsrl_hdf5(spread_h5), read_rows(tmp_path / "a")
    np.testing.assert_array_equal(rows["obs"], src["observations"])  # every episode kept, in order
    changed = rows["costs"] != src["costs"]
    episodes = np.unique(rows["eps_id"][changed])
    assert len(episodes) == int(FILTER_EPISODES * 0.02)
    for e in episodes:
        mine = rows["eps_id"] == e
        assert set(np.unique(rows["costs"][mine])) <= {0.0, 1.0} and rows["costs"][mine].sum() < 20
        np.testing.assert_allclose(rows["rewards"][mine], 1.5 * src["rewards"][mine])
        assert src["costs"][mine].sum() >= BALL.max_cost / 2 and src["rewards"][mine].sum() >= BALL.max_reward / 2
    np.testing.assert_array_equal(
        rows["rewards"][~np.isin(rows["eps_id"], episodes)], src["rewards"][~np.isin(rows["eps_id"], episodes)]
    )


def test_download_failure_exits_with_one_line_pointing_to_h5_and_collect(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DSRL_DATASET_DIR": str(tmp_path / "dsrl"),
        "PYTHONPATH": str(Path.cwd()),
        "http_proxy": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "https_proxy": "http://127.0.0.1:9",  # DSRL's current URLs are https
        "HTTPS_PROXY": "http://127.0.0.1:9",
    }  # no network either way
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "data_conversion.dsrl_to_parquet",
            "--task",
            "BallCircle",
            "--out",
            str(tmp_path / "out"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()[-1] + "\n"
    _assert_one_line_error(err, "cannot download", "--h5", "python -m data_conversion.collect")
    assert not (tmp_path / "out").exists()
    assert list((tmp_path / "dsrl").iterdir()) == []  # no partial download left behind


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_rllib_offline_data_path_delivers_costs_to_learner_batch(tmp_path: Path, bounded_h5: Path, ray_session) -> None:
    """RLlib's own offline path (OfflineData -> OfflinePreLearner) reads the Parquet; `costs` reaches the batch,
    and RLlib's unsquash_action maps the stored actions back to the env's."""
    from ray.rllib.algorithms.bc import BCConfig
    from ray.rllib.utils.spaces.space_utils import unsquash_action

    convert(BOUNDED, bounded_h5, tmp_path / "out", part_rows=100)
    rows = read_rows(tmp_path / "out")
    env_box = gym.spaces.Box(LOW, HIGH, dtype=np.float32)
    src_actions = read_dsrl_hdf5(bounded_h5)["actions"]
    np.testing.assert_allclose(unsquash_action(rows["actions"], env_box), src_actions.clip(LOW, HIGH), atol=1e-6)

    config = (
        BCConfig()
        .environment(
            observation_space=gym.spaces.Box(-np.inf, np.inf, (BALL.obs_dim,), np.float32),
            action_space=gym.spaces.Box(-1.0, 1.0, (BALL.act_dim,), np.float32),
        )
        .offline_data(
            input_=[str(tmp_path / "out" / "data")],
            input_read_episodes=False,
            dataset_num_iters_per_learner=1,
            map_batches_kwargs={"concurrency": 1},  # RLlib's default of 2 actors starves the reads on 2 CPUs
        )
        .training(train_batch_size_per_learner=32)
        .env_runners(num_env_runners=0)
        .learners(num_learners=0)
    )
    algo = config.build_algo()
    try:
        batch = algo.offline_data.sample(num_samples=32, num_shards=0).policy_batches["default_policy"]
    finally:
        algo.stop()

    costs = batch["costs"]
    assert costs.dtype == np.float32 and costs.shape == (32,)
    # Each learner-batch row's cost is the cost of the Parquet row with the same observation.
    cost_of = {obs.tobytes(): cost for obs, cost in zip(rows["obs"], rows["costs"], strict=True)}
    assert [cost_of[np.asarray(obs, np.float32).tobytes()] for obs in batch["obs"]] == list(costs)
