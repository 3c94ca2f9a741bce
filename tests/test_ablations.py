"""The ablation tables (``rllib_caps.report.ablations``) from hand-made records and trial directories: which axes get
a table, what is held fixed, mean ± Student-t 95% CI by hand, safe marks, the CSV per κ, and critic variants of one
trial read back as one record each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rllib_caps.report.ablations import ablation_tables, format_csv, format_latex, format_markdown
from rllib_caps.report.records import TrialRecord, load_trials
from rllib_caps.report.writer import write_report
from rllib_caps.sweeps.trial_schema import VARIANT_RESULTS

T_975_1 = 12.706204736174707  # Student-t quantile 0.975 with 1 degree of freedom


def evaluation(reward: float, cost: float) -> dict:
    """Two thresholds: κ = 10 gets (reward − 0.1, cost − 0.2), κ = 20 (reward + 0.1, cost + 0.2)."""
    per = {"10": (reward - 0.1, cost - 0.2), "20": (reward + 0.1, cost + 0.2)}
    thresholds = {k: {"threshold": float(k), "episodes": 1, "reward": 0.0, "cost": 0.0, "normalized_reward": r,
                      "normalized_cost": c, "safe": float(c <= 1), "head_usage": {"0": 0.5, "1": 0.5},
                      "mean_length": 200.0} for k, (r, c) in per.items()}
    return {"thresholds": thresholds, "mean": {"normalized_reward": reward, "normalized_cost": cost,
                                               "safe": float(cost <= 1)}}


def record(seed: int, reward: float, cost: float, *, heads: int = 2, actor: str = "shared", critic: str = "offline",
           task: str = "BallCircle") -> TrialRecord:
    return TrialRecord(algo="caps", task=task, seed=seed, search={}, evaluation=evaluation(reward, cost),
                       trial_dir=Path(f"/x/{task}{heads}{actor}{seed}"), checkpoint=None,
                       axes={"num_heads": heads, "actor": actor, "critic": critic})


def test_one_table_per_varied_axis_with_the_other_axes_at_their_reference() -> None:
    records = [record(s, 0.5, 0.5, heads=k, actor=a) for s in (0, 1) for k in (2, 4) for a in ("shared", "separate")]
    tables = {t.axis.name: t for t in ablation_tables(records)}
    assert set(tables) == {"num_heads", "actor"}  # backbone and critic take one value: no table
    assert tables["num_heads"].fixed == {"actor": "shared", "backbone": "iql", "critic": "offline"}
    assert tables["num_heads"].values == [2, 4]
    assert tables["actor"].fixed == {"num_heads": 2, "backbone": "iql", "critic": "offline"}
    assert tables["actor"].values == ["shared", "separate"]
    # Without K = 2 in the sweep the reference K is the smallest present.
    only_large = [r for r in records if r.axes["num_heads"] == 4] + [record(0, 0.1, 0.1, heads=8)]
    assert {t.axis.name: t.fixed.get("num_heads") for t in ablation_tables(only_large)}["actor"] == 4


def test_cells_are_mean_and_student_t_ci_over_seeds_with_safe_marks() -> None:
    records = [record(0, 0.4, 0.8), record(1, 0.6, 1.0),  # offline: reward 0.50 ± 1.27, cost 0.90 ± 1.27 (safe)
               record(0, 0.7, 1.4, critic="fqe-reward"), record(1, 0.7, 1.2, critic="fqe-reward"),  # unsafe
               record(0, 0.2, 0.1, critic="fqe-both"), record(1, 0.2, 0.1, critic="fqe-both")]
    (table,) = ablation_tables(records)
    assert table.axis.name == "critic" and table.values == ["offline", "fqe-reward", "fqe-both"]
    half = T_975_1 * 0.1414213562373095 / 2 ** 0.5
    offline = table.cells[("BallCircle", "offline")]
    assert offline.reward.mean == pytest.approx(0.5) and offline.reward.half_width == pytest.approx(half)
    assert offline.cost.mean == pytest.approx(0.9) and offline.cost.half_width == pytest.approx(half)
    assert table.cells[("BallCircle", "fqe-both")].reward.half_width == pytest.approx(0.0)
    assert table.best_safe("BallCircle") == "offline"  # fqe-reward has more reward but is unsafe
    md = format_markdown(table)
    row = next(line for line in md.splitlines() if line.startswith("| BallCircle"))
    assert row == ("| BallCircle | **0.50 ± 1.27** | **0.90 ± 1.27** | 0.70 ± 0.00 | 1.30 ± 1.27 ✗ | "
                   "0.20 ± 0.00 | 0.10 ± 0.00 |")
    assert "Student-t 95% confidence interval over seeds" in md and "critic" not in md.split("(")[1].split(")")[0]
    tex = format_latex(table)
    assert r"\textcolor{blue}{\textbf{0.50 $\pm$ 1.27}}" in tex and r"\textcolor{gray}{1.30 $\pm$ 1.27}" in tex
    lines = format_csv(table).splitlines()
    assert lines[0].startswith("axis,fixed,task,value,seeds,threshold,normalized_reward,reward_ci95")
    # κ = 10 of the offline critics: rewards 0.3 and 0.5 over the two seeds.
    assert f"critic,K=2 actor=shared backbone=iql,BallCircle,offline,0 1,10,0.4,{half:.6g}," in lines[1]
    assert len(lines) == 1 + 3 * 3  # header + (2 thresholds + mean) × 3 critics


def test_single_seed_cells_have_no_interval() -> None:
    (table,) = ablation_tables([record(0, 0.4, 0.5, heads=2), record(0, 0.3, 0.2, heads=4)])
    assert "| BallCircle | **0.40** | **0.50** | 0.30 | 0.20 |" in format_markdown(table)


def _write_trial(experiment: Path, name: str, params: dict, results: list[dict]) -> None:
    trial = experiment / name
    trial.mkdir(parents=True)
    (trial / "params.json").write_text(json.dumps(params))
    (trial / "result.json").write_text("\n".join(json.dumps(r) for r in results) + "\n")


def test_critic_variants_of_one_trial_become_records_and_the_report_writes_ablation_tables(tmp_path: Path) -> None:
    experiment = tmp_path / "exp"
    for seed in (0, 1):
        variants = {"offline": evaluation(0.5 + seed / 10, 0.5), "fqe-reward": evaluation(0.6, 0.7),
                    "fqe-both": evaluation(0.2, 0.1)}
        _write_trial(experiment, f"BallCircle_K2_seed{seed}",
                     {"algo": "caps", "task": "BallCircle", "heads": 2, "seed": seed, "backbone": "iql",
                      "actor": "shared", "setup": {}},
                     [{"training_iteration": 1}, {"training_iteration": 2, "evaluation": {"dsrl": evaluation(0, 0)},
                                                  VARIANT_RESULTS: variants}])
    _write_trial(experiment, "BallCircle_K4_seed0",
                 {"algo": "caps", "task": "BallCircle", "heads": 4, "seed": 0, "setup": {}},
                 [{"training_iteration": 2, "evaluation": {"dsrl": evaluation(0.3, 0.3)}}])
    records, unfinished = load_trials(experiment)
    assert unfinished == []
    assert sorted((r.axes["num_heads"], r.seed, r.axes["critic"]) for r in records) == [
        (2, 0, "fqe-both"), (2, 0, "fqe-reward"), (2, 0, "offline"), (2, 1, "fqe-both"), (2, 1, "fqe-reward"),
        (2, 1, "offline"), (4, 0, "offline")]
    assert {r.config for r in records} == {"K=2", "K=2 fqe-reward", "K=2 fqe-both", "K=4"}
    report = write_report(experiment)
    assert "## Ablation: number of heads K" in report.markdown
    assert "## Ablation: offline critics vs FQE" in report.markdown
    assert "0.55 ± 0.64" in report.markdown  # offline reward over seeds 0.5, 0.6
    for name in ("ablation_num_heads", "ablation_critic"):
        for fmt in ("md", "csv", "tex"):
            assert (report.out_dir / f"{name}.{fmt}").is_file()
    assert not (report.out_dir / "ablation_actor.md").exists()
