"""The report from a stored sweep (tests/fixtures/report_results, made by its make_fixture.py): averages over
seeds and thresholds, safe/unsafe marks, the best safe configuration, suite averages, safe counts, files."""

import csv
import io
import json
import re
import shutil
from pathlib import Path

import pytest

from rllib_caps.report import MainTable, ReportError, load_trials, summarize, write_report
from rllib_caps.report.__main__ import main
from rllib_caps.report.cost_limits import COST_LIMITS, CostLimitTable, format_cost_limits, limit_for
from rllib_caps.report.tables import format_latex, format_markdown

FIXTURE = Path(__file__).parent / "fixtures" / "report_results" / "experiment"

# (task, config) -> (normalised reward, normalised cost, safe, best safe): the set scores averaged over seeds.
EXPECTED = {
    ("BallCircle", "K=2"): (0.72, 1.15, False, False),
    ("BallCircle", "K=4"): (0.61, 0.60, True, True),  # the only safe config wins despite its lower reward
    ("CarCircle", "K=2"): (0.52, 0.95, True, True),  # one seed unsafe (1.10), the seed mean safe
    ("CarCircle", "K=4"): (0.43, 0.40, True, False),
    ("PointGoal1", "K=2"): (0.31, 1.60, False, False),
    ("PointGoal1", "K=4"): (0.21, 1.30, False, False),  # no safe config: nothing marked best
    ("easysparse", "K=2"): (0.62, 0.30, True, True),
    ("easysparse", "K=4"): (0.50, 0.60, True, False),  # seed 10 unfinished: seed 0 only
}


@pytest.fixture(scope="module")
def table() -> MainTable:
    records, _ = load_trials(FIXTURE)
    return MainTable(summarize(records))


def test_rows_average_seeds_and_thresholds(table: MainTable) -> None:
    got = {(r.task, r.config): (r.normalized_reward, r.normalized_cost, r.safe, r.best_safe) for r in table.rows}
    assert got.keys() == EXPECTED.keys()
    for key, (reward, cost, safe, best) in EXPECTED.items():
        assert got[key][:2] == pytest.approx((reward, cost), abs=1e-9), key
        assert got[key][2:] == (safe, best), key
    assert [r.task for r in table.rows][::2] == ["BallCircle", "CarCircle", "PointGoal1", "easysparse"]  # by suite


def test_per_threshold_values_and_head_usage(table: MainTable) -> None:
    row = table.cell("PointGoal1", "K=2")
    assert list(row.per_threshold) == [20.0, 40.0, 80.0]  # Safety-Gymnasium thresholds
    assert row.per_threshold[20.0] == pytest.approx((0.29, 1.92))  # reward - 0.02, cost × 1.2
    assert row.head_usage[80.0] == pytest.approx([0.75, 0.25])
    assert table.cell("BallCircle", "K=4").head_usage[10.0] == pytest.approx([0.25, 0.0, 0.0, 0.75])


def test_suite_averages_and_safe_counts(table: MainTable) -> None:
    assert table.suite_average("bullet", "K=2") == pytest.approx((0.62, 1.05))
    assert table.suite_average("bullet", "K=4") == pytest.approx((0.52, 0.50))
    assert table.suite_average("metadrive", "K=4") == pytest.approx((0.50, 0.60))
    assert table.suite_average("velocity", "K=2") is None
    assert table.safe_count("K=2") == (2, 4)
    assert table.safe_count("K=4") == (3, 4)


def test_markdown_marks(table: MainTable) -> None:
    lines = format_markdown(table).splitlines()
    assert "| BallCircle | 0.72 | 1.15 ✗ | **0.61** | **0.60** |" in lines
    assert "| CarCircle | **0.52** | **0.95** | 0.43 | 0.40 |" in lines
    assert "| PointGoal1 | 0.31 | 1.60 ✗ | 0.21 | 1.30 ✗ |" in lines
    assert "| *Bullet average* | 0.62 | 1.05 ✗ | 0.52 | 0.50 |" in lines
    assert "| safe tasks | 2 / 4 |  | 3 / 4 |  |" in lines


def test_latex_uses_the_papers_marks(table: MainTable) -> None:
    tex = format_latex(table)
    assert r"BallCircle & \textcolor{gray}{0.72} & \textcolor{gray}{1.15} & \textcolor{blue}{\textbf{0.61}}" in tex
    assert r"CarCircle & \textcolor{blue}{\textbf{0.52}} & \textcolor{blue}{\textbf{0.95}} & \textbf{0.43}" in tex
    assert r"Safe tasks & \multicolumn{2}{c}{2 / 4} & \multicolumn{2}{c}{3 / 4}" in tex


def test_write_report_files_and_csv(tmp_path: Path) -> None:
    experiment = tmp_path / "experiment"
    shutil.copytree(FIXTURE, experiment)
    report = write_report(experiment)
    assert report.out_dir == experiment / "report"
    names = {p.name for p in report.out_dir.iterdir()}
    assert {"report.md", "main_table.md", "main_table.csv", "main_table.tex", "reward_cost.png", "kappa.png",
            "head_usage.png"} <= names
    assert all((report.out_dir / n).stat().st_size > 10_000 for n in names if n.endswith(".png"))
    markdown = (report.out_dir / "report.md").read_text()
    for png in (n for n in names if n.endswith(".png")):  # every figure shown, by its relative path, with a caption
        (caption,) = re.findall(rf"^!\[(.+)\]\({re.escape(png)}\)$", markdown, re.MULTILINE)
        assert f"\n*{caption}*\n" in markdown, png
    assert "metadrive-simulator 0.4.3" in report.markdown  # the fidelity caveat, since MetaDrive rows exist
    assert "easysparse_K4_seed10" in report.markdown  # the unfinished trial is named
    rows = list(csv.DictReader(io.StringIO((report.out_dir / "main_table.csv").read_text())))
    means = {(r["task"], r["config"]): r for r in rows if r["threshold"] == "mean"}
    assert float(means[("CarCircle", "K=2")]["normalized_cost"]) == pytest.approx(0.95)
    assert means[("CarCircle", "K=2")]["safe"] == "1" and means[("CarCircle", "K=2")]["best_safe"] == "1"
    assert means[("BallCircle", "K=2")]["safe"] == "0"
    assert means[("easysparse", "K=4")]["seeds"] == "0"
    assert float(means[("bullet average", "K=2")]["normalized_cost"]) == pytest.approx(1.05)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with pytest.raises(ReportError, match="already exists"):
        write_report(experiment, out=elsewhere)  # a directory the report does not own
    assert main([str(experiment), "--out", str(elsewhere), "--force"]) == 0
    assert main([str(experiment)]) == 0  # its own report directory: rewritten, a second run works
    assert (report.out_dir / "report.md").is_file()


def test_no_finished_trials_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main([str(tmp_path)]) == 2
    assert "no finished trials" in capsys.readouterr().err
    assert main([str(tmp_path / "missing")]) == 2


def test_cost_limit_configurations_follow_the_paper() -> None:
    assert COST_LIMITS[0] == (5, 10) and COST_LIMITS[-1] == (40, 80)
    assert limit_for("bullet", (5, 10)) == limit_for("metadrive", (5, 10)) == 5.0
    assert limit_for("safetygym", (5, 10)) == limit_for("velocity", (5, 10)) == 10.0
    table = CostLimitTable(configs=["K=2"], counts={(5, 10): {"K=2": (1, 4)}, (10, 20): {"K=2": (3, 4)}})
    assert "| {5, 10} | 1 / 4 |" in format_cost_limits(table, "md")
    assert '"{10, 20}",K=2,3,4' in format_cost_limits(table, "csv")
    assert r"\{5, 10\} & 1 / 4 \\" in format_cost_limits(table, "tex")


def _record(algo: str, seed: int, scores: dict[str, tuple[float, float]], cost_limit: float | None = None,
            heads: int | None = None):
    from rllib_caps.report.records import TrialRecord

    thresholds = {k: {"normalized_reward": r, "normalized_cost": c, "head_usage": {"0": 1.0}}
                  for k, (r, c) in scores.items()}
    mean = {"normalized_reward": sum(r for r, _ in scores.values()) / len(scores),
            "normalized_cost": sum(c for _, c in scores.values()) / len(scores)}
    axes = {name: value for name, value in (("num_heads", heads), ("cost_limit", cost_limit)) if value is not None}
    return TrialRecord(algo=algo, task="BallCircle", seed=seed, search={},
                       evaluation={"thresholds": thresholds, "mean": mean},
                       trial_dir=Path(f"/x/{algo}_{seed}_{cost_limit}"), checkpoint=None, axes=axes)


def test_main_table_puts_algorithms_side_by_side_and_merges_per_kappa_trials_per_seed() -> None:
    """BC-Safe's three per-κ trials of one seed are one seed result (the mean over κ); CI over seeds by
    mean_ci; CAPS's column keeps its K label behind the algorithm's title."""
    records = [_record("caps", s, {"10": (0.5 + d, 0.5), "20": (0.6 + d, 0.4), "40": (0.7 + d, 0.3)}, heads=2)
               for s, d in ((0, 0.0), (10, 0.1), (20, 0.2))]
    for seed, d in ((0, 0.0), (10, 0.3), (20, 0.6)):
        for kappa, (r, c) in {"10": (0.1, 0.9 + d), "20": (0.2, 0.6 + d), "40": (0.3, 0.3 + d)}.items():
            records.append(_record("bc-safe", seed, {kappa: (r, c)}, cost_limit=float(kappa)))
    table = MainTable(summarize(records))
    assert table.configs == ["CAPS K=2", "BC-Safe"]
    caps, bc = table.cell("BallCircle", "CAPS K=2"), table.cell("BallCircle", "BC-Safe")
    assert bc.seeds == (0, 10, 20) and bc.per_threshold[20.0] == pytest.approx((0.2, 0.9))
    assert [p[1] for p in bc.seed_points] == pytest.approx([0.6, 0.9, 1.2])  # each seed: the mean over its κ
    assert (bc.normalized_reward, bc.normalized_cost) == pytest.approx((0.2, 0.9))
    assert bc.cost_ci == pytest.approx(4.302653 * 0.3 / 3 ** 0.5, rel=1e-5)  # t_{0.975, 2} · s / √n
    assert caps.reward_ci == pytest.approx(4.302653 * 0.1 / 3 ** 0.5, rel=1e-5)
    assert caps.best_safe and not bc.best_safe  # both safe on average, CAPS has the higher reward
    markdown = format_markdown(table, ci=True)
    assert "| BallCircle | **0.70 ± 0.25** | **0.40 ± 0.00** | 0.20 ± 0.00 | 0.90 ± 0.75 |" in markdown
    assert "| safe tasks | 1 / 1 |  | 1 / 1 |  |" in markdown
    assert "95% Student-t confidence interval" in markdown and "per-κ trials" in markdown
    assert r"0.70$\pm$0.25" in format_latex(table, ci=True)
    with pytest.raises(ReportError, match="two trials of one seed evaluated κ=10"):
        summarize([*records, _record("bc-safe", 0, {"10": (0.0, 0.0)}, cost_limit=10.0)])


def test_a_trial_rerun_into_a_new_directory_on_resume_leaves_no_unfinished_trial(tmp_path: Path) -> None:
    """Tune reruns a trial that had started but was not yet recorded when the driver died in ``<name>_<4 hex>``;
    the old directory, without results, is that same trial, not an unfinished one. A trial of another config
    without results still is."""
    experiment = tmp_path / "experiment"
    shutil.copytree(FIXTURE, experiment)
    records_before, unfinished_before = load_trials(experiment)
    finished = experiment / "BallCircle_K2_seed0_00000_00000"
    stale = finished.with_name(finished.name + "_stale")
    stale.mkdir()
    shutil.copy(finished / "params.json", stale / "params.json")
    (stale / "result.json").write_text("")
    other = experiment / "BallCircle_K2_seed20_00000_00009"
    other.mkdir()
    params = json.loads((finished / "params.json").read_text())
    (other / "params.json").write_text(json.dumps({**params, "seed": 20}))
    (other / "result.json").write_text("")
    records, unfinished = load_trials(experiment)
    assert len(records) == len(records_before) and sorted(unfinished) == sorted([*unfinished_before, other])
