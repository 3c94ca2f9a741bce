"""The one seam to Ray's, Tune's and torch's private members (``rllib_caps/core/ray_internals.py``): the pinned
versions, every private member it relies on still there, and no other module naming one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import ray
import torch

from rllib_caps.core.ray_internals import PUBLIC_INSTEAD, REQUIRED, missing_internals

ROOT = Path(__file__).resolve().parents[1]
SEAM = ROOT / "rllib_caps" / "core" / "ray_internals.py"
SCANNED = ("rllib_caps", "data_conversion", "benchmarks")
RECHECK = "upgrading means re-checking rllib_caps/core/ray_internals.py (each private member it lists), then the pin"


def pinned(package: str) -> str:
    match = re.search(rf"^{package}(\[[^\]]*\])?==(\S+)", (ROOT / "requirements.txt").read_text(), re.MULTILINE)
    assert match, f"requirements.txt pins no {package}"
    return match[2]


def test_ray_is_the_pinned_version() -> None:
    assert pinned("ray") == "2.60.0", f"requirements.txt pins Ray {pinned('ray')}: {RECHECK}"
    assert ray.__version__ == "2.60.0", f"Ray {ray.__version__} is installed, the seam is checked on 2.60.0: {RECHECK}"


def test_torch_is_the_pinned_version() -> None:
    installed = torch.__version__.split("+")[0]  # the CPU and CUDA builds of one version
    assert installed == pinned("torch"), f"torch {installed} is installed, {pinned('torch')} pinned: {RECHECK}"


def test_every_private_member_used_exists() -> None:
    assert missing_internals() == [], RECHECK


@pytest.mark.parametrize("owner", ["torch", "ray.tune.search.Repeater",
                                   "ray.rllib.core.learner.learner.Learner.update"])
def test_a_missing_member_is_reported(monkeypatch: pytest.MonkeyPatch, owner: str) -> None:
    """The check can fail, for a module's attribute, an instance attribute and a keyword argument."""
    monkeypatch.setitem(REQUIRED, owner, (*REQUIRED[owner], "_not_in_ray"))
    assert missing_internals() == [f"{owner}._not_in_ray"]


PRIVATE = {name for names in REQUIRED.values() for name in names} | set(PUBLIC_INSTEAD)


def named_privates(source: str) -> list[tuple[int, str]]:
    """(line, name) of every attribute, definition, keyword argument, import or string that names a private
    member of ``REQUIRED`` or ``PUBLIC_INSTEAD``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names = [node.name]
        elif isinstance(node, ast.keyword):
            names = [node.arg]
        elif isinstance(node, ast.alias):
            names = [node.name.rsplit(".", 1)[-1]]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value]
        else:
            continue
        found += [(getattr(node, "lineno", 0), name) for name in names if name in PRIVATE]
    return sorted(found)


def test_only_the_seam_names_private_members() -> None:
    offenders = [f"{path.relative_to(ROOT)}:{line}: {name}" + (f" (use {PUBLIC_INSTEAD[name]})"
                                                                 if name in PUBLIC_INSTEAD else "")
                 for folder in SCANNED for path in sorted((ROOT / folder).rglob("*.py")) if path != SEAM
                 for line, name in named_privates(path.read_text())]
    assert not offenders, ("private Ray/torch members outside rllib_caps/core/ray_internals.py (route them "
                           "through it):\n" + "\n".join(offenders))


def test_the_scan_finds_private_members() -> None:
    """The scan is not vacuous: it finds each kind of use, and every member the seam uses."""
    source = ("class Config(AlgorithmConfig):\n"
              "    @property\n"
              "    def _model_config_auto_includes(self):\n"
              "        self._value_error('x')\n"
              "learner.update(batch=b, _no_metrics_reduce=True)\n"
              "from torch import _foreach_lerp_\n"
              "getattr(group, '_learner')\n")
    assert [name for _, name in named_privates(source)] == [
        "_model_config_auto_includes", "_value_error", "_no_metrics_reduce", "_foreach_lerp_", "_learner"]
    assert {name for _, name in named_privates(SEAM.read_text())} >= PRIVATE - set(PUBLIC_INSTEAD)


def test_tunes_callback_tag_counts_as_rays_own_without_importing_the_trackers() -> None:
    """``count_tune_callbacks_by_name``: the usage tag's counts are those of Ray's own count, over built-in,
    integration, custom and non-callbacks, and a process that records the tag imports neither W&B nor MLflow."""
    import subprocess
    import sys

    from ray.air._internal import usage
    from ray.air.integrations.mlflow import MLflowLoggerCallback
    from ray.air.integrations.wandb import WandbLoggerCallback
    from ray.tune import Callback
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback, LoggerCallback

    from rllib_caps.core.ray_internals import count_tune_callbacks_by_name

    class Custom(Callback):
        pass

    class CustomLogger(LoggerCallback):
        pass

    class DriverWandb(WandbLoggerCallback):  # a subclass under another name is a custom logger to Ray
        pass

    callbacks = [JsonLoggerCallback(), CSVLoggerCallback(), WandbLoggerCallback(project="p"),
                 MLflowLoggerCallback(), DriverWandb(project="p"), Custom(), Custom(), CustomLogger(), object()]
    rays = dict(usage._count_callbacks(callbacks))
    assert rays == {"JsonLoggerCallback": 1, "CSVLoggerCallback": 1, "WandbLoggerCallback": 1,
                    "MLflowLoggerCallback": 1, "CustomLoggerCallback": 2, "CustomCallback": 2}
    original = usage._count_callbacks
    try:
        count_tune_callbacks_by_name()
        assert dict(usage._count_callbacks(callbacks)) == rays
        assert dict(usage._count_callbacks(None)) == {}
    finally:
        usage._count_callbacks = original

    tagged = subprocess.run(
        [sys.executable, "-c",
         "import sys\nfrom ray.air._internal import usage\nfrom ray.tune import Callback\n"
         "from rllib_caps.core.ray_internals import count_tune_callbacks_by_name\n"
         "count_tune_callbacks_by_name()\nprint(dict(usage._count_callbacks([Callback()])))\n"
         "print(sorted(name for name in ('mlflow', 'wandb', 'ray.air.integrations.mlflow') if name in sys.modules))"],
        capture_output=True, text=True, check=True, cwd=ROOT)
    assert tagged.stdout.splitlines() == ["{'CustomCallback': 1}", "[]"], tagged.stdout + tagged.stderr
