"""The paper's tables and plots for a finished (or partly finished) sweep.

    python -m rllib_caps.report results/quickstart
    python -m rllib_caps.report results/paper --cost-limits --episodes 20 --jobs 2

Reads every Tune trial under EXPERIMENT_DIR (``params.json`` + ``result.json``, no Ray needed) and writes
EXPERIMENT_DIR/report/ atomically:

- ``main_table.{md,csv,tex}``: per task and column (each algorithm's configurations: CAPS's K and searched
  parameters; one column per baseline) the normalised reward and cost averaged over thresholds, episodes and
  seeds, ± the 95% Student-t CI over seeds; unsafe (cost > 1) marked, the best safe column of each task marked
  when there are several; suite averages; the number of safe tasks per column.
- ``cost_limits.{md,csv,tex,json}`` with ``--cost-limits``: the paper's cost-limit ablation (Table 2): the
  same checkpoints evaluated at scaled limits without retraining, counting safe tasks.
- ``ablation_<axis>.{md,csv,tex}`` for every ablation axis the sweep varies (K, actors, backbone, critics;
  ``rllib_caps.report.ablations``): mean ± 95% CI over seeds per task, with safe marks.
- ``reward_cost.png``, ``kappa.png``, ``head_usage.png`` (see ``rllib_caps.report.plots``).
- what each algorithm's extension adds (``AlgorithmExtension.report_sections``), e.g. for CAPS ``calibration.md``
  and ``calibration_<Task>.png``: its Q^c on the trial's dataset against the realised discounted cost-to-go, with
  the shift it acts with (``rllib_caps.algorithms.caps.critic_calibration``).
- ``learning_<Task>.png`` per task: training losses and the evaluations during training (``--eval-every``)
  against gradient steps, per seed and their mean (``rllib_caps.report.curves``).

``report.md`` holds the tables and shows every PNG (its name relative to the report, with a caption) in its
"Figures" section, the extension's PNGs under their own section.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rllib_caps.algorithms.registry import get_algorithm
from rllib_caps.core.extension import ReportSection
from rllib_caps.envs.metadrive import FIDELITY_NOTE
from rllib_caps.report.ablations import AblationTable, ablation_tables
from rllib_caps.report.ablations import format_csv as ablations_csv
from rllib_caps.report.ablations import format_latex as ablations_tex
from rllib_caps.report.ablations import format_markdown as ablations_md
from rllib_caps.report.cost_limits import (
    EVALUATIONS_FILE,
    CostLimitTable,
    cost_limit_table,
    evaluate_cost_limits,
    format_cost_limits,
    kept_evaluations,
)
from rllib_caps.report.curves import load_curves
from rllib_caps.report.records import REPORT_DIR, ReportError, TrialRecord, load_trials
from rllib_caps.report.tables import MainTable, format_csv, format_latex, format_markdown, summarize
from rllib_caps.utils.atomic import OutputExistsError, OutputNotWritableError, atomic_directory
from rllib_caps.utils.checks import check_output

COMMAND = "rllib_caps.report"  # names report directories in their output marker


@dataclass(frozen=True)
class Report:
    markdown: str
    out_dir: Path
    unfinished: list[Path]  # trial directories without an evaluation


def figure_markdown(name: str, caption: str) -> str:
    """A PNG of the report shown in ``report.md`` (beside it, so its name is its relative path), caption below."""
    return f"![{caption}]({name})\n\n*{caption}*"


def build_markdown(table: MainTable, unfinished: Sequence[Path], cost_limits: CostLimitTable | None,
                   ablations: Sequence[AblationTable] = (),
                   skipped_checkpoints: Mapping[str, str] | None = None,
                   sections: Sequence[ReportSection] = (), kept_limits: tuple[Path, int] | None = None,
                   figures: Mapping[str, str] | None = None) -> str:
    """``kept_limits``: the previous ``cost_limits.json`` the cost-limit table was kept from, and how many checkpoints
    it lacks; ``figures``: the report's PNGs (file name -> caption), shown in a "Figures" section (a section's own
    PNGs, named in its ``files``, are shown in it, captioned with its title)."""
    algos = sorted({get_algorithm(r.algo).display_name for r in table.rows})
    title = algos[0] if len(algos) == 1 else "Main table"
    parts = [f"## {title}: normalised reward and cost", "", format_markdown(table, ci=True)]
    for ablation in ablations:
        parts += ["", f"## Ablation: {ablation.axis.title}", "", ablations_md(ablation)]
    if any(r.suite == "metadrive" for r in table.rows):
        parts += ["", f"Caveat: {FIDELITY_NOTE}"]
    if unfinished:
        parts += ["", f"{len(unfinished)} trial(s) have no evaluation (unfinished, failed, or an unreadable "
                  "params.json or result.json, named in the log) and are left out: "
                  + ", ".join(p.name for p in unfinished)]
    if cost_limits is not None:
        parts += ["", "## Cost-limit ablation: safe tasks", "", format_cost_limits(cost_limits, "md")]
    if cost_limits is not None and kept_limits is not None:
        path, lacking = kept_limits
        parts += ["", f"Kept from the previous report ({path}), not evaluated again"
                  + (f"; {lacking} checkpoint(s) are not in it" if lacking else "")
                  + ": `python -m rllib_caps.report` with `--cost-limits` evaluates every checkpoint."]
    if skipped_checkpoints:
        parts += ["", f"{len(skipped_checkpoints)} checkpoint(s) failed their integrity check and are left out of "
                  "the cost-limit table: " + "; ".join(skipped_checkpoints.values())]
    if figures:
        parts += ["", "## Figures"]
        for name, caption in figures.items():
            parts += ["", figure_markdown(name, caption)]
    for section in sections:
        parts += ["", f"## {section.title}", "", section.markdown]
        for name in (n for n in section.files if n.endswith(".png")):
            parts += ["", figure_markdown(name, f"{section.title}: {Path(name).stem}")]
    return "\n".join(parts)


def write_report(experiment_dir: str | Path, *, out: str | Path | None = None, force: bool = False,
                 cost_limits: bool = False, episodes: int = 20, jobs: int = 1, verify: bool = True) -> Report:
    """Writes the tables and plots into ``out`` (default EXPERIMENT_DIR/report, which is always rewritten)
    atomically; an existing ``out`` elsewhere is replaced only with ``force``, and one that cannot be written is
    refused before any work. ``verify=False`` loads the cost-limit checkpoints without their manifest check."""
    experiment_dir = Path(experiment_dir).resolve()
    if not experiment_dir.is_dir():
        raise ReportError(f"{experiment_dir}: no such experiment directory")
    out_dir = Path(out).resolve() if out else experiment_dir / REPORT_DIR
    force = force or out is None  # the default report directory belongs to the report: it is rewritten
    try:
        default = out_dir == experiment_dir / REPORT_DIR  # the report's own place inside the experiment
        check_output(out_dir, "--out", {} if default else {"EXPERIMENT_DIR": experiment_dir})
    except OutputNotWritableError as err:
        raise ReportError(str(err)) from err
    records, unfinished = load_trials(experiment_dir)
    if not records:
        raise ReportError(f"{experiment_dir}: no finished trials to report ({len(unfinished)} unfinished)")
    try:
        # claimed (free, ours to replace, locked) before the cost-limit rollouts; becomes out_dir at the end
        with atomic_directory(out_dir, force=force, command=COMMAND) as tmp:
            markdown = _write_tables_and_plots(records, unfinished, out_dir, tmp, cost_limits=cost_limits,
                                               episodes=episodes, jobs=jobs, verify=verify)
    except (OutputExistsError, OutputNotWritableError) as err:
        raise ReportError(str(err)) from err
    return Report(markdown=markdown, out_dir=out_dir, unfinished=unfinished)


def _write_tables_and_plots(records: list[TrialRecord], unfinished: Sequence[Path], out_dir: Path, tmp: Path, *,
                            cost_limits: bool, episodes: int, jobs: int, verify: bool) -> str:
    """Computes the tables (the cost-limit one with rollouts, or kept from the report at ``out_dir`` it replaces)
    and writes them and the plots into ``tmp``; the report's Markdown."""
    from rllib_caps.report.plots import head_usage_plot, kappa_plot, learning_curves_plot, reward_cost_plot

    table = MainTable(summarize(records))
    limits_table = evaluations = skipped = kept_limits = None
    deployed = [r for r in records if r.trained]  # one record per checkpoint
    if cost_limits:
        evaluations, skipped = evaluate_cost_limits(deployed, episodes, jobs, verify=verify)
    else:  # what this report does not compute again, it keeps from the one it replaces
        kept, lacking = kept_evaluations(out_dir, deployed)
        evaluations, kept_limits = (kept, (out_dir / EVALUATIONS_FILE, lacking)) if kept else (None, None)
    if evaluations is not None:
        limits_table = cost_limit_table(deployed, evaluations)
    ablations = ablation_tables(records)
    sections = [section for algo in dict.fromkeys(r.algo for r in deployed)
                for section in get_algorithm(algo).extension.report_sections([r for r in deployed if r.algo == algo],
                                                                             verify=verify)]
    plots = {"reward_cost.png": lambda: reward_cost_plot(table.rows),
             "kappa.png": lambda: kappa_plot(table.rows, deployed if evaluations is not None else records,
                                             evaluations)}
    if any(row.head_usage for row in table.rows):
        plots["head_usage.png"] = lambda: head_usage_plot(table.rows)
    for task, lines in load_curves(deployed).items():
        plots[f"learning_{task}.png"] = lambda task=task, lines=lines: learning_curves_plot(task, lines)
    figures = {name: plot().save(tmp / name) for name, plot in plots.items()}  # one figure open at a time
    markdown = build_markdown(table, unfinished, limits_table, ablations, skipped, sections, kept_limits, figures)
    (tmp / "report.md").write_text(markdown + "\n")
    (tmp / "main_table.md").write_text(format_markdown(table, ci=True) + "\n")
    (tmp / "main_table.csv").write_text(format_csv(table))
    (tmp / "main_table.tex").write_text(format_latex(table, ci=True))
    for ablation in ablations:
        for fmt, render in (("md", ablations_md), ("csv", ablations_csv), ("tex", ablations_tex)):
            (tmp / f"ablation_{ablation.axis.name}.{fmt}").write_text(render(ablation).rstrip("\n") + "\n")
    if limits_table is not None:
        for fmt in ("md", "csv", "tex"):
            (tmp / f"cost_limits.{fmt}").write_text(format_cost_limits(limits_table, fmt) + "\n")
        (tmp / EVALUATIONS_FILE).write_text(json.dumps(evaluations, indent=1))
    for section in sections:
        for name, write in section.files.items():
            write(tmp / name)
    return markdown
