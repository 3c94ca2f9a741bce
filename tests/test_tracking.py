"""Experiment tracking through Tune's W&B and MLflow callbacks: the options and callbacks (fast), and a one-trial
sweep logged to both offline, read back with each library's own reader: ``mlflow.search_runs`` and
``MlflowClient.get_metric_history`` on the SQLite store, ``wandb leet inspect --json`` on the offline run's
``.wandb`` transaction log (slow)."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from test_interrupts import ray_of_its_own

from rllib_caps.report import load_trials
from rllib_caps.report.curves import losses_of
from rllib_caps.sweeps.options import SweepError, SweepOptions, resolve_options
from rllib_caps.sweeps.tracking import DEFAULT_WANDB_PROJECT, mlflow_uri, tracking_callbacks, wandb_project
from rllib_caps.tune import parse_args

ROOT = Path(__file__).resolve().parents[1]
TINY_TRAINING = {"steps": 60, "updates_per_iteration": 30, "hidden": [16, 16], "batch_size": 32, "eval_episodes": 1}


@pytest.fixture
def answering_server() -> Iterator[str]:
    """The URL of a local HTTP server that answers every request (404): a reachable tracking host."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    server.RequestHandlerClass.log_message = lambda *args: None
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/no-such-page"
    server.shutdown()


def closed_port_url() -> str:
    """An http URL on a local port that nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# ------------------------------------------------------------------------------------------------ fast

def test_tracking_flags_and_yaml_keys(tmp_path: Path) -> None:
    options = resolve_options(parse_args(["--wandb", "--mlflow", "--storage", str(tmp_path)]))
    assert (options.wandb, options.mlflow) == (True, True)
    assert wandb_project(options) == DEFAULT_WANDB_PROJECT
    assert mlflow_uri(options) == f"sqlite:///{tmp_path / 'mlflow.db'}"
    options = resolve_options(parse_args(["--wandb", "mine", "--mlflow", "sqlite:///elsewhere.db"]))
    assert (wandb_project(options), mlflow_uri(options)) == ("mine", "sqlite:///elsewhere.db")
    assert tracking_callbacks(resolve_options(parse_args([]))) == []
    with pytest.raises(SweepError, match=r"--log-artifacts logs to the sweep's trackers: add --wandb, --mlflow"):
        tracking_callbacks(resolve_options(parse_args(["--log-artifacts"])))
    assert resolve_options(parse_args(["--log-artifacts", "--mlflow"])).log_artifacts
    config = tmp_path / "tracked.yaml"
    config.write_text(yaml.safe_dump({"wandb": "from-yaml", "mlflow": True}))
    options = resolve_options(parse_args(["--config", str(config)]))
    assert (options.wandb, options.mlflow) == ("from-yaml", True)
    for value in (3, "", ["a"]):
        config.write_text(yaml.safe_dump({"mlflow": value}))
        with pytest.raises(SweepError, match=r"tracked.yaml: mlflow must be an MLflow tracking URI or true"):
            resolve_options(parse_args(["--config", str(config)]))


def test_callbacks_are_set_up_before_the_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               answering_server: str) -> None:
    """MLflow: the experiment named after the sweep exists in the store before any trial; W&B: the run settings
    carry the project, the sweep's name as group and the driver's WANDB_MODE; without it (W&B online, its server
    answering) and without an API key, a SweepError naming the flag."""
    import mlflow
    from ray.air.integrations.mlflow import MLflowLoggerCallback
    from ray.air.integrations.wandb import WandbLoggerCallback

    uri = f"sqlite:///{tmp_path / 'new' / 'dir' / 'mlflow.db'}"
    monkeypatch.setenv("WANDB_MODE", "offline")
    wandb_cb, mlflow_cb = tracking_callbacks(SweepOptions(name="sweep-a", wandb="proj", mlflow=uri))
    assert isinstance(wandb_cb, WandbLoggerCallback) and isinstance(mlflow_cb, MLflowLoggerCallback)
    assert (wandb_cb.project, wandb_cb.group) == ("proj", "sweep-a")
    assert wandb_cb.kwargs == {"mode": "offline", "dir": str(Path("results").resolve() / "sweep-a")}
    experiment = mlflow.MlflowClient(uri).get_experiment_by_name("sweep-a")
    assert experiment.experiment_id == mlflow_cb.mlflow_util.experiment_id
    assert experiment.artifact_location == (Path("results").resolve() / "mlflow-artifacts").as_uri()  # not ./mlruns
    with pytest.raises(SweepError, match=r"--mlflow sqlite:////proc/no/mlflow.db: FileNotFoundError"):
        tracking_callbacks(SweepOptions(mlflow="sqlite:////proc/no/mlflow.db"))
    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc login either
    monkeypatch.setenv("WANDB_BASE_URL", answering_server)
    with pytest.raises(SweepError, match=r"--wandb proj: W&B logs online \(mode online\) but has no API key.*"
                                         r"WANDB_MODE=offline"):  # refused by check_trackers, before Ray starts
        tracking_callbacks(SweepOptions(wandb="proj"))


@pytest.mark.parametrize("flag", ["--wandb", "--mlflow"])
def test_an_unreachable_tracker_is_refused_in_seconds_before_ray_starts(tmp_path: Path, flag: str) -> None:
    """W&B logging online, or an MLflow tracking URI, whose server is a closed local port: ``tune`` exits 2 with one
    line naming the flag (and for W&B how to log offline) within the reachability timeout, before Ray starts and
    before any trial (no experiment directory)."""
    url = closed_port_url()
    env = {**os.environ, "WANDB_MODE": "online", "WANDB_BASE_URL": url, "WANDB_API_KEY": "x" * 40}
    command = [sys.executable, "-m", "rllib_caps.tune", "--tasks", "BallCircle", "--seeds", "0", "--data-root",
               str(ROOT / "datasets"), "--storage", str(tmp_path), "--name", "refused", flag]
    if flag == "--mlflow":
        command.append(url)
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, check=False, timeout=60)
    took = time.monotonic() - started
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    expected = f"error: --wandb {DEFAULT_WANDB_PROJECT}: W&B logs online" if flag == "--wandb" else \
        f"error: --mlflow {url}: the MLflow tracking server cannot be reached"
    assert line.startswith(expected) and ("WANDB_MODE=offline" in line) == (flag == "--wandb"), line
    assert took < 30 and "Ray" not in done.stdout + done.stderr and not (tmp_path / "refused").exists()


def test_a_reachable_tracking_server_passes(answering_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check is not a refusal of every server: one that answers (here 404) passes, for both flags."""
    from rllib_caps.sweeps.tracking import check_trackers

    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_BASE_URL", answering_server)
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    check_trackers(SweepOptions(wandb=True, mlflow=answering_server))


# ------------------------------------------------------------------------------------------------ slow




def contents(path: Path) -> bytes:
    """The bytes of a regular file; nothing for anything else, or for a file gone since (Ray removes a few as it
    stops)."""
    try:
        return path.read_bytes() if path.is_file() and not path.is_symlink() else b""
    except FileNotFoundError:
        return b""


def _wandb_records(run_dir: Path) -> list[dict]:
    """The records of an offline W&B run's ``.wandb`` log, through wandb's own reader."""
    done = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(run_dir)],
                          capture_output=True, text=True, check=True, timeout=120)
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_sweep_logs_each_trial_to_wandb_offline_and_mlflow_and_no_credential_reaches_rays_logs(
        tmp_path: Path) -> None:
    """One trial (2 iterations, evaluated after each: --eval-every 30) with --wandb, --mlflow and --log-artifacts,
    on a Ray that ``tune`` starts, with credentials planted in its environment (W&B's key, AWS's, MLflow's password,
    a Hub token): none of them is in any file that Ray wrote (its session's logs, the runtime-env agent's among
    them). The trackers get:
    one run per trial, named as the trial, grouped by the sweep's name, with the trial's variant as config, every
    iteration's losses and the per-κ evaluations at their gradient steps (the x axis), equal to the trial's
    result.json; an artifacts run in each tracker with the trial's final checkpoint, its ONNX bundle and the report's
    plots; the report draws its learning curves. No tracker slows Tune's loop (no "performance bottleneck"
    warning), and the console has one line per trial event and the table of trials, no Tune box."""
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    command = [sys.executable, "-m", "rllib_caps.tune", "--tasks", "BallCircle", "--seeds", "0", "--data-root",
               str(ROOT / "datasets"), "--storage", str(tmp_path), "--name", "tracked", "--no-cost-limits",
               "--eval-every", "30", "--wandb", "rllib-caps-test", "--mlflow", uri, "--log-artifacts"]
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({"training": TINY_TRAINING}))
    planted = {name: f"planted-{uuid.uuid4().hex}" for name in ("WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY",
                                                                "AWS_ACCESS_KEY_ID", "MLFLOW_TRACKING_PASSWORD",
                                                                "HF_TOKEN")}
    with ray_of_its_own("raysec") as ray_tmp:
        env = {**os.environ, **planted, "RAY_TMPDIR": ray_tmp, "WANDB_MODE": "offline"}
        done = subprocess.run([*command, "--config", str(config)], capture_output=True, text=True, cwd=ROOT,
                              env=env, check=False, timeout=500)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        written = {path: contents(path) for path in Path(ray_tmp).rglob("*")}
    assert any(path.name.startswith("runtime_env_agent") and text for path, text in written.items()), \
        "Ray's logs were not found"
    leaked = [f"{path}: {name}" for path, text in written.items() for name, value in planted.items()
              if value.encode() in text]
    assert not leaked, leaked
    assert "performance bottleneck" not in done.stdout + done.stderr, done.stderr
    (record,), _ = load_trials(tmp_path / "tracked")
    trial_id = record.trial_dir.name.split("_seed0_")[1]
    printed = done.stdout[:done.stdout.index("\n## ")].splitlines()  # before the report
    console = printed[[line.startswith("started") for line in printed].index(True):]  # after where Ray runs
    assert console[:3] == ["started   caps BallCircle K2 seed=0",
                           "evaluated caps BallCircle K2 seed=0 at 30 gradient steps: normalised reward "
                           f"{_first_evaluation(record.trial_dir)}",
                           "finished  caps BallCircle K2 seed=0: normalised reward "
                           f"{record.evaluation['mean']['normalized_reward']:.3f}, cost "
                           f"{record.evaluation['mean']['normalized_cost']:.3f} "
                           f"({'safe' if record.evaluation['mean']['safe'] == 1 else 'UNSAFE'})"]
    assert console[3].split() == ["trial", "algorithm", "task", "axes", "seed", "iter", "gradient", "steps",
                                  "reward", "cost", "status"]
    assert console[4].split()[:7] == [trial_id, "CAPS", "BallCircle", "K=2", "0", "2", "60"] and len(console) == 5
    assert not any(box in done.stdout for box in ("╭", "│", "Trial status", "tensorboard", "Tuner.restore"))
    results = [json.loads(line) for line in (record.trial_dir / "result.json").read_text().splitlines()]
    assert [r["gradient_steps"] for r in results] == [30, 60] and all("evaluation" in r for r in results)
    kappa10 = [r["evaluation"]["dsrl"]["thresholds"]["10"]["normalized_cost"] for r in results]
    qr_loss = [losses_of(r)["qr_loss"] for r in results]
    plots = sorted(path.name for path in (tmp_path / "tracked" / "report").glob("*.png"))
    assert "learning_BallCircle.png" in plots

    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["tracked"]).set_index("tags.mlflow.runName")
    run = runs.loc[record.trial_dir.name]
    assert run["status"] == "FINISHED"
    assert (run["params.variant/algo"], run["params.variant/task"], run["params.variant/num_heads"],
            run["params.seed"]) == ("caps", "BallCircle", "2", "0")
    assert run["metrics.normalized_reward"] == record.evaluation["mean"]["normalized_reward"]
    client = mlflow.MlflowClient(uri)
    history = {key: [(m.step, m.value) for m in client.get_metric_history(run["run_id"], key)]
               for key in ("learners/default_policy/qr_loss", "evaluation/dsrl/thresholds/10/normalized_cost")}
    assert history["learners/default_policy/qr_loss"] == list(zip([30, 60], qr_loss, strict=True))
    assert history["evaluation/dsrl/thresholds/10/normalized_cost"] == list(zip([30, 60], kappa10, strict=True))
    artifacts = runs.loc["tracked-artifacts"]
    assert artifacts["artifact_uri"].startswith((tmp_path / "mlflow-artifacts").as_uri())  # under --storage

    def listed(path: str = "") -> set[str]:
        return {item.path for item in client.list_artifacts(artifacts["run_id"], path)}

    name = record.trial_dir.name
    assert listed() == {f"checkpoint-{name}", f"bundle-{name}", "report"}
    assert f"checkpoint-{name}/{record.checkpoint.name}/policy" in listed(f"checkpoint-{name}/{record.checkpoint.name}")
    bundle = {"policy.onnx", "policy.md", "onnx_runtime.py"}  # the ONNX bundle runs alone
    assert listed(f"bundle-{name}") == {f"bundle-{name}/{file}" for file in bundle}
    assert listed("report") == {f"report/{plot}" for plot in plots}

    (run_dir,) = (tmp_path / "tracked" / "wandb").glob(f"offline-run-*-{trial_id}")
    records = _wandb_records(run_dir)
    (started,) = [r["run"] for r in records if r["type"] == "run"]
    assert (started["project"], started["run_group"], started["display_name"]) == \
        ("rllib-caps-test", "tracked", record.trial_dir.name)
    assert started["config"]["update"]["variant"] == {"algo": "caps", "task": "BallCircle", "num_heads": 2,
                                                      "backbone": "iql", "actor": "shared"}
    axes = [r["metric"] for r in records if r["type"] == "metric" and r["metric"].get("glob_name") == "*"]
    assert [axis["step_metric"] for axis in axes] == ["gradient_steps"]  # every chart's x
    history = [r["history"]["item"] for r in records if r["type"] == "history"]
    assert [(h["_step"], h["gradient_steps"], h["training_iteration"]) for h in history] == [(30, 30, 1), (60, 60, 2)]
    assert [h["learners/default_policy/qr_loss"] for h in history] == pytest.approx(qr_loss)
    assert [h["evaluation/dsrl/thresholds/10/normalized_cost"] for h in history] == pytest.approx(kappa10)
    (artifacts_dir,) = [path for path in (tmp_path / "tracked" / "wandb").glob("offline-run-*")
                        if not path.name.endswith(trial_id)]
    logged = {r["artifact"]["name"]: {entry["path"] for entry in r["artifact"]["manifest"]["contents"]}
              for r in _wandb_records(artifacts_dir) if r["type"] == "artifact"}
    assert set(logged) == {f"checkpoint-{name}", f"bundle-{name}", "report"}
    assert any(path.startswith(f"{record.checkpoint.name}/policy/") for path in logged[f"checkpoint-{name}"])
    assert logged[f"bundle-{name}"] == bundle and logged["report"] == set(plots)
    assert (tmp_path / "tracked" / "report" / "learning_BallCircle.png").stat().st_size > 10_000


def _first_evaluation(trial_dir: Path) -> str:
    """The console's text of a trial's evaluation during training: its mean normalised reward and cost."""
    first = json.loads((trial_dir / "result.json").read_text().splitlines()[0])
    mean = first["evaluation"]["dsrl"]["mean"]
    return f"{mean['normalized_reward']:.3f}, cost {mean['normalized_cost']:.3f}"
