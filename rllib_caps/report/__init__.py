"""The paper's tables and plots of a sweep, read from its Tune experiment directory without Ray or the sweep code:
``records`` (reading trials), ``tables`` (the main table), ``ablations`` (the ablation tables),
``cost_limits`` (the cost-limit ablation),
``plots`` (PNGs) and ``writer`` (the report directory). ``python -m rllib_caps.report`` is the CLI.

The names below are imported on first use (PEP 562), so that the CLI's ``--help`` imports no SciPy or matplotlib."""

from __future__ import annotations

import importlib
from typing import Any

_MODULES = {"ReportError": "records", "TrialRecord": "records", "load_trials": "records", "MainTable": "tables",
            "summarize": "tables", "Report": "writer", "write_report": "writer"}
__all__ = sorted(_MODULES)


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULES[name]}"), name)
