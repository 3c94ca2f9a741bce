"""ONNX export of CAPS (``python -m rllib_caps.export``): the exported graph under ONNX Runtime acts as
``CAPSPolicy`` does (same head at every step, actions within 1e-5) on real BallCircle episodes, for both backbones
and K = 2 and 4, in a subprocess where torch, Ray and rllib_caps cannot be imported; the bundle (model, card and
runtime) copied alone to another directory runs the same way, with the Q^c shift of ``--calibrate-cost``; the
policy card and the model's metadata; bad input."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from test_caps_module import OBS, make_module

from rllib_caps.algorithms.caps.export import export_onnx
from rllib_caps.algorithms.caps.policy import CAPSPolicy
from rllib_caps.export import main as export_main
from rllib_caps.onnx_runtime import ONNXCAPSPolicy

REPO = Path(__file__).resolve().parents[1]
BUNDLED = REPO / "datasets" / "BallCircle"
RUNTIME = REPO / "rllib_caps" / "onnx_runtime.py"

# Serves ONNXCAPSPolicy over stdin/stdout, one JSON object a line, with torch, Ray and rllib_caps unimportable: run
# with -I (no PYTHONPATH, no user site), it imports onnx_runtime from the directory argv[1] as a user would.
SERVER = r"""
import importlib.abc, json, sys

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "ray", "rllib_caps"):
            raise ImportError(f"{name} is blocked: the ONNX runtime must not need it")

sys.meta_path.insert(0, Blocker())
sys.path.insert(0, sys.argv[1])
from onnx_runtime import ONNXCAPSPolicy
policy = ONNXCAPSPolicy(sys.argv[2])
blocked = [m for m in sys.modules if m.split(".")[0] in ("torch", "ray", "rllib_caps")]
print(json.dumps({"ready": True, "loaded": blocked}), flush=True)
for line in sys.stdin:
    request = json.loads(line)
    if "reset" in request:
        policy.reset(request["reset"])
        print(json.dumps({}), flush=True)
    else:
        action = policy.act(request["obs"], request["cost"])
        print(json.dumps({"action": action.tolist(), "head": int(policy.last_heads[0])}), flush=True)
"""


class BlockedRuntime:
    """``ONNXCAPSPolicy`` of ``runtime_dir``'s ``onnx_runtime.py`` in an isolated subprocess (``python -I``, in the
    model's directory) whose torch, ray and rllib_caps imports raise."""

    def __init__(self, model: Path, runtime_dir: Path = RUNTIME.parent) -> None:
        self.process = subprocess.Popen([sys.executable, "-I", "-c", SERVER, str(runtime_dir), model.name], text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=model.parent)
        hello = self._read()
        assert hello == {"ready": True, "loaded": []}, hello

    def _read(self) -> dict:
        line = self.process.stdout.readline()
        assert line, f"the ONNX runtime subprocess ended (exit code {self.process.poll()})"
        return json.loads(line)

    def request(self, **request) -> dict:
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> None:
        self.process.stdin.close()
        assert self.process.wait(timeout=30) == 0


@pytest.mark.parametrize("settings", [
    {"time_limit": "time_aware", "backbone": "sacbc", "clamp_cost_q": True, "actor_time": True, "cost_gamma": 1.0,
     "initial_alpha": 0.1, "cost_step_shifts": np.linspace(-0.1, 0.1, 16)},
    {"implementation": "code", "shared": False, "fused_critics": True, "time_limit": "terminal",
     "head_selection": "head_order", "cost_shift": 0.05},
    {"head_selection": "q_trust"},
], ids=["sacbc-time-aware-clamped-per-step-shifted", "iql-code-separate-fused-head-order-shifted", "iql-q-trust"])
def test_graph_equals_caps_policy_on_random_states_budgets_and_steps(tmp_path, settings) -> None:
    """No Ray: a module under ONNX Runtime in-process picks CAPSPolicy's heads and actions over random states, costs,
    steps and restarts: SAC+BC-style (clamped Q^c, time-aware critics and actor, cost γ = 1), and the authors' IQL
    code (critics holding −c, fixed std) with separate actor bodies and fused critics. Actions are in [−2, 2], twice
    the normalised ones, so the graph must map them as CAPSPolicy does. Seeded: torch's and ONNX Runtime's matmul
    kernels round differently (~1e-8), so two heads whose values tie that closely may go either way; untrained heads
    meet such ties about once in 30 random modules."""
    torch.manual_seed(0)
    settings = dict(settings)
    shift = settings.pop("cost_shift", 0.0)  # a calibrated Q^c (CAPSPolicy.set_cost_shift) is exported as it acts
    step_shifts = settings.pop("cost_step_shifts", np.zeros(16))  # and a per-step one (set_cost_step_shifts)
    module = make_module(num_heads=4, **settings)
    CAPSPolicy(module).set_cost_shift(shift)
    if step_shifts.any():
        CAPSPolicy(module).set_cost_step_shifts(step_shifts)
    metadata = export_onnx(module, tmp_path / "policy.onnx")
    assert np.allclose(json.loads(metadata["cost_step_shifts"]), step_shifts)  # the graph's table, recorded
    torch_policy, onnx_policy = CAPSPolicy(module), ONNXCAPSPolicy(tmp_path / "policy.onnx")
    rng, heads = np.random.default_rng(0), set()
    for kappa in (0.0, 0.05, 0.3):
        torch_policy.reset(kappa, batch_size=8)
        onnx_policy.reset(kappa, batch_size=8)
        cost = np.zeros(8)
        for _ in range(60):
            restart = rng.random(8) < 0.05  # a vector env's autoreset: these entries start new episodes
            torch_policy.reset_envs(restart)
            onnx_policy.reset_envs(restart)
            obs = rng.normal(size=(8, OBS)).astype(np.float32)
            expected = torch_policy.act(obs, cost)
            np.testing.assert_allclose(onnx_policy.act(obs, cost), expected, rtol=0, atol=1e-5)
            assert onnx_policy.last_heads.tolist() == torch_policy.last_heads.tolist()
            assert onnx_policy.step.tolist() == torch_policy.budget.step.tolist()
            np.testing.assert_array_equal(onnx_policy.spent, torch_policy.budget.spent)
            heads |= set(torch_policy.last_heads.tolist())
            cost = rng.uniform(0, 0.01, size=8)
    assert len(heads) > 1


def test_runtime_refuses_acting_without_a_budget_and_bad_inputs(tmp_path) -> None:
    export_onnx(make_module(num_heads=2), tmp_path / "policy.onnx")
    policy = ONNXCAPSPolicy(tmp_path / "policy.onnx")
    assert policy.num_heads == 2 and policy.obs_dim == OBS
    with pytest.raises(RuntimeError, match="reset"):
        policy.act(np.zeros(OBS, np.float32))
    with pytest.raises(ValueError, match="κ"):
        policy.reset(-1.0)
    policy.reset(5.0, batch_size=2)
    with pytest.raises(ValueError, match="shape"):
        policy.act(np.zeros((2, OBS + 1), np.float32))
    policy.act(np.zeros((2, OBS), np.float32))
    with pytest.raises(ValueError, match="cost must be >= 0"):
        policy.act(np.zeros((2, OBS), np.float32), np.array([0.0, np.nan]))
    with pytest.raises(ValueError, match="boolean mask"):
        policy.reset_envs(np.array([0, 1]))


def untrained_checkpoint(path: Path) -> Path:
    """A CAPS checkpoint of BallCircle's spaces as training writes its policy files and manifest, untrained and
    without Ray (all that export reads of a checkpoint), recording the bundled dataset as its training data."""
    from rllib_caps.algorithms.caps.torch.default_caps_torch_rl_module import DefaultCAPSTorchRLModule
    from rllib_caps.core.deployment import save_policy
    from rllib_caps.envs import get_task
    from rllib_caps.utils.manifest import write_manifest

    torch.manual_seed(0)
    task = get_task("BallCircle")
    module = DefaultCAPSTorchRLModule(
        observation_space=gym.spaces.Box(-np.inf, np.inf, (task.obs_dim,), np.float32),
        action_space=gym.spaces.Box(-1.0, 1.0, (task.act_dim,), np.float32),
        model_config={"hidden": [16, 16], "num_heads": 3, "shared_actor": True, "learn_std": True,
                      "cost_maximize": False, "gamma": 0.99, "horizon": 200, "task": "BallCircle", "seed": 0,
                      "head_selection": "head_order"})
    path.mkdir(parents=True)
    save_policy(module, path, training_data=str(BUNDLED / "data"))
    write_manifest(path)
    return path


def test_the_bundle_copied_alone_runs_with_numpy_and_onnxruntime_only(tmp_path) -> None:
    """``export --calibrate-cost mean`` (no ``--format``) writes the model, its card and ``onnx_runtime.py``; copied
    alone elsewhere, the bundle acts in ``python -I`` with torch, Ray and rllib_caps blocked as ``CAPSPolicy`` does
    with the same shift; the metadata and the card record the graph's shapes, the head selection, the shift and the
    opset, and no absolute path."""
    from rllib_caps.algorithms.caps.calibration import calibrate_cost_critic
    from rllib_caps.algorithms.caps.critic_calibration import calibration_columns

    checkpoint = untrained_checkpoint(tmp_path / "ckpt")
    bundle = tmp_path / "bundle"
    assert export_main(["--checkpoint", str(checkpoint), "--out", str(bundle / "policy.onnx"),
                        "--calibrate-cost", "mean"]) == 0
    assert sorted(p.name for p in bundle.iterdir()) == ["onnx_runtime.py", "policy.md", "policy.onnx"]
    assert (bundle / "onnx_runtime.py").read_text() == RUNTIME.read_text()
    elsewhere = shutil.copytree(bundle, tmp_path / "elsewhere" / "bundle")
    shutil.rmtree(bundle)

    expected = CAPSPolicy.from_checkpoint(checkpoint)
    shift = calibrate_cost_critic(expected, calibration_columns(BUNDLED / "data"), "mean")
    assert shift < -1.0  # an untrained Q^c (about 0) against BallCircle's realised cost-to-go: a shift to record
    metadata = ONNXCAPSPolicy(elsewhere / "policy.onnx").session.get_modelmeta().custom_metadata_map
    assert {k: metadata[k] for k in ("head_selection", "cost_calibration", "opset")} == {
        "head_selection": "head_order", "cost_calibration": "mean", "opset": "18"}
    assert math.isclose(float(metadata["cost_shift"]), shift, rel_tol=1e-6)
    shapes = {"obs": "float32 [batch, 8]", "cost_spent": "float64 [batch]", "step": "int64 [batch]",
              "kappa": "float64 [batch]", "action": "float32 [batch, 2]", "head": "int64 [batch]"}
    assert json.loads(metadata["shapes"]) == shapes
    card = (elsewhere / "policy.md").read_text()
    assert all(f"| `{name}` | {'output' if name in ('action', 'head') else 'input'} | {shape} |" in card
               for name, shape in shapes.items()) and "(B, D)" not in card
    assert "head selection `head_order`" in card and f"cost shift {float(metadata['cost_shift']):.6g}" in card
    assert "ONNX opset 18" in card and "from onnx_runtime import ONNXCAPSPolicy" in card
    assert str(tmp_path) not in card and "`../ckpt`" in card  # relative to the bundle as exported

    runtime, rng, heads = BlockedRuntime(elsewhere / "policy.onnx", elsewhere), np.random.default_rng(0), set()
    for kappa in (0.0, 20.0):
        expected.reset(kappa)
        runtime.request(reset=kappa)
        cost = 0.0
        for _ in range(15):
            obs = rng.normal(size=8).astype(np.float32)
            reply = runtime.request(obs=obs.tolist(), cost=cost)
            np.testing.assert_allclose(reply["action"], expected.act(obs, cost), rtol=0, atol=1e-5)
            assert reply["head"] == int(expected.last_heads[0])
            heads.add(reply["head"])
            cost = float(rng.uniform(0, 0.5))
    runtime.close()
    assert len(heads) > 1


def test_export_flags_are_checked_before_the_checkpoint_loads(tmp_path, capsys) -> None:
    """``--data`` without ``--calibrate-cost``, a missing ``--data``, and another ``onnx_runtime.py`` where the
    bundle goes (without ``--force``) are one-line errors; nothing is written. The same runtime there already is no
    obstacle (several models may share a directory)."""
    checkpoint, out = str(untrained_checkpoint(tmp_path / "ckpt")), tmp_path / "bundle" / "policy.onnx"
    for argv, message in ((["--data", str(BUNDLED)], "--data is the dataset of --calibrate-cost"),
                          (["--calibrate-cost", "half"], "--calibrate-cost half: choose one of none, mean, pessimism"),
                          (["--calibrate-cost", "mean", "--data", str(tmp_path / "missing")],
                           f"--data {tmp_path / 'missing'}")):
        assert export_main(["--checkpoint", checkpoint, "--out", str(out), *argv]) == 2
        assert message in capsys.readouterr().err
        assert not out.parent.exists()
    out.parent.mkdir()
    runtime = out.with_name("onnx_runtime.py")
    runtime.write_text(RUNTIME.read_text())
    assert export_main(["--checkpoint", str(tmp_path / "missing"), "--out", str(out)]) == 2
    assert "--checkpoint" in capsys.readouterr().err  # claimed the outputs, then found no checkpoint
    runtime.write_text("# an older runtime\n")
    assert export_main(["--checkpoint", checkpoint, "--out", str(out)]) == 2
    assert f"{runtime}: already exists (use --force" in capsys.readouterr().err
    assert sorted(p.name for p in out.parent.iterdir()) == ["onnx_runtime.py"]
    assert runtime.read_text() == "# an older runtime\n"


def test_loading_a_checkpoint_prints_no_deprecation_of_a_call_it_does_not_make(tmp_path) -> None:
    """A fresh process's first RLModule logs RLlib's notice of ``RLModule(config=...)`` (RLlib builds an
    ``RLModuleConfig`` itself): ``CAPSPolicy.from_checkpoint`` (as ``evaluate`` and ``report`` load checkpoints)
    prints nothing, while RLlib's other deprecation notices still do."""
    checkpoint = untrained_checkpoint(tmp_path / "ckpt")
    code = ("import sys; from rllib_caps.algorithms.caps.policy import CAPSPolicy; "
            "CAPSPolicy.from_checkpoint(sys.argv[1]); "
            "from ray._common.deprecation import deprecation_warning; deprecation_warning('another_call()')")
    proc = subprocess.run([sys.executable, "-c", code, str(checkpoint)], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [line.split(" -- ", 1)[-1] for line in proc.stderr.splitlines() if "deprecated" in line] == [
        "DeprecationWarning: `another_call()` has been deprecated. This will raise an error in the future!"]


@pytest.mark.parametrize("num_envs", [None, 2])
@pytest.mark.parametrize("value", [3.0, 0, np.inf, -1.0, np.nan, "3", None, True, [0.5, 0.0], np.array([1.0, -2.0])])
def test_runtime_checks_budget_inputs_as_caps_policy_does(value, num_envs) -> None:
    """The standalone runtime cannot import ``check_budget_input``; its copy must accept and refuse the same."""
    from rllib_caps.core.budget import check_budget_input
    from rllib_caps.onnx_runtime import budget_input

    try:
        expected = check_budget_input(value, "cost", num_envs)
    except (TypeError, ValueError) as err:
        with pytest.raises(type(err)) as got:
            budget_input(value, "cost", num_envs)
        assert str(got.value) == str(err)
    else:
        np.testing.assert_array_equal(budget_input(value, "cost", num_envs), expected)


def test_card_evaluation_comes_from_the_checkpoint_or_its_tune_trial(tmp_path) -> None:
    from rllib_caps.report.records import checkpoint_evaluation

    trial, evaluation = tmp_path / "trial", {"thresholds": {"10": {"cost": 1.0}}, "mean": {}}
    (trial / "checkpoint_000000").mkdir(parents=True)
    assert checkpoint_evaluation(trial / "checkpoint_000000") is None
    (trial / "result.json").write_text(json.dumps({"evaluation": {"dsrl": evaluation}}) + "\n" + json.dumps({}) + "\n")
    assert checkpoint_evaluation(trial / "checkpoint_000000") == evaluation
    (trial / "checkpoint_000000" / "evaluation.json").write_text(json.dumps({"thresholds": {}, "mean": {}}))
    assert checkpoint_evaluation(trial / "checkpoint_000000") == {"thresholds": {}, "mean": {}}


@pytest.fixture(scope="module")
def exported(ray_session, tmp_path_factory) -> dict[tuple[str, int], Path]:
    """Tiny CAPS checkpoints from the train CLI (RLLIB_CAPS_SMOKE_TEST), exported by the export CLI: (backbone,
    K) -> the checkpoint directory, with the model and its card beside it (the checkpoint's name with the suffix .onnx
    and .md: an output inside the checkpoint is refused)."""
    from rllib_caps.train import main as train_main

    root, found = tmp_path_factory.mktemp("export"), {}
    settings = {("iql", 2): ["--time-limit", "time_aware", "--actor-time"], ("iql", 4): ["--eval-episodes", "0"],
                ("sacbc", 2): ["--eval-episodes", "0"],
                ("sacbc", 4): ["--time-limit", "time_aware", "--cost-gamma", "1.0", "--eval-episodes", "0"]}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RLLIB_CAPS_SMOKE_TEST", "1")
        for (backbone, heads), extra in settings.items():
            checkpoint = root / f"{backbone}-{heads}"
            assert train_main(["--task", "BallCircle", "--data", str(BUNDLED), "--out", str(checkpoint),
                               "--backbone", backbone, "--heads", str(heads), *extra]) == 0
            assert export_main(["--checkpoint", str(checkpoint), "--format", "onnx",
                                "--out", str(checkpoint.with_suffix(".onnx"))]) == 0
            found[backbone, heads] = checkpoint
    return found


def rollout(drive, shadow, seed: int) -> tuple[np.ndarray, np.ndarray, list[int], list[int]]:
    """One BallCircle episode from reset(seed) acted by ``drive(obs, cost) -> (action, head)``; ``shadow`` sees the
    same observations and costs. Returns both policies' actions and heads at every step."""
    from rllib_caps.envs import make_env

    env = make_env("BallCircle")
    obs, _ = env.reset(seed=seed)
    cost, done, steps = 0.0, False, []
    while not done:
        steps.append((drive(obs, cost), shadow(obs, cost)))
        obs, _, terminated, truncated, info = env.step(steps[-1][0][0])
        cost, done = info["cost"], terminated or truncated
    env.close()
    (drive_actions, drive_heads), (shadow_actions, shadow_heads) = (zip(*side, strict=True)
                                                                    for side in zip(*steps, strict=True))
    return np.array(drive_actions), np.array(shadow_actions), list(drive_heads), list(shadow_heads)


@pytest.mark.slow
@pytest.mark.parametrize("backbone", ["iql", "sacbc"])
@pytest.mark.parametrize("heads", [2, 4])
def test_onnx_runtime_without_torch_ray_or_rllib_caps_acts_as_caps_policy_on_real_episodes(exported, backbone,
                                                                                         heads) -> None:
    """Each policy in turn drives the simulator while the other one, carrying its own budget, acts on the same
    observations and costs. (Two separate closed-loop episodes part after ~50 steps even when every action agrees
    to 1e-7: the simulator amplifies float rounding of the actions, so they would compare different states.)"""
    checkpoint = exported[backbone, heads]
    torch_policy = CAPSPolicy.from_checkpoint(checkpoint)
    runtime = BlockedRuntime(checkpoint.with_suffix(".onnx"))

    def torch_act(obs, cost):
        return torch_policy.act(obs, cost), int(torch_policy.last_heads[0])

    def onnx_act(obs, cost):
        reply = runtime.request(obs=obs.tolist(), cost=float(cost))
        return np.asarray(reply["action"], dtype=np.float32), reply["head"]

    used, costly = set(), False
    for kappa in (0.0, 20.0):
        for seed, (drive, shadow) in enumerate([(onnx_act, torch_act), (torch_act, onnx_act)]):
            torch_policy.reset(kappa)
            runtime.request(reset=kappa)
            drive_actions, shadow_actions, drive_heads, shadow_heads = rollout(drive, shadow, seed)
            assert drive_heads == shadow_heads, (kappa, seed)
            np.testing.assert_allclose(drive_actions, shadow_actions, rtol=0, atol=1e-5)
            used |= set(drive_heads)
            costly |= bool(torch_policy.budget.spent[0] > 0)
    runtime.close()
    assert len(used) > 1 and costly  # the episodes switch heads and spend budget (c_<t reaches the graph)


@pytest.mark.slow
def test_policy_card_names_task_algorithm_data_sha256_and_evaluation(exported) -> None:
    card = exported["iql", 2].with_suffix(".md").read_text()
    metadata = json.loads((BUNDLED / "metadata.json").read_text())
    assert "BallCircle" in card and "CAPS(IQL), K = 2 heads" in card
    assert metadata["source"]["sha256"] in card and metadata["files"]["part-00000.parquet"] in card
    assert "| κ | episodes |" in card and "| 20 | 1 |" in card  # the train CLI's evaluation at κ = 10, 20, 40
    assert "ONNXCAPSPolicy" in card
    assert "None recorded" in exported["sacbc", 4].with_suffix(".md").read_text()  # trained with --eval-episodes 0


@pytest.mark.slow
def test_bad_input_is_a_clear_error_and_leaves_nothing_behind(exported, tmp_path, capsys) -> None:
    checkpoint = str(exported["iql", 2])
    out = tmp_path / "policy.onnx"
    for argv, message in ((["--checkpoint", str(tmp_path / "missing")], f"--checkpoint {tmp_path / 'missing'}"),
                          (["--checkpoint", str(tmp_path)], "--checkpoint"),
                          (["--checkpoint", checkpoint, "--out", str(tmp_path / "policy.md")], "--out")):
        assert export_main(["--format", "onnx", "--out", str(out), *argv]) == 2
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        export_main(["--checkpoint", checkpoint, "--format", "tflite", "--out", str(out)])
    assert exit_info.value.code == 2 and "--format" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []

    out.write_text("keep")
    for given in (checkpoint, str(tmp_path / "missing")):  # refused before the checkpoint is even looked at
        assert export_main(["--checkpoint", given, "--format", "onnx", "--out", str(out)]) == 2
        assert "use --force" in capsys.readouterr().err and out.read_text() == "keep"
    assert export_main(["--checkpoint", checkpoint, "--format", "onnx", "--out", str(out), "--force"]) == 0
    assert ONNXCAPSPolicy(out).num_heads == 2 and out.with_suffix(".md").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["onnx_runtime.py", "policy.md", "policy.onnx"]  # no
    # temporary files left
