"""The docs run as printed: every ```bash and ```python block of README.md and docs/*.md, in order, twice (a
second run must work too), in a copy of the repository, at tiny sizes through ``RLLIB_CAPS_SMOKE_TEST=1``
(README, "Tests"). A block preceded by ``<!-- docs-test: skip -- REASON -->`` is not run; it must say why."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"(?:<!-- docs-test: skip -- (?P<reason>[^\n]*?) -->\n)?"
                   r"```(?P<lang>bash|python|sh)\n(?P<code>.*?)```", re.DOTALL)


@dataclass(frozen=True)
class Block:
    source: str  # file:line
    lang: str
    code: str
    skip_reason: str | None


def blocks() -> list[Block]:
    found = []
    for doc in DOCS:
        text = doc.read_text()
        for m in BLOCK.finditer(text):
            line = text[:m.start("code")].count("\n")
            found.append(Block(f"{doc.relative_to(ROOT)}:{line}", m["lang"], m["code"], m["reason"]))
    return found


def test_every_skipped_block_says_why() -> None:
    all_blocks = blocks()
    assert len(all_blocks) >= 5, "the block parser found too few blocks"
    for block in all_blocks:
        assert block.skip_reason is None or len(block.skip_reason.strip()) > 10, block.source


def _copy_repository(dest: Path) -> None:
    """The tracked and untracked-but-not-ignored files (``shutil.copy2`` keeps the mtimes, so ``make`` sees the
    setup stamp as current), with ``.venv`` linked rather than copied."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    (dest / ".venv").symlink_to(ROOT / ".venv")


@pytest.mark.slow
@pytest.mark.timeout(2700)  # every block twice, sweeps among them: 12 min a pass on the loaded 2-core machine
def test_docs_run_as_printed_twice(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _copy_repository(repo)
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "RLLIB_CAPS_SMOKE_TEST": "1", "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(repo)}
    runnable = [b for b in blocks() if b.skip_reason is None]
    for attempt in ("first run", "second run"):
        for block in runnable:
            argv = ["bash", "-euo", "pipefail", "-c", block.code] if block.lang in ("bash", "sh") else \
                [sys.executable, "-c", block.code]
            done = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=900)
            assert done.returncode == 0, (f"{attempt}: {block.source} exited {done.returncode}\n{block.code}\n"
                                          f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}")
