"""``tune --num-gpus N --dry-run``'s packing plan and projected wall time on GPUs (``rllib_caps.sweeps.gpu_plan``),
from a GPU's figures file (``rllib_caps.sweeps.gpu_figures``): the file's checks, the model's sums, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rllib_caps.sweeps.gpu_figures import (
    FiguresError,
    check_device,
    grid_figures,
    read_figures,
    write_figures,
)
from rllib_caps.sweeps.gpu_plan import (
    DEFAULT_GPU_FIGURES,
    describe_gpu_plan,
    gpu_seconds,
    member_steps_per_s,
    mergeable_groups,
    sharing_gain,
    tune_trials,
)
from rllib_caps.sweeps.projection import TrialWork, step_size
from rllib_caps.sweeps.resources import TrialResources
from rllib_caps.sweeps.trial_schema import MEMBERS
from rllib_caps.tune import main

ROOT = Path(__file__).resolve().parents[1]
DEVICE = "NVIDIA H100 80GB HBM3"
SIZE = step_size(512, [512, 512])


def figures_file(tmp_path: Path, **extra: object) -> Path:
    path = tmp_path / "figures.json"
    path.write_text(json.dumps({"format": "rllib-caps-gpu-figures/1", "device": DEVICE, "date": "2026-11-27",
                                "command": "bench", "steps_per_s": {"caps": 100.0, "bc-all": 1000.0},
                                "population": {"caps": {"3": 240.0, "9": 480.0}}, **extra}))
    return path


def work(task: str, algo: str = "caps", steps: int = 1200) -> TrialWork:
    return TrialWork(algo=algo, gradient_steps=steps, size=SIZE, default_size=SIZE, eval_env_steps=0,
                     suite="bullet", task=task)


def population(task: str, members: int = 3, algo: str = "caps") -> dict:
    return {"algo": algo, "task": task, MEMBERS: [{"seed": s} for s in range(members)]}


def test_the_h100_sample_records_every_algorithm_alone_and_the_packable_ones_in_populations() -> None:
    figures = read_figures(DEFAULT_GPU_FIGURES)
    assert figures.device == DEVICE and figures.steps_per_s["caps"] == 797
    assert figures.population["caps"] == {3: 1800.0} and "bearl" not in figures.population


def test_the_h200_sample_records_every_algorithm_its_populations_and_the_sharing_of_one_gpu() -> None:
    figures = read_figures(DEFAULT_GPU_FIGURES.with_name("h200_figures.json"))
    assert figures.device == "NVIDIA H200" and set(figures.steps_per_s) == {
        "caps", "bc-all", "bc-safe", "bearl", "cpq", "coptidice", "cdt"}
    assert set(figures.population) == set(figures.steps_per_s) - {"cdt"}  # CDT had no populations on November 28
    assert figures.sharing_members == 3 and sorted(figures.sharing_processes) == [1, 3, 9]
    assert sharing_gain(figures, 9) < 1.05 < figures.sharing_population[27] / figures.sharing_population[3]


@pytest.mark.parametrize(("content", "complaint"), [
    (None, "cannot read it"),
    ("{", "not valid JSON"),
    ('{"device": "x"}', "not a GPU figures file"),
    ('{"format": "rllib-caps-gpu-figures/1", "device": "x", "date": "d", "command": "c"}', "missing steps_per_s"),
    ('{"format": "rllib-caps-gpu-figures/1", "device": "x", "date": "d", "command": "c", "steps_per_s": {"caps": 0}}',
     "steps_per_s has a rate <= 0"),
    ('{"format": "rllib-caps-gpu-figures/1", "device": "x", "date": "d", "command": "c", "steps_per_s": {"caps": 1},'
     ' "population": {"caps": {"three": 5}}}', "population.caps must map sizes"),
])
def test_a_file_that_is_not_usable_figures_is_refused_naming_it(tmp_path: Path, content: str | None,
                                                                 complaint: str) -> None:
    path = tmp_path / "figures.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(FiguresError, match=complaint) as err:
        read_figures(path)
    assert str(err.value).startswith(str(path))


def test_figures_of_another_gpu_are_refused_and_an_unknown_gpu_is_not_checked(tmp_path: Path) -> None:
    figures = read_figures(figures_file(tmp_path))
    with pytest.raises(FiguresError, match=f"--gpu-figures {figures.path}: recorded on {DEVICE}, but this "
                                           "machine's GPU is NVIDIA A40"):
        check_device(figures, "--gpu-figures", "NVIDIA A40")
    check_device(figures, "--gpu-figures", DEVICE)
    check_device(figures, "--gpu-figures", None)


def test_population_rates_interpolate_between_recorded_sizes_and_stay_flat_beyond() -> None:
    figures = read_figures(DEFAULT_GPU_FIGURES)
    assert member_steps_per_s(figures, "caps", 1) == 797
    assert member_steps_per_s(figures, "caps", 2) == pytest.approx((797 + 1800) / 2)
    assert member_steps_per_s(figures, "caps", 30) == 1800
    assert member_steps_per_s(figures, "bearl", 9) == 439  # no population recorded: as fast as one trial


def test_gpu_time_of_a_trial_and_the_gain_of_sharing_a_gpu(tmp_path: Path) -> None:
    figures = read_figures(figures_file(tmp_path, sharing={"members": 3, "processes": {"1": 240, "3": 600},
                                                           "one_population": {"3": 240, "9": 480}}))
    trials = tune_trials([population("BallCircle"), {"algo": "bc-all", "task": "BallCircle", "seed": 0}],
                         {("caps", "BallCircle"): work("BallCircle"), ("bc-all", "BallCircle"): work("BallCircle",
                                                                                                      "bc-all")})
    assert [t.members for t in trials] == [3, 1]
    assert gpu_seconds(figures, trials[0]) == pytest.approx(3 * 1200 / 240)
    assert gpu_seconds(figures, trials[1]) == pytest.approx(1200 / 1000)
    assert sharing_gain(figures, 1) == 1.0 and sharing_gain(figures, 3) == pytest.approx(2.5)
    assert sharing_gain(figures, 2) == pytest.approx(420 / 240)
    text = describe_gpu_plan(trials, figures, 1, TrialResources(cpus=1, gpus=0.5, concurrency=2), {})
    assert "2 Tune trial(s), 2 at a time, up to 2 per GPU on 1 GPU(s) (each trial 0.5 GPU)" in text
    assert "recorded: 3 trials of 3 members on one GPU 600 member-steps/s, one population of 9 480: trials " \
           "sharing the GPU keeps the GPU fuller" in text
    # 16.2 GPU-s over 1 GPU at 2 trials' gain (420/240), but never less than the longest trial's 15 s
    assert f"about 15 s (training 15 s, evaluation 0 s), from {figures.path}" in text


def test_populations_of_tasks_with_matching_sizes_could_merge(tmp_path: Path) -> None:
    figures = read_figures(figures_file(tmp_path))
    tasks = ("BallCircle", "CarCircle", "DroneRun")  # observation and action sizes (8, 2), (8, 2), (17, 4)
    trials = tune_trials([population(t) for t in tasks], {("caps", t): work(t) for t in tasks})
    groups = mergeable_groups(trials)
    assert [[t.variant["task"] for t in group] for group in groups] == [["BallCircle", "CarCircle"]]
    text = describe_gpu_plan(trials, figures, 4, TrialResources(cpus=1, gpus=1, concurrency=3), {})
    assert "2 population(s) of tasks with matching observation and action sizes could merge into 1 group(s): " \
           "30 s of GPU time apart, 20 s merged" in text  # 2 × 3 × 1200 / 240 apart; 6 × 1200 / 360 merged
    assert "no gain recorded from sharing a GPU: taken as none" in text


def test_the_benchmarks_write_one_figures_file_that_the_dry_run_reads(tmp_path: Path) -> None:
    path = tmp_path / "figures.json"
    rows = [{"algorithm": "caps", "steps_per_s": 812.34, "population": 3, "population_member_steps_per_s": 1900.0},
            {"algorithm": "bearl", "steps_per_s": 440.0, "population": 9, "population_member_steps_per_s": None}]
    write_figures(path, {"device": DEVICE, "date": "2026-11-28", "command": "bench", **grid_figures(rows)})
    write_figures(path, {"device": DEVICE, "sharing": {"members": 3, "processes": {"1": 1900, "3": 4000}}})
    figures = read_figures(path)
    assert figures.steps_per_s == {"caps": 812.3, "bearl": 440.0} and figures.population == {"caps": {3: 1900.0}}
    assert figures.sharing_processes == {1: 1900.0, 3: 4000.0}
    with pytest.raises(FiguresError, match=f"{path}: holds the figures of {DEVICE}, not NVIDIA A40"):
        write_figures(path, {"device": "NVIDIA A40", "sharing": {}})
    assert read_figures(path).device == DEVICE  # the refused write left the file as it was


def test_dry_run_on_gpus_prints_the_packing_and_the_projected_time(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    argv = ["--algos", "caps", "bc-safe", "--tasks", "BallCircle,DroneRun", "--data-root", str(ROOT / "datasets"),
            "--storage", str(tmp_path), "--num-gpus", "2", "--address", "auto", "--dry-run"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "4 Tune trial(s): 4 population(s) of 24 trials, 0 trial(s) alone" in out
    assert "on 2 GPU(s): 4 Tune trial(s), " in out and " GPU(s) (each trial " in out
    assert f"projected wall time on 2 × {DEVICE}: about " in out and str(DEFAULT_GPU_FIGURES) in out
    assert "could merge" not in out  # BallCircle (8, 2) and DroneRun (17, 4) differ
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main([*argv, "--gpu-figures", str(bad)]) == 2
    assert f"error: --gpu-figures {bad}: not a GPU figures file" in capsys.readouterr().err


def test_bench_writes_figures_only_from_a_gpu_grid_projection(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    from rllib_caps.bench import main as bench_main

    assert bench_main(["--project-grid", "--figures", str(tmp_path / "f.json")]) == 2
    assert "--figures applies to --project-grid --device cuda" in capsys.readouterr().err
    assert not (tmp_path / "f.json").exists()


def test_gpus_beyond_the_trials_that_run_at_once_do_not_shorten_the_sweep(tmp_path: Path) -> None:
    figures = read_figures(figures_file(tmp_path))
    tasks = ("BallCircle", "BallRun", "DroneRun", "AntRun")
    trials = tune_trials([population(t) for t in tasks], {("caps", t): work(t) for t in tasks})
    # 4 populations of 15 GPU-s each; the CPUs run 2 at a time: 2 of the 4 GPUs train, 30 s
    text = describe_gpu_plan(trials, figures, 4, TrialResources(cpus=1, gpus=1, concurrency=2), {})
    assert "up to 1 per GPU on 2 GPU(s)" in text and "training 30 s" in text
