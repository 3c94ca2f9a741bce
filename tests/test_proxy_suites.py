"""datasets/sources/proxy_suites.sh, the proxy datasets' rebuild: a bad call is refused at once, before any work."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "datasets" / "sources" / "proxy_suites.sh"


def test_a_bad_call_exits_2_naming_the_fault_and_collects_nothing(tmp_path: Path) -> None:
    missing = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert missing.returncode == 2 and "usage:" in missing.stderr
    out = tmp_path / "proxy"
    bad = subprocess.run(["bash", str(SCRIPT), str(out), "SwimmerVelocity", "CarCircle9"], capture_output=True,
                         text=True, check=False, env={"PATH": "/usr/bin:/bin", "PYTHON": "/bin/false"})
    assert bad.returncode == 2 and "unknown dataset 'CarCircle9'" in bad.stderr
    assert list(out.iterdir()) == []  # the good name before it was not started either
