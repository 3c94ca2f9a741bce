"""Evaluation during training (``--eval-every N`` gradient steps): its validation on both CLIs and in the sweep YAML
(fast), and a trial that evaluates during training trains and ends exactly as one that does not (slow)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import yaml

from rllib_caps.algorithms.registry import build_config
from rllib_caps.report.curves import losses_of
from rllib_caps.sweeps.grid import grid_variants
from rllib_caps.sweeps.options import SweepError, SweepOptions, resolve_options
from rllib_caps.sweeps.resources import plan_resources
from rllib_caps.sweeps.runner import check_trials, setup_dict
from rllib_caps.sweeps.trainable import SweepTrial
from rllib_caps.sweeps.trials import METRIC_KEYS
from rllib_caps.train import main as train_main
from rllib_caps.tune import parse_args

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "datasets" / "BallCircle"
TINY_TRAINING = {"steps": 60, "updates_per_iteration": 30, "hidden": [16, 16], "batch_size": 32, "eval_episodes": 1}


def _config(**settings):
    return build_config("caps", "BallCircle", DATA, **{"steps": 90, "updates_per_iteration": 30, **settings})


def _resources():
    return plan_resources(1, 1, 0, num_gpus=0, cpus_per_trial=1, gpus_per_trial=None, max_concurrent=None)


# ------------------------------------------------------------------------------------------------ fast

def test_eval_every_is_rllibs_interval_in_whole_iterations() -> None:
    assert _config().evaluation_interval == 3  # off: the last of 3 iterations only
    assert _config(eval_every=30).evaluation_interval == 1
    assert _config(eval_every=60).evaluation_interval == 2  # at 60 steps, and at 90 (the last) in any case
    assert _config(eval_every=300).evaluation_interval == 10  # past the end: the last iteration only
    with pytest.raises(ValueError, match="evaluation_every 45 is not a multiple of updates_per_iteration 30"):
        _config(eval_every=45)
    with pytest.raises(ValueError, match="evaluation_every 30 needs evaluation episodes"):
        _config(eval_every=30, eval_episodes=0)
    config = _config()
    config.evaluation_every = 0
    with pytest.raises(ValueError, match="evaluation_every must be a whole number of gradient steps >= 1"):
        config.validate()


def test_train_refuses_eval_every_naming_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "ckpt"
    argv = ["--task", "BallCircle", "--data", str(DATA), "--out", str(out), "--steps", "60",
            "--updates-per-iteration", "30"]
    assert train_main([*argv, "--eval-every", "45"]) == 2
    assert "error: --eval-every (evaluation_every) 45 is not a multiple of updates_per_iteration 30" in \
        capsys.readouterr().err
    assert train_main([*argv, "--eval-every", "30", "--eval-episodes", "0"]) == 2
    assert "--eval-every (evaluation_every) 30 needs evaluation episodes" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        train_main([*argv, "--eval-every", "0"])
    assert exited.value.code == 2 and "argument --eval-every: must be an integer >= 1" in capsys.readouterr().err
    assert not out.exists()


def test_sweep_eval_every_is_a_flag_and_a_yaml_key_checked_per_trial(tmp_path: Path) -> None:
    options = resolve_options(parse_args(["--eval-every", "60", "--data-root", str(ROOT / "datasets")]))
    assert options.training_settings()["eval_every"] == 60
    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump({"training": {"eval_every": 0}}))
    with pytest.raises(SweepError, match=r"sweep.yaml: training.eval_every must be an integer >= 1"):
        resolve_options(parse_args(["--config", str(config)]))
    with pytest.raises(SystemExit):
        parse_args(["--eval-every", "ten"])
    options = SweepOptions(tasks="BallCircle", seeds=[0], data_root=str(ROOT / "datasets"),
                           training={**TINY_TRAINING, "eval_every": 45})
    with pytest.raises(SweepError, match=r"caps BallCircle K2 seed=0: invalid training settings \(.*--eval-every.*\): "
                                         r"evaluation_every 45 is not a multiple of updates_per_iteration 30"):
        check_trials(options, options.task_specs(), setup_dict(options, _resources()))


# ------------------------------------------------------------------------------------------------ slow

@pytest.mark.slow
@pytest.mark.timeout(300)
def test_evaluating_during_training_changes_neither_training_nor_the_final_evaluation(ray_session) -> None:
    """The same trial of 3 iterations of 30 steps without and with ``eval_every`` 60: identical losses, final
    metrics and weights; with it, iteration 2 evaluates, and so does the last one, where the interval does not land,
    with its own evaluation (not RLlib's metrics carried over from iteration 2); iteration 1 has none; the
    top-level metrics stay NaN until the last iteration."""
    runs = {}
    for every in (None, 60):
        options = SweepOptions(data_root=str(ROOT / "datasets"), training={**TINY_TRAINING, "steps": 90,
                                                                          "eval_every": every})
        trial = {"variant": grid_variants(options, options.task_specs())[0], "seed": 5,
                 "setup": setup_dict(options, _resources())}
        trainable = SweepTrial(config=trial)
        results = [trainable.train() for _ in range(3)]
        runs[every] = results, {k: v.clone() for k, v in trainable.algorithms[0].get_module().state_dict().items()}
        trainable.stop()
    (plain, plain_weights), (during, during_weights) = runs[None], runs[60]
    assert [r["gradient_steps"] for r in during] == [30, 60, 90] and during[-1]["done"]
    for a, b in zip(plain, during, strict=True):
        assert losses_of(a) == losses_of(b) and len(losses_of(a)) == 5  # CAPS: Q^r, Q^c, V^r, V^c, actor
    assert ["evaluation" in r for r in plain] == [False, False, True]
    assert ["evaluation" in r for r in during] == [False, True, True]
    assert during[1]["evaluation"]["dsrl"] != during[2]["evaluation"]["dsrl"]
    assert during[-1]["evaluation"]["dsrl"] == plain[-1]["evaluation"]["dsrl"]
    assert [during[-1][k] for k in METRIC_KEYS] == [plain[-1][k] for k in METRIC_KEYS]
    assert all(math.isnan(r["normalized_reward"]) for r in during[:-1])
    for name, value in plain_weights.items():
        assert torch.equal(during_weights[name], value), name
