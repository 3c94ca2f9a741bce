"""``--task-file PATH``, the one flag every CLI that takes a task adds (``add_task_file_argument``): tasks declared in a
YAML file (docs/custom_tasks.md), found by name like DSRL's. Importing this module imports nothing else of the
package, so ``--help`` stays instant; the file is read as the flag is parsed."""

from __future__ import annotations

import argparse
from typing import Any


class _LoadTaskFile(argparse.Action):
    """Reads and registers the file's tasks as the flag is parsed (so ``--task`` and ``--tasks`` find them); a bad
    file is a usage error (exit 2) naming the file and key. Repeatable; the paths are kept, in order."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, value: Any,
                 option_string: str | None = None) -> None:
        from rllib_caps.envs.tasks import load_task_file

        try:
            load_task_file(value)
        except ValueError as err:
            parser.error(f"{option_string}: {err}")
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest) or []), value])


def add_task_file_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """Adds ``--task-file PATH`` (repeatable) to a CLI's parser."""
    parser.add_argument("--task-file", action=_LoadTaskFile, metavar="PATH",
                        help="YAML file declaring tasks of your own (docs/custom_tasks.md); repeat for several files")
