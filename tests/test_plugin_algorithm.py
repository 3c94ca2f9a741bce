"""An algorithm plugs in as its own folder plus one registry entry (docs/architecture.md, "An algorithm is a folder
and an entry").

A toy algorithm, behaviour cloning with an L1 loss, its own deployable policy, its own sweep axis (the hidden layers'
width, ``--widths``) and its own Optuna search space (its actor's learning rate), is written into
``algorithms/toybc/`` of a copy of the package, with one entry appended to the copy's registry and nothing else
changed; ``train``, ``evaluate``, ``tune --help`` (the axis's flag), ``tune --dry-run``, a two-trial ``tune`` over
the axis, ``tune --search optuna`` over its space and ``report`` (a column for the axis) then run on it. The
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
from rllib_caps.core.deployment import policy_spec
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
    "search.py": '''"""ToyBC's Optuna space: its actor's learning rate, log-uniform."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ToySpace:
    low: float
    high: float

    def __call__(self, trial: Any) -> None:
        trial.suggest_float("search/actor_lr", self.low, self.high, log=True)


def toy_space(axes: Mapping[str, Any], ranges: Mapping[str, Any]) -> ToySpace:
    low, high = ranges.get("actor_lr", (1e-4, 1e-2))
    if not 0 < low < high:
        raise ValueError(f"actor_lr: need 0 < low < high, got [{low}, {high}]")
    return ToySpace(float(low), float(high))
''',
}
TOY_ENTRY = '''
TOY_WIDTH = SweepAxis("width", option="widths", default=(16,), kind=int, label="w", named_default=True,
                      settings=lambda width: {"hidden": [width, width]}, help="ToyBC's hidden layer widths")
ALGORITHMS["toybc"] = AlgorithmEntry(
    name="toybc", config_path="rllib_caps.algorithms.toybc.toybc:ToyBCConfig",
    trial_label=fixed_label("ToyBC", TOY_WIDTH), searchable=("actor_lr",), threshold_at_deployment=False,
    title="ToyBC", axes=(TOY_WIDTH,), search_space="rllib_caps.algorithms.toybc.search:toy_space",
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

    tune_help = run_cli(plugged, tmp_path, "rllib_caps.tune", "--help").stdout
    assert "ToyBC's sweep axes" in tune_help and "--widths" in tune_help  # the axis the toy's entry declares

    sweep = ["rllib_caps.tune", "--algos", "toybc", "--tasks", "BallCircle", "--seeds", "0", "--data-root",
             str(data_root), "--storage", str(tmp_path / "results")]
    planned = run_cli(plugged, tmp_path, *sweep, "--name", "toy", "--widths", "16", "32", "--dry-run").stdout
    assert "toybc" in planned and "2 trials" in planned and "w {16, 32}" in planned

    config = tmp_path / "toy.yaml"
    config.write_text(yaml.safe_dump({"training": TINY, "cpus_per_trial": 1.0, "widths": [16, 32]}))
    swept = run_cli(plugged, tmp_path, *sweep, "--name", "toy", "--config", str(config))
    assert "ToyBC w=16" in swept.stdout and "ToyBC w=32" in swept.stdout  # the printed table: one column per value
    experiment = tmp_path / "results" / "toy"
    trained = {trial.name.split("_")[2]: policy_spec(trial / "checkpoint_000000")["model_config"]["hidden"]
               for trial in experiment.glob("toybc_*")}
    assert trained == {"w16": [16, 16], "w32": [32, 32]}  # each trial trained with its value's setting

    run_cli(plugged, tmp_path, "rllib_caps.report", str(experiment))
    assert "ToyBC w=32" in (experiment / "report" / "report.md").read_text()
    header, *rows = (experiment / "report" / "main_table.csv").read_text().splitlines()
    column = header.split(",").index("w")  # the axis's column (its label)
    assert {row.split(",")[column] for row in rows} == {"16", "32"}

    config.write_text(yaml.safe_dump({"training": TINY, "cpus_per_trial": 1.0, "num_samples": 2,
                                      "search_space": {"actor_lr": [1e-4, 1e-3], "seed": 0}}))
    run_cli(plugged, tmp_path, *sweep, "--name", "toysearch", "--config", str(config), "--search", "optuna")
    searched = [json.loads(path.read_text())["search"]["actor_lr"]
                for path in (tmp_path / "results" / "toysearch" / "BallCircle-w16").glob("*/params.json")]
    assert len(searched) == 2 and len(set(searched)) == 2 and all(1e-4 <= lr <= 1e-3 for lr in searched)
    best = yaml.safe_load((tmp_path / "results" / "toysearch" / "best_params.yaml").read_text())
    assert best["overrides"]["BallCircle"]["w16"]["actor_lr"] in searched and best["widths"] == [16]


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
