"""The docs run as printed: every ```bash and ```python block of README.md and of each docs/*.md page, in order, in
a copy of the repository, at tiny sizes through ``RLLIB_CAPS_SMOKE_TEST=1`` (README, "Tests"); one test per page.
A block preceded by ``<!-- docs-test: skip -- REASON -->`` is not run; it must say why. A block whose second run
is promised (a sweep that finds itself finished, a fetch that finds its datasets up to date, an ``--out`` that
``--force`` replaces) is preceded by ``<!-- docs-test: twice -- REASON -->``: after the page's blocks, those run
again, in order, and must work too."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"(?:<!-- docs-test: (?P<mark>skip|twice) -- (?P<reason>[^\n]*?) -->\n)?"
                   r"```(?P<lang>bash|python|sh)\n(?P<code>.*?)```", re.DOTALL)


@dataclass(frozen=True)
class Block:
    source: str  # file:line
    lang: str
    code: str
    mark: str | None  # "skip" or "twice"
    reason: str | None


def blocks(doc: Path) -> list[Block]:
    text = doc.read_text()
    return [Block(f"{doc.relative_to(ROOT)}:{text[:m.start('code')].count(chr(10))}", m["lang"], m["code"], m["mark"],
                  m["reason"]) for m in BLOCK.finditer(text)]


def test_every_marked_block_says_why() -> None:
    all_blocks = [block for doc in DOCS for block in blocks(doc)]
    assert len(all_blocks) >= 5, "the block parser found too few blocks"
    assert any(block.mark == "twice" for block in all_blocks)
    for block in all_blocks:
        assert block.mark is None or len(block.reason.strip()) > 10, block.source


def test_a_block_skipped_as_run_elsewhere_is_printed_there_verbatim() -> None:
    """A block skipped because it "runs as printed in docs/PAGE.md" (a summary in the README) is one of that page's
    blocks, character for character, and that page's test runs it."""
    elsewhere = re.compile(r"runs as printed in (?P<page>docs/[\w.-]+\.md)")
    summaries = [(block, elsewhere.search(block.reason)) for doc in DOCS for block in blocks(doc)
                 if block.mark == "skip" and elsewhere.search(block.reason)]
    assert summaries, "no block is skipped as run elsewhere"
    for block, match in summaries:
        page = [b for b in blocks(ROOT / match["page"]) if b.mark != "skip"]
        assert block.code in [b.code for b in page], f"{block.source}: not a run block of {match['page']}"


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


def run_block(block: Block, repo: Path, env: dict[str, str], attempt: str) -> None:
    argv = ["bash", "-euo", "pipefail", "-c", block.code] if block.lang in ("bash", "sh") else \
        [sys.executable, "-c", block.code]
    start = time.monotonic()
    done = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    print(f"{attempt}: {block.source} took {time.monotonic() - start:.1f} s")  # shown with -s, or on a failure
    assert done.returncode == 0, (f"{attempt}: {block.source} exited {done.returncode}\n{block.code}\n"
                                  f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}")


@pytest.mark.slow
@pytest.mark.parametrize("doc", [d for d in DOCS if any(b.mark != "skip" for b in blocks(d))],
                         ids=lambda doc: doc.name)
def test_docs_run_as_printed(ray_address: str, tmp_path: Path, doc: Path) -> None:
    """The commands join the session's Ray through ``RAY_ADDRESS`` (as ``ray.init`` and the CLIs' ``--address``
    default read it) instead of each starting one; the tests of signals and of ``tests/test_interrupts.py`` start
    Rays of their own."""
    repo = tmp_path / "repo"
    _copy_repository(repo)
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "RLLIB_CAPS_SMOKE_TEST": "1", "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "RAY_ADDRESS": ray_address, "PYTHONPATH": str(repo)}
    runnable = [b for b in blocks(doc) if b.mark != "skip"]
    for block in runnable:
        run_block(block, repo, env, "first run")
    for block in runnable:
        if block.mark == "twice":
            run_block(block, repo, env, "second run")
