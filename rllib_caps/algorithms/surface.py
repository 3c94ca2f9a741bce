"""The declarations an algorithm's registry entry makes of its surface: its sweep axes (``SweepAxis``), its other
sweep options (``SweepSetting``), its own ``train`` flags (``TrainFlag``) and its report's ablation tables
(``AblationAxis``), and the trial labels built from them. The generic sweep, report and CLIs are built from these;
no generic module names an algorithm's axis. No Ray import, no algorithm import."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

COST_LIMIT_AXIS = "cost_limit"  # the sweep axis of per-threshold algorithms: the task's three thresholds


@dataclass(frozen=True)
class SweepAxis:
    """One sweep axis an algorithm declares: its trials differ in this value (or, ``evaluated``, each trained trial is
    evaluated once per value). ``name`` is the trial param, the record's key and the report's column; ``option`` the
    ``tune`` flag (``--<option>``) and sweep-YAML key that lists the values (empty: the values come from the task,
    only for κ); ``label`` writes a value in trial names and scopes (``K`` -> ``K2``), where a value at its default is
    left out unless ``named_default``; ``settings`` maps a value to the config settings it trains with (default:
    ``{name: value}``)."""

    name: str
    option: str = ""
    default: tuple[Any, ...] = ()
    kind: type = str
    choices: tuple[Any, ...] = ()
    help: str = ""
    label: str = ""
    named_default: bool = False
    settings: Callable[[Any], dict[str, Any]] | None = None
    evaluated: bool = False  # values are evaluations of one trained trial (``AlgorithmExtension.evaluate_variants``)
    legacy_names: tuple[str, ...] = ()  # the trial param's older names, read from older experiments' params.json

    @property
    def column(self) -> str:
        """Its name in report columns and descriptions: the label, else the name."""
        return self.label or self.name

    @property
    def reference(self) -> Any:
        """The value a trial without this axis has (its first default)."""
        return self.default[0] if self.default else None

    def config_settings(self, value: Any) -> dict[str, Any]:
        """The training settings of one value."""
        return self.settings(value) if self.settings else {self.name: value}

    def named(self, value: Any) -> bool:
        """Whether a trial's name and label show this value."""
        return self.named_default or value != self.reference

    def part(self, value: Any) -> str:
        """``K2``, ``kappa10``, ``sacbc``: the value as trial and member names write it."""
        if not self.label:
            return str(value)
        return f"{self.label}{float(value):g}" if self.kind is not str else f"{self.label}{value}"

    def text(self, value: Any) -> str:
        """``K=2``, ``sacbc``: the value as configuration labels write it."""
        return f"{self.label}={value}" if self.label else str(value)

    def scope_value(self, key: str) -> Any:
        """The value that a per-value override scope ``key`` (``K4``) names, or None where it names none."""
        if not self.label or not key.startswith(self.label) or len(key) == len(self.label):
            return None
        text = key[len(self.label):]
        try:
            value = self.kind(float(text)) if self.kind in (int, float) else self.kind(text)
        except ValueError:
            return None
        return value if self.part(value) == key else None

    def read(self, params: Mapping[str, Any]) -> Any:
        """A trial's value from its params (under its name or an older one), else None."""
        for name in (self.name, *self.legacy_names):
            if name in params:
                return params[name]
        return None


COST_LIMIT = SweepAxis(COST_LIMIT_AXIS, kind=float, label="kappa", named_default=True,
                       help="κ: the task's cost thresholds, one trial each")


@dataclass(frozen=True)
class SweepSetting:
    """A per-algorithm sweep option that is no axis (e.g. CAPS's ``fqe_steps``): a ``tune`` flag and sweep-YAML key,
    passed to ``AlgorithmExtension.evaluate_variants`` as its ``settings``."""

    name: str
    bounds: Mapping[str, Any] = field(default_factory=dict)  # utils.checks.check_number's keywords (a number)
    help: str = ""


@dataclass(frozen=True)
class TrainFlag:
    """An algorithm's own ``train`` flag: ``flag`` (``--heads``) sets ``setting`` (a friendly name or config
    attribute)."""

    setting: str
    flag: str
    kind: Callable[[str], Any] | None = None  # argparse's ``type``; None: a switch (store_true)
    choices: tuple[Any, ...] = ()
    help: str = ""
    nargs: str | None = None  # argparse's ``nargs`` (``+``: a list)


@dataclass(frozen=True)
class AblationAxis:
    """One ablation table of the report (``report.ablations``): its records' values of the axis ``name`` side by
    side, the other axes held at their reference."""

    name: str  # a SweepAxis name (the TrialRecord's ``axes`` key)
    title: str
    label: Callable[[Any], str]  # a value's column label
    reference: Any  # held fixed while another axis varies, when the sweep has it
    order: tuple[Any, ...] = ()  # the columns' order (values not listed follow, sorted)


def axes_label(axes: Sequence[SweepAxis], params: Mapping[str, Any]) -> str:
    """``K=2 sacbc separate``: the values of ``axes`` that a label shows (``SweepAxis.named``); κ is left out (the
    report averages over it)."""
    return " ".join(axis.text(params[axis.name]) for axis in axes
                    if axis.name != COST_LIMIT_AXIS and axis.name in params and axis.named(params[axis.name]))


def search_label(search: Mapping[str, Any]) -> str:
    """``actor_lr=0.00123``: a trial's searched settings (``lr=0.1,0.2`` for a list)."""
    return " ".join(f"{name}=" + ",".join(f"{v:.3g}" for v in (value if isinstance(value, list) else [value]))
                    for name, value in search.items())


def fixed_label(label: str, *axes: SweepAxis) -> Callable[[Mapping[str, Any]], str]:
    """The trial label of an algorithm: ``label``, then the values of its ``axes`` that a label shows, then its
    searched settings (seed and κ are averaged in the report)."""
    return lambda params: " ".join(filter(None, [label, axes_label(axes, params),
                                                 search_label(params.get("search") or {})]))
