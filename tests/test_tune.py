"""The sweep CLI: options, resources, per-trial settings (fast), and real Tune sweeps on CPU over tiny real
datasets (slow): a 2 tasks × 2 seeds sweep with its report, and a sweep killed mid-way and resumed."""

from __future__ import annotations

import json
import math
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from sim_datasets import make_data_root  # tests/sim_datasets.py

from rllib_caps.envs.tasks import get_task
from rllib_caps.report import MainTable, load_trials, summarize, write_report
from rllib_caps.report.__main__ import main as report_main
from rllib_caps.sweeps.grid import describe_grid, grid_variants
from rllib_caps.sweeps.options import SweepError, SweepOptions, load_config_file, resolve_options
from rllib_caps.sweeps.plan import (
    LEGACY_PLAN_FILE,
    PLAN_FILE,
    experiment_started,
    new_trial_grids,
    read_plan,
    record_plan,
    sweep_plan,
)
from rllib_caps.sweeps.resources import plan_resources
from rllib_caps.sweeps.runner import dashboard_message, run_sweep, setup_dict
from rllib_caps.sweeps.trainable import SweepTrial
from rllib_caps.sweeps.trials import (
    METRIC_KEYS,
    constrained_objective,
    dataset_dir,
    describe_trial,
    settings_for,
    trial_config,
    trial_name,
    trial_settings,
    unknown_settings,
)
from rllib_caps.tune import main, parse_args

ROOT = Path(__file__).resolve().parents[1]
REPORT_FIXTURE = ROOT / "tests" / "fixtures" / "report_results" / "experiment"
TINY_TRAINING = {"steps": 60, "updates_per_iteration": 30, "hidden": [16, 16], "batch_size": 32, "eval_episodes": 1}


# ------------------------------------------------------------------------------------------------ fast

def test_resources_pack_fractional_trials_and_share_gpus() -> None:
    r = plan_resources(12, 2, 0, num_gpus=0, cpus_per_trial=0.5, gpus_per_trial=None, max_concurrent=None)
    assert (r.cpus, r.gpus, r.concurrency) == (0.5, 0.0, 4)
    r = plan_resources(12, 16, 1, num_gpus=1, cpus_per_trial=1, gpus_per_trial=None, max_concurrent=None)
    assert (r.gpus, r.concurrency) == (pytest.approx(1 / 12), 12)
    r = plan_resources(3, 16, 4, num_gpus=4, cpus_per_trial=1, gpus_per_trial=None, max_concurrent=None)
    assert r.gpus == 1.0  # one learner per trial uses at most one GPU
    r = plan_resources(12, 16, 2, num_gpus=2, cpus_per_trial=1, gpus_per_trial=0.5, max_concurrent=None)
    assert (r.gpus, r.concurrency) == (0.5, 4)
    r = plan_resources(12, 16, 0, num_gpus=0, cpus_per_trial=1, gpus_per_trial=None, max_concurrent=3)
    assert r.concurrency == 3
    with pytest.raises(SweepError, match="--num-gpus"):
        plan_resources(4, 2, 0, num_gpus=1, cpus_per_trial=1, gpus_per_trial=None, max_concurrent=None)
    with pytest.raises(SweepError, match="--cpus-per-trial"):
        plan_resources(4, 2, 0, num_gpus=0, cpus_per_trial=3, gpus_per_trial=None, max_concurrent=None)


def test_overrides_apply_suite_then_task_then_k() -> None:
    training = {"steps": 100, "awr_beta": 3.0, "hidden": [8]}
    overrides = {"metadrive": {"steps": 200, "expectile_reward": 0.5, "K4": {"awr_beta": 1.0}},
                 "easysparse": {"steps": 300, "K4": {"lambdas": [0.5, 1.5]}}, "BallCircle": {"steps": 7}}
    got = trial_settings(training, overrides, get_task("easysparse"), {"num_heads": 4})
    assert got == {"steps": 300, "awr_beta": 1.0, "hidden": [8], "expectile_reward": 0.5, "lambdas": [0.5, 1.5]}
    assert trial_settings(training, overrides, get_task("easysparse"), {"num_heads": 2})["awr_beta"] == 3.0
    assert trial_settings(training, overrides, get_task("CarRun"), {"num_heads": 2}) == training


def test_command_line_overrides_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "small.yaml"
    config.write_text(yaml.safe_dump({"tasks": ["BallRun", "CarRun"], "seeds": [1, 2], "data_root": "d",
                                      "training": {"steps": 50}}))
    options = resolve_options(parse_args(["--config", str(config), "--seeds", "7", "--steps", "9"]))
    assert (options.tasks, options.seeds, options.data_root, options.name) == ("BallRun,CarRun", [7], "d", "small")
    assert options.training_settings() == {"steps": 9}
    assert options.axes["num_heads"] == [2] and options.cpus_per_trial == 1.0  # defaults
    config.write_text("seeds: [1]\nlearning_rate: 3\n")
    with pytest.raises(SweepError, match=r"small.yaml: unknown keys \['learning_rate'\]"):
        load_config_file(config)
    config.write_text("seeds: [1\n")
    with pytest.raises(SweepError, match=r"--config .*small.yaml: not valid YAML \(while parsing"):
        load_config_file(config)
    with pytest.raises(SweepError, match=r"--config .*absent.yaml: cannot read it \(No such file"):
        load_config_file(tmp_path / "absent.yaml")
    with pytest.raises(SweepError, match="--tasks: unknown task or suite 'BallCircel'.*BallCircle"):
        SweepOptions(tasks="BallCircel").task_specs()


def test_the_cost_limit_table_is_on_when_an_algorithm_takes_kappa_at_deployment() -> None:
    assert resolve_options(parse_args([])).report_cost_limits  # CAPS
    assert resolve_options(parse_args(["--algos", "bc-safe", "cdt"])).report_cost_limits
    assert not resolve_options(parse_args(["--algos", "bc-safe", "bearl"])).report_cost_limits
    assert not resolve_options(parse_args(["--no-cost-limits"])).report_cost_limits
    assert resolve_options(parse_args(["--algos", "cpq", "--cost-limits"])).report_cost_limits


def test_missing_dataset_names_both_conversion_commands(tmp_path: Path) -> None:
    with pytest.raises(SweepError) as err:
        dataset_dir(tmp_path, get_task("CarRun"))
    for text in ("--data-root", str(tmp_path / "CarRun"), "python -m data_conversion.dsrl_to_parquet",
                 "python -m data_conversion.collect"):
        assert text in str(err.value)


def test_address_defaults_to_ray_address_as_ray_init_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from data_conversion.fetch import _parser as fetch_parser

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert resolve_options(parse_args([])).address is None  # a new local Ray
    assert fetch_parser().parse_args(["--tasks", "BallCircle", "--out", "x"]).address is None
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    assert resolve_options(parse_args([])).address == "127.0.0.1:6379"
    assert resolve_options(parse_args(["--address", "auto"])).address == "auto"
    assert fetch_parser().parse_args(["--tasks", "BallCircle", "--out", "x"]).address == "127.0.0.1:6379"


def test_cli_errors_before_starting_ray(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "rllib_caps.tune", "--tasks", "BallCircel"], capture_output=True,
                          text=True, cwd=ROOT, check=False)
    assert proc.returncode == 2 and "closest valid names: BallCircle" in proc.stderr
    assert "Started a local Ray instance" not in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "rllib_caps.tune", "--storage", str(tmp_path), "--name", "nope",
                           "--resume"], capture_output=True, text=True, cwd=ROOT, check=False)
    assert proc.returncode == 2 and f"--resume: no experiment at {tmp_path / 'nope'}" in proc.stderr
    help_text = subprocess.run([sys.executable, "-m", "rllib_caps.tune", "--help"], capture_output=True, text=True,
                               cwd=ROOT, check=True).stdout
    for flag in ("--tasks", "--seeds", "--heads", "--num-gpus", "--address", "--config", "--data-root", "--storage",
                 "--name", "--resume", "--dashboard", "--search", "--num-samples", "--max-failures",
                 "--gpus-per-trial", "--eval-runners"):
        assert flag in help_text


@pytest.mark.parametrize(("yaml_text", "message"), [
    ("seeds: 0", "seeds must be a non-empty list of integers"),
    ("seeds: [0, 10, 0]", "seeds [0, 10, 0] repeats a value"),
    ("heads: [2, '4']", "heads must be a non-empty list of integers"),
    ("training: {hidden: 256}", "training.hidden must be a list of integers"),
    ("overrides: {BallCircel: {steps: 10}}", "overrides.BallCircel: not a task or suite"),
])
def test_config_file_types_and_repeats_are_checked_before_anything_runs(tmp_path: Path, yaml_text: str,
                                                                         message: str) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(yaml_text + "\n")
    with pytest.raises(SweepError, match=re.escape(message)) as err:
        resolve_options(parse_args(["--config", str(config)]))
    assert str(config) in str(err.value)


@pytest.mark.parametrize("text", ["", "# every option commented out\n# seeds: [0]\n", "null\n"])
def test_an_empty_config_file_is_an_error_before_anything_runs(tmp_path: Path, text: str,
                                                               capsys: pytest.CaptureFixture) -> None:
    """Not the default sweep (3 seeds of 100k steps) by accident: the file is named, exit 2, nothing written."""
    config = tmp_path / "empty.yaml"
    config.write_text(text)
    assert main(["--config", str(config), "--storage", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err
    assert f"--config {config}: the file sets no options" in err and "Started a local Ray" not in err
    assert not (tmp_path / "results").exists()


def test_the_new_trials_of_a_grown_grid_are_split_into_disjoint_grids() -> None:
    """Each trial the larger plan adds is in exactly one grid, and no trial of the recorded plan is in any; an axis
    that only some algorithms have (K) adds trials of those algorithms only."""
    recorded = sweep_plan(SweepOptions.of(algos=["caps", "bc-all"], seeds=[0, 10], heads=[2]))
    planned = sweep_plan(SweepOptions.of(algos=["caps", "bc-all", "bc-safe"], seeds=[0, 10, 20], heads=[2, 4]))

    def trials(plan: dict, **grid: list) -> set[tuple]:
        plan = {**plan, **grid}
        return {(algo, seed, heads if algo == "caps" else None) for algo in plan["algos"] for seed in plan["seeds"]
                for heads in plan["heads"]}

    grids = new_trial_grids(recorded, planned)
    assert [axis for axis, _ in grids] == ["algos", "seeds", "heads"]
    assert grids[2][1] == {"heads": [4], "algos": ["caps"], "seeds": [0, 10]}
    new = [trials(planned, **grid) for _, grid in grids]
    assert sum(map(len, new)) == len(set().union(*new))  # disjoint
    assert set().union(*new) == trials(planned) - trials(recorded)
    assert new_trial_grids(sweep_plan(SweepOptions.of(heads=[2])), sweep_plan(SweepOptions.of(heads=[4]))) == [
        ("heads", {"heads": [4]})]  # a replaced value: its grid still names it
    assert new_trial_grids(recorded, sweep_plan(SweepOptions.of(algos=["bc-all"], seeds=[0, 10], heads=[2, 4]))) == []


def test_rerunning_a_finished_sweep_is_a_friendly_no_op(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A second `make quickstart`: the finished experiment is kept, one line points at its report, exit 0; an
    unfinished one still asks for --resume."""
    experiment = tmp_path / "quickstart"
    shutil.copytree(REPORT_FIXTURE, experiment)
    assert main(["--storage", str(tmp_path), "--name", "quickstart"]) == 2  # one trial has no evaluation, no report
    assert "--resume" in capsys.readouterr().err
    shutil.rmtree(experiment / "easysparse_K4_seed10_00000_00007")
    write_report(experiment)
    assert main(["--storage", str(tmp_path), "--name", "quickstart"]) == 0
    out = capsys.readouterr().out
    assert "already holds this finished sweep" in out and str(experiment / "report") in out


def test_dashboard_message_explains_token_auth(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    message = dashboard_message("127.0.0.1:8265", joined=False)
    assert "http://127.0.0.1:8265" in message and "~/.ray/auth_token" in message
    assert "ray get-auth-token" in message and "RAY_AUTH_MODE=disabled" in message
    assert "head node" in dashboard_message("10.0.0.1:8265", joined=True)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert "authentication is off" in dashboard_message("127.0.0.1:8265", joined=False)


def test_constrained_objective_ranks_every_safe_result_above_every_unsafe_one() -> None:
    assert constrained_objective(0.1, 1.0) > constrained_objective(0.9, 1.01)
    assert constrained_objective(0.5, 0.2) > constrained_objective(0.4, 0.1)  # both safe: reward decides
    assert constrained_objective(0.0, 1.5) > constrained_objective(0.9, 2.0)  # both unsafe: violation decides
    assert constrained_objective(-5.0, 0.0) > constrained_objective(1.0, 1.0001)


def test_grid_gives_caps_its_heads_and_per_threshold_algorithms_the_tasks_thresholds() -> None:
    options = SweepOptions.of(algos=["caps", "bc-all", "bc-safe"], tasks="BallCircle,PointGoal1", heads=[2, 4])
    variants = grid_variants(options, options.task_specs())
    assert [v for v in variants if v["algo"] == "bc-safe"] == [
        {"algo": "bc-safe", "task": "BallCircle", "cost_limit": k} for k in (10.0, 20.0, 40.0)] + [
        {"algo": "bc-safe", "task": "PointGoal1", "cost_limit": k} for k in (20.0, 40.0, 80.0)]
    assert [v for v in variants if v["algo"] == "bc-all"] == [{"algo": "bc-all", "task": "BallCircle"},
                                                              {"algo": "bc-all", "task": "PointGoal1"}]
    assert {v["num_heads"] for v in variants if v["algo"] == "caps"} == {2, 4}
    text = describe_grid(options, options.task_specs())
    assert "total: 36 trials" in text  # (2 tasks × 2 K + 2 tasks + 2 tasks × 3 κ) × 3 seeds
    assert "BC-Safe       18 trials" in text and "κ BallCircle {10, 20, 40}, PointGoal1 {20, 40, 80}" in text
    setup = {"data_root": str(ROOT / "datasets"), "training": {"steps": 20, "awr_beta": 2.0}, "overrides": {},
             "resources": {"cpus": 1.0, "gpus": 0.0}}
    trial = {"variant": {"algo": "bc-safe", "task": "BallCircle", "cost_limit": 20.0}, "seed": 10, "setup": setup}
    config = trial_config(trial)  # awr_beta is CAPS's: not passed to BC-Safe
    assert (config.cost_limit, config.thresholds, config.seed, config.num_gradient_steps) == (20.0, [20.0], 10, 20)
    assert trial_name(trial, "x_00001") == "bc-safe_BallCircle_kappa20_seed10_x_00001"
    caps = {"variant": {"algo": "caps", "task": "BallCircle", "heads": 4}, "seed": 0, "setup": setup}
    assert trial_config(caps).awr_beta == 2.0 and trial_name(caps, "y") == "caps_BallCircle_K4_seed0_y"
    assert settings_for("bc-safe", {"awr_beta": 1, "steps": 5, "eval_episodes": 2}) == {"steps": 5,
                                                                                         "eval_episodes": 2}
    assert unknown_settings(["caps", "bc-safe"], {"awr_beta": 1, "stpes": 5}) == ["stpes"]
    assert unknown_settings(["bc-safe"], {"awr_beta": 1}) == ["awr_beta"]


def test_dry_run_prints_the_grid_without_starting_ray(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = tmp_path / "algos.yaml"
    config.write_text("algos: [caps, bc-safe]\ntasks: BallCircle\nseeds: [0, 10, 20]\n")
    assert main(["--config", str(config), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "algorithms caps bc-safe × 1 task(s) × 3 seed(s)" in out and "total: 12 trials" in out
    assert "projected wall time: about " in out and "12 trial(s), " in out  # tests/test_projection.py: its sums
    assert not (tmp_path / "results").exists()
    assert main(["--algos", "caps", "bc-safe", "--search", "optuna", "--dry-run"]) == 2
    assert "tunes one algorithm with searchable settings (caps)" in capsys.readouterr().err
    config.write_text("algos: [caps, bc-sfae]\n")
    with pytest.raises(SweepError, match="unknown algorithm 'bc-sfae'"):
        resolve_options(parse_args(["--config", str(config)]))


# ------------------------------------------------------------------------------------------------ slow

@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_data_root(tmp_path_factory.mktemp("data"), ["BallCircle", "BallRun"], episodes=4)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sweep_over_two_tasks_and_two_seeds_reports_every_row(ray_address: str, data_root: Path,
                                                              tmp_path: Path) -> None:
    options = SweepOptions.of(tasks="BallCircle,BallRun", seeds=[0, 1], heads=[2], data_root=str(data_root),
                           storage=str(tmp_path), name="grid", training=TINY_TRAINING, cpus_per_trial=1.0)
    experiment = run_sweep(options)
    records, unfinished = load_trials(experiment)
    assert unfinished == []
    assert sorted((r.task, r.seed) for r in records) == [("BallCircle", 0), ("BallCircle", 1), ("BallRun", 0),
                                                         ("BallRun", 1)]
    for r in records:
        assert set(r.evaluation["thresholds"]) == {"10", "20", "40"}
        assert all(t["episodes"] == 1 for t in r.evaluation["thresholds"].values())
        assert r.checkpoint is not None and (r.checkpoint / "learner_group").is_dir()
        last = json.loads((r.trial_dir / "result.json").read_text().splitlines()[-1])
        assert last["training_iteration"] == 2 and last["normalized_cost"] == r.evaluation["mean"]["normalized_cost"]
    table = MainTable(summarize(records))
    assert [(row.task, row.config, row.seeds) for row in table.rows] == [("BallCircle", "K=2", (0, 1)),
                                                                         ("BallRun", "K=2", (0, 1))]
    report = write_report(experiment)
    assert "| BallCircle |" in report.markdown and "| BallRun |" in report.markdown
    assert "safe tasks" in report.markdown
    # The cost critic of every trial on its own dataset, with the shift its training's calibration left
    # ("pessimism": max(bias as trained, 0), so what remains is no pessimism).
    assert "## Cost critic on its dataset" in report.markdown
    rows = [line.split(" | ") for line in (report.out_dir / "calibration.md").read_text().splitlines()
            if line.startswith("| Ball")]
    assert sorted((row[0][2:], int(row[2])) for row in rows) == [("BallCircle", 0), ("BallCircle", 1),
                                                                  ("BallRun", 0), ("BallRun", 1)]
    for row in rows:
        shift, bias = float(row[3]), float(row[6])
        assert shift >= 0.0 and (bias <= 0.0 or abs(bias) < 1e-2 * max(shift, 1.0))
    assert all((report.out_dir / f"calibration_{task}.png").stat().st_size > 0 for task in ("BallCircle", "BallRun"))
    with pytest.raises(SweepError, match="already exists: continue it with --resume"):
        run_sweep(options)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_three_algorithm_sweep_reports_every_column_and_the_cost_limit_table(ray_address: str, tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture) -> None:
    """CAPS and CDT (one trial each, evaluated at κ 10/20/40) and BC-Safe (one trial per κ) in one Tune experiment
    on the bundled BallCircle; the report has a column per algorithm, BC-Safe's seed merging its three κ, and the
    cost-limit table re-evaluates the two κ-at-deployment checkpoints (CAPS, CDT) at every limit set. What the sweep
    prints: a start and a finish line per trial and the table of the five, nothing of Tune's (boxes, hints)."""
    options = SweepOptions(algos=["caps", "bc-safe", "cdt"], tasks="BallCircle", seeds=[0],
                           data_root=str(ROOT / "datasets"), storage=str(tmp_path), name="three",
                           training=TINY_TRAINING, cpus_per_trial=1.0)
    experiment = run_sweep(options)
    printed = capsys.readouterr().out.splitlines()
    records, unfinished = load_trials(experiment)
    assert unfinished == []
    names = sorted(describe_trial(json.loads((r.trial_dir / "params.json").read_text())) for r in records)
    assert sorted(line.removeprefix("started").strip() for line in printed if line.startswith("started")) == names
    assert sorted(line.removeprefix("finished").split(":")[0].strip() for line in printed
                  if line.startswith("finished")) == names
    assert printed[-6].split()[:3] == ["trial", "algorithm", "task"] and len(printed) == 2 * 5 + 1 + 5
    assert all(line.split()[-1] == "TERMINATED" for line in printed[-5:])
    assert sorted((r.algo, r.cost_limit) for r in records) == [("bc-safe", 10.0), ("bc-safe", 20.0),
                                                               ("bc-safe", 40.0), ("caps", None), ("cdt", None)]
    for r in records:
        expected = [f"{r.cost_limit:g}"] if r.algo == "bc-safe" else ["10", "20", "40"]  # each at its own κ
        assert sorted(r.evaluation["thresholds"], key=float) == expected
    table = MainTable(summarize(records))
    assert table.configs == ["CAPS K=2", "BC-Safe", "CDT"]
    bc_safe = table.cell("BallCircle", "BC-Safe")
    assert list(bc_safe.per_threshold) == [10.0, 20.0, 40.0] and bc_safe.seeds == (0,)
    report = write_report(experiment, cost_limits=True, episodes=1)
    assert all(f"{c} reward ↑" in report.markdown for c in ("CAPS K=2", "BC-Safe", "CDT"))
    assert "| safe tasks |" in report.markdown
    limits = (report.out_dir / "cost_limits.md").read_text()
    assert "CAPS K=2 safe tasks | CDT safe tasks" in limits and "| {5, 10} |" in limits and "| {20, 40} |" in limits
    evaluations = json.loads((report.out_dir / "cost_limits.json").read_text())
    assert len(evaluations) == 2  # the CAPS and CDT checkpoints, not BC-Safe's
    for results in evaluations.values():
        assert sorted(results["thresholds"], key=float) == ["5", "10", "15", "20", "30", "40"]
    assert (report.out_dir / "kappa.png").stat().st_size > 0
    calibrated = [line for line in (report.out_dir / "calibration.md").read_text().splitlines()
                  if line.startswith("| BallCircle")]
    assert len(calibrated) == 1 and "| K=2 |" in calibrated[0]  # CAPS reads a cost critic; CDT and BC-Safe none


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_reused_trial_actor_gives_the_results_of_a_fresh_one(ray_address: str, tmp_path: Path) -> None:
    """Actor reuse (``reuse_actors``): a trial run in an actor that already ran another trial (``reset``) ends with
    the same evaluation and weights as the same trial in a fresh actor."""
    options = SweepOptions(data_root=str(ROOT / "datasets"), training=TINY_TRAINING)
    setup = setup_dict(options, plan_resources(1, 1, 0, num_gpus=0, cpus_per_trial=1, gpus_per_trial=None,
                                               max_concurrent=None))
    variant = grid_variants(options, options.task_specs())[0]
    trials = [{"variant": variant, "seed": seed, "setup": setup} for seed in (3, 4)]

    def run_to_end(trainable) -> dict:
        while not (result := trainable.train())["done"]:
            pass
        return {"metrics": [result[k] for k in METRIC_KEYS],
                "weights": {k: v.clone() for k, v in trainable.algorithms[0].get_module().state_dict().items()}}

    fresh = SweepTrial(config=trials[1])
    expected = run_to_end(fresh)
    fresh.stop()
    reused = SweepTrial(config=trials[0])
    first = run_to_end(reused)
    assert reused.reset(trials[1])
    again = run_to_end(reused)
    reused.stop()
    assert again["metrics"] == expected["metrics"] and not math.isnan(again["metrics"][0])
    assert first["weights"].keys() == again["weights"].keys()
    assert any(not torch.equal(first["weights"][k], again["weights"][k]) for k in first["weights"])
    for name, value in expected["weights"].items():
        assert torch.equal(again["weights"][name], value), name


@pytest.fixture(scope="module")
def finished_sweep(ray_address: str, data_root: Path, tmp_path_factory: pytest.TempPathFactory
                   ) -> tuple[Path, list[str]]:
    """One tiny CAPS trial (seed 0) swept and reported as ``tune`` does, cost-limit table included; returns its
    experiment directory and the ``tune`` arguments that made it."""
    storage = tmp_path_factory.mktemp("finished")
    config = storage / "sweep.yaml"
    config.write_text(yaml.safe_dump({"tasks": "BallCircle", "seeds": [0], "data_root": str(data_root),
                                      "training": TINY_TRAINING}))
    argv = ["--config", str(config), "--storage", str(storage)]
    experiment = run_sweep(resolve_options(parse_args(argv)))
    write_report(experiment, cost_limits=True, episodes=1)
    return experiment, argv


@pytest.mark.slow
def test_a_rerun_with_another_seed_is_refused_and_its_command_trains_only_the_new_trial(
        finished_sweep: tuple[Path, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``--seeds 0 1`` on a finished sweep of seed 0: no "nothing to do", but exit 2 naming the added seed and the
    command that trains seed 1 alone, inside the sweep; that command trains one trial, and the report of the sweep
    then has both seeds, seed 0's results untouched."""
    experiment = shutil.copytree(finished_sweep[0], tmp_path / "sweep")
    argv = [*finished_sweep[1], "--storage", str(tmp_path)]
    seed0 = {p: p.read_bytes() for p in experiment.glob("*/result.json")}
    assert main(argv) == 0 and "already holds this finished sweep" in capsys.readouterr().out
    assert main([*argv, "--seeds", "0", "1"]) == 2
    err = capsys.readouterr().err
    assert "seeds: added 1" in err and "Started a local Ray" not in err
    (command,) = [shlex.split(line) for line in err.splitlines() if line.startswith("  python -m rllib_caps.tune")]
    assert command[-4:] == ["--storage", str(experiment), "--name", "seeds-1"]
    assert f"python -m rllib_caps.report {experiment} --cost-limits" in err
    run_sweep(resolve_options(parse_args(command[3:])))  # as `tune` would, on the session's Ray
    assert [r.seed for r in load_trials(experiment / "seeds-1")[0]] == [1]
    records, unfinished = load_trials(experiment)
    assert unfinished == [] and sorted(r.seed for r in records) == [0, 1]
    assert {p: p.read_bytes() for p in experiment.glob("*/result.json")} == seed0


@pytest.mark.slow
def test_resume_with_changed_training_settings_is_refused_naming_each(
        finished_sweep: tuple[Path, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Tune keeps a resumed experiment's trials and settings, so ``--resume`` with another --steps, batch size or K
    is an error naming each change with its old and new value, before Ray starts; nothing in the sweep changes."""
    experiment, argv = finished_sweep
    before = sorted(p.relative_to(experiment) for p in experiment.rglob("*"))
    config = tmp_path / "bigger.yaml"
    config.write_text(yaml.safe_dump({**yaml.safe_load(Path(argv[1]).read_text()),
                                      "training": {**TINY_TRAINING, "batch_size": 64}}))
    assert main([*argv, "--config", str(config), "--name", "sweep", "--resume", "--steps", "120", "--heads", "4"]) == 2
    err = capsys.readouterr().err
    for change in ("training.steps: 60 -> 120", "training.batch_size: 32 -> 64", "heads: added 4; removed 2"):
        assert f"  {change}\n" in err, err
    assert str(experiment / PLAN_FILE) in err and "Started a local Ray" not in err
    assert main([*argv, "--heads", "4", "--dry-run"]) == 2  # the grid it asks for, and that running it is refused
    captured = capsys.readouterr()
    assert "K {4}" in captured.out and "  heads: added 4; removed 2\n" in captured.err
    assert sorted(p.relative_to(experiment) for p in experiment.rglob("*")) == before


@pytest.mark.slow
def test_a_report_without_cost_limits_keeps_the_previous_cost_limit_table(
        finished_sweep: tuple[Path, list[str]], caplog: pytest.LogCaptureFixture) -> None:
    """The cost-limit evaluations cannot be recomputed without --cost-limits: a plain re-run of the report keeps
    the previous ones (files and section) and says so in one log line."""
    report = finished_sweep[0] / "report"
    files = {name: (report / name).read_text() for name in ("cost_limits.json", "cost_limits.md")}
    assert "## Cost-limit ablation" in (report / "report.md").read_text()
    with caplog.at_level("INFO", logger="rllib_caps.report"):
        assert report_main([str(finished_sweep[0])]) == 0
    assert {name: (report / name).read_text() for name in files} == files
    assert (report / "cost_limits.csv").is_file() and (report / "cost_limits.tex").is_file()
    text = (report / "report.md").read_text()
    assert "## Cost-limit ablation" in text and "Kept from the previous report" in text
    kept = [r.getMessage() for r in caplog.records if "keeping the cost-limit evaluations" in r.getMessage()]
    assert len(kept) == 1 and str(report / "cost_limits.json") in kept[0]


def test_the_plan_is_no_file_tunes_state_copy_rewrites_and_an_older_sweeps_json_plan_is_still_read(
        tmp_path: Path) -> None:
    """Tune copies the experiment directory's *.json and *.pkl back in place at each state save of a resumed run (a
    killed driver can truncate them: sweeps/state_backup.py), so the plan is neither."""
    assert Path(PLAN_FILE).suffix not in (".json", ".pkl")
    options = SweepOptions.of(algos=["caps"], seeds=[0, 10], heads=[2], storage=str(tmp_path), name="sweep")
    record_plan(options)
    assert [p.name for p in options.experiment_dir.iterdir()] == [PLAN_FILE]
    assert read_plan(options.experiment_dir) == sweep_plan(options)  # the YAML reads back as written
    older = tmp_path / "older"
    older.mkdir()
    (older / LEGACY_PLAN_FILE).write_text(json.dumps(sweep_plan(options), indent=1))
    assert not experiment_started(older)
    (older / "experiment_state-2026-11-28_00-00-00.json").write_text("{}")
    assert experiment_started(older) and read_plan(older) == sweep_plan(options)
