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


def test_the_committed_behaviour_policies_load_as_data_and_act() -> None:
    """Every committed snapshot set (what the script rolls out instead of training PPO) loads without a pickle and
    acts with finite actions of its own action size."""
    import numpy as np
    import torch

    from data_conversion.behavior_policies import load_snapshots

    sets = sorted(p for p in (ROOT / "datasets" / "sources" / "snapshots").iterdir() if p.is_dir())
    assert sets, "no committed behaviour policies"
    for directory in sets:
        assert not list(directory.rglob("*.pkl")), directory
        snapshots = load_snapshots(directory)
        assert len(snapshots) > 1, directory
        for snapshot in snapshots:
            module = snapshot.module
            obs = np.zeros((1, *module.observation_space.shape), dtype=np.float32)
            inputs = module.forward_inference({"obs": torch.as_tensor(obs)})["action_dist_inputs"]
            assert inputs.shape == (1, 2 * module.action_space.shape[0]) and inputs.isfinite().all(), directory
