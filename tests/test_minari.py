"""Minari in and out: the bundled BallCircle through Minari and back bit for bit, the refusals of bad input (no cost
key, spaces that are not the task's, a decreasing episode id, misplaced episode ends), and one run through the CLIs
from a dataset that Minari's DataCollector recorded on the real simulator to an ONNX policy. Every Minari dataset
lives under a temporary ``$MINARI_DATASETS_PATH``."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import minari
import numpy as np
import pyarrow.parquet as pq
import pytest
from minari.data_collector import EpisodeBuffer

from data_conversion.collect import main as collect_main
from data_conversion.minari_format import ROOT_VARIABLE, quiet_create
from data_conversion.minari_to_parquet import main as minari_to_parquet
from data_conversion.minari_write import episode_starts
from data_conversion.parquet_to_minari import main as parquet_to_minari
from rllib_caps.data.dataset import column_to_numpy
from rllib_caps.data.schema import (
    COLUMNS,
    DATA_DIR,
    EPS_ID,
    METADATA_FILE,
    NEXT_OBS,
    TERMINATEDS,
    T,
    arrow_table,
    write_parquet_parts,
)
from rllib_caps.envs.tasks import CUSTOM_SUITE, TaskSpec, get_task, with_dataset_ranges

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "datasets" / "BallCircle"
TASK = get_task("BallCircle")


@pytest.fixture
def minari_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "minari"
    monkeypatch.setenv(ROOT_VARIABLE, str(root))
    return root


def _columns(path: Path) -> dict[str, np.ndarray]:
    table = pq.read_table(path / DATA_DIR)
    return {name: column_to_numpy(table, name, path) for name in COLUMNS}


def _rows(episodes: int = 3, steps: int = 50, seed: int = 0) -> dict[str, np.ndarray]:
    """Rows in the Parquet schema, as a user would write them for BallCircle: one chain of observations per
    episode, each ended by a truncation."""
    rng = np.random.default_rng(seed)
    chains = [rng.normal(size=(steps + 1, TASK.obs_dim)).astype(np.float32) for _ in range(episodes)]
    last = np.r_[np.zeros(steps - 1, np.bool_), True]
    return {"obs": np.concatenate([c[:-1] for c in chains]), "new_obs": np.concatenate([c[1:] for c in chains]),
            "actions": rng.uniform(-1, 1, (episodes * steps, TASK.act_dim)).astype(np.float32),
            "rewards": rng.normal(size=episodes * steps).astype(np.float32),
            "costs": rng.integers(0, 2, episodes * steps).astype(np.float32),
            "terminateds": np.zeros(episodes * steps, np.bool_), "truncateds": np.tile(last, episodes),
            "eps_id": np.repeat(np.arange(episodes), steps), "t": np.tile(np.arange(steps), episodes)}


def _minari_dataset(dataset_id: str, *, obs_dim: int = TASK.obs_dim, high: float = 1.0,
                    infos: str | None = "cost", steps: int = 50,
                    flags: tuple[np.ndarray, np.ndarray] | None = None) -> minari.MinariDataset:
    """Three episodes of `steps` random steps, made with Minari's API (as another tool would), the step cost in
    ``infos[infos]`` (no infos at all for None), each ended by a truncation unless `flags` (terminations,
    truncations) says otherwise."""
    rng = np.random.default_rng(1)
    terminations, truncations = flags or (np.zeros(steps, np.bool_), np.r_[np.zeros(steps - 1, np.bool_), True])
    buffers = [EpisodeBuffer(observations=rng.normal(size=(steps + 1, obs_dim)).astype(np.float32),
                             actions=rng.uniform(-high, high, (steps, TASK.act_dim)).astype(np.float32),
                             rewards=rng.normal(size=steps), terminations=terminations, truncations=truncations,
                             infos={infos: [0.0, *rng.integers(0, 2, steps).tolist()]} if infos else None)
               for _ in range(3)]
    return quiet_create(minari.create_dataset_from_buffers, dataset_id, buffers,
                        observation_space=gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
                        action_space=gym.spaces.Box(-high, high, (TASK.act_dim,), np.float32))


def test_the_bundled_ballcircle_goes_through_minari_and_back_bit_for_bit(minari_root: Path, tmp_path: Path) -> None:
    dataset_id = "rllib-caps/BallCircle/dsrl-v0"
    assert parquet_to_minari(["--data", str(BUNDLED), "--dataset-id", dataset_id]) == 0
    bundled = _columns(BUNDLED)

    dataset = minari.load_dataset(dataset_id)  # what any Minari user does
    assert (dataset.total_episodes, dataset.total_steps) == (314, len(bundled["t"]))
    episode = dataset[3]
    rows = bundled[EPS_ID] == 3
    assert episode.infos["cost"][0] == 0.0  # the reset's entry, then the cost of each step
    np.testing.assert_array_equal(episode.infos["cost"][1:], bundled["costs"][rows])
    np.testing.assert_array_equal(episode.observations[1:], bundled[NEXT_OBS][rows])
    fields = dataset.storage.metadata["safe_rl"]
    assert fields["task"] == json.loads(json.dumps(TASK.to_dict())) and fields["cost_thresholds"] == [10, 20, 40]
    assert fields["reward_range"] == [TASK.min_reward, TASK.max_reward] and fields["range_source"] == "dsrl"
    assert fields["cost_range"] == [TASK.min_cost, TASK.max_cost]
    assert fields["converted_from"]["files"] == json.loads((BUNDLED / METADATA_FILE).read_text())["files"]
    # Minari's own normalisation is DSRL's normalised reward.
    assert minari.get_normalized_score(dataset, np.array([TASK.max_reward, TASK.min_reward])).tolist() == [1.0, 0.0]

    out = tmp_path / "BallCircle"
    assert minari_to_parquet(["--dataset", dataset_id, "--out", str(out)]) == 0  # the task from the metadata
    back = _columns(out)
    for name in COLUMNS:
        assert back[name].dtype == bundled[name].dtype and back[name].tobytes() == bundled[name].tobytes(), name
    metadata, original = (json.loads((path / METADATA_FILE).read_text()) for path in (out, BUNDLED))
    assert metadata["source"]["file"] == dataset_id and metadata["task_spec"]["name"] == "BallCircle"
    for key in ("task", "rows", "episodes", "episode_reward_return", "episode_cost_return", "conversion_warnings"):
        assert metadata[key] == original[key], key

    # The same id again is refused unless --force, which replaces only what this command wrote.
    assert parquet_to_minari(["--data", str(BUNDLED), "--dataset-id", dataset_id]) == 2
    assert parquet_to_minari(["--data", str(out), "--dataset-id", dataset_id, "--force"]) == 0


def test_a_minari_dataset_without_its_cost_key_is_refused_naming_the_key(
        minari_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _minari_dataset("other/penalty-v0", infos="penalty")
    _minari_dataset("other/noinfo-v0", infos=None)
    out = tmp_path / "out"
    for dataset_id, key in (("other/penalty-v0", "cost"), ("other/noinfo-v0", "cost"),
                            ("other/noinfo-v0", "penalty")):
        flags = [] if key == "cost" else ["--cost-key", key]
        assert minari_to_parquet(["--dataset", dataset_id, "--task", "BallCircle", "--out", str(out), *flags]) == 2
        err = capsys.readouterr().err
        assert f"no infos['{key}']" in err and "--cost-key" in err and err.count("\n") == 1, err
        assert not out.exists() and not [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")]
    # Named, the key is read; a dataset that declares no task needs --task.
    assert minari_to_parquet(["--dataset", "other/penalty-v0", "--out", str(out), "--cost-key", "penalty"]) == 2
    assert "declares no task; name one with --task" in capsys.readouterr().err
    assert minari_to_parquet(["--dataset", "other/penalty-v0", "--task", "BallCircle", "--out", str(out),
                              "--cost-key", "penalty"]) == 0
    metadata = json.loads((out / METADATA_FILE).read_text())
    assert metadata["source"]["cost_key"] == "penalty" and metadata["rows"] == 150 and metadata["episodes"] == 3


@pytest.mark.parametrize(("spaces", "message"), [
    ({"obs_dim": 7}, "observation_space Box(-inf, inf, (7,), float32) does not match task BallCircle's 8-dim"),
    ({"high": 2.0}, "action_space Box(-2.0, 2.0, (2,), float32) does not match task BallCircle's Box(-1.0, 1.0"),
])
def test_spaces_that_are_not_the_tasks_are_refused(minari_root: Path, tmp_path: Path, spaces: dict, message: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    _minari_dataset("other/spaces-v0", **spaces)
    assert minari_to_parquet(["--dataset", str(minari_root / "other" / "spaces-v0"), "--task", "BallCircle",
                              "--out", str(tmp_path / "out")]) == 2  # by path this time
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_minari_episode_ends_are_checked_as_dsrl_files(minari_root: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    steps = 50
    early = np.zeros(steps, np.bool_)
    early[10] = True
    _minari_dataset("other/early-v0", flags=(early, np.zeros(steps, np.bool_)))
    assert minari_to_parquet(["--dataset", "other/early-v0", "--task", "BallCircle", "--out", str(tmp_path / "a")]) \
        == 2
    assert "episode 0: ends at step 10 (terminations/truncations) before its last step 49" in capsys.readouterr().err
    # No flag at the end: kept as truncated, with a warning (an error under --strict); both flags: terminated.
    both = np.r_[np.zeros(steps - 1, np.bool_), True]
    _minari_dataset("other/open-v0", flags=(np.zeros(steps, np.bool_), np.zeros(steps, np.bool_)))
    _minari_dataset("other/both-v0", flags=(both, both))
    argv = ["--dataset", "other/open-v0", "--task", "BallCircle", "--out", str(tmp_path / "b")]
    assert minari_to_parquet([*argv, "--strict"]) == 2 and "refused under --strict" in capsys.readouterr().err
    assert minari_to_parquet(argv) == 0
    assert "warning: 3 episodes end with neither a termination nor a truncation" in capsys.readouterr().out
    assert minari_to_parquet(["--dataset", "other/both-v0", "--task", "BallCircle", "--out", str(tmp_path / "c")]) \
        == 0
    for name, terminated in (("b", 0), ("c", 3)):
        metadata = json.loads((tmp_path / name / METADATA_FILE).read_text())
        assert (metadata["terminated_episodes"], metadata["truncated_episodes"]) == (terminated, 3 - terminated)


def test_a_decreasing_episode_id_is_refused_and_hand_written_rows_convert(
        minari_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _rows()
    for name, columns in (("good", rows), ("bad", {**rows, EPS_ID: np.repeat([0, 2, 1], 50)})):
        write_parquet_parts([arrow_table(columns)], tmp_path / name / DATA_DIR, 1000)
    argv = ["--task", "BallCircle", "--no-verify"]  # no metadata.json: the user names the task
    assert parquet_to_minari(["--data", str(tmp_path / "bad"), "--dataset-id", "user/bad-v0", *argv]) == 2
    err = capsys.readouterr().err
    assert "column 'eps_id' decreases at row 100 (2 then 1)" in err and err.count("\n") == 1, err
    assert not (minari_root / "user" / "bad-v0").exists()
    assert parquet_to_minari(["--data", str(tmp_path / "bad"), "--dataset-id", "user/bad-v0"]) == 2
    assert "name the task with --task" in capsys.readouterr().err

    # Minari's Arrow storage this time (HDF5 elsewhere): the cost goes in as a list, which both storages read back.
    assert parquet_to_minari(["--data", str(tmp_path / "good"), "--dataset-id", "user/good-v0", *argv,
                              "--data-format", "arrow"]) == 0
    dataset = minari.load_dataset("user/good-v0")
    assert dataset.total_episodes == 3 and dataset.storage.metadata["data_format"] == "arrow"
    np.testing.assert_array_equal(dataset[2].infos["cost"][1:], rows["costs"][100:])
    assert minari_to_parquet(["--dataset", "user/good-v0", "--out", str(tmp_path / "back")]) == 0
    back = _columns(tmp_path / "back")
    assert all(back[name].tobytes() == rows[name].astype(back[name].dtype).tobytes() for name in COLUMNS)


def test_a_declared_task_travels_in_the_metadata_both_ways(minari_root: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A task that is not DSRL's, declared with ``TaskSpec(...)``, with other action bounds and no known ranges: its
    spec goes into the Minari metadata and comes back into metadata.json, so neither direction needs --task again."""
    from data_conversion.minari_write import export_minari

    task = TaskSpec(id="Declared-v0", name="Declared", suite=CUSTOM_SUITE, env_id="Declared-v0", obs_dim=TASK.obs_dim,
                    act_dim=TASK.act_dim, action_low=(-2.0, -0.5), action_high=(2.0, 1.5), max_episode_steps=50,
                    thresholds=(5.0,), max_reward=None, min_reward=None, max_cost=None, min_cost=None,
                    range_source=None)
    rows = _rows()
    write_parquet_parts([arrow_table(rows)], tmp_path / "rows" / DATA_DIR, 1000)
    summary = export_minari(tmp_path / "rows", "user/declared-v0", task=task, verify=False)
    assert summary.warnings and "do not map back to the same float32" in summary.warnings[0]  # -0.5..1.5 rounds
    metadata = minari.load_dataset("user/declared-v0").storage.metadata
    assert metadata["safe_rl"]["task"] == json.loads(json.dumps(task.to_dict()))
    assert metadata["safe_rl"]["reward_range"] is None and "ref_max_score" not in metadata  # nothing normalised
    assert minari_to_parquet(["--dataset", "user/declared-v0", "--out", str(tmp_path / "back")]) == 0
    converted = json.loads((tmp_path / "back" / METADATA_FILE).read_text())
    # Back in metadata.json, the spec gains the ranges DSRL would derive from these rows, and says so.
    derived = with_dataset_ranges(task, converted["episode_reward_return"], converted["episode_cost_return"])
    assert converted["task"] == "Declared" and derived.range_source == "dataset"
    assert TaskSpec.from_dict(converted["task_spec"]) == derived
    back = _columns(tmp_path / "back")
    for name in COLUMNS:
        if name != "actions":
            assert back[name].tobytes() == rows[name].astype(back[name].dtype).tobytes(), name
    np.testing.assert_allclose(back["actions"], rows["actions"], rtol=0, atol=2e-7)  # within a float32 rounding
    # Out again from the converted rows, with the task from their metadata.json: the actions, once rounded, stay.
    capsys.readouterr()
    assert parquet_to_minari(["--data", str(tmp_path / "back"), "--dataset-id", "user/declared-v1"]) == 0
    assert "warning" not in capsys.readouterr().out
    first, second = (minari.load_dataset(f"user/declared-v{v}") for v in (0, 1))
    assert second.storage.metadata["safe_rl"]["task"]["name"] == "Declared"
    assert all(a.actions.tobytes() == b.actions.tobytes() for a, b in zip(first, second, strict=True))


@pytest.mark.parametrize(("change", "message"), [
    (lambda c: c[T].__setitem__(7, 0), "column 't' is 0 at row 7, expected 7"),
    (lambda c: c[TERMINATEDS].__setitem__(20, True), "row 20 of episode 0 has 'terminateds' or 'truncateds' before"),
    (lambda c: c["truncateds"].__setitem__(99, False), "row 99 of episode 1 is its last and has neither"),
    (lambda c: c[NEXT_OBS].__setitem__((30, 0), -c[NEXT_OBS][30, 0]), "'new_obs' at row 30 is not 'obs' of row 31"),
])
def test_rows_that_are_not_one_minari_episode_sequence_are_refused_naming_the_row(change, message: str) -> None:
    rows = _rows()
    np.testing.assert_array_equal(episode_starts(rows, "x"), [0, 50, 100])
    change(rows)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        episode_starts(rows, "x")


def test_collect_says_which_output_each_format_writes(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--format", "minari"], ["--format", "minari", "--dataset-id", "a/b-v0", "--out", "x.hdf5"],
                 ["--dataset-id", "a/b-v0"]):
        with pytest.raises(SystemExit) as exit_info:
            collect_main(argv)
        assert exit_info.value.code == 2 and "takes no" in capsys.readouterr().err


@pytest.mark.slow
def test_a_minari_collection_trains_its_target_costs(ray_session: object, minari_root: Path) -> None:
    """--format minari trains what --format hdf5 does: the target costs' Lagrangian runs too."""
    dataset_id = "rllib-caps/BallCircle/lagrangian-v0"
    assert collect_main(["--task", "BallCircle", "--format", "minari", "--dataset-id", dataset_id, "--penalties", "0",
                         "--target-costs", "5", "--train-steps", "400", "--snapshots", "1",
                         "--episodes-per-snapshot", "1"]) == 0
    dataset = minari.load_dataset(dataset_id)
    assert dataset.total_episodes == 2 and "(λ = 0, cost → 5)" in dataset.storage.metadata["algorithm_name"]


@pytest.mark.slow
def test_a_dataset_collected_with_minari_trains_evaluates_and_exports(
        ray_session: object, minari_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Through the CLIs: Minari's DataCollector records the collector's episodes on the real BallCircle simulator,
    the converter reads them back, CAPS trains a few hundred steps, is evaluated at two κ and exported to ONNX.
    The collection and the conversion are docs/minari.md's block, as printed there."""
    from rllib_caps.evaluate import main as evaluate_main
    from rllib_caps.export import main as export_main
    from rllib_caps.onnx_runtime import ONNXCAPSPolicy
    from rllib_caps.train import main as train_main

    dataset_id = "rllib-caps/BallCircle/ppo-v0"
    assert collect_main(["--task", "BallCircle", "--format", "minari", "--dataset-id", dataset_id, "--penalties",
                         "0,5", "--train-steps", "400", "--snapshots", "1", "--episodes-per-snapshot", "2", "--plot",
                         str(tmp_path / "ppo-v0.png")]) == 0
    assert (tmp_path / "ppo-v0.png").read_bytes()[:4] == b"\x89PNG"
    dataset = minari.load_dataset(dataset_id)
    assert dataset.total_episodes == 4 and dataset.total_steps == 4 * TASK.max_episode_steps
    assert all(set(np.unique(episode.infos["cost"])) <= {0.0, 1.0} for episode in dataset.iterate_episodes())
    assert dataset.storage.metadata["safe_rl"]["task"]["name"] == "BallCircle"

    data, checkpoint = tmp_path / "BallCircle-ppo", tmp_path / "ckpt"
    assert minari_to_parquet(["--dataset", dataset_id, "--out", str(data)]) == 0
    assert train_main(["--task", "BallCircle", "--data", str(data), "--out", str(checkpoint), "--steps", "256",
                       "--updates-per-iteration", "128", "--hidden", "32", "32", "--batch-size", "64",
                       "--eval-episodes", "0"]) == 0
    capsys.readouterr()
    assert evaluate_main(["--checkpoint", str(checkpoint), "--thresholds", "10", "40", "--episodes", "2",
                          "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert sorted(results["thresholds"]) == ["10", "40"]
    assert all(np.isfinite(score["cost"]) for score in results["thresholds"].values())
    assert export_main(["--checkpoint", str(checkpoint), "--format", "onnx", "--out", str(tmp_path / "p.onnx")]) == 0
    policy = ONNXCAPSPolicy(tmp_path / "p.onnx")
    policy.reset(threshold=10.0)
    action = policy.act(_columns(data)["obs"][:1])
    assert action.shape == (1, TASK.act_dim) and (np.abs(action) <= 1.0).all()
