"""The hooks an algorithm adds to the generic layers (``rllib_caps.core.extension``): a plain algorithm's are the
no-op base, CAPS's produce its evaluation extras (head usage, Q^c at the first step) and its evaluate flags, and
the evaluate CLI's parser holds every algorithm's flags once."""

from __future__ import annotations

import argparse
import subprocess
import sys

import numpy as np
import pytest

from rllib_caps.algorithms.caps.extension import CAPSExtension
from rllib_caps.algorithms.registry import ALGORITHMS
from rllib_caps.core.extension import AlgorithmExtension, module_extension
from rllib_caps.evaluate import EvaluateParser, build_parser

CAPS_FLAGS = ("--head", "--critic", "--rule-cost-expectile", "--rule-cost-members", "--rule-cost-reading", "--data",
              "--fqe-steps", "--fqe-batch-size", "--calibration", "--calibrate-cost")


def test_a_plain_algorithms_extension_is_the_no_op_base() -> None:
    extension = ALGORITHMS["bc-all"].extension
    assert type(extension) is AlgorithmExtension
    assert extension.episode_metrics(None, {"head": np.zeros(3)}, np.ones(3)) == {}
    assert extension.threshold_metrics([{}, {}]) == {}
    parser = argparse.ArgumentParser()
    extension.add_evaluate_arguments(parser)
    assert [a.dest for a in parser._actions] == ["help"]  # no flag of its own
    args = parser.parse_args([])
    assert extension.evaluate_outputs(args) == {} and extension.prepare_evaluation(None, None, args, {}) is None
    assert extension.evaluate(None, None, args, thresholds=[1.0], seed=0, prepared=None, files={}) is None
    assert extension.report_sections([object()], verify=True) == []
    with pytest.raises(NotImplementedError, match="evaluates no variants"):
        extension.evaluate_variants(None, ["offline"], {})


def test_every_entrys_extension_is_its_modules() -> None:
    """The registry names an algorithm's extension (``extension_path``) and its RLModule class does (its
    ``extension_path``, which evaluation on EnvRunners and Ray-free rollouts read): the two agree."""
    for name, entry in ALGORITHMS.items():
        module_class = entry.config_class().get_default_rl_module_spec().module_class
        assert type(module_extension(module_class)) is type(entry.extension), name
    assert type(ALGORITHMS["caps"].extension) is CAPSExtension
    assert type(module_extension(object)) is AlgorithmExtension  # a module without one: the base


class _Module:
    num_heads = 3
    cost_gamma = 0.5


def test_caps_episode_metrics_count_heads_and_discount_the_cost() -> None:
    outputs = {"head": np.array([0, 2, 2, 0, 2]), "predicted_cost": np.array([1.5, 9.0, 9.0, 9.0, 9.0])}
    metrics = CAPSExtension().episode_metrics(_Module(), outputs, np.array([1.0, 0.0, 2.0, 0.0, 8.0]))
    assert metrics["head_counts"].tolist() == [2, 0, 3]  # head 1 never acted: still counted, as 0
    assert metrics["predicted_cost"] == 1.5  # Q^c at the first step only
    assert metrics["discounted_cost"] == pytest.approx(1.0 + 0.25 * 2.0 + 0.0625 * 8.0)


def test_evaluate_parser_adds_a_shared_flag_once_and_records_owners() -> None:
    class Twin(AlgorithmExtension):  # another algorithm that also reads a dataset
        def add_evaluate_arguments(self, parser: argparse.ArgumentParser) -> None:
            parser.add_argument("--data", help="its dataset")
            parser.add_argument("--temperature", type=float, default=1.0)

    parser = EvaluateParser()
    caps, twin = CAPSExtension(), Twin()
    parser.add_extension_arguments(caps)
    parser.add_extension_arguments(twin)
    assert [a.option_strings for a in parser._actions].count(["--data"]) == 1  # not an argparse conflict either
    args = parser.parse_args(["--data", "d", "--temperature", "2"])
    assert parser.foreign_flags(args, twin) == []  # --data is the twin's too
    assert parser.foreign_flags(args, caps) == ["--temperature"]
    assert parser.foreign_flags(args, AlgorithmExtension()) == ["--data", "--temperature"]


def test_evaluate_help_lists_every_algorithms_flags_once() -> None:
    text = build_parser().format_help()
    assert all(flag in text for flag in CAPS_FLAGS)
    assert [a.option_strings for a in build_parser()._actions].count(["--critic"]) == 1
    shown = subprocess.run([sys.executable, "-m", "rllib_caps.evaluate", "--help"], capture_output=True, text=True,
                           check=True).stdout
    assert all(flag in shown for flag in CAPS_FLAGS)
