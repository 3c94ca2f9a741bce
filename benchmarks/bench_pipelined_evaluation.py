"""What pipelining a population's evaluations during training saves: a packed CAPS(IQL) trial on BallCircle (two
seeds, hidden 64, batch 256, 1,200 gradient steps in 6 iterations, evaluations at steps 400, 800 and 1,200 with one
remote evaluation EnvRunner per member), timed with its evaluations pipelined (the default) and evaluated in place,
interleaved, on a local Ray cluster of 2 CPUs.

    python benchmarks/bench_pipelined_evaluation.py --repetitions 2
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import ray

from rllib_caps.sweeps.grid import grid_variants
from rllib_caps.sweeps.options import SweepOptions
from rllib_caps.sweeps.packing import packed_variants
from rllib_caps.sweeps.population_run import PopulationRun
from rllib_caps.sweeps.resources import plan_resources
from rllib_caps.sweeps.runner import setup_dict
from rllib_caps.sweeps.trials import trial_class

DATA = Path(__file__).resolve().parents[1] / "datasets"
TRAINING = {"steps": 1200, "updates_per_iteration": 200, "hidden": [64, 64], "batch_size": 256, "eval_episodes": 2,
            "eval_every": 400, "eval_runners": 1}


def seconds_to_train(trial: dict, pipelined: bool) -> float:
    """Wall seconds of the trial's iterations, its evaluations pipelined or in place."""
    pipelines = PopulationRun.pipelines
    if not pipelined:
        PopulationRun.pipelines = lambda self, iteration: False
    trainable = trial_class()(config=trial)
    try:
        begin = time.perf_counter()
        while not trainable.train()["done"]:
            pass
        return time.perf_counter() - begin
    finally:
        trainable.stop()
        PopulationRun.pipelines = pipelines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repetitions", type=int, default=2, help="interleaved runs of each mode (default 2)")
    args = parser.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    options = SweepOptions(seeds=[3, 4], data_root=str(DATA), training=TRAINING)
    setup = setup_dict(options, plan_resources(1, 2, 0, num_gpus=0, cpus_per_trial=1, gpus_per_trial=None,
                                               max_concurrent=None))
    (variant,) = packed_variants(grid_variants(options, options.task_specs()), options.seeds)
    trial = {"variant": variant, "setup": setup}
    for _ in range(args.repetitions):
        for pipelined in (True, False):
            print(f"{'pipelined' if pipelined else 'in place'}: {seconds_to_train(trial, pipelined):.2f} s",
                  flush=True)


if __name__ == "__main__":
    main()
