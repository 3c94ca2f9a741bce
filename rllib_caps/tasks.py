"""Print the registry of the 38 DSRL tasks, and the tasks declared in task files:
``python -m rllib_caps.tasks [--tasks SEL] [--json] [--task-file PATH]``."""

from __future__ import annotations

import argparse
import json

from rllib_caps.envs.tasks import SUITES, TaskSpec, select_tasks
from rllib_caps.utils.console import aligned_table


def format_table(tasks: list[TaskSpec]) -> str:
    """The tasks as an aligned text table."""
    header = ("name", "suite", "id", "env_id", "obs", "act", "steps", "thresholds", "reward range",
              "cost range")
    rows = [
        (
            t.name,
            t.suite,
            t.id,
            t.env_id,
            str(t.obs_dim),
            str(t.act_dim),
            str(t.max_episode_steps),
            ",".join(map(str, t.thresholds)),
            _range(t.min_reward, t.max_reward),
            _range(t.min_cost, t.max_cost),
        )
        for t in tasks
    ]
    return aligned_table(header, rows)


def _range(low: float | None, high: float | None) -> str:
    """A range as the table shows it; a declared task's that is unknown until its dataset gives it."""
    return "from the dataset" if low is None or high is None else f"[{low:.1f}, {high:.1f}]"


def main(argv: list[str] | None = None) -> None:
    """Print the task registry as a table or as JSON."""
    from rllib_caps.envs.tasks import CUSTOM_SUITE
    from rllib_caps.task_file_flag import add_task_file_argument

    parser = argparse.ArgumentParser(
        prog="python -m rllib_caps.tasks",
        description="The 38 DSRL tasks: ids, simulators, sizes, episode lengths, cost thresholds and the "
                    "reward/cost ranges of the normalised scores.")
    parser.add_argument("--tasks", default="all",
                        help="'all', a suite (" + ", ".join((*SUITES, CUSTOM_SUITE)) + ") or a comma list of "
                             "task names/ids (default: all)")
    parser.add_argument("--json", action="store_true", help="print a JSON list of task objects")
    add_task_file_argument(parser)  # its tasks are listed with DSRL's (under 'all', or the suite 'custom')
    args = parser.parse_args(argv)
    try:
        tasks = select_tasks(args.tasks)
    except ValueError as err:
        parser.error(str(err))
    print(json.dumps([t.to_dict() for t in tasks], indent=2) if args.json else format_table(tasks))


if __name__ == "__main__":
    main()
