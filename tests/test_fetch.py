"""data_conversion.fetch against a local Hub stand-in (tests/hub_server.py), a directory and an HTTP mirror: real
huggingface_hub downloads, real DSRL-format files, real conversions as Ray tasks; no network."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hub_server import Fault, HubServer
from test_dsrl_to_parquet import episode_arrays
from test_interrupts import ray_of_its_own

from data_conversion.dsrl_format import write_dsrl_hdf5
from data_conversion.fetch import Outcome, conversion_memory, current_dataset, format_outcomes, prepare_datasets
from data_conversion.sources import DirSource, FetchError, HubSource, UrlSource, parse_source, parse_sums
from rllib_caps.envs.compat.dsrl import dataset_file_name, hub_url_prefix, load_infos
from rllib_caps.envs.tasks import get_task
from rllib_caps.report.records import load_trials
from rllib_caps.utils.checksum import file_sha256

TASKS = ("BallCircle", "CarRun", "DroneRun")  # obs/act 8/2, 7/2, 17/4
ROWS, EPISODES = 300, 6  # of episode_arrays


def dsrl_bytes(task: str, tmp: Path) -> bytes:
    spec = get_task(task)
    path = tmp / f"{task}.hdf5"
    write_dsrl_hdf5(path, episode_arrays(spec.obs_dim, spec.act_dim, np.array(spec.action_low),
                                         np.array(spec.action_high)))
    return path.read_bytes()


def random_arrays(task: str, rows: int, episode_length: int = 100) -> dict[str, np.ndarray]:
    """``rows`` rows of incompressible DSRL data for ``task``, a time-out every ``episode_length`` rows."""
    spec = get_task(task)
    rng = np.random.default_rng(2)
    timeouts = np.arange(1, rows + 1) % episode_length == 0
    return {"observations": rng.normal(size=(rows, spec.obs_dim)).astype(np.float32),
            "next_observations": rng.normal(size=(rows, spec.obs_dim)).astype(np.float32),
            "actions": rng.uniform(-1, 1, size=(rows, spec.act_dim)).astype(np.float32),
            "rewards": rng.normal(size=rows).astype(np.float32), "costs": rng.integers(0, 2, rows).astype(np.float32),
            "terminals": np.zeros(rows, bool), "timeouts": timeouts}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """DSRL name -> bytes of a small DSRL-format file per task."""
    tmp = tmp_path_factory.mktemp("dsrl")
    return {dataset_file_name(task): dsrl_bytes(task, tmp) for task in TASKS}


@pytest.fixture
def hub_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hub cache and short timeouts; returns HF_HOME."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "5")
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "5")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return tmp_path / "hf"


def by_task(outcomes: list[Outcome]) -> dict[str, Outcome]:
    return {o.task: o for o in outcomes}


def test_dsrl_urls_point_at_the_hub_with_dsrl_file_names(monkeypatch: pytest.MonkeyPatch) -> None:
    urls = load_infos().DATASET_URLS
    assert len(urls) == 38
    assert urls["BallCircle"] == hub_url_prefix() + "SafetyBallCircle-v0-80-886.hdf5"
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert hub_url_prefix() == "https://huggingface.co/datasets/YYY-45/DSRL/resolve/main/"
    monkeypatch.setenv("HF_ENDPOINT", "http://mirror.example/")
    assert hub_url_prefix() == "http://mirror.example/datasets/YYY-45/DSRL/resolve/main/"
    assert dataset_file_name("easysparse") == "SafeMetaDrive-easysparse-v0-85-1000.hdf5"


def test_parse_source_and_sums(tmp_path: Path) -> None:
    assert isinstance(parse_source("hf"), HubSource)
    assert isinstance(parse_source("https://mirror.example/dsrl"), UrlSource)
    assert parse_source(str(tmp_path)) == DirSource(tmp_path.resolve())
    with pytest.raises(FetchError, match="--source nowhere/at/all"):
        parse_source("nowhere/at/all")
    digest = "ab" * 32
    assert parse_sums(f"{digest}  a.hdf5\n{digest.upper()} *b.hdf5\nnot a line\n") == {"a.hdf5": digest,
                                                                                      "b.hdf5": digest}


def test_conversion_memory_grows_with_rows_and_width() -> None:
    ant = get_task("AntCircle")
    small, large = conversion_memory(300, 8, 2), conversion_memory(2_900_000, ant.obs_dim, ant.act_dim)
    assert small < large < 2 * 2**30  # a few AntCircle conversions fit a 24 GiB machine
    assert conversion_memory(2_900_000, 8, 2) < large


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_three_tasks_from_the_hub_in_parallel_then_nothing_to_do(tmp_path: Path, files: dict[str, bytes],
                                                                 hub_env: Path, ray_session,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    tasks = [get_task(t) for t in TASKS]
    with HubServer(files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        first = by_task(prepare_datasets(tasks, tmp_path / "data", HubSource(), progress=False))
        gets = sorted(name for method, name, _ in hub.requests if method == "GET" and name in files)
        hub.requests.clear()
        inodes = {t: (tmp_path / "data" / t).stat().st_ino for t in TASKS}
        second = by_task(prepare_datasets(tasks, tmp_path / "data", HubSource(), progress=False))
        second_methods = {method for method, name, _ in hub.requests if name in files}
    assert {t: o.status for t, o in first.items()} == dict.fromkeys(TASKS, "converted")
    assert gets == sorted(files)  # one download per file
    for task in TASKS:
        assert (first[task].rows, first[task].episodes, first[task].source) == (ROWS, EPISODES, "hf:YYY-45/DSRL")
        meta = json.loads((tmp_path / "data" / task / "metadata.json").read_text())
        name = dataset_file_name(task)
        assert meta["source"]["file"] == name and meta["source"]["rows"] == ROWS
        assert meta["source"]["sha256"] == file_sha256(next((hub_env / "hub").rglob(name)))
    assert list(hub_env.joinpath("hub").glob("datasets--YYY-45--DSRL/blobs/*"))  # through the Hub cache
    assert {t: o.status for t, o in second.items()} == dict.fromkeys(TASKS, "up to date")
    assert second_methods == {"HEAD"}  # only metadata: nothing downloaded
    assert {t: (tmp_path / "data" / t).stat().st_ino for t in TASKS} == inodes  # nothing rewritten
    table = format_outcomes(list(second.values())).splitlines()
    assert table[0].split() == ["task", "rows", "episodes", "source", "seconds", "status"] and len(table) == 4


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_interrupted_download_resumes_and_mismatched_files_are_refused(tmp_path: Path, files: dict[str, bytes],
                                                                     hub_env: Path, ray_session,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    ball, car, drone = (dataset_file_name(t) for t in TASKS)
    # huggingface_hub writes what it receives in 10 MiB blocks, so a resumable cut needs a larger file
    write_dsrl_hdf5(tmp_path / "big.hdf5", random_arrays("BallCircle", 180_000))
    files = {**files, ball: (tmp_path / "big.hdf5").read_bytes()}
    assert len(files[ball]) > 11 * 2**20
    cut = 11 * 2**20
    faults = {ball: Fault(cut_after=cut), car: Fault(corrupt=True), drone: Fault(advertised_size=len(files[drone]) + 7)}
    with HubServer(files, faults) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        out = by_task(prepare_datasets([get_task(t) for t in TASKS], tmp_path / "data", HubSource(), progress=False))
    ball_gets = [rng for method, name, rng in hub.requests if method == "GET" and name == ball]
    assert ball_gets == [None, f"bytes={10 * 2**20}-"]  # continues after the last block written before the cut
    assert out["BallCircle"].status == "converted" and out["BallCircle"].rows == 180_000
    assert current_dataset(tmp_path / "data" / "BallCircle", get_task("BallCircle"))["source"]["sha256"] == \
        file_sha256(next((hub_env / "hub").rglob(ball)))
    assert out["CarRun"].status == "failed" and "sha256" in out["CarRun"].message and car in out["CarRun"].message
    assert out["DroneRun"].status == "failed" and "size" in out["DroneRun"].message
    for task in ("CarRun", "DroneRun"):
        assert not (tmp_path / "data" / task).exists()  # nothing converted for a refused file
    blobs = hub_env / "hub" / "datasets--YYY-45--DSRL" / "blobs"
    assert not list((hub_env / "hub").rglob(car))  # the refused download left the cache: its link and its blob
    assert not (blobs / hashlib.sha256(files[car]).hexdigest()).exists() and (blobs / hashlib.sha256(files[ball])
                                                                               .hexdigest()).exists()


def _as_from_a_terminal() -> None:
    """A child's SIGINT as a shell gives it: delivered (not blocked) and not ignored, whatever the test process's
    threads and earlier tests left in the state a child inherits across exec."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
@pytest.mark.timeout(600)  # Ray's start-up in the fetch process takes minutes on a loaded 2-core machine
def test_ctrl_c_mid_download_keeps_the_finished_tasks_and_leaves_no_ray_process(
        tmp_path: Path, files: dict[str, bytes], hub_env: Path, ray_session) -> None:
    """Ctrl+C (SIGINT to the terminal's process group) while DroneRun's file is downloading: exit 130, one line
    saying what was kept, BallCircle and CarRun complete, nothing of DroneRun, no Ray process of the run left; the
    same command again gets DroneRun only."""
    downloading = threading.Event()
    out = tmp_path / "data"
    held = {dataset_file_name("DroneRun"): Fault(hold=downloading)}
    with ray_of_its_own("rayfet") as ray_tmp, HubServer(files, held) as hub:
        # DroneRun's download stays held until the interrupt: under load the other two tasks' conversions can take
        # longer than hub_env's 5 s download timeout, which would end the run before it could be interrupted.
        env = {**os.environ, "HF_ENDPOINT": hub.url, "RAY_TMPDIR": ray_tmp, "RAY_AUTH_MODE": "disabled",
               "HF_HUB_DOWNLOAD_TIMEOUT": "600"}
        inherited = f"the test process's SIGINT: {signal.getsignal(signal.SIGINT)}, blocked: " \
                    f"{signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])}"
        process = subprocess.Popen([sys.executable, "-m", "data_conversion.fetch", "--tasks", ",".join(TASKS),
                                    "--out", str(out)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, start_new_session=True, preexec_fn=_as_from_a_terminal)
        deadline = time.monotonic() + 400
        while not (all((out / t / "metadata.json").is_file() for t in ("BallCircle", "CarRun"))
                   and ("GET", dataset_file_name("DroneRun"), None) in hub.requests):
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.2)
        os.killpg(process.pid, signal.SIGINT)
        try:
            _, stderr = process.communicate(timeout=150)
        except subprocess.TimeoutExpired:
            process.kill()
            pytest.fail(f"no exit 150 s after SIGINT ({inherited}):\n{process.communicate()[1][-3000:]}")
        finally:
            downloading.set()
    assert process.returncode == 130, stderr[-3000:]
    assert f"interrupted (SIGINT): every task finished so far is complete in {out}" in stderr
    assert sorted(p.name for p in out.iterdir()) == ["BallCircle", "CarRun"]  # no DroneRun, no temporary directory
    with HubServer(files) as hub, pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_ENDPOINT", hub.url)
        again = by_task(prepare_datasets([get_task(t) for t in TASKS], out, HubSource(), progress=False))
    assert {t: o.status for t, o in again.items()} == {"BallCircle": "up to date", "CarRun": "up to date",
                                                       "DroneRun": "converted"}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_server_down_one_line_per_task_and_nonzero_exit(ray_address: str, tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(Path.cwd()), "HF_ENDPOINT": f"http://127.0.0.1:{port}",
           "HF_HOME": str(tmp_path / "hf"), "HF_HUB_ETAG_TIMEOUT": "3", "HF_HUB_DOWNLOAD_TIMEOUT": "3",
           "RAY_ADDRESS": ray_address}
    proc = subprocess.run([sys.executable, "-m", "data_conversion.fetch", "--tasks", "BallCircle,CarRun", "--out",
                           str(tmp_path / "data")], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 1, proc.stderr[-2000:]
    for task in ("BallCircle", "CarRun"):
        lines = [line for line in proc.stderr.splitlines() if line.startswith(f"error: {task}:")]
        assert len(lines) == 1, proc.stderr[-2000:]
        assert f"127.0.0.1:{port}" in lines[0] and "HF_ENDPOINT" in lines[0]
        assert any(line.split()[:1] == [task] and line.split()[-1] == "failed" for line in proc.stdout.splitlines())
    assert "2 of 2 tasks not ready: BallCircle, CarRun" in proc.stderr
    assert "\r" not in proc.stderr  # no progress bar where stderr is no terminal: no line it runs into
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").iterdir())


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_source_dir_and_mirror(tmp_path: Path, files: dict[str, bytes], ray_session,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    source_dir = tmp_path / "dsrl"
    source_dir.mkdir()
    for name, data in files.items():
        (source_dir / name).write_bytes(data)
    ball, car, _ = (dataset_file_name(t) for t in TASKS)
    (source_dir / "SHA256SUMS").write_text(f"{'0' * 64}  {car}\n")  # CarRun's listed hash is wrong
    tasks = [get_task(t) for t in (*TASKS, "AntRun")]  # no AntRun file
    out = by_task(prepare_datasets(tasks, tmp_path / "data", DirSource(source_dir), progress=False))
    assert [out[t].status for t in ("BallCircle", "DroneRun")] == ["converted", "converted"]
    assert out["CarRun"].status == "failed" and "sha256" in out["CarRun"].message
    assert (source_dir / car).is_file()  # a directory's files are never deleted
    assert out["AntRun"].status == "failed" and "no such file" in out["AntRun"].message
    # The same file from a plain HTTP mirror is the same dataset: nothing to do; a new one is downloaded.
    monkeypatch.setenv("RLLIB_CAPS_CACHE", str(tmp_path / "cache"))
    with HubServer({ball: files[ball], car: files[car]}) as mirror:
        source = parse_source(f"{mirror.url}/mirror")
        again = by_task(prepare_datasets([get_task("BallCircle"), get_task("CarRun")], tmp_path / "data", source,
                                         progress=False))
    assert again["BallCircle"].status == "up to date" and again["CarRun"].status == "converted"
    assert [m for m, name, _ in mirror.requests if m == "GET" and name == ball] == []


def test_tune_names_every_missing_dataset_before_ray_starts(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from rllib_caps.tune import main

    code = main(["--tasks", "BallCircle,CarRun,easysparse", "--data-root", str(tmp_path / "empty"), "--storage",
                 str(tmp_path / "results")])
    err = capsys.readouterr().err
    assert code == 2
    assert "no converted dataset for 3 task(s): BallCircle, CarRun, easysparse" in err
    assert f"python -m data_conversion.fetch --tasks BallCircle,CarRun,easysparse --out {tmp_path / 'empty'}" in err
    assert "--prepare" in err
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_tune_prepare_on_an_empty_data_root_trains(ray_address: str, tmp_path: Path, files: dict[str, bytes]) -> None:
    source = tmp_path / "dsrl"
    source.mkdir()
    name = dataset_file_name("BallCircle")
    (source / name).write_bytes(files[name])
    env = {**os.environ, "PYTHONPATH": str(Path.cwd()), "RLLIB_CAPS_SMOKE_TEST": "1", "RAY_ADDRESS": ray_address}
    proc = subprocess.run([sys.executable, "-m", "rllib_caps.tune", "--tasks", "BallCircle", "--prepare", str(source),
                           "--data-root", str(tmp_path / "data"), "--storage", str(tmp_path / "results"), "--seeds",
                           "0", "--no-cost-limits"], env=env, capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, proc.stderr[-3000:]
    meta = json.loads((tmp_path / "data" / "BallCircle" / "metadata.json").read_text())
    assert meta["source"]["file"] == name and meta["rows"] == ROWS
    assert "BallCircle" in proc.stdout and "converted" in proc.stdout  # the preparation table
    records, unfinished = load_trials(tmp_path / "results" / "sweep")
    assert len(records) == 1 and not unfinished and records[0].task == "BallCircle"


def test_dsrl_to_parquet_without_h5_downloads_from_the_hub_endpoint(tmp_path: Path, files: dict[str, bytes]) -> None:
    name = dataset_file_name("CarRun")
    with HubServer({name: files[name]}) as hub:
        env = {**os.environ, "PYTHONPATH": str(Path.cwd()), "HF_ENDPOINT": hub.url,
               "DSRL_DATASET_DIR": str(tmp_path / "dsrl")}
        proc = subprocess.run([sys.executable, "-m", "data_conversion.dsrl_to_parquet", "--task", "CarRun", "--out",
                               str(tmp_path / "CarRun")], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "dsrl" / name).read_bytes() == files[name]
    assert json.loads((tmp_path / "CarRun" / "metadata.json").read_text())["source"]["file"] == name
