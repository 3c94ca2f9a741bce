"""rllib-caps as an installable package (``pyproject.toml``): the exact lock that ``make`` installs
(``requirements.txt``) lies in the declared ranges, and the wheel, built offline, installs into a fresh environment
that already has Ray and torch, where the ``rllib-caps`` console script runs."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def locked() -> dict[str, str]:
    """``requirements.txt``'s pins: package name -> version."""
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = re.fullmatch(r"([\w.-]+)(?:\[[\w,-]+\])?==([\w.+-]+)", line).groups()
            pins[canonicalize_name(name)] = version
    return pins


def test_the_lock_lies_in_the_declared_ranges() -> None:
    """Every declared requirement (runtime and extras) is locked at a version its range allows, and every locked
    package is declared: the ranges and the lock cannot drift apart."""
    declared = [Requirement(text) for text in PROJECT["dependencies"]]
    declared += [Requirement(text) for extra in PROJECT["optional-dependencies"].values() for text in extra]
    assert set(PROJECT["optional-dependencies"]) == {"sim", "tracking", "minari", "onnx", "dev"}
    pins = locked()
    assert {"torch", "ray", "wandb", "onnxruntime", "pytest"} <= set(pins)
    for requirement in declared:
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement} is declared but not locked in requirements.txt"
        assert requirement.specifier.contains(pins[name]), f"requirements.txt locks {name}=={pins[name]}, " \
                                                           f"outside the declared {requirement}"
        assert requirement.specifier and (name == "ruff" or "==" not in str(requirement.specifier)), \
            f"{requirement}: a range, not a pin (only ruff, whose lint rules change between releases, is pinned)"
    assert set(pins) == {canonicalize_name(r.name) for r in declared}


def test_the_wheel_installs_beside_ray_and_torch_and_its_console_script_runs(tmp_path: Path) -> None:
    """``pip wheel`` (offline, no build isolation) of a copy of the sources; a fresh venv that sees this
    environment's site-packages through a ``.pth`` line (Ray, torch, ..., but not the editable rllib_caps, whose
    finder a plain path line does not run); the wheel installed there without dependencies or an index; then
    ``rllib-caps --help`` and ``rllib-caps tasks`` run from the venv's bin, importing the installed copy."""
    src = tmp_path / "src"
    for name in ("rllib_caps", "data_conversion"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                    "-w", str(tmp_path / "dist"), str(src)], check=True, capture_output=True, cwd=tmp_path)
    wheel = next((tmp_path / "dist").glob("rllib_caps-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q",
                    str(wheel)], check=True, capture_output=True)
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}  # no PYTHONPATH to the sources

    def run(*argv: str) -> str:
        done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    assert run(str(python), "-c", "import rllib_caps; print(rllib_caps.__file__)").startswith(purelib)
    usage = run(str(venv / "bin" / "rllib-caps"), "--help")
    assert usage.startswith("usage: rllib-caps COMMAND")
    assert all(command in usage for command in ("train", "evaluate", "tune", "report", "export", "fetch", "tasks"))
    assert "BallCircle" in run(str(venv / "bin" / "rllib-caps"), "tasks")
