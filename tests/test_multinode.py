"""A sweep on a 2-node Ray cluster on this machine (``ray.cluster_utils.Cluster``): trials land on both nodes,
results and checkpoints go to ``--storage``, and after the driver is killed ``--resume`` finishes the sweep
without rerunning the trials that had finished."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from sim_datasets import make_data_root
from test_fault_injection import (
    TEN_ITERATIONS,
    continue_processes,
    finished_in_results,
    terminated_trials,
    trial_processes,
)

from rllib_caps.report.records import load_trials
from rllib_caps.sweeps.trainable import SweepTrial


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_two_node_sweep_uses_both_nodes_and_resumes_after_the_driver_is_killed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ray.cluster_utils import Cluster

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # the nodes and the driver agree without a token file
    data_root = make_data_root(tmp_path / "data", ["BallCircle"], episodes=3)
    storage = tmp_path / "shared"  # the path both nodes write results and checkpoints to
    node_args = {"num_cpus": 1, "object_store_memory": 100 * 2**20}
    cluster = Cluster(initialize_head=True, head_node_args={**node_args, "include_dashboard": False})
    worker = cluster.add_node(**node_args)
    driver, stopped = None, []
    try:
        cluster.wait_for_nodes()
        # Tune saves its experiment state every 10 s or more by default; every second, the test sees a finished trial
        # recorded sooner. (The moment itself does not depend on it: see below.)
        env = {**os.environ, "PYTHONPATH": str(Path.cwd()), "TUNE_GLOBAL_CHECKPOINT_S": "1"}
        config = tmp_path / "multi.yaml"
        config.write_text(yaml.safe_dump({
            "tasks": "BallCircle", "seeds": [0, 10, 20], "heads": [2], "data_root": str(data_root),
            "storage": str(storage), "name": "multi", "cpus_per_trial": 1, "checkpoint_every": 1,
            "cost_limits": False,
            # not the smoke test's 2 iterations: the third trial, which starts as the first two finish, must outlast
            # the moment below (seen: all three finished before the driver was killed)
            "training": TEN_ITERATIONS}))
        command = [sys.executable, "-m", "rllib_caps.tune", "--config", str(config), "--address", cluster.address]
        experiment = storage / "multi"
        driver = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # The moment is made, not waited for: once a trial has written its last result, the trial workers are
        # stopped (SIGSTOP; the third trial runs in a finished trial's worker, which Tune reuses, or in a new one, which
        # its 10 iterations keep from finishing first), so no other trial can finish until Tune's saved state records
        # the finished one(s); then the driver is killed.
        deadline = time.monotonic() + 600
        while not finished_in_results(experiment):
            assert driver.poll() is None and time.monotonic() < deadline, "no trial finished before the sweep ended"
            time.sleep(0.2)
        stopped = trial_processes()
        assert stopped, "no trial worker to stop"
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        while not terminated_trials(experiment):
            assert driver.poll() is None and time.monotonic() < deadline, "Tune's state recorded no finished trial"
            time.sleep(0.2)
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        continue_processes(stopped)
        finished_ids = terminated_trials(experiment)
        finished_before = [r for r in load_trials(experiment)[0] if r.trial_dir.name.endswith(tuple(finished_ids))]
        lines_before = {r.trial_dir.name: len((r.trial_dir / "result.json").read_text().splitlines())
                        for r in finished_before}
        assert 1 <= len(finished_before) == len(finished_ids) < 3

        resumed = subprocess.run([*command, "--resume"], env=env, capture_output=True, text=True, timeout=900)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        records, unfinished = load_trials(experiment)
        assert len(records) == 3 and not unfinished
        for name, lines in lines_before.items():  # not rerun: no result appended
            assert len((experiment / name / "result.json").read_text().splitlines()) == lines
        assert all(r.checkpoint is not None and r.checkpoint.is_relative_to(storage) for r in records)
        trial_nodes = {a["Address"]["NodeID"] for a in cluster.global_state.actor_table(None).values()
                       if a["ActorClassName"] == SweepTrial.__name__}
        assert trial_nodes == {cluster.head_node.node_id, worker.node_id}
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
        continue_processes(stopped)
        cluster.shutdown()


def test_storage_and_data_root_uris_are_refused_with_the_mount_advice() -> None:
    from rllib_caps.sweeps.options import SweepError, resolve_options
    from rllib_caps.tune import parse_args

    for flag, uri in (("--storage", "s3://bucket/results"), ("--data-root", "gs://bucket/datasets")):
        with pytest.raises(SweepError, match=f"{flag} {uri}: a URI is not supported.*mount"):
            resolve_options(parse_args([flag, uri]))
