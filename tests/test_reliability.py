"""Reliability without Ray: bad deployment inputs are refused with one clear error, integrity checks cannot be
switched off by deleting a file, and bad flags, YAML values and output locations fail before any work, naming the
flag, key or file."""

from __future__ import annotations

import json
import math
import os
import pickle
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from test_caps_module import OBS, make_module

from data_conversion.dsrl_to_parquet import main as convert_main
from rllib_caps.algorithms.caps.policy import CAPSPolicy
from rllib_caps.algorithms.cdt.policy import CDTPolicy
from rllib_caps.algorithms.registry import build_config
from rllib_caps.evaluate import main as evaluate_main
from rllib_caps.report import write_report
from rllib_caps.report.__main__ import main as report_main
from rllib_caps.report.records import load_trials
from rllib_caps.sweeps.options import SweepError, resolve_options
from rllib_caps.sweeps.runner import resumable
from rllib_caps.sweeps.state_backup import BACKUP_FILE, KEPT_CHECKPOINTS, back_up_state, repair_state
from rllib_caps.train import main as train_main
from rllib_caps.tune import main as tune_main
from rllib_caps.tune import parse_args as parse_tune_args
from rllib_caps.utils.atomic import OutputNotWritableError
from rllib_caps.utils.checks import check_number, check_seed, check_writable

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "datasets" / "BallCircle"
REPORT_FIXTURE = ROOT / "tests" / "fixtures" / "report_results" / "experiment"


# ------------------------------------------------------------------------------------------------ deployment

def make_caps() -> CAPSPolicy:
    return CAPSPolicy(make_module(num_heads=3))


def make_cdt() -> CDTPolicy:
    config = build_config("cdt", "BallCircle", str(BUNDLED), eval_episodes=0, seed=1, embedding_dim=16, num_layers=1,
                          attention_heads=1, seq_len=4)
    config.validate()  # sets the task's spaces
    return CDTPolicy(config.get_rl_module_spec().build())


POLICIES = {"caps": (make_caps, OBS), "cdt": (make_cdt, 8)}
BAD_THRESHOLDS = [("20", TypeError, "must be a number"), (None, TypeError, "must be a number"),
                  (True, TypeError, "must be a number"),
                  (-1.0, ValueError, "must be >= 0"), (math.nan, ValueError, "must be >= 0")]
BAD_COSTS = [(-0.5, ValueError, "must be >= 0"), (math.nan, ValueError, "must be >= 0"),
             (math.inf, ValueError, "must be finite"),
             ("1", TypeError, "must be a number"), ([0.0, -1.0], ValueError, "must be >= 0"),
             ([0.0, "a"], TypeError, "must be a number"), (np.zeros(3), ValueError, "has shape")]


@pytest.mark.parametrize("algo", POLICIES)
def test_bad_thresholds_are_refused_naming_the_argument(algo: str) -> None:
    policy = POLICIES[algo][0]()
    for threshold, error, message in BAD_THRESHOLDS:
        with pytest.raises(error, match=f"threshold \\(the cost limit κ\\) {message}"):
            policy.reset(threshold)
    policy.reset(np.float32(20))  # numpy numbers are numbers
    policy.reset(math.inf)  # no limit


@pytest.mark.parametrize("algo", POLICIES)
def test_bad_costs_are_refused_single_and_batched(algo: str) -> None:
    make, obs_dim = POLICIES[algo]
    policy = make()
    policy.reset(20.0)
    policy.act(np.zeros(obs_dim, np.float32))
    for cost, error, message in BAD_COSTS[:4]:
        with pytest.raises(error, match=f"cost {message}"):
            policy.act(np.zeros(obs_dim, np.float32), cost)
    policy.reset(20.0, batch_size=2)
    for cost, error, message in BAD_COSTS:
        with pytest.raises(error, match=f"cost {message}"):
            policy.act(np.zeros((2, obs_dim), np.float32), cost)


@pytest.mark.parametrize("algo", POLICIES)
def test_batched_use_equals_single_env_use(algo: str) -> None:
    """Two envs acted on together give the actions two one-env policies give, with valid costs of every form."""
    make, obs_dim = POLICIES[algo]
    batched = make()
    singles = [type(batched)(batched.module) for _ in range(2)]
    rng = np.random.default_rng(0)
    batched.reset(5, batch_size=2)
    for single in singles:
        single.reset(5)
    cost = np.zeros(2)
    for _ in range(6):
        obs = rng.normal(size=(2, obs_dim)).astype(np.float32)
        actions = batched.act(obs, cost)
        for i, single in enumerate(singles):
            np.testing.assert_allclose(single.act(obs[i], cost[i]), actions[i], rtol=1e-5, atol=1e-5)
        cost = rng.integers(0, 2, size=2)  # integer costs, as some envs report


# ------------------------------------------------------------------------------------------------ checks before work

def test_one_seed_range_and_number_check_everywhere() -> None:
    assert check_seed(0) == 0 and check_seed(2**32 - 1) == 2**32 - 1 and check_seed(np.int64(7)) == 7
    for bad in (-1, 2**32, 1.5, "3", True):
        with pytest.raises(ValueError, match=r"must be an integer >= 0 and < 4294967296"):
            check_seed(bad)
    assert check_number(0.5, minimum=0) == 0.5
    for bad in (-2, math.nan, "two hundred", None):
        with pytest.raises(ValueError, match="must be a number >= 0"):
            check_number(bad, minimum=0)


@pytest.mark.parametrize(("main", "argv", "message"), [
    (tune_main, ["--num-gpus", "-2"], "argument --num-gpus: must be a number >= 0, got -2.0"),
    (tune_main, ["--seeds", "0", "-1"], "argument --seeds: must be an integer >= 0"),
    (tune_main, ["--steps", "two"], "argument --steps: invalid int value: 'two'"),
    (train_main, ["--task", "BallCircle", "--data", "d", "--out", "o", "--seed", str(2**32)], "argument --seed"),
    (train_main, ["--task", "BallCircle", "--data", "d", "--out", "o", "--num-gpus", "-1"], "argument --num-gpus"),
    (evaluate_main, ["--checkpoint", "c", "--seed", "-5"], "argument --seed: must be an integer >= 0"),
])
def test_bad_flags_are_refused_by_argparse_naming_the_flag(main, argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err.splitlines()[-1]


def test_sweep_errors_name_the_flag_or_the_file_and_key(tmp_path: Path) -> None:
    config = tmp_path / "sweep.yaml"
    config.write_text("seeds: [1, 2]\n")
    with pytest.raises(SweepError, match=r"^--seeds \[0, 0\] repeats a value") as err:
        resolve_options(parse_tune_args(["--config", str(config), "--seeds", "0", "0"]))
    assert str(config) not in str(err.value)
    for text, message in (('steps: "two hundred"', "steps must be an integer >= 1, got 'two hundred'"),
                          ("training: {steps: two hundred}", "training.steps must be an integer >= 1"),
                          ("num_gpus: -2", "num_gpus must be a number >= 0, got -2"),
                          ("seeds: [0, -1]", "seeds: each seed must be an integer >= 0"),
                          ("training: [1]", "training must be a mapping")):
        config.write_text(text + "\n")
        with pytest.raises(SweepError, match=re.escape(f"--config {config}: {message}")):
            resolve_options(parse_tune_args(["--config", str(config)]))


def test_unwritable_outputs_are_refused_before_any_work(tmp_path: Path, capsys) -> None:
    """A regular file in the way (read-only even for root): evaluate refuses --out before loading the checkpoint,
    report --out before reading trials' checkpoints, tune --storage before Ray starts; one line each, exit 2."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(OutputNotWritableError, match=f"--out {blocker / 'x' / 'y'}: cannot write there"):
        check_writable(blocker / "x" / "y", "--out")
    check_writable(tmp_path / "new" / "dir", "--out")
    assert not (tmp_path / "new").exists()
    cases = [(evaluate_main, ["--checkpoint", str(tmp_path / "none"), "--out", str(blocker / "r.json")], "--out"),
             (report_main, [str(REPORT_FIXTURE), "--out", str(blocker / "report")], "--out"),
             (tune_main, ["--storage", str(blocker / "results"), "--name", "x"], "--storage")]
    for main, argv, flag in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: {flag} ") and "cannot write there" in err and len(err.splitlines()) == 1


def test_a_corrupt_result_json_is_named_skipped_and_reported(tmp_path: Path, caplog) -> None:
    experiment = tmp_path / "experiment"
    shutil.copytree(REPORT_FIXTURE, experiment)
    records_before, unfinished_before = load_trials(experiment)
    broken = records_before[0].trial_dir / "result.json"
    broken.write_text(broken.read_text()[:-20])
    records, unfinished = load_trials(experiment)
    assert len(records) < len(records_before) and unfinished == sorted([*unfinished_before, broken.parent])
    assert f"{broken}: line" in caplog.text and "not valid JSON" in caplog.text and "skipped" in caplog.text
    report = write_report(experiment)
    assert broken.parent.name in report.markdown and "unreadable" in report.markdown


def test_an_h5_path_naming_a_directory_says_so(tmp_path: Path, capsys) -> None:
    (tmp_path / "h5").mkdir()
    assert convert_main(["--task", "BallCircle", "--h5", str(tmp_path / "h5"), "--out", str(tmp_path / "out")]) == 2
    assert f"{tmp_path / 'h5'}: is a directory, not an HDF5 file" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ Tune's state

def test_tunes_state_is_kept_while_complete_and_put_back_when_truncated(tmp_path: Path) -> None:
    experiment = tmp_path / "sweep"
    experiment.mkdir()
    state = experiment / "experiment_state-2026-11-28_00-36-31.json"
    search = experiment / "basic-variant-state-2026-11-28_00-36-31.json"
    state.write_text(json.dumps({"trial_data": [1]}))
    search.write_bytes(pickle.dumps({"generated": 1}))
    assert back_up_state(experiment) is not None
    state.write_text(json.dumps({"trial_data": [1, 2]}))
    search.write_bytes(pickle.dumps({"generated": 2})[:-3])  # truncated: the pair is not kept
    assert back_up_state(experiment) is not None
    state.write_text('{"trial_data": [1, 2, 3')  # truncated, as a full disk leaves it
    assert repair_state(experiment) == [search, state]
    assert json.loads(state.read_text()) == {"trial_data": [1]} and pickle.loads(search.read_bytes()) == {
        "generated": 1}  # both from the same moment
    assert repair_state(experiment) == []  # nothing damaged: nothing to do


def test_the_checkpoints_a_kept_state_names_are_put_back_after_tune_rotated_them_out(tmp_path: Path) -> None:
    """The copy of Tune's state keeps hard links to the checkpoints saved by then; ``repair_state`` puts back
    those Tune deleted since. Links to checkpoints already gone at one copy are dropped at the next."""
    experiment = tmp_path / "sweep"
    trial = experiment / "trial_00000"
    state = experiment / "experiment_state-2026-11-28_00-36-31.json"

    def save(name: str) -> Path:
        checkpoint = trial / name
        (checkpoint / "learner_group").mkdir(parents=True)
        (checkpoint / "learner_group" / "weights.pt").write_bytes(name.encode() * 100)
        (checkpoint / "manifest.json").write_text("{}")
        return checkpoint

    first = save("checkpoint_000000")
    state.parent.mkdir(exist_ok=True)
    state.write_text(json.dumps({"trial_data": ["checkpoint_000000"]}))
    gone = back_up_state(experiment)
    assert gone == frozenset()
    second, third = save("checkpoint_000001"), save("checkpoint_000002")
    shutil.rmtree(first)  # Tune rotates it out (num_to_keep=2) ...
    state.write_text('{"trial_data": ["checkpoint_000001", "checkpoint_0000')  # ... and the disk is full
    assert back_up_state(experiment, gone) == gone  # a truncated state is not kept
    assert repair_state(experiment) == [state]
    assert (first / "learner_group" / "weights.pt").read_bytes() == b"checkpoint_000000" * 100
    assert os.stat(first / "manifest.json").st_nlink == 2  # a link, not a copy

    shutil.rmtree(first)
    state.write_text(json.dumps({"trial_data": ["checkpoint_000001", "checkpoint_000002"]}))
    gone = back_up_state(experiment, gone)  # the links of this copy: 1 and 2; 0 was deleted just now ...
    assert gone == {Path("trial_00000/checkpoint_000000")}
    state.write_text(json.dumps({"trial_data": ["checkpoint_000002"]}))
    shutil.rmtree(second)
    back_up_state(experiment, gone)  # ... so the next copy drops it, and keeps 1, deleted since the last copy
    kept = experiment / KEPT_CHECKPOINTS / "trial_00000"
    assert sorted(path.name for path in kept.iterdir()) == ["checkpoint_000001", "checkpoint_000002"]
    assert third.is_dir()


def test_a_truncated_state_without_a_copy_is_named() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        experiment = Path(tmp)
        (experiment / "experiment_state-2026-11-28_00-36-31.json").write_text('{"trial_data": [')
        with pytest.raises(SweepError, match="experiment_state-2026-11-28_00-36-31.json is truncated or corrupt"):
            repair_state(experiment)


def test_a_sweep_killed_while_tune_writes_its_first_state_starts_afresh_on_resume(tmp_path: Path, caplog) -> None:
    """A driver killed while Tune wrote its first ``tuner.pkl`` leaves it truncated with no copy (the copies start
    with the trials). With no finished trial there is nothing to keep: ``--resume`` deletes it and starts the sweep
    there afresh. Where trials finished, their state is never deleted: the damaged file is named instead."""
    experiment = tmp_path / "sweep"
    experiment.mkdir()
    (experiment / "tuner.pkl").write_bytes(pickle.dumps({"tuner": 1})[:-2])
    assert not resumable(experiment)
    assert not (experiment / "tuner.pkl").exists()
    assert "tuner.pkl: deleted" in caplog.text and "starting it there afresh" in caplog.text

    finished = tmp_path / "finished"
    shutil.copytree(REPORT_FIXTURE, finished)
    (finished / "tuner.pkl").write_bytes(b"\x80")
    with pytest.raises(SweepError, match="tuner.pkl is truncated or corrupt"):
        resumable(finished)
    assert (finished / "tuner.pkl").read_bytes() == b"\x80"


def test_a_resumed_sweep_killed_while_tune_rewrites_its_state_resumes_from_the_last_good_copy(tmp_path: Path) -> None:
    """A resumed run's Tune rewrites every ``*.json`` / ``*.pkl`` file of the experiment directory at each save, older
    sessions' included: a kill leaves any of them truncated. An older session's file, which no restore reads, is
    left as it is; a damaged newest session is replaced by the copy's, and the sessions after the copy are deleted.
    The copy itself lies where Tune's rewrites never reach it."""
    experiment = tmp_path / "sweep"
    experiment.mkdir()
    first, second, third = "2026-11-28_00-36-25", "2026-11-28_00-36-31", "2026-11-28_00-36-58"

    def save(session: str, trials: list[int]) -> None:
        (experiment / f"experiment_state-{session}.json").write_text(json.dumps({"trial_data": trials}))
        (experiment / f"basic-variant-state-{session}.json").write_bytes(pickle.dumps({"generated": len(trials)}))

    (experiment / "tuner.pkl").write_bytes(pickle.dumps("tuner"))
    save(first, [])
    save(second, [1])
    back_up_state(experiment)
    assert not (experiment / BACKUP_FILE).parent.suffix and (experiment / BACKUP_FILE).parent.is_dir()
    save(third, [1, 2])
    (experiment / f"basic-variant-state-{first}.json").write_bytes(b"\x80\x04\x95")  # an older session: never read
    assert repair_state(experiment) == []
    assert back_up_state(experiment) is not None  # an older session's damage does not stop the copies either
    assert set(pickle.loads((experiment / BACKUP_FILE).read_bytes())) == {
        "tuner.pkl", f"experiment_state-{third}.json", f"basic-variant-state-{third}.json"}

    fourth = "2026-11-28_00-37-30"
    save(fourth, [1, 2, 3])
    (experiment / f"basic-variant-state-{fourth}.json").write_bytes(b"\x80\x04\x95")
    (experiment / "tuner.pkl").write_bytes(b"\x80")
    assert repair_state(experiment) == sorted(experiment / name for name in (
        "tuner.pkl", f"experiment_state-{third}.json", f"basic-variant-state-{third}.json"))
    assert not list(experiment.glob(f"*{fourth}*"))  # Tune resumes from the third session, as the copy has it
    assert json.loads((experiment / f"experiment_state-{third}.json").read_text()) == {"trial_data": [1, 2]}
    assert pickle.loads((experiment / "tuner.pkl").read_bytes()) == "tuner"


def test_the_copy_is_taken_from_tunes_staging_directory_where_its_files_agree(tmp_path: Path) -> None:
    """Tune's upload thread rewrites the experiment directory's files one by one: there, a complete experiment state
    can sit beside the search state of the save before. The copy reads the staging directory's, which Tune writes in
    the thread that runs the callbacks."""
    experiment, staging = tmp_path / "sweep", tmp_path / "staging"
    experiment.mkdir()
    staging.mkdir()
    session = "2026-11-28_01-09-03"
    (experiment / f"experiment_state-{session}.json").write_text(json.dumps({"trial_data": [1]}))
    (experiment / f"basic-variant-state-{session}.json").write_bytes(pickle.dumps({"generated": 2}))  # uploaded
    (experiment / "tuner.pkl").write_bytes(pickle.dumps("tuner"))  # not staged: the experiment directory's
    (staging / f"experiment_state-{session}.json").write_text(json.dumps({"trial_data": [1, 2]}))
    (staging / f"basic-variant-state-{session}.json").write_bytes(pickle.dumps({"generated": 2}))
    assert back_up_state(experiment, staging_dir=staging) is not None
    kept = pickle.loads((experiment / BACKUP_FILE).read_bytes())
    assert json.loads(kept[f"experiment_state-{session}.json"]) == {"trial_data": [1, 2]}
    assert pickle.loads(kept["tuner.pkl"]) == "tuner"
