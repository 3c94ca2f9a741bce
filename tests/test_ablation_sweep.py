"""The sweep's ablation axes: ``--backbones`` and ``--actors`` as grid axes, ``--critics`` as evaluation variants of
one trained trial (fast: options, grid, per-trial settings, K included), and a real small ablation sweep on CPU
(actors × critics, 2 seeds) whose report holds the ablation tables with CIs (slow)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from sim_datasets import make_data_root  # tests/sim_datasets.py

from rllib_caps.report import load_trials, write_report
from rllib_caps.sweeps.options import SweepError, SweepOptions, check_options, resolve_options
from rllib_caps.sweeps.resources import TrialResources
from rllib_caps.sweeps.runner import check_trials, grid_param_space, run_sweep, setup_dict, tune_variants
from rllib_caps.sweeps.trial_schema import EVALUATED, VARIANT_RESULTS, trial_params
from rllib_caps.sweeps.trials import trial_config
from rllib_caps.tune import parse_args

TINY_TRAINING = {"steps": 40, "updates_per_iteration": 20, "hidden": [16, 16], "batch_size": 32, "eval_episodes": 1}
RESOURCES = TrialResources(cpus=1.0, gpus=0.0, concurrency=1)


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_data_root(tmp_path_factory.mktemp("data"), ["BallCircle"], episodes=4)


def test_axes_come_from_flags_and_yaml_and_are_checked(tmp_path: Path) -> None:
    options = resolve_options(parse_args(["--backbones", "iql", "--actors", "shared", "separate", "--critics",
                                          "offline", "fqe-both", "--fqe-steps", "50"]))
    assert (options.axes["backbone"], options.axes["actor"], options.axes["critic"],
            options.algorithm_settings["fqe_steps"]) == (
        ["iql"], ["shared", "separate"], ["offline", "fqe-both"], 50)
    config = tmp_path / "ablation.yaml"
    config.write_text("heads: [2, 4, 8]\nactors: [separate]\ncritics: [fqe-reward]\n")
    options = resolve_options(parse_args(["--config", str(config)]))
    assert (options.axes["num_heads"], options.axes["actor"], options.axes["critic"]) == (
        [2, 4, 8], ["separate"], ["fqe-reward"])
    for bad, message in (({"actors": ["shared", "joint"]}, "actors ['joint'] unknown; choose from shared, separate"),
                         ({"critics": ["fqe"]}, "critics ['fqe'] unknown"),
                         ({"backbones": "iql"}, "--backbones must be a non-empty list of names"),
                         ({"actors": ["shared", "shared"]}, "repeats a value"),
                         ({"fqe_steps": 0}, "--fqe-steps must be an integer >= 1, got 0")):
        with pytest.raises(SweepError, match=re.escape(message)):
            check_options(SweepOptions.of(**bad), "the command line")


def test_grid_has_backbone_and_actor_axes_and_trials_train_what_they_say(data_root: Path) -> None:
    options = SweepOptions.of(tasks="BallCircle", seeds=[0], heads=[2, 4], actors=["shared", "separate"],
                              critics=["offline", "fqe-reward"], data_root=str(data_root), training=TINY_TRAINING)
    setup = setup_dict(options, RESOURCES)
    space = grid_param_space(options, tune_variants(options, options.task_specs()), setup)
    variants = space["variant"]["grid_search"]
    assert [(v["num_heads"], v["backbone"], v["actor"]) for v in variants] == [
        (2, "iql", "shared"), (2, "iql", "separate"), (4, "iql", "shared"), (4, "iql", "separate")]
    assert not any("critic" in v for v in variants)  # critics: no extra training
    assert setup[EVALUATED] == {"critic": ["offline", "fqe-reward"]}
    check_trials(options, options.task_specs(), setup)  # every (K, backbone, actor) builds and validates
    base = {"algo": "caps", "task": "BallCircle", "heads": 4, "seed": 0, "setup": setup}
    assert trial_config({**base, "actor": "separate"}).shared_actor is False
    assert trial_config({**base, "actor": "shared"}).shared_actor is True
    assert trial_config({**base, "backbone": "iql"}).backbone == "iql"
    assert trial_config(base).shared_actor is True  # trials of older sweeps have no axes
    # A backbone the algorithm does not know fails in the driver, naming the flag.
    options.axes["backbone"] = ["iql", "nope"]
    with pytest.raises(SweepError, match=r"K2 nope seed=0.*--backbones.*backbone must be one of"):
        check_trials(options, options.task_specs(), setup_dict(options, RESOURCES))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_small_ablation_sweep_reports_the_ablation_tables_with_cis(ray_address: str, data_root: Path,
                                                                    tmp_path: Path) -> None:
    # FQE as tiny as the training, and one κ. (An environment variable set here would not reach the trials: they run
    # in the shared Ray's workers, which have the environment that Ray started with.)
    options = SweepOptions.of(tasks="BallCircle", seeds=[0, 1], heads=[2], actors=["shared", "separate"],
                           critics=["offline", "fqe-reward"], fqe_steps=20, data_root=str(data_root),
                           storage=str(tmp_path), name="ablation", training={**TINY_TRAINING, "thresholds": [20]},
                           cpus_per_trial=1.0)
    experiment = run_sweep(options)
    records, unfinished = load_trials(experiment)
    assert unfinished == []
    assert len(records) == 2 * 2 * 2  # actors × seeds trials, each evaluated with both critics ...
    assert len({r.trial_dir for r in records}) == 4  # ... and trained once
    for trial_dir in {r.trial_dir for r in records}:
        last = json.loads((trial_dir / "result.json").read_text().splitlines()[-1])
        assert set(last[VARIANT_RESULTS]) == {"offline", "fqe-reward"}
        params = trial_params(json.loads((trial_dir / "params.json").read_text()))
        assert ("separate" in trial_dir.name) == (params["actor"] == "separate")
    assert {r.config for r in records} == {"K=2", "K=2 separate", "K=2 fqe-reward", "K=2 separate fqe-reward"}
    report = write_report(experiment)
    for title in ("shared vs separate actors", "offline critics vs FQE"):
        assert f"## Ablation: {title}" in report.markdown
    assert "IQL vs SAC+BC" not in report.markdown and "number of heads K" not in report.markdown  # one value each
    actor_table = (report.out_dir / "ablation_actor.md").read_text()
    assert re.search(r"\| BallCircle \| \*{0,2}-?\d\.\d\d ± \d\.\d\d", actor_table), actor_table  # mean ± CI, 2 seeds
    assert "(K=2, backbone=iql, critic=offline)" in actor_table
