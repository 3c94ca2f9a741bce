"""An algorithm plugs in as its own folder plus one registry entry (docs/architecture.md, "Adding an algorithm").

A toy algorithm, behaviour cloning with an L1 loss and its own deployable policy, is written into
``algorithms/toybc/`` of a copy of the package, with one entry appended to the copy's registry and nothing else
changed; ``train``, ``evaluate``, ``tune --dry-run``, a one-trial ``tune`` and ``report`` then run on it. The
generic layers name no algorithm: ``test_generic_layers_name_no_algorithm`` checks their string literals.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rllib_caps.algorithms.registry import ALGORITHMS
from tests.sim_datasets import make_data_root

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rllib_caps"

TOY_FILES = {
    "__init__.py": '"""ToyBC: behaviour cloning with an L1 loss (the plug-in test\'s algorithm)."""\n',
    "toybc.py": '''"""ToyBC's config, algorithm and learner: BC's module, an L1 loss."""

from __future__ import annotations

import torch
from ray.rllib.core.columns import Columns

from rllib_caps.algorithms.bc.bc import BC, BCConfig
from rllib_caps.algorithms.bc.default_bc_rl_module import BC_MEANS
from rllib_caps.algorithms.bc.torch.bc_torch_learner import BCTorchLearner


class ToyBCLearner(BCTorchLearner):
    def member_losses(self, fwd_out: dict, batch: dict, config: object) -> dict[str, torch.Tensor]:
        return {"bc_loss": (fwd_out[BC_MEANS] - batch[Columns.ACTIONS]).abs().mean()}


class ToyBCConfig(BCConfig):
    def __init__(self, algo_class: type | None = None) -> None:
        super().__init__(algo_class=algo_class or ToyBC)

    def get_default_learner_class(self) -> type:
        return ToyBCLearner


class ToyBC(BC):
    @classmethod
    def get_default_config(cls) -> ToyBCConfig:
        return ToyBCConfig()
''',
    "policy.py": '''"""ToyBC deployed without Ray: the actor's mean action; κ is ignored."""

from __future__ import annotations

import numpy as np
import torch
from ray.rllib.core.columns import Columns

from rllib_caps.algorithms.bc.torch.default_bc_torch_rl_module import DefaultBCTorchRLModule
from rllib_caps.core.deployment import DeployedPolicy


class ToyBCPolicy(DeployedPolicy):
    module_class = DefaultBCTorchRLModule

    def reset(self, threshold: float, batch_size: int = 1) -> None:
        self.batch_size = batch_size

    @torch.no_grad()
    def act(self, obs: np.ndarray, cost: float = 0.0, reward: float = 0.0) -> np.ndarray:
        batch = torch.from_numpy(self.observation_batch(obs, self.batch_size))
        actions = self.module.forward_inference({Columns.OBS: batch})[Columns.ACTIONS].numpy()
        return self.env_actions(actions, single=np.ndim(obs) == 1)
''',
}
TOY_ENTRY = '''
ALGORITHMS["toybc"] = AlgorithmEntry(
    name="toybc", config_path="rllib_caps.algorithms.toybc.toybc:ToyBCConfig", trial_label=fixed_label("ToyBC"),
    searchable=(), threshold_at_deployment=False, title="ToyBC",
    policy_path="rllib_caps.algorithms.toybc.policy:ToyBCPolicy")
'''
TINY = {"steps": 40, "updates_per_iteration": 20, "hidden": [16, 16], "batch_size": 32, "eval_episodes": 1}


@pytest.fixture(scope="module")
def plugged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the package with the toy algorithm's folder and its registry entry; returns the copy's parent."""
    src = tmp_path_factory.mktemp("plugged")
    shutil.copytree(PACKAGE, src / "rllib_caps", ignore=shutil.ignore_patterns("__pycache__"))
    folder = src / "rllib_caps" / "algorithms" / "toybc"
    folder.mkdir()
    for name, text in TOY_FILES.items():
        (folder / name).write_text(text)
    registry = src / "rllib_caps" / "algorithms" / "registry.py"
    registry.write_text(registry.read_text() + TOY_ENTRY)
    return src


def run_cli(src: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """``python -m <args>`` importing the plugged copy of the package (and its own local Ray)."""
    env = {**os.environ, "PYTHONPATH": str(src), "RAY_ADDRESS": "", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, f"{' '.join(args)}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def test_the_copy_differs_from_the_package_by_the_folder_and_the_entry_alone(plugged: Path) -> None:
    copied = {p.relative_to(plugged / "rllib_caps") for p in (plugged / "rllib_caps").rglob("*.py")}
    original = {p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py")}
    assert copied - original == {Path("algorithms/toybc") / name for name in TOY_FILES}
    changed = [path for path in original
               if (plugged / "rllib_caps" / path).read_bytes() != (PACKAGE / path).read_bytes()]
    assert changed == [Path("algorithms/registry.py")]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_plugged_algorithm_trains_evaluates_sweeps_and_reports(plugged: Path, tmp_path: Path) -> None:
    located = run_cli(plugged, tmp_path, "rllib_caps.algorithms.registry")  # importable; prints nothing
    assert located.stdout == ""
    where = subprocess.run([sys.executable, "-c", "import rllib_caps; print(rllib_caps.__file__)"], cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": str(plugged)}, capture_output=True, text=True, check=True)
    assert Path(where.stdout.strip()).is_relative_to(plugged)

    data_root = make_data_root(tmp_path / "datasets", ["BallCircle"], episodes=4)
    help_text = run_cli(plugged, tmp_path, "rllib_caps.train", "--help").stdout
    assert "toybc" in help_text  # the CLI's choices come from the registry

    flags = ["--steps", "40", "--updates-per-iteration", "20", "--hidden", "16", "16", "--batch-size", "32",
             "--eval-episodes", "1"]
    trained = run_cli(plugged, tmp_path, "rllib_caps.train", "--algo", "toybc", "--task", "BallCircle", "--data",
                      str(data_root / "BallCircle"), "--out", "ckpt", *flags, "--json")
    results = json.loads(trained.stdout[trained.stdout.index("{"):])
    assert sorted(results["thresholds"], key=float) == ["10", "20", "40"]  # κ ignored in training: every κ

    evaluated = run_cli(plugged, tmp_path, "rllib_caps.evaluate", "--checkpoint", "ckpt", "--thresholds", "15",
                        "--episodes", "1", "--json")
    assert list(json.loads(evaluated.stdout)["thresholds"]) == ["15"]

    sweep = ["rllib_caps.tune", "--algos", "toybc", "--tasks", "BallCircle", "--seeds", "0", "--data-root",
             str(data_root), "--storage", str(tmp_path / "results"), "--name", "toy"]
    planned = run_cli(plugged, tmp_path, *sweep, "--dry-run").stdout
    assert "toybc" in planned and "1 trial" in planned

    config = tmp_path / "toy.yaml"
    config.write_text(yaml.safe_dump({"training": TINY, "cpus_per_trial": 1.0}))
    swept = run_cli(plugged, tmp_path, *sweep, "--config", str(config))
    assert "ToyBC" in swept.stdout  # the table printed at the end has the toy's column

    run_cli(plugged, tmp_path, "rllib_caps.report", str(tmp_path / "results" / "toy"))
    assert "ToyBC" in (tmp_path / "results" / "toy" / "report" / "report.md").read_text()


GENERIC = [PACKAGE / "core", PACKAGE / "sweeps", PACKAGE / "report", *PACKAGE.glob("*.py")]


def string_literals(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string constant of a module except docstrings (f-strings' literal parts included)."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_generic_layers_name_no_algorithm() -> None:
    """No string literal in ``core/``, ``sweeps/``, ``report/`` or the CLIs is an algorithm's registry name (help
    texts may still give one as an example): what they know of an algorithm comes from its registry entry."""
    found = [f"{path.relative_to(ROOT)}:{line}: {text!r}"
             for target in GENERIC for path in ([target] if target.is_file() else sorted(target.rglob("*.py")))
             for line, text in string_literals(path) if text in ALGORITHMS]
    assert not found, "algorithm names outside the registry and the algorithms' folders:\n" + "\n".join(found)
