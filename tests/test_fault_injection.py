"""Faults on a real local Ray: a trial restored from its checkpoint continues exactly as if never stopped; a
SIGKILLed trial worker is retried from its last checkpoint and ends as a clean run does; a driver SIGKILLed
before any trial or after the last one is finished by ``--resume`` without rerunning a finished trial; a corrupt
checkpoint is named and left out of the report; Ctrl+C or SIGTERM stops ``tune`` the way Tune does (state saved,
``--resume`` printed) and leaves no Ray process behind."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml
from sim_datasets import make_data_root  # tests/sim_datasets.py
from test_interrupts import ray_of_its_own
from test_tune import TINY_TRAINING

from rllib_caps.algorithms.registry import build_config, get_algorithm
from rllib_caps.report import load_trials, write_report
from rllib_caps.sweeps.options import SweepOptions
from rllib_caps.sweeps.runner import run_sweep
from rllib_caps.sweeps.state_backup import BACKUP_FILE, KEPT_CHECKPOINTS
from rllib_caps.utils.signals import STOP_GRACE_S

# Trials of 10 iterations at one κ: a trial outlasts Tune's next state snapshot even where its worker is stopped late
# (seen: a 2-iteration trial finished first). Shared by every test here that makes a moment within a sweep.
TEN_ITERATIONS = {**TINY_TRAINING, "steps": 300, "thresholds": [20]}

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "datasets" / "BallCircle"
pytestmark = pytest.mark.slow


def env(**extra: str) -> dict[str, str]:
    """This process's environment (read now: it has the shared Ray's ``RAY_AUTH_MODE``, which a process joining
    that Ray needs), unbuffered."""
    return {**os.environ, "PYTHONUNBUFFERED": "1", **extra}


def module_weights(algorithm) -> dict[str, torch.Tensor]:
    return {name: value.clone() for name, value in algorithm.get_module().state_dict().items()}


@pytest.mark.parametrize(("algo", "settings"), [("caps", {"heads": 2}), ("cpq", {"cost_limit": 20.0})])
def test_a_restored_checkpoint_continues_exactly_as_if_never_stopped(ray_session, tmp_path: Path, algo: str,
                                                                    settings: dict) -> None:
    """Module, optimisers, Lagrange state and the minibatch generator are all in the checkpoint: one iteration,
    save, a new algorithm restored from it, two more iterations = three iterations uninterrupted, bit for bit."""
    def build():
        return build_config(algo, "BallCircle", BUNDLED, steps=60, hidden=[32, 32], batch_size=32,
                            updates_per_iteration=20, eval_episodes=0, seed=3, **settings).build_algo()

    straight = build()
    for _ in range(3):
        straight.train()
    expected = module_weights(straight)
    straight.stop()

    first = build()
    first.train()
    first.save_to_path(tmp_path / "ckpt")
    first.stop()
    resumed = build()
    resumed.restore_from_path(tmp_path / "ckpt")
    for _ in range(2):
        resumed.train()
    weights = module_weights(resumed)
    resumed.stop()
    assert weights.keys() == expected.keys()
    for name, value in expected.items():
        assert torch.equal(weights[name], value), name


def module_state(checkpoint: Path, algo: str = "caps") -> dict[str, torch.Tensor]:
    return get_algorithm(algo).policy_class.from_checkpoint(checkpoint).module.state_dict()


def trial_processes() -> list[int]:
    """PIDs of the Ray worker processes that run a sweep trial (``ray::SweepTrial...``) of a Ray this test process
    started (their raylet is its child), never another test process's."""
    lines = subprocess.run(["ps", "-eww", "-o", "pid=,ppid=,args="], capture_output=True,
                           text=True).stdout.splitlines()
    processes = [(int(pid), int(ppid), args) for pid, ppid, args in (line.split(None, 2) for line in lines)]
    parent = {pid: ppid for pid, ppid, _ in processes}
    return [pid for pid, ppid, args in processes
            if args.startswith("ray::SweepTrial") and parent.get(ppid) == os.getpid()]


@pytest.mark.timeout(600)
def test_a_killed_trial_worker_is_retried_from_its_checkpoint_and_ends_as_a_clean_run(ray_address: str,
                                                                                      tmp_path: Path) -> None:
    def options(name: str) -> SweepOptions:
        return SweepOptions(tasks="BallCircle", seeds=[0], data_root=str(BUNDLED.parent), storage=str(tmp_path),
                            name=name, training=TEN_ITERATIONS,
                            checkpoint_every=1, max_failures=1, cpus_per_trial=1.0)

    (clean,), _ = load_trials(run_sweep(options("clean")))
    killed: list[int] = []

    def kill_the_trial_after_its_first_checkpoint() -> None:
        deadline = time.monotonic() + 300
        while not list((tmp_path / "killed").glob("*/checkpoint_000000")) and time.monotonic() < deadline:
            time.sleep(0.05)
        killed.extend(trial_processes())
        for pid in killed:
            os.kill(pid, signal.SIGKILL)

    watcher = threading.Thread(target=kill_the_trial_after_its_first_checkpoint, daemon=True)
    watcher.start()
    (retried,), unfinished = load_trials(run_sweep(options("killed")))
    watcher.join()
    assert killed and unfinished == []
    assert "died" in (retried.trial_dir / "error.txt").read_text().lower()  # Tune recorded the failure, then retried
    iterations = [json.loads(line)["training_iteration"]
                  for line in (retried.trial_dir / "result.json").read_text().splitlines()]
    assert iterations[-1] == 10 and len(iterations) < 20  # continued from a checkpoint, not from the start
    assert retried.evaluation == clean.evaluation
    expected = module_state(clean.checkpoint)
    for name, value in module_state(retried.checkpoint).items():
        assert torch.equal(value, expected[name]), name


def terminated_trials(experiment: Path) -> set[str]:
    """Trial ids that Tune's saved experiment state records as finished."""
    finished = set()
    for state_file in experiment.glob("experiment_state-*.json"):
        try:
            state = json.loads(state_file.read_text())
        except (json.JSONDecodeError, OSError):  # being rewritten
            continue
        for trial_json, _ in state.get("trial_data", []):
            trial = json.loads(trial_json)
            if trial.get("status") == "TERMINATED":
                finished.add(trial["trial_id"])
    return finished


def finished_in_results(experiment: Path) -> int:
    """How many trials have written their last result (``done``) to their ``result.json``."""
    finished = 0
    for results in experiment.glob("*/result.json"):
        lines = results.read_text().splitlines()
        try:
            finished += bool(lines) and json.loads(lines[-1]).get("done") is True
        except json.JSONDecodeError:  # being written
            continue
    return finished


def continue_processes(stopped: list[int]) -> None:
    """SIGCONT to those of the ``stopped`` processes that are still alive."""
    for pid in stopped:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def kill_when(command: list[str], log: Path, reached: Callable[[], bool],
              stop_trials_when: Callable[[], bool] | None = None) -> None:
    """Runs ``command`` and SIGKILLs it (its process group) as soon as ``reached()``. With ``stop_trials_when``,
    the trial workers are stopped (SIGSTOP) as soon as that holds, so that no trial runs on while ``reached()`` is
    waited for, and so is every trial worker that Tune starts after that (a trial that Tune placed in a new worker
    rather than the reused one); they are continued after the kill."""
    stopped: list[int] = []
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env(),
                                   start_new_session=True)
        try:
            deadline = time.monotonic() + 400
            while not reached():
                assert process.poll() is None, f"the sweep ended before the kill: {log.read_text()[-3000:]}"
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                if stop_trials_when is not None and (stopped or stop_trials_when()):
                    new = [pid for pid in trial_processes() if pid not in stopped]
                    assert stopped or new, "no trial worker to stop"
                    for pid in new:
                        os.kill(pid, signal.SIGSTOP)
                    stopped += new
                time.sleep(0.1)
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            continue_processes(stopped)


@pytest.mark.timeout(900)
def test_a_driver_killed_at_any_point_is_finished_by_resume_without_rerunning_a_finished_trial(
        ray_address: str, tmp_path: Path) -> None:
    """The driver is SIGKILLed before any trial has finished, then (resumed) mid-sweep, then (resumed) after the
    last trial, before or while the report is written; each ``--resume`` keeps every finished trial's results
    untouched, and the last one reports both. A checkpoint corrupted afterwards is named and left out of
    the cost-limit table."""
    data_root = make_data_root(tmp_path / "data", ["BallRun"], episodes=4)
    config = tmp_path / "resume.yaml"
    config.write_text(yaml.safe_dump({"tasks": "BallRun", "seeds": [0, 1], "data_root": str(data_root),
                                      "storage": str(tmp_path), "max_concurrent": 1, "checkpoint_every": 1,
                                      "cost_limits": False,
                                      "training": TEN_ITERATIONS}))
    command = [sys.executable, "-m", "rllib_caps.tune", "--config", str(config), "--address", ray_address]
    experiment = tmp_path / "resume"
    kept: dict[str, bytes] = {}  # finished trial dir -> its result.json

    def finished_results_untouched() -> None:
        for name, result in kept.items():
            assert (experiment / name / "result.json").read_bytes() == result, name
        for path in experiment.iterdir():
            if path.is_dir() and path.name.rsplit("_", 1)[-1] in terminated_trials(experiment):
                kept.setdefault(path.name, (path / "result.json").read_bytes())

    # Mid-sweep, the moment is made: once a trial has written its last result, the trial workers are stopped, so no
    # other trial can finish before Tune's state records that one (the next trial runs in its reused worker).
    points = [("before any trial finished", lambda: experiment.is_dir(), None, 0, 0),
              ("mid-sweep", lambda: 1 <= len(terminated_trials(experiment)),
               lambda: finished_in_results(experiment) >= 1, 1, 1),
              ("after the last trial", lambda: len(terminated_trials(experiment)) == 2, None, 2, 2)]
    for i, (point, reached, stop_trials_when, fewest, most) in enumerate(points):
        kill_when(command + (["--resume"] if i else []), tmp_path / f"run{i}.log", reached, stop_trials_when)
        assert fewest <= len(terminated_trials(experiment)) <= most, point
        finished_results_untouched()
    resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True, cwd=ROOT, env=env(),
                             check=False, timeout=500)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    finished_results_untouched()
    records, unfinished = load_trials(experiment)
    assert unfinished == [] and sorted(r.seed for r in records) == [0, 1]
    assert "| BallRun |" in resumed.stdout

    damaged = records[1].checkpoint
    (damaged / "manifest.json").unlink()
    report = write_report(experiment, out=tmp_path / "report", cost_limits=True, episodes=1)
    assert f"{damaged}: no manifest.json" in report.markdown
    assert len(json.loads((report.out_dir / "cost_limits.json").read_text())) == 1  # the intact checkpoint


def kept_checkpoint_names(experiment: Path) -> set[str]:
    """The checkpoints (``checkpoint_NNNNNN``) that the copy of Tune's state (``BACKUP_FILE``) names (its
    checkpoint managers are pickles, stored in the state as hex; the paths appear in them)."""
    try:
        state = pickle.loads((experiment / BACKUP_FILE).read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError):
        return set()
    experiment_state = next(data for name, data in state.items() if name.startswith("experiment_state-"))
    return {name.decode() for hexed in re.findall(rb"[0-9a-f]{64,}", experiment_state)
            for name in re.findall(rb"checkpoint_\d{6}", bytes.fromhex(hexed[: len(hexed) // 2 * 2].decode()))}


def kept_state_names_a_deleted_checkpoint(experiment: Path) -> bool:
    """Whether the copy of Tune's state names a checkpoint that Tune has deleted since."""
    return any(not any(experiment.glob(f"[!.]*/{name}")) for name in kept_checkpoint_names(experiment))


def wait_for(reached: Callable[[], bool], process: subprocess.Popen, log: Path, seconds: float = 300) -> None:
    """Polls ``reached()`` until it holds; fails, with the log's end, if ``process`` ends first or after
    ``seconds``."""
    deadline = time.monotonic() + seconds
    while not reached():
        assert process.poll() is None, f"the sweep ended first: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.1)


@pytest.mark.timeout(600)
def test_a_trial_whose_kept_checkpoint_was_rotated_out_continues_from_it_after_a_full_disk(
        ray_address: str, tmp_path: Path) -> None:
    """What a full ``--storage`` leaves: Tune's state truncated, and the last good copy of it naming a checkpoint
    that Tune has since rotated out (``num_to_keep=2``). ``--resume`` puts that checkpoint back (the copy kept
    hard links to it) with the state, and the trial ends exactly as an uninterrupted run.

    The moment is made, not waited for: the trial's worker is stopped (SIGSTOP) once Tune has registered its first
    checkpoint, until the copy of Tune's state names its checkpoints, then continued; two checkpoints later Tune
    rotates the oldest of them out, and the driver is killed."""
    training = TEN_ITERATIONS
    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump({"tasks": "BallCircle", "seeds": [0], "data_root": str(BUNDLED.parent),
                                      "storage": str(tmp_path), "name": "rotated", "checkpoint_every": 1,
                                      "cost_limits": False,
                                      "training": training}))
    command = [sys.executable, "-m", "rllib_caps.tune", "--config", str(config), "--address", ray_address]
    experiment = tmp_path / "rotated"
    log = tmp_path / "killed.log"
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env(),
                                   start_new_session=True)
        try:
            # Tune registered the first checkpoint (StateBackup linked it as it did): stop the trial there
            wait_for(lambda: any((experiment / KEPT_CHECKPOINTS).glob("*/checkpoint_000000")), process, log)
            stopped = trial_processes()
            assert stopped, "no trial worker to stop"
            for pid in stopped:
                os.kill(pid, signal.SIGSTOP)
            wait_for(lambda: bool(kept_checkpoint_names(experiment)), process, log)
            for pid in stopped:
                os.kill(pid, signal.SIGCONT)
            wait_for(lambda: kept_state_names_a_deleted_checkpoint(experiment), process, log)
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    for state in experiment.glob("experiment_state-*.json"):
        state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])  # as a full disk truncates it
    resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True, cwd=ROOT, env=env(),
                             check=False, timeout=400)
    output = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, output[-3000:]
    put_back = re.search(r"put back the last good copy of Tune's state and (\d+) checkpoint", output)
    assert put_back and int(put_back[1]) >= 1, output[-3000:]
    (record,), unfinished = load_trials(experiment)
    assert unfinished == []
    (clean,), _ = load_trials(run_sweep(SweepOptions(tasks="BallCircle", seeds=[0], data_root=str(BUNDLED.parent),
                                                     storage=str(tmp_path), name="clean", training=training,
                                                     cpus_per_trial=1.0)))
    assert record.evaluation == clean.evaluation
    expected = module_state(clean.checkpoint)
    for name, value in module_state(record.checkpoint).items():
        assert torch.equal(value, expected[name]), name


def signal_every_ray_process(marker: str, signum: int) -> int:
    """Sends ``signum`` to every live process whose command line names ``marker`` (the Ray temp directory of one
    command), as Slurm's ``scancel`` and systemd signal every process of a job; returns how many."""
    lines = subprocess.run(["ps", "-eww", "-o", "pid=,args="], capture_output=True, text=True).stdout.splitlines()
    pids = [int(pid) for pid, args in (line.split(None, 1) for line in lines) if marker in args]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
    return len(pids)


def interrupt_at_first_checkpoint(config: Path, trials: Path, signum: int, status: int,
                                  every_process: bool = False) -> str:
    """Runs ``tune --config config`` on a Ray of its own until a trial matching the glob ``trials`` has written its
    first checkpoint, then sends ``signum`` to its process group (as Ctrl+C does with SIGINT, and Slurm, systemd or
    ``kill -TERM -PGID`` with SIGTERM) and checks that it exits with ``status`` in seconds (Ray's own processes,
    in a session of their own, do not get the signal: the driver stops Tune and shuts Ray down in order); returns
    its output. With ``every_process``, Ray's processes get the signal too, as Slurm and systemd send it: the
    command ends within ``STOP_GRACE_S`` of it all the same."""
    log = config.with_suffix(".log")
    with ray_of_its_own("raytun") as ray_tmp, log.open("w") as out:
        process = subprocess.Popen([sys.executable, "-m", "rllib_caps.tune", "--config", str(config)],
                                   stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env(RAY_TMPDIR=ray_tmp),
                                   start_new_session=True)
        deadline = time.monotonic() + 300
        while not list(Path(trials.anchor).glob(str((trials / "checkpoint_000001").relative_to(trials.anchor)))):
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        signalled = time.monotonic()
        assert not every_process or signal_every_ray_process(ray_tmp, signum) > 3, "Ray's processes not found"
        os.killpg(process.pid, signum)
        assert process.wait(timeout=180) == status, log.read_text()[-3000:]
        assert time.monotonic() - signalled < STOP_GRACE_S + 10, log.read_text()[-3000:]  # Ray's GCS wait: 60 s
    return log.read_text()


@pytest.mark.timeout(600)
def test_an_interrupted_sweep_stops_as_tune_does_and_resumes(ray_address: str, tmp_path: Path) -> None:
    """Ctrl+C (SIGINT to the terminal's process group) to a sweep, mid-trial: Tune saves the experiment, ``tune``
    says so with the ``--resume`` command, exits 130 in seconds and leaves none of the Ray processes it started; the
    printed command finishes the sweep. SIGTERM to the process group (as Slurm and systemd send it) takes the same
    path in ``tune`` (tests/test_interrupts.py checks that path for each signal); it is sent to a packed sweep,
    resumed from its members' checkpoints, in ``test_an_interrupted_packed_search_resumes_with_its_samples_...``."""
    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump({"tasks": "BallCircle", "seeds": [0, 1], "data_root": str(BUNDLED.parent),
                                      "storage": str(tmp_path), "name": "stopped", "max_concurrent": 1,
                                      "checkpoint_every": 1, "cost_limits": False, "pack": "off",
                                      "training": {**TINY_TRAINING, "steps": 120, "thresholds": [20]}}))
    text = interrupt_at_first_checkpoint(config, tmp_path / "stopped" / "*", signal.SIGINT, 130)
    said = "interrupted (SIGINT): Tune saved the experiment state"
    assert said in text and "--config " + str(config) + " --resume" in text, text[-3000:]
    assert len(load_trials(tmp_path / "stopped")[0]) < 2
    resumed = subprocess.run([sys.executable, "-m", "rllib_caps.tune", "--config", str(config), "--resume",
                              "--address", ray_address], capture_output=True, text=True, cwd=ROOT, env=env(),
                             check=False, timeout=400)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    records, unfinished = load_trials(tmp_path / "stopped")
    assert unfinished == [] and sorted(r.seed for r in records) == [0, 1]
    assert len(list((tmp_path / "stopped").glob("*/params.json"))) == 2


@pytest.mark.timeout(600)
def test_sigterm_to_every_process_of_a_sweep_ends_it_within_the_grace_and_it_resumes(ray_address: str,
                                                                                     tmp_path: Path) -> None:
    """SIGTERM to the driver and to every process of its Ray (Slurm's ``scancel``, systemd's stop): Ray's GCS
    is gone, so Tune cannot stop in order; ``tune`` still ends within ``STOP_GRACE_S`` with 143 and the ``--resume``
    line, and that command finishes the sweep from the saved state."""
    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump({"tasks": "BallCircle", "seeds": [0], "data_root": str(BUNDLED.parent),
                                      "storage": str(tmp_path), "name": "slurm", "checkpoint_every": 1,
                                      "cost_limits": False,
                                      "training": {**TINY_TRAINING, "steps": 120, "thresholds": [20]}}))
    text = interrupt_at_first_checkpoint(config, tmp_path / "slurm" / "*", signal.SIGTERM, 143, every_process=True)
    assert "interrupted (SIGTERM): Tune saved the experiment state" in text and "--resume" in text, text[-3000:]
    resumed = subprocess.run([sys.executable, "-m", "rllib_caps.tune", "--config", str(config), "--resume",
                              "--address", ray_address], capture_output=True, text=True, cwd=ROOT, env=env(),
                             check=False, timeout=400)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    (record,), unfinished = load_trials(tmp_path / "slurm")
    assert unfinished == [] and record.seed == 0


@pytest.mark.timeout(600)
def test_an_interrupted_packed_search_resumes_with_its_samples_and_their_scores(ray_address: str,
                                                                                tmp_path: Path) -> None:
    """``--search optuna --pack on --population-samples 2``, SIGTERM during the first population (2 samples × 2
    seeds): ``--resume`` finishes it from its members' checkpoints and runs the last sample, and no sample is run
    twice or lost (the packing searcher's state comes back with Tune's)."""
    config = tmp_path / "search.yaml"
    config.write_text(yaml.safe_dump({"tasks": "BallCircle", "seeds": [0, 1], "heads": [3],
                                      "data_root": str(BUNDLED.parent), "storage": str(tmp_path), "name": "search",
                                      "search": "optuna", "num_samples": 3, "pack": "on", "population_samples": 2,
                                      "max_concurrent": 1, "checkpoint_every": 1, "cost_limits": False,
                                      "search_space": {"seed": 0},
                                      "training": {**TINY_TRAINING, "steps": 240, "thresholds": [20]}}))
    interrupt_at_first_checkpoint(config, tmp_path / "search" / "*" / "*", signal.SIGTERM, 143)
    resumed = subprocess.run([sys.executable, "-m", "rllib_caps.tune", "--config", str(config), "--resume",
                              "--address", ray_address], capture_output=True, text=True, cwd=ROOT, env=env(),
                             check=False, timeout=500)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    records, unfinished = load_trials(tmp_path / "search")
    assert unfinished == [] and len(records) == 6
    samples: dict[float, list[int]] = {}
    for record in records:
        samples.setdefault(record.search["awr_beta"], []).append(record.seed)
    assert len(samples) == 3 and all(sorted(seeds) == [0, 1] for seeds in samples.values())
    assert sorted(len(json.loads(p.read_text())["members"])
                  for p in (tmp_path / "search").rglob("params.json")) == [2, 4]
    assert (tmp_path / "search" / "best_params.yaml").is_file()


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 64 MiB tmpfs mounted at ``tmp_path/small`` (this machine's tests run as root), unmounted afterwards."""
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    """Writes zeros into ``disk/filler`` until the device is full."""
    filler = disk / "filler"
    with filler.open("wb") as out:
        try:
            while True:
                out.write(bytes(2**20))
                out.flush()
        except OSError:
            pass
    return filler


@pytest.mark.timeout(600)
def test_a_full_storage_disk_is_a_clear_error_and_the_sweep_resumes_once_space_is_freed(
        ray_address: str, tmp_path: Path, small_disk: Path) -> None:
    """The storage fills up mid-sweep (after Tune saved its state at least once): ``tune`` ends with one error
    naming ``--storage`` and ``--resume``, and exit 2; once space is freed, ``--resume`` restores the experiment
    (putting back Tune's last good state where the full disk truncated it) and runs it to the end without a
    traceback (an uncaught one would exit 1); every trial finishes, including one whose recorded checkpoint Tune
    rotated out after that state was copied."""
    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump({"tasks": "BallCircle", "seeds": [0, 1], "data_root": str(BUNDLED.parent),
                                      "storage": str(small_disk), "name": "full", "max_concurrent": 1,
                                      "checkpoint_every": 1, "cost_limits": False, "max_failures": 1,
                                      "training": {**TINY_TRAINING, "steps": 120, "thresholds": [20]}}))
    command = [sys.executable, "-m", "rllib_caps.tune", "--config", str(config), "--address", ray_address]
    log = tmp_path / "full.log"
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env())
        deadline = time.monotonic() + 300
        while not (small_disk / "full" / BACKUP_FILE).is_file():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        filler = fill(small_disk)
        assert process.wait(timeout=300) == 2, log.read_text()[-3000:]
    assert (f"error: --storage {small_disk / 'full'}: only 0.0 MiB left on its device (full?); free some space, "
            "then run the same command with --resume") in log.read_text()
    filler.unlink()
    resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True, cwd=ROOT, env=env(),
                             check=False, timeout=400)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    records, unfinished = load_trials(small_disk / "full")
    assert unfinished == [] and sorted(r.seed for r in records) == [0, 1]
