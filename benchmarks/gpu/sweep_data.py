"""The datasets of the GPU script's sweep (benchmarks/gpu/sweep.yaml): random-action episodes of the tasks that
benchmarks/gpu/sweep_tasks.yaml declares, converted as a user's DSRL file is, into DATA_ROOT/<Task>/.

    python benchmarks/gpu/sweep_data.py DATA_ROOT
"""

from __future__ import annotations

import sys
from pathlib import Path

from rllib_caps.envs import tasks
from tests.sim_datasets import make_data_root

TASK_FILE = Path(__file__).with_name("sweep_tasks.yaml")
EPISODES = 200  # 5,000 transitions per task


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(f"usage: python {sys.argv[0]} DATA_ROOT", file=sys.stderr)
        return 2
    names = [spec.name for spec in tasks.load_task_file(TASK_FILE)]
    make_data_root(Path(argv[0]), names, episodes=EPISODES)
    print(f"{', '.join(names)}: {EPISODES} episodes each in {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
