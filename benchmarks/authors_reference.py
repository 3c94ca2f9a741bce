"""The CAPS authors' public code (yassineCh/CAPS, CAPS(IQL)) as a reference run on a local DSRL-format HDF5.

    .venv/bin/python benchmarks/authors_reference.py --authors-code /work/authors/CAPS \
        --python /work/authors/venv/bin/python --task CarCircle1 --h5 CarCircle1.hdf5 --seed 0 \
        --out benchmarks/quality_runs/authors-CarCircle1-long-s0.json

Their code is never copied here: ``--authors-code`` is their checkout, ``--python`` a virtualenv that has what it needs
(OSRL, DSRL, FSRL, pyrallis, torch and the simulators at this project's pins; benchmarks/quality_runs/README.md says
how to make it). ``benchmarks/authors_capsiql.py`` runs in that interpreter: their training and ``evaluate_switch`` at
each of the task's cost limits, at the protocol (``protocol_args``: their ``train_capsiql.py`` flags). This script
checks the inputs, runs it, and writes one JSON (atomically): ``trainer_args``, ``reward_bounds``, ``per_kappa``,
``all_evaluations``, ``heads_alone`` (each head acting alone, after the last evaluation),
``mean_normalized_reward``, ``mean_normalized_cost``, ``wall_seconds``, ``cpu_seconds`` (the
child's user + system time). Scores are normalised as this project does (``rllib_caps.core.scoring``, DSRL's reward
range from ``rllib_caps.envs.tasks``); each evaluation also carries DSRL's own ``get_normalized_score`` (their
evaluation script's) as ``dsrl_normalized_*``, and the run fails if the two reward ranges differ.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from rllib_caps.utils.checks import number_type, seed_type

POSITIVE_INT = number_type(integer=True, positive=True)
REPO = Path(__file__).resolve().parents[1]
INNER = Path(__file__).resolve().with_name("authors_capsiql.py")
AUTHORS_FILES = ("examples/train/train_capsiql.py", "examples/configs/capsiql_configs.py",
                 "osrl/algorthims/capsiql.py", "osrl/common/net.py")
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def protocol_args(dsrl_id: str, seed: int, update_steps: int, eval_episodes: int) -> list[str]:
    """Their ``train_capsiql.py`` flags at this project's protocol (hidden 256, batch 256, K = 2, one CPU thread,
    one evaluation at the end)."""
    return ["--task", dsrl_id, "--seed", str(seed), "--device", "cpu", "--threads", "1",
            "--update_steps", str(update_steps), "--hidden_dim", "256", "--batch_size", "256", "--num_heads", "2",
            "--reward_scale", "0.1", "--eval_episodes", str(eval_episodes), "--eval_every", str(update_steps),
            "--num_workers", "0"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="authors_reference.py", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__)
    parser.add_argument("--authors-code", type=Path, required=True, help="checkout of yassineCh/CAPS")
    parser.add_argument("--python", type=Path, required=True, help="the python of the authors' virtualenv")
    parser.add_argument("--task", required=True, help="the task: short name or DSRL id (e.g. CarCircle1)")
    parser.add_argument("--h5", type=Path, required=True, help="the dataset, a DSRL-format HDF5 file")
    parser.add_argument("--seed", type=seed_type, required=True, help="the training seed")
    parser.add_argument("--out", type=Path, required=True, help="the JSON to write (authors-<Dataset>-s<S>.json)")
    parser.add_argument("--update-steps", type=POSITIVE_INT, default=30_000, help="gradient steps (default 30000)")
    parser.add_argument("--eval-episodes", type=POSITIVE_INT, default=20, help="episodes per cost limit (default 20)")
    return parser.parse_args(argv)


def check_inputs(ns: argparse.Namespace) -> None:
    """A one-line error (SystemExit) naming the flag at fault, before anything runs."""
    missing = [f for f in AUTHORS_FILES if not (ns.authors_code / f).is_file()]
    if missing:
        raise SystemExit(f"error: --authors-code {ns.authors_code}: not a checkout of yassineCh/CAPS "
                         f"(no {missing[0]})")
    if not (ns.python.is_file() and os.access(ns.python, os.X_OK)):
        raise SystemExit(f"error: --python {ns.python}: not an executable file")
    if not ns.h5.is_file():
        raise SystemExit(f"error: --h5 {ns.h5}: no such file")
    with ns.h5.open("rb") as f:
        if f.read(len(HDF5_SIGNATURE)) != HDF5_SIGNATURE:
            raise SystemExit(f"error: --h5 {ns.h5}: not an HDF5 file")
    if ns.out.suffix != ".json":
        raise SystemExit(f"error: --out {ns.out}: name a .json file")
    if not ns.out.parent.is_dir():
        raise SystemExit(f"error: --out {ns.out}: its folder does not exist")


def run_authors(ns: argparse.Namespace, trainer_args: list[str]) -> tuple[dict, float, float]:
    """Runs ``authors_capsiql.py`` in the authors' interpreter (in a scratch folder: DSRL writes a plot to the
    working directory); its result, wall seconds and CPU seconds."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "DSRL_SUPPRESS_IMPORT_ERROR": "1", "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    with tempfile.TemporaryDirectory(prefix="authors-reference-") as scratch:
        result = Path(scratch) / "result.json"
        command = [str(ns.python), str(INNER), "--authors-code", str(ns.authors_code.resolve()),
                   "--h5", str(ns.h5.resolve()), "--result", str(result), "--", *trainer_args]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.time()
        code = subprocess.run(command, cwd=scratch, env=env).returncode
        wall = time.time() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if code != 0:
            raise SystemExit(f"error: the authors' code exited with status {code} (its output is above)")
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return json.loads(result.read_text()), wall, cpu


def summary(ns: argparse.Namespace, spec, trainer_args: list[str], inner: dict, wall: float, cpu: float) -> dict:
    """The reference JSON: the last evaluation per cost limit, normalised as this project scores."""
    from rllib_caps.core.scoring import normalized_cost, normalized_reward

    bounds = {"min": spec.min_reward, "max": spec.max_reward}
    if inner["dsrl_reward_bounds"] != bounds:
        raise SystemExit(f"error: task {spec.name}: DSRL's reward range {inner['dsrl_reward_bounds']} differs from "
                         f"this project's {bounds}")
    evaluations = inner["all_evaluations"]
    last = evaluations[-1]["step"]
    per_kappa = {}
    for ev in evaluations:
        if ev["step"] == last:
            per_kappa[str(ev["cost_limit"])] = {
                **ev, "normalized_reward": normalized_reward(ev["reward"], spec.min_reward, spec.max_reward),
                "normalized_cost": normalized_cost(ev["cost"], ev["cost_limit"])}
    rows = per_kappa.values()
    heads = [{**head, "normalized_reward": normalized_reward(head["reward"], spec.min_reward, spec.max_reward),
              "normalized_cost": {str(k): normalized_cost(head["cost"], k) for k in spec.thresholds}}
             for head in inner["heads_alone"]]
    return {"dataset": str(ns.h5.resolve()), "task": spec.name, "dsrl_id": spec.id, "seed": ns.seed,
            "trainer": "yassineCh/CAPS examples/train/train_capsiql.py's steps (benchmarks/authors_capsiql.py: "
                       "CapsIQL + CapsIQLTrainer.evaluate_switch)",
            "trainer_args": trainer_args, "authors_config": inner["config"],
            "reward_bounds": {**bounds, "source": spec.range_source},
            "per_kappa": per_kappa,
            "mean_normalized_reward": sum(r["normalized_reward"] for r in rows) / len(per_kappa),
            "mean_normalized_cost": sum(r["normalized_cost"] for r in rows) / len(per_kappa),
            "all_evaluations": evaluations, "heads_alone": heads, "wall_seconds": wall, "cpu_seconds": cpu}


def main(argv: Sequence[str] | None = None) -> None:
    ns = parse_args(argv)
    from rllib_caps.envs.tasks import get_task
    from rllib_caps.utils.atomic import atomic_file

    try:
        spec = get_task(ns.task)
    except ValueError as err:
        raise SystemExit(f"error: --task {ns.task}: {err}") from None
    check_inputs(ns)
    trainer_args = protocol_args(spec.id, ns.seed, ns.update_steps, ns.eval_episodes)
    inner, wall, cpu = run_authors(ns, trainer_args)
    with atomic_file(ns.out) as tmp:
        tmp.write_text(json.dumps(summary(ns, spec, trainer_args, inner, wall, cpu), indent=1) + "\n")
    print(f"{ns.out}: mean normalised reward {json.loads(ns.out.read_text())['mean_normalized_reward']:.3f}")


if __name__ == "__main__":
    sys.exit(main())
