"""The paper's tables and plots of a sweep, read from its Tune experiment directory without Ray or the sweep code:
``records`` (reading trials), ``tables`` (the main table), ``ablations`` (the ablation tables),
``cost_limits`` (the cost-limit ablation),
``plots`` (PNGs) and ``writer`` (the report directory). ``python -m rllib_caps.report`` is the CLI."""

from rllib_caps.report.records import ReportError, TrialRecord, load_trials
from rllib_caps.report.tables import MainTable, summarize
from rllib_caps.report.writer import Report, write_report

__all__ = ["MainTable", "Report", "ReportError", "TrialRecord", "load_trials", "summarize", "write_report"]
