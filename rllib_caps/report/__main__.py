"""``python -m rllib_caps.report EXPERIMENT_DIR``: the paper's tables and plots of a sweep (see ``writer``)."""

from __future__ import annotations

import argparse
import logging
import sys

from rllib_caps.report.cost_limits import COST_LIMITS


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from rllib_caps.task_file_flag import add_task_file_argument

    p = argparse.ArgumentParser(
        prog="python -m rllib_caps.report",
        description="Tables (Markdown, CSV, LaTeX) and plots of a CAPS sweep from its Tune experiment directory: "
                    "normalised reward and cost per task averaged over thresholds, episodes and seeds, safe marks, "
                    "suite averages; optionally the paper's cost-limit ablation.",
    )
    p.add_argument("experiment_dir", help="a Tune experiment directory written by python -m rllib_caps.tune")
    p.add_argument("--out", help="output directory (default: EXPERIMENT_DIR/report)")
    add_task_file_argument(p)
    p.add_argument("--force", action="store_true", help="replace --out if it exists (the default EXPERIMENT_DIR/report "
                   "is always rewritten)")
    p.add_argument("--cost-limits", action="store_true",
                   help="also evaluate each trial's checkpoint at the cost limits " + ", ".join(
                       f"{{{a},{b}}}" for a, b in COST_LIMITS) + " (Ray-free, no retraining)")
    p.add_argument("--episodes", type=int, default=20, help="episodes per cost limit (default 20)")
    p.add_argument("--jobs", type=int, default=1, help="evaluation processes for --cost-limits (default 1)")
    p.add_argument("--no-verify", dest="verify", action="store_false",
                   help="--cost-limits: load checkpoints without manifest.json without checking their files (logged)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    from rllib_caps.report.writer import ReportError, write_report

    if args.episodes < 1 or args.jobs < 1:
        print("error: --episodes and --jobs must be >= 1", file=sys.stderr)
        return 2
    try:
        report = write_report(args.experiment_dir, out=args.out, force=args.force, cost_limits=args.cost_limits,
                              episodes=args.episodes, jobs=args.jobs, verify=args.verify)
    except ReportError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(report.markdown)
    print(f"\nreport written to {report.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
