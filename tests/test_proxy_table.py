"""The proxy benchmark's table (``benchmarks/proxy_table.py``): suites from the tasks, the mean ± 95 % t-interval
over seeds, safe (seed, κ) counts, published figures as references, and the inputs it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.proxy_table import main, mean_and_halfwidth


def arms_json(path: Path, rewards: tuple[float, float, float], costs: tuple[float, float, float]) -> str:
    """A ``head_selection.py arms`` JSON with the default arm's two sources (the pessimism arm is derived)."""
    row = {"shift": 0.0, "per_kappa": {k: [r, c] for k, r, c in zip(("10", "20", "40"), rewards, costs, strict=True)},
           "mean_nr": sum(rewards) / 3, "max_nc": max(costs)}
    path.write_text(json.dumps({"head_order": row, "head_order+calibrated": {**row, "shift": -1.0}}))
    return str(path)


def authors_json(path: Path, task: str, rewards: tuple[float, ...], costs: tuple[float, ...]) -> str:
    path.write_text(json.dumps({"task": task, "mean_normalized_reward": sum(rewards) / len(rewards),
                                "per_kappa": {str(i): {"normalized_reward": r, "normalized_cost": c}
                                              for i, (r, c) in enumerate(zip(rewards, costs, strict=True))}}))
    return str(path)


def test_the_t_interval_over_seeds() -> None:
    mean, half = mean_and_halfwidth([0.2, 0.4])
    assert mean == pytest.approx(0.3)
    assert half == pytest.approx(12.7062047 * 0.1414213562 / 2 ** 0.5, rel=1e-6)  # t(0.975, 1) · sd / √n
    assert mean_and_halfwidth([0.5]) == (0.5, None)


def test_rows_per_suite_with_safe_counts_and_ratios(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ours = [f"CarCircle1-v3={arms_json(tmp_path / 'c0.json', (0.2, 0.3, 0.4), (0.5, 1.2, 0.9))}",
            f"CarCircle1-v3={arms_json(tmp_path / 'c1.json', (0.4, 0.5, 0.6), (0.5, 0.8, 0.9))}",
            f"BallCircle={arms_json(tmp_path / 'b0.json', (0.6, 0.6, 0.6), (0.1, 0.2, 0.3))}"]
    authors = [f"CarCircle1-v3={authors_json(tmp_path / 'a0.json', 'CarCircle1', (0.1, 0.2, 0.3), (0.1, 0.2, 2.0))}",
               f"CarCircle1-v3={authors_json(tmp_path / 'a1.json', 'CarCircle1', (0.2, 0.2, 0.2), (0.1, 0.2, 0.3))}",
               "BallCircle=0.5"]
    assert main(["--ours", *ours, "--authors", *authors, "--task", "BallCircle=BallCircle"]) == 0
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): [c.strip() for c in line.split("|")[3:-1]]
            for line in capsys.readouterr().out.splitlines()[2:]}
    car = rows[("safetygym", "CarCircle1-v3")]
    assert car[0] == "2" and car[1].startswith("0.400 ± ") and car[2] == "5 / 6" and car[3] == "1.20"
    assert car[4].startswith("0.200 ± ") and car[5] == "5 / 6" and car[6] == "2.00" and car[7] == "2.00"
    ball = rows[("bullet", "BallCircle")]
    assert ball[1] == "0.600" and ball[4] == "0.500" and ball[5] == "—" and ball[7] == "1.20"
    assert rows[("all", "mean of every dataset")][-1] == "1.60"


def test_trains_own_evaluation_is_read_as_well(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    evaluation = tmp_path / "train.json"
    evaluation.write_text(json.dumps({"thresholds": {"20": {"normalized_reward": 0.3, "normalized_cost": 1.5},
                                                     "40": {"normalized_reward": 0.5, "normalized_cost": 0.5}}}))
    assert main(["--ours", f"CarCircle1-v3={evaluation}", "--authors", "CarCircle1-v3=0.2",
                 "--task", "CarCircle1-v3=CarCircle1"]) == 0
    row = capsys.readouterr().out.splitlines()[2].split("|")
    assert [c.strip() for c in row[4:7]] == ["0.400", "1 / 2", "1.50"] and row[10].strip() == "2.00"
    assert main(["--ours", f"CarCircle1-v3={evaluation}", "--authors", "CarCircle1-v3=-0.1",
                 "--task", "CarCircle1-v3=CarCircle1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].split("|")[10].strip() == "—" and lines[-1].split("|")[10].strip() == "—"


def test_a_dataset_without_the_authors_or_a_task_is_refused(tmp_path: Path) -> None:
    ours = f"BallCircle={arms_json(tmp_path / 'b0.json', (0.6, 0.6, 0.6), (0.1, 0.2, 0.3))}"
    with pytest.raises(SystemExit, match="--authors: no run for BallCircle"):
        main(["--ours", ours, "--authors", "Other=0.5"])
    with pytest.raises(SystemExit, match="--task: BallCircle's task is not known"):
        main(["--ours", ours, "--authors", "BallCircle=0.5"])
