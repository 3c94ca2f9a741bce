"""What an algorithm adds to the generic sweep, evaluation, evaluate CLI and report: ``AlgorithmExtension``, named by
its registry entry (``AlgorithmEntry.extension``) and, for evaluation on EnvRunners and Ray-free rollouts, by its
RLModule class (``OfflineTorchRLModule.extension_path``). The generic layers call these hooks and nothing else of
an algorithm's own; each hook's default adds nothing. No Ray import."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Evaluation:
    """What ``python -m rllib_caps.evaluate`` prints and writes for one checkpoint."""

    output: dict[str, Any]  # the JSON of --json and --out: the results schema, plus what the extension adds
    tables: list[str]  # what is printed without --json


@dataclass(frozen=True)
class ReportSection:
    """A part of the report an algorithm adds: a Markdown section of ``report.md`` and files beside it."""

    title: str
    markdown: str
    files: Mapping[str, Callable[[Path], None]] = field(default_factory=dict)  # file name -> writes it to the path


class AlgorithmExtension:
    """The hooks of one algorithm; subclass and override what the algorithm adds (e.g. CAPS's critic variants)."""

    def evaluate_variants(self, algorithm: Any, variants: Sequence[str], settings: Mapping[str, Any]
                          ) -> dict[str, dict[str, Any]]:
        """After a sweep trial trains: its trained ``algorithm`` evaluated once per value in ``variants`` of the
        entry's evaluated axis (e.g. CAPS's critics), value -> the results schema. ``settings`` are the sweep's
        values of the entry's other sweep options (e.g. ``fqe_steps``)."""
        raise NotImplementedError(f"{type(self).__name__} evaluates no variants")

    # Evaluation (on EnvRunners and Ray-free): per-step outputs of the module or deployable policy -> extra results.

    def episode_metrics(self, module: Any, outputs: Mapping[str, np.ndarray], costs: np.ndarray) -> dict[str, Any]:
        """One episode's extra metrics from what ``module`` output at each step (``outputs``: name -> per-step
        array; the extra model outputs on an EnvRunner, ``DeployedPolicy.last_outputs`` Ray-free) and the costs
        its steps incurred."""
        return {}

    def threshold_metrics(self, episodes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The extra results at one κ (numbers, or dicts of numbers) from its episodes' ``episode_metrics``."""
        return {}

    # The evaluate CLI (python -m rllib_caps.evaluate).

    def add_evaluate_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Adds the algorithm's own flags to the evaluate CLI (a flag another algorithm added is added once)."""

    def evaluate_outputs(self, args: argparse.Namespace) -> dict[str, str]:
        """Flag -> path of every file the algorithm's flags write (checked and claimed with ``--out``)."""
        return {}

    def prepare_evaluation(self, policy: Any, task: Any, args: argparse.Namespace, outputs: Mapping[str, str]) -> Any:
        """Checks the algorithm's flags against the loaded ``policy`` and ``task`` (and the inputs they name apart
        from ``outputs``, flag -> path) and loads what its evaluation needs, before any output is claimed; a
        ``ValueError`` (or ``DatasetError``) names the flag at fault."""
        return None

    def evaluate(self, policy: Any, task: Any, args: argparse.Namespace, *, thresholds: Sequence[float],
                 seed: int, prepared: Any, files: Mapping[str, Path]) -> Evaluation | None:
        """``policy`` evaluated at ``thresholds``, ``args.episodes`` episodes each from ``seed`` on, as the
        algorithm's flags ask (``prepared``: what ``prepare_evaluation`` returned; ``files``: flag -> the temporary
        path to write each of ``evaluate_outputs`` to). None, the default: the plain rollout of
        ``core.rollout.evaluate_policy``."""
        return None

    # The report (python -m rllib_caps.report).

    def report_sections(self, records: Sequence[Any], *, verify: bool) -> list[ReportSection]:
        """Extra sections of the report over the algorithm's deployed trial ``records`` (one per checkpoint)."""
        return []

    # A sweep's artifacts (python -m rllib_caps.tune --log-artifacts).

    def deployment_bundle(self, checkpoint: Path, out_dir: Path, evaluation: Mapping[str, Any] | None
                          ) -> list[Path]:
        """Writes into ``out_dir`` what a trained ``checkpoint`` deploys as besides itself (with its recorded
        ``evaluation``, where one is); returns the files. None by default."""
        return []


def module_extension(module_class: type) -> AlgorithmExtension:
    """The extension of the algorithm of an RLModule class: the class its ``extension_path`` names ("module:Class",
    resolved on use, as the registry's: the extension may import the module; ``OfflineTorchRLModule`` declares
    none), or the base."""
    path = getattr(module_class, "extension_path", "")
    if not path:
        return AlgorithmExtension()
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)()
