"""Write a converted dataset (``DIR/data/*.parquet`` + ``metadata.json``, DSRL's included) as a Minari dataset.

The dataset goes under Minari's root (``$MINARI_DATASETS_PATH``, default ``~/.minari/datasets``) as ``--dataset-id``
and loads with ``minari.load_dataset``. The step cost is in ``infos["cost"]`` (entry 0 is the reset's, 0.0), the
actions are the env's (mapped back from [-1, 1] with the task's bounds), and the metadata holds, under ``safe_rl``,
the whole task spec, its cost thresholds and its reward and cost ranges (``ref_min_score``/``ref_max_score`` are the
reward range). ``minari_to_parquet`` turns it back into the same Parquet columns. The dataset's checks
(``train``'s) run first, then those that make its rows one Minari episode sequence (episode ids that never
decrease, steps that count from 0, one end flag per episode at its last row, ``new_obs`` = the next ``obs``).

Example::

    python -m data_conversion.parquet_to_minari --data datasets/BallCircle --dataset-id rllib-caps/BallCircle/dsrl-v0
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

MINARI_METADATA = ("author", "author_email", "code_permalink", "algorithm_name", "description")


def _parser() -> argparse.ArgumentParser:
    from rllib_caps.task_file_flag import add_task_file_argument

    parser = argparse.ArgumentParser(
        prog="python -m data_conversion.parquet_to_minari",
        description=__doc__.split("\n\n")[0],
        epilog="Errors (a dataset that fails its checks, bad flags, an existing output) print one line and exit "
               "with code 2.",
    )
    parser.add_argument("--data", type=Path, required=True, metavar="DIR",
                        help="converted dataset directory (data/*.parquet, metadata.json)")
    parser.add_argument("--dataset-id", required=True, metavar="ID",
                        help="Minari dataset id to write, (namespace/)name-vN, e.g. rllib-caps/BallCircle/dsrl-v0")
    parser.add_argument("--task", help="task short name or id; default: the task the dataset's metadata.json records")
    add_task_file_argument(parser)
    parser.add_argument("--data-format", choices=("hdf5", "arrow"), help="Minari's storage (default: Minari's, hdf5)")
    parser.add_argument("--no-verify", action="store_true",
                        help="skip the Parquet files' checksums (for a dataset without metadata.json, written by hand)")
    parser.add_argument("--force", action="store_true", help="replace the Minari dataset if this command wrote it")
    group = parser.add_argument_group("Minari metadata", "recorded in the dataset; fill them in before sharing it")
    for name in MINARI_METADATA:
        group.add_argument(f"--{name.replace('_', '-')}", dest=name)
    return parser


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit code."""
    args = _parser().parse_args(argv)
    from data_conversion.minari_format import task_from_flags
    from data_conversion.minari_write import export_minari
    from rllib_caps.data.errors import DatasetError

    try:
        task = task_from_flags(args.task, args.task_file or [])
        summary = export_minari(args.data, args.dataset_id, task=task, force=args.force, verify=not args.no_verify,
                                data_format=args.data_format, **{name: getattr(args, name) for name in MINARI_METADATA})
    except DatasetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote Minari dataset {summary.dataset_id} ({summary.episodes} episodes, {summary.steps} steps) to "
          f"{summary.path}")
    for warning in summary.warnings:
        print(f"warning: {warning}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
