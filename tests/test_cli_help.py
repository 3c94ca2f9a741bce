"""The command lines answer at once and check before Ray: ``--help`` of every CLI imports no RLlib, Ray, torch or SciPy
(the timings are in docs/performance.md, not here), the defaults it shows are the config classes' own, ``train``
and ``tune`` share their training flags, and ``tune`` refuses what needs no Ray (GPUs, a W&B key) before Ray, on a
dry run too."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from rllib_caps.algorithms.registry import (
    ALGORITHMS,
    COMMON_TRAIN_FLAGS,
    HELP_DEFAULTS,
    SETTING_ALIASES,
    declared,
    default_config,
    defaults_text,
    help_defaults,
)
from rllib_caps.sweeps.options import SweepError, resolve_options
from rllib_caps.train import flag_names
from rllib_caps.tune import main as tune_main
from rllib_caps.tune import parse_args as tune_args

ROOT = Path(__file__).resolve().parents[1]
CLIS = ("rllib_caps.tune", "rllib_caps.train", "rllib_caps.evaluate", "rllib_caps.export", "rllib_caps.report",
        "rllib_caps.tasks", "rllib_caps.bench", "rllib_caps.cli", "data_conversion.fetch", "data_conversion.collect",
        "data_conversion.dsrl_to_parquet", "data_conversion.frontier")
HEAVY = ("ray", "torch", "scipy", "matplotlib", "pandas", "wandb", "mlflow", "onnx")
HELP_SCRIPT = """
import contextlib, io, runpy, sys
for module in sys.argv[1:]:
    sys.argv = [module, "--help"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    assert out.getvalue().startswith("usage:"), (module, out.getvalue()[:200])
print(" ".join(sorted(name for name in sys.modules if name.split(".")[0] in {heavy})))
"""


def test_every_cli_help_imports_no_rllib_ray_torch_or_scipy() -> None:
    """All the CLIs' ``--help`` in one process, one after another: none imports a heavy library (a parser that
    needs a config class's default, or a CLI whose top-level imports start the work, would)."""
    done = subprocess.run([sys.executable, "-c", HELP_SCRIPT.format(heavy=set(HEAVY)), *CLIS], capture_output=True,
                          text=True, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [], f"--help imported {done.stdout}"


def _plain(value: object) -> object:
    return list(value) if isinstance(value, list | tuple) else value


def test_the_declared_help_defaults_are_the_config_classes() -> None:
    """Every setting whose default a help text shows, for every algorithm: the declared value (``HELP_DEFAULTS``
    and the entry's ``defaults``) is the config class's, and an algorithm whose config has the setting declares it."""
    shown = set(HELP_DEFAULTS) | {key for entry in ALGORITHMS.values() for key in entry.defaults} | {
        flag.setting for flag in declared("train_flags").values() if flag.kind is not None}
    assert {"steps", "hidden", "batch_size", "heads", "cost_gamma"} <= shown
    for name, entry in ALGORITHMS.items():
        config = default_config(name)
        for setting in sorted(shown):
            attribute = SETTING_ALIASES.get(setting, setting)
            real = getattr(config, f"resolved_{attribute}", getattr(config, attribute, None))
            assert _plain(help_defaults(entry).get(setting)) == _plain(real), f"{name}: {setting}"


def test_an_undeclared_default_is_refused() -> None:
    assert defaults_text("steps") == "100000 (caps, bc-all, bc-safe, cpq, coptidice, cdt); 300000 (bearl)"
    with pytest.raises(ValueError, match="no algorithm declares a default of 'actor_lr'"):
        defaults_text("actor_lr")


def test_train_and_tune_share_the_training_flags(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Each of ``COMMON_TRAIN_FLAGS`` is a flag of both parsers, and ``tune``'s override the YAML's ``training``."""
    flags = {flag.flag for flag in COMMON_TRAIN_FLAGS}
    assert {"--hidden", "--batch-size", "--updates-per-iteration", "--steps", "--eval-every"} <= flags
    with pytest.raises(SystemExit):
        tune_args(["--help"])
    assert flags <= flag_names() and flags <= set(re.findall(r"--[\w-]+", capsys.readouterr().out))
    config = tmp_path / "sweep.yaml"
    config.write_text("training: {hidden: [64, 64], batch_size: 128, steps: 500}\n")
    options = resolve_options(tune_args(["--config", str(config), "--hidden", "32", "32", "--batch-size", "16",
                                         "--updates-per-iteration", "10"]))
    assert options.training_settings() == {"hidden": [32, 32], "batch_size": 16, "steps": 500,
                                           "updates_per_iteration": 10}
    config.write_text("hidden: 256\n")
    with pytest.raises(SweepError, match="sweep.yaml: hidden must be a list of integers, got 256"):
        resolve_options(tune_args(["--config", str(config)]))
    with pytest.raises(SweepError, match="--batch-size must be"):
        resolve_options(tune_args(["--batch-size", "0"]))


def sweep_argv(tmp_path: Path, *extra: str) -> list[str]:
    return ["--tasks", "BallCircle", "--seeds", "0", "--data-root", str(ROOT / "datasets"), "--storage",
            str(tmp_path), "--name", "checked", "--steps", "100", "--updates-per-iteration", "50", *extra]


def test_tune_refuses_gpus_and_a_missing_wandb_key_before_ray(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture) -> None:
    """On a local Ray: more GPUs than this machine has, and W&B online without an API key, are refused in a run
    and in a dry run, with nothing written and no Ray started; a dry run that passes says what it checked."""
    import ray
    import torch

    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # a local Ray: this machine's GPUs are the cluster's

    def no_ray(*args: object, **kwargs: object) -> None:
        raise AssertionError("tune started Ray before refusing")

    monkeypatch.setattr(ray, "init", no_ray)  # (another test of this worker may have started one already)
    too_many = str(torch.cuda.device_count() + 1)
    for extra in ([], ["--dry-run"]):
        assert tune_main(sweep_argv(tmp_path, "--num-gpus", too_many, *extra)) == 2
        assert f"--num-gpus {too_many}: this machine has {torch.cuda.device_count()} CUDA GPUs" in \
            capsys.readouterr().err
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc, no `wandb login`
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.chdir(tmp_path)
    for extra in ([], ["--dry-run"]):
        assert tune_main(sweep_argv(tmp_path, "--wandb", *extra)) == 2
        assert "W&B logs online (mode online) but has no API key; set WANDB_API_KEY" in capsys.readouterr().err
    assert not (tmp_path / "checked").exists()
    assert tune_main(sweep_argv(tmp_path, "--dry-run")) == 0
    assert "checked before Ray starts: --storage writable, 1 of 1 dataset(s)" in capsys.readouterr().out
