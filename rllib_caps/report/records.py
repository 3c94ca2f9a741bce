"""Reading a sweep back from disk: every Tune trial's ``params.json`` and ``result.json`` (no Ray, no sweep code).

A trial's params are ``{algo, task, <the algorithm's trained axes by name, e.g. num_heads or cost_limit>, seed |
seeds + __trial_index__, [search], setup}``; a grid sweep nests the per-algorithm part under ``variant`` (see
``rllib_caps.sweeps.trial_schema``, which decodes them).
A trial whose sweep asked for several values of its algorithm's evaluated axis (CAPS's ``--critics``) also reports
``variant_evaluations`` (value -> results, every variant on the same episodes) and becomes one record per value: it
trained once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rllib_caps.algorithms.registry import AlgorithmEntry, get_algorithm
from rllib_caps.algorithms.surface import COST_LIMIT_AXIS
from rllib_caps.core.keys import EVALUATION_FILE, RESULTS_KEY
from rllib_caps.envs import get_task
from rllib_caps.sweeps.trial_schema import (
    LEGACY_VARIANT_RESULTS,
    MEMBERS,
    TASK_SPECS,
    VARIANT_RESULTS,
    trial_members,
    trial_seed,
)

logger = logging.getLogger("rllib_caps.report")

REPORT_DIR = "report"
class ReportError(ValueError):
    """Nothing to report, or the output exists; the message names the directory."""


def member_results(results: list[dict[str, Any]], member: str | None) -> list[dict[str, Any]]:
    """A trial's results (its ``result.json`` lines), or one member's of a packed trial."""
    if member is None:
        return results
    return [result[MEMBERS][member] for result in results if member in result.get(MEMBERS, {})]


def member_checkpoint(checkpoint: Path | None, member: str | None) -> Path | None:
    """The ordinary checkpoint of a trial, or of one member inside a packed trial's checkpoint."""
    return checkpoint if checkpoint is None or member is None else checkpoint / MEMBERS / member


def trial_data(params: Mapping[str, Any]) -> Path | None:
    """The converted dataset a trial trained on: its setup's ``data_root`` / task (None where not recorded)."""
    root = (params.get("setup") or {}).get("data_root")
    return None if root is None else Path(root) / params["task"]


@dataclass(frozen=True)
class TrialRecord:
    """One finished trial: what it trained and its evaluation (the ``evaluation/dsrl`` results schema)."""

    algo: str
    task: str
    seed: int
    search: dict[str, Any]
    evaluation: dict[str, Any]
    trial_dir: Path
    checkpoint: Path | None
    # Its algorithm's axis values by axis name (``SweepAxis``; κ as ``cost_limit`` for an algorithm trained once per
    # κ), the evaluated axis's value the one this evaluation is of; an axis missing takes its reference.
    axes: dict[str, Any] = field(default_factory=dict)
    data: Path | None = None  # the converted dataset it trained on (setup's data_root / task), where recorded
    member: str | None = None  # its name in a packed trial (``member_name``), None for a trial alone
    task_spec: dict[str, Any] | None = None  # a declared task's spec, as its sweep carried it (``TASK_SPECS``)

    def __post_init__(self) -> None:
        object.__setattr__(self, "axes", {**self.entry.axis_values({}), **self.axes})

    @property
    def entry(self) -> AlgorithmEntry:
        return get_algorithm(self.algo)

    @property
    def cost_limit(self) -> float | None:
        """κ the trial was trained for (None if κ is chosen at deployment or ignored)."""
        value = self.axes.get(COST_LIMIT_AXIS)
        return None if value is None else float(value)

    @property
    def trained(self) -> bool:
        """Whether this evaluation is of the trial as trained: its evaluated axis (if any) at its reference (one
        record per checkpoint)."""
        axis = self.entry.evaluated_axis
        return axis is None or self.axes[axis.name] == axis.reference

    @property
    def key(self) -> str:
        """Its trial directory, with its member's name for a member of a packed trial: what it trained, by name."""
        return str(self.trial_dir if self.member is None else self.trial_dir / self.member)

    @property
    def results(self) -> list[dict[str, Any]]:
        """Its results, one per training iteration (its ``result.json``, or its member's part of it)."""
        return member_results(read_json(self.trial_dir / "result.json", lines=True), self.member)

    @property
    def suite(self) -> str:
        """The task's suite: ``custom`` for a declared task (its spec in the trial), else the DSRL task's."""
        return self.task_spec["suite"] if self.task_spec is not None else get_task(self.task).suite

    @property
    def config(self) -> str:
        """The configuration label (the registry's, e.g. K, non-default ablation axes, searched parameters)."""
        return self.entry.label({**self.axes, "search": self.search})

    @property
    def title(self) -> str:
        """The algorithm's column title, e.g. ``CAPS``, ``BC-Safe``."""
        return get_algorithm(self.algo).display_name


def read_json(path: Path, *, lines: bool = False) -> Any:
    """The JSON of a trial file: one document (``params.json``), or with ``lines`` one object per non-empty line
    (``result.json``; a missing file has none). Raises ``ReportError`` naming the file (and line) when unreadable."""
    if lines and not path.is_file():
        return []
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise ReportError(f"{path}: unreadable ({err})") from err
    parsed = []
    for number, document in enumerate(text.splitlines() if lines else [text], 1):
        try:
            parsed += [json.loads(document)] if document.strip() or not lines else []
        except json.JSONDecodeError as err:
            raise ReportError(f"{path}: {f'line {number} is ' if lines else ''}not valid JSON ({err.msg})") from err
    return parsed if lines else parsed[0]


def last_evaluation(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The ``evaluation/dsrl`` of the last result that has one (None for an unfinished trial)."""
    evaluation = None
    for result in results:
        evaluation = result.get("evaluation", {}).get(RESULTS_KEY) or evaluation
    return evaluation


def checkpoint_evaluation(checkpoint: Path) -> dict[str, Any] | None:
    """The per-κ evaluation recorded for a checkpoint: its ``evaluation.json`` (train CLI), else the last one in the
    ``result.json`` of the Tune trial directory it sits in; None when neither has one."""
    own = checkpoint / EVALUATION_FILE
    if own.is_file():
        return read_json(own)
    packed = checkpoint.parent.name == MEMBERS  # TRIAL/checkpoint_N/members/NAME
    trial_dir = checkpoint.parents[2] if packed else checkpoint.parent
    return last_evaluation(member_results(read_json(trial_dir / "result.json", lines=True),
                                          checkpoint.name if packed else None))


def last_variant_evaluations(results: list[dict[str, Any]]) -> dict[Any, dict[str, Any]] | None:
    """Evaluated-axis value -> results from the last result with ``variant_evaluations``, else ``{None: the last
    evaluation}`` (the trial as trained); None for an unfinished trial."""
    found = next((r.get(VARIANT_RESULTS) or r[LEGACY_VARIANT_RESULTS] for r in reversed(results)
                  if r.get(VARIANT_RESULTS) or r.get(LEGACY_VARIANT_RESULTS)), None)
    if found:
        return found
    evaluation = last_evaluation(results)
    return None if evaluation is None else {None: evaluation}


def latest_checkpoint(trial_dir: Path) -> Path | None:
    checkpoints = sorted(trial_dir.glob("checkpoint_*"))
    return checkpoints[-1] if checkpoints else None


def trial_dirs(experiment_dir: Path) -> list[Path]:
    """Every Tune trial directory under ``experiment_dir`` (search experiments nest one level deeper)."""
    return sorted(p.parent for p in experiment_dir.rglob("params.json")
                  if REPORT_DIR not in p.relative_to(experiment_dir).parts)


def load_trials(experiment_dir: str | Path) -> tuple[list[TrialRecord], list[Path]]:
    """The finished trials, and the trial directories without an evaluation (unfinished, failed, or with an
    unreadable ``params.json`` or ``result.json``: skipped with a warning naming the file).

    A directory left unfinished by a trial that a resumed sweep then ran again in a new directory (Tune's
    ``<name>_<4 hex>`` when the old name exists: the trial had started, but the driver died before its experiment
    state recorded that) is no unfinished trial: with a finished directory of the same trial config, it is skipped.
    """
    records, unfinished, loaded = [], [], []
    for trial_dir in trial_dirs(Path(experiment_dir)):
        try:
            config, results = read_json(trial_dir / "params.json"), read_json(trial_dir / "result.json", lines=True)
            loaded += [(trial_dir, config, member, params, last_variant_evaluations(member_results(results, member)))
                       for member, params in trial_members(config)]
        except ReportError as err:
            logger.warning("%s; trial %s skipped (left out of the report)", err, trial_dir.name)
            unfinished.append(trial_dir)
    finished_configs = [config for _, config, _, _, evaluations in loaded if evaluations is not None]
    for trial_dir, config, member, params, evaluations in loaded:
        if evaluations is None:
            if config not in finished_configs and trial_dir not in unfinished:
                unfinished.append(trial_dir)
            continue
        if "algo" not in params:
            raise ReportError(f"{trial_dir / 'params.json'}: no algo: written by an rllib-caps before 0.2, whose "
                              "results this version does not read; run the sweep again")
        try:
            algo = get_algorithm(params["algo"])
        except ValueError as err:
            raise ReportError(f"{trial_dir / 'params.json'}: {err}") from err
        axes = algo.axis_values(params)
        evaluated = algo.evaluated_axis
        for value, evaluation in evaluations.items():
            variant = {} if evaluated is None or value is None else {evaluated.name: value}
            records.append(TrialRecord(algo=algo.name, task=params["task"], seed=trial_seed(params),
                                       search={k: v for k, v in (params.get("search") or {}).items()
                                               if k in algo.searchable},
                                       evaluation=evaluation, trial_dir=trial_dir,
                                       checkpoint=member_checkpoint(latest_checkpoint(trial_dir), member),
                                       axes={**axes, **variant}, data=trial_data(params), member=member,
                                       task_spec=((params.get("setup") or {}).get(TASK_SPECS) or {}).get(
                                           params["task"])))
    return records, unfinished
