"""``rllib-caps COMMAND [ARGS]``: the installed package's one console script (``pyproject.toml``), a dispatcher to the
command-line modules, each imported only when its command runs (so ``rllib-caps --help`` is instant).

    rllib-caps tasks
    rllib-caps train --task BallCircle --data datasets/BallCircle --out ckpt
    rllib-caps tune --config tune_configs/quickstart.yaml

``rllib-caps COMMAND ARGS`` is ``python -m MODULE ARGS`` of the command's module (``COMMANDS``).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

PROG = "rllib-caps"
# command -> (its module, whose main(argv) it runs; what it does)
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("rllib_caps.train", "train one algorithm on one dataset and save its checkpoint"),
    "evaluate": ("rllib_caps.evaluate", "evaluate a checkpoint at any cost thresholds, without Ray"),
    "tune": ("rllib_caps.tune", "sweep algorithms × tasks × seeds on Ray Tune, then print the paper's table"),
    "report": ("rllib_caps.report.__main__", "the tables and plots of a finished sweep"),
    "export": ("rllib_caps.export", "export a CAPS checkpoint to ONNX with its policy card"),
    "fetch": ("data_conversion.fetch", "fetch DSRL's datasets and convert them for training"),
    "tasks": ("rllib_caps.tasks", "list the tasks, their suites and cost thresholds"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    commands = "\n".join(f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items())
    return (f"usage: {PROG} COMMAND [ARGS]\n\nCAPS and offline safe RL baselines on Ray RLlib.\n\n"
            f"commands:\n{commands}\n\n{PROG} COMMAND --help shows a command's flags.")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"{usage()}\n\n{PROG}: error: unknown command {command!r}; choose from {', '.join(COMMANDS)}",
              file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[command][0])
    return module.main(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
