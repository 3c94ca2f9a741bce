"""Convert a Minari dataset into the project's Parquet rows and ``metadata.json``, as ``dsrl_to_parquet`` does.

The cost of step ``i`` is ``infos["cost"][i + 1]`` (entry 0 is the reset's; ``--cost-key`` names another key); a
dataset without it is refused. The task is the one the dataset's metadata declares (``safe_rl``: what
``parquet_to_minari`` and ``collect --format minari`` write), else ``--task`` (with ``--task-file`` for a declared
task); the dataset's spaces must be the task's. An episode flags its end only at its last step (a termination wins
over a truncation; an episode with neither is kept as truncated, as ``DataCollector`` does); actions outside the
task's bounds are clipped and counted; the warnings of ``dsrl_to_parquet`` apply, and ``--strict`` refuses instead.

Examples::

    python -m data_conversion.minari_to_parquet --dataset rllib-caps/BallCircle/dsrl-v0 --out data/BallCircle
    python -m data_conversion.minari_to_parquet --dataset PATH/TO/DATASET --task BallCircle --out data/BallCircle
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    from rllib_caps.task_file_flag import add_task_file_argument

    parser = argparse.ArgumentParser(
        prog="python -m data_conversion.minari_to_parquet",
        description=__doc__.split("\n\n")[0],
        epilog="Errors (no cost key, spaces that are not the task's, bad flags, existing output) print one line and "
               "exit with code 2.",
    )
    parser.add_argument("--dataset", required=True, metavar="ID_OR_PATH",
                        help="Minari dataset id under $MINARI_DATASETS_PATH (default ~/.minari/datasets), or the path "
                             "of a Minari dataset directory")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="output directory (data/*.parquet, metadata.json)")
    parser.add_argument("--task", help="task short name or id; default: the task the dataset's metadata declares")
    add_task_file_argument(parser)
    parser.add_argument("--cost-key", metavar="KEY",
                        help="infos key of the step cost; default: the key the dataset declares, else 'cost'")
    parser.add_argument("--download", action="store_true",
                        help="fetch a dataset id that is not local from Minari's remote ($MINARI_REMOTE)")
    parser.add_argument("--force", action="store_true", help="replace --out if this command wrote it")
    parser.add_argument("--strict", action="store_true",
                        help="refuse (exit 2, nothing written) instead of warning about clipped actions, episodes "
                             "longer than the task's or episodes without an end flag")
    return parser


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit code."""
    args = _parser().parse_args(argv)
    from data_conversion.minari_format import task_from_flags
    from data_conversion.minari_read import convert_minari
    from rllib_caps.data.errors import DatasetError

    try:
        task = task_from_flags(args.task, args.task_file or [])
        summary = convert_minari(args.dataset, args.out, task=task, cost_key=args.cost_key, force=args.force,
                                 strict=args.strict, download=args.download)
    except DatasetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {summary.rows} rows, {summary.episodes} episodes of task {summary.metadata['task']} to "
          f"{summary.out_dir}")
    for warning in summary.warnings:
        print(f"warning: {warning}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
