"""The dataset collector on the real BallCircle simulator and real RLlib PPO, on a tiny budget."""

from __future__ import annotations

import contextlib
import importlib
import json
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from data_conversion.behavior_policies import GaussianPolicy, Snapshot
from data_conversion.collect import bin_cap, grid_filter, main
from data_conversion.dsrl_format import DTYPES, KEYS
from rllib_caps.envs.tasks import get_task

TASK = get_task("BallCircle")
TINY = ["--task", "BallCircle", "--penalties", "0", "--target-costs", "5", "--train-steps", "400", "--snapshots", "2",
        "--episodes-per-snapshot", "3", "--seed", "7"]  # fmt: skip


def _read(path: Path) -> dict[str, np.ndarray]:
    import h5py

    with h5py.File(path, "r") as f:
        return {key: f[key][:] for key in f}


@pytest.fixture(scope="module")
def runs(ray_session: object, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two tiny collections with the same seed (the first also with a custom --plot path and --snapshot-dir)."""
    out = tmp_path_factory.mktemp("collect")
    paths = [out / "a.hdf5", out / "b.hdf5"]
    card, snapshots = str(out / "card_a.png"), str(out / "snapshots")
    assert main([*TINY, "--out", str(paths[0]), "--plot", card, "--snapshot-dir", snapshots]) == 0
    assert main([*TINY, "--out", str(paths[1])]) == 0
    return paths


@pytest.mark.slow
def test_file_is_valid_dsrl_format(runs: list[Path]) -> None:
    data = _read(runs[0])
    assert sorted(data) == sorted(KEYS)
    rows = len(data["rewards"])
    assert rows > 0
    for key in KEYS:
        assert data[key].dtype == DTYPES[key], key
    assert data["observations"].shape == data["next_observations"].shape == (rows, TASK.obs_dim)
    assert data["actions"].shape == (rows, TASK.act_dim)
    for key in ("rewards", "costs", "terminals", "timeouts"):
        assert data[key].shape == (rows,), key
    assert (data["costs"] >= 0).all() and set(np.unique(data["costs"])) <= {0.0, 1.0}
    assert (data["actions"] >= np.array(TASK.action_low, dtype=np.float32)).all()
    assert (data["actions"] <= np.array(TASK.action_high, dtype=np.float32)).all()


@pytest.mark.slow
def test_episode_boundaries_are_consistent(runs: list[Path]) -> None:
    data = _read(runs[0])
    ends = np.flatnonzero(data["terminals"] | data["timeouts"])
    assert ends[-1] == len(data["rewards"]) - 1  # the file ends with a complete episode
    assert not (data["terminals"] & data["timeouts"]).any()
    starts = np.r_[0, ends[:-1] + 1]
    # BallCircle never terminates: every episode runs to DSRL's time limit and ends in a time-out.
    assert (ends - starts + 1 == TASK.max_episode_steps).all() and not data["terminals"].any()
    within = np.ones(len(data["rewards"]), dtype=bool)
    within[ends] = False
    # Inside an episode, each next observation is the following row's observation.
    np.testing.assert_array_equal(data["next_observations"][within], data["observations"][1:][within[:-1]])
    # Episodes are distinct rollouts (12 collected, at most all kept).
    first_obs = data["observations"][starts]
    assert 1 < len(starts) <= 12 and len(np.unique(first_obs, axis=0)) == len(starts)


@pytest.mark.slow
def test_same_seed_gives_same_file(runs: list[Path]) -> None:
    a, b = (_read(path) for path in runs)
    for key in KEYS:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.mark.slow
def test_dataset_cards_are_written(runs: list[Path]) -> None:
    for png in (runs[0].parent / "card_a.png", runs[1].with_suffix(".png")):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p.name for p in runs[0].parent.iterdir() if p.name.startswith(".")]  # no temp files left


@pytest.mark.slow
def test_snapshots_are_saved_as_data_and_reload(runs: list[Path]) -> None:
    from data_conversion.behavior_policies import load_snapshots

    directory = runs[0].parent / "snapshots"
    saved = sorted(p.name for p in directory.iterdir())
    assert saved == ["penalty0-200", "penalty0-400", "target5-200", "target5-400"]
    assert not list(directory.glob("*/*.pkl"))  # weights and JSON only: loading them runs no code
    meta = json.loads((directory / "target5-400" / "snapshot.json").read_text())
    assert meta["target_cost"] == 5 and meta["env_steps"] == 400 and meta["penalty"] > 0
    snapshots = load_snapshots(directory)
    assert [(s.label, s.env_steps) for s in snapshots] == [("λ = 0", 200), ("λ = 0", 400), ("cost → 5", 200),
                                                           ("cost → 5", 400)]
    assert snapshots[3].penalty == meta["penalty"]
    action = GaussianPolicy(snapshots[3], TASK).act(np.zeros((1, TASK.obs_dim)), [np.random.default_rng(0)], [0.0])
    assert action.shape == (1, TASK.act_dim) and np.isfinite(action).all()


@pytest.mark.slow
def test_a_snapshot_saves_under_a_relative_directory(
    runs: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from data_conversion.behavior_policies import load_snapshots, save_snapshot

    module = load_snapshots(runs[0].parent / "snapshots")[1].module
    monkeypatch.chdir(tmp_path)
    saved = save_snapshot(Snapshot(0.0, 400, module), Path("relative"))
    assert saved == tmp_path / "relative" / "penalty0-400" and (saved / "snapshot.json").is_file()
    assert [s.env_steps for s in load_snapshots(Path("relative"))] == [400]


class _Touch:
    """Unpickling it creates ``path``: a pickle that runs code."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[Path]]:
        return Path.touch, (self.path,)


@pytest.mark.slow
def test_a_pickled_snapshot_is_refused_unread_and_a_trusted_one_converts(runs: list[Path], tmp_path: Path) -> None:
    """An earlier collector's snapshots are RLlib pickles: `load_snapshots` names the directory and never unpickles
    one; `convert_pickled_snapshots` rewrites a trusted one as data, acting as before."""
    import pickle

    import torch

    from data_conversion.behavior_policies import convert_pickled_snapshots, load_snapshots

    meta = '{"penalty": 0.0, "target_cost": null, "env_steps": 400}'
    poisoned, marker = tmp_path / "poisoned" / "penalty0-400", tmp_path / "ran"
    poisoned.mkdir(parents=True)
    for name in ("class_and_ctor_args.pkl", "module_state.pkl"):
        (poisoned / name).write_bytes(pickle.dumps(_Touch(marker)))
    (poisoned / "snapshot.json").write_text(meta)
    with pytest.raises(ValueError, match=f"{poisoned}: no spec.json: a snapshot in RLlib's pickled format"):
        load_snapshots(poisoned.parent)
    assert not marker.exists()

    module = load_snapshots(runs[0].parent / "snapshots")[1].module
    old = tmp_path / "old"
    module.save_to_path(old / "penalty0-400")  # RLlib's own format, as collectors before this one wrote it
    (old / "penalty0-400" / "snapshot.json").write_text(meta)
    assert convert_pickled_snapshots(old) == 1 and convert_pickled_snapshots(old) == 0
    assert not list(old.glob("*/*.pkl"))
    obs = {"obs": torch.as_tensor(np.random.default_rng(1).standard_normal((4, TASK.obs_dim)), dtype=torch.float32)}
    again = load_snapshots(old)[0].module.forward_inference(obs)["action_dist_inputs"]
    assert torch.equal(again, module.forward_inference(obs)["action_dist_inputs"])


@pytest.mark.slow
def test_rolling_the_saved_snapshots_out_again_reproduces_the_file(runs: list[Path], tmp_path: Path) -> None:
    again = tmp_path / "again.hdf5"
    rollout_flags = ["--task", "BallCircle", "--episodes-per-snapshot", "3", "--seed", "7"]
    assert main([*rollout_flags, "--from-snapshots", str(runs[0].parent / "snapshots"), "--out", str(again)]) == 0
    a, b = _read(runs[0]), _read(again)
    for key in KEYS:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_a_directory_without_snapshots_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "stray").mkdir()
    out = tmp_path / "never.hdf5"
    assert main(["--from-snapshots", str(tmp_path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path}: holds no snapshot" in err and "--snapshot-dir" in err
    assert not out.exists()


@pytest.mark.slow
def test_dsrl_loader_accepts_file(runs: list[Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # dsrl's package import fails on its Safety-Gymnasium/MetaDrive envs under gymnasium 1.x and says so
    # unless told to be quiet; its Bullet envs, registered first, work.
    monkeypatch.setenv("DSRL_SUPPRESS_IMPORT_ERROR", "1")
    monkeypatch.setenv("DSRL_DATASET_DIR", str(tmp_path / "dsrl"))
    importlib.import_module("dsrl")
    # Bullet-Safety-Gym redirects the file descriptors behind sys.stdout/sys.stderr while it builds a
    # simulator, which fails on pytest's captured streams; make_env handles that, dsrl does not.
    with contextlib.redirect_stdout(sys.__stdout__), contextlib.redirect_stderr(sys.__stderr__):
        env = gym.make(TASK.id)
    data = env.unwrapped.get_dataset(h5path=str(runs[0]))
    ours = _read(runs[0])
    for key in KEYS:
        np.testing.assert_array_equal(data[key], ours[key], err_msg=key)


@pytest.mark.slow
def test_refuses_to_overwrite(runs: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    before = runs[0].read_bytes()
    assert main([*TINY, "--out", str(runs[0]), "--plot", str(runs[0].parent / "card_a.png")]) == 1
    assert "--force" in capsys.readouterr().err
    assert runs[0].read_bytes() == before


def test_grid_filter_evens_out_density_within_the_budget() -> None:
    rng = np.random.default_rng(0)
    costs = np.r_[np.zeros(50), rng.uniform(0, 100, 200), 100.0]
    rewards = np.r_[np.full(50, 10.0), rng.uniform(0, 500, 200), 500.0]
    kept = grid_filter(costs, rewards, (10, 10), 120, np.random.default_rng(1))
    assert (np.diff(kept) > 0).all() and len(kept) <= 120
    cells = np.minimum((costs / 10).astype(int), 9) * 10 + np.minimum((rewards / 50).astype(int), 9)
    ids, counts = np.unique(cells, return_counts=True)
    cap = bin_cap(counts, 120)
    assert np.minimum(counts, cap).sum() <= 120 < np.minimum(counts, cap + 1).sum()  # the largest cap that fits
    kept_counts = {c: int((cells[kept] == c).sum()) for c in ids}
    assert all(kept_counts[c] == min(n, cap) for c, n in zip(ids, counts, strict=True))  # small cells kept whole
    assert np.isin(kept, np.arange(50)).sum() <= cap  # the 50 identical episodes collapse to the cap
    np.testing.assert_array_equal(kept, grid_filter(costs, rewards, (10, 10), 120, np.random.default_rng(1)))


def test_bin_cap() -> None:
    assert bin_cap(np.array([5, 1, 3]), 9) == 5 and bin_cap(np.array([5, 1, 3]), 8) == 4
    assert bin_cap(np.array([5, 1, 3]), 2) == 1  # never below one per cell


def _weights(state: dict) -> list[np.ndarray]:
    """An RLModule state's arrays in key order, the nested module ids flattened."""
    leaves = []
    for key in sorted(state):
        value = state[key]
        leaves += _weights(value) if isinstance(value, dict) else [np.asarray(value)]
    return leaves


@pytest.mark.slow
def test_warm_start_begins_from_the_given_weights(ray_session: object) -> None:
    """With PPO frozen (lr 0), a warm-started run keeps its source's trained weights (which no fresh network has) in
    its learner, critic included, and in the policy it rolls out with."""
    from data_conversion.behavior_policies import train_snapshots

    source = train_snapshots(TASK, 0.0, 16, 1, seed=3)
    frozen = {"lr": 0.0, "reward_scale": 0.5}
    warm = train_snapshots(TASK, 0.0, 16, 1, seed=4, target_cost=5, ppo=frozen, warm_start=source.final_weights)
    learner = [_weights(run.final_weights) for run in (warm, source)]
    rolled_out = [_weights(run.snapshots[-1].module.get_state()) for run in (warm, source)]
    assert len(learner[0]) > len(rolled_out[0]) > 0  # the learner's module has the critic, the rollout's does not
    for warm_weights, source_weights in (learner, rolled_out):
        for a, b in zip(warm_weights, source_weights, strict=True):
            np.testing.assert_array_equal(a, b)


def test_warm_start_trains_the_unpenalised_run_first() -> None:
    from data_conversion.collect import warm_start_order

    assert warm_start_order([1.0, 0.0, 2.0], 5) == [1, 0, 2, 3, 4]
    with pytest.raises(ValueError, match="--penalties must include 0"):
        warm_start_order([1.0, 2.0], 3)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--penalties", "1", "--warm-start"], "--penalties must include 0"),
        (["--ppo-config", "gama=0.9"], "'gama=0.9': expected KEY=VALUE with KEY one of lr, gamma"),
        (["--ppo-config", "lr=fast"], "'lr=fast': could not convert"),
        (["--ppo-config", "use_kl_loss=yes"], "expected true or false"),
        (["--gamma", "0.99", "--ppo-config", "gamma=0.9"], "--gamma and --ppo-config gamma=...: give one"),
        (["--from-snapshots", "s", "--penalties", "1", "--warm-start"],
         "--from-snapshots trains nothing, so --penalties, --warm-start would be ignored: drop them"),
    ],
)
def test_bad_ppo_flags_are_refused(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--out", "never.hdf5", *argv])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not Path("never.hdf5").exists()


def test_ppo_settings_are_parsed_by_type() -> None:
    from data_conversion.ppo_settings import parse_ppo_settings

    settings = parse_ppo_settings(["gamma=0.9999", "minibatch_size=128", "use_kl_loss=false", "reward_scale=0.01"])
    assert settings == {"gamma": 0.9999, "minibatch_size": 128, "use_kl_loss": False, "reward_scale": 0.01}
    assert isinstance(settings["minibatch_size"], int)
