"""Export a trained CAPS checkpoint to an ONNX bundle: the model, a Markdown policy card and the runtime beside them.

    python -m rllib_caps.export --checkpoint CKPT --out bundle/policy.onnx [--calibrate-cost pessimism]

The model (``rllib_caps.algorithms.caps.export``) runs under ONNX Runtime with the bundle's ``onnx_runtime.py`` (a copy
of ``rllib_caps/onnx_runtime.py``), which needs no torch, Ray or rllib_caps: the directory works copied alone.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rllib_caps.utils.atomic import OutputExistsError, OutputNotWritableError, atomic_files
from rllib_caps.utils.checks import check_output
from rllib_caps.utils.console import divert_library_notices
from rllib_caps.utils.manifest import CheckpointError

FORMATS = ("onnx",)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from rllib_caps.task_file_flag import add_task_file_argument

    p = argparse.ArgumentParser(
        prog="python -m rllib_caps.export",
        description="Export a trained CAPS checkpoint (either backbone, any K) as one ONNX graph: every head's actor, "
                    "the critics the switching rule reads and the switching rule itself. Inputs: obs, the cost spent "
                    "so far, the step index and κ; outputs: the action (in the env's bounds) and the head that acted. "
                    "Also writes a Markdown policy card next to the model (OUT with the suffix .md). Run the model "
                    "with onnx_runtime.py, written beside it (numpy and onnxruntime only), which carries the budget "
                    "between steps: the directory runs when copied alone.",
    )
    p.add_argument("--checkpoint", required=True, help="CAPS checkpoint directory (from rllib_caps.train or a sweep)")
    p.add_argument("--format", default=FORMATS[0], choices=FORMATS, help=f"export format [{FORMATS[0]}]")
    add_task_file_argument(p)
    p.add_argument("--out", required=True, help="model file to write (atomically), e.g. policy.onnx; the card goes "
                                                "to the same path with the suffix .md, the runtime beside them as "
                                                "onnx_runtime.py")
    p.add_argument("--calibrate-cost", metavar="MODE",  # checked in main: CALIBRATIONS' import is not instant
                   help="before exporting, set the shift of the cost critic from its bias on the dataset (--data): "
                        "'pessimism' removes measured pessimism only, 'mean' the bias either way, 'none' no shift; "
                        "'per_step', 'per_step_pessimism' the same per time bin (as evaluate --calibrate-cost). "
                        "Default: the checkpoint's shift. The graph acts with it; the "
                        "model's metadata and the card record it")
    p.add_argument("--data", help="--calibrate-cost: the converted dataset to calibrate on [the checkpoint's training "
                                  "data]")
    p.add_argument("--force", action="store_true", help="overwrite --out, its card and a different onnx_runtime.py "
                                                        "beside them if they exist")
    p.add_argument("--no-verify", dest="verify", action="store_false",
                   help="load a checkpoint without manifest.json without checking its files (logged)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    divert_library_notices()
    from rllib_caps.algorithms.caps.calibration import CALIBRATIONS
    from rllib_caps.algorithms.caps.export import (
        RUNTIME_FILE,
        calibrate_for_export,
        runtime_source,
        training_data,
        write_bundle,
    )
    from rllib_caps.algorithms.caps.policy import CAPSPolicy
    from rllib_caps.algorithms.registry import load_policy
    from rllib_caps.core.deployment import policy_spec
    from rllib_caps.report.records import checkpoint_evaluation
    from rllib_caps.utils.paths import resolve_local

    out, checkpoint = Path(args.out), Path(resolve_local(args.checkpoint))
    card, runtime = out.with_suffix(".md"), out.with_name(RUNTIME_FILE)
    source = runtime_source()
    try:
        if out.suffix == ".md" or out.name == RUNTIME_FILE:
            raise ValueError(f"--out {args.out}: the policy card takes the suffix .md and the runtime the name "
                             f"{RUNTIME_FILE}; name the model e.g. {out.with_suffix('.onnx').name}")
        if args.calibrate_cost not in (None, *CALIBRATIONS):
            raise ValueError(f"--calibrate-cost {args.calibrate_cost}: choose one of {', '.join(CALIBRATIONS)}")
        if args.data and args.calibrate_cost is None:
            raise ValueError("--data is the dataset of --calibrate-cost: give --calibrate-cost MODE, or leave out "
                             "--data")
        for path in (out, card, runtime):
            check_output(path, "--out", {"--checkpoint": checkpoint}, file=True)
    except (ValueError, OutputNotWritableError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    # The runtime is written unless the same one is there already (several models may share a directory).
    outputs = (out, card) + (() if runtime.is_file() and runtime.read_text() == source else (runtime,))
    try:
        # The outputs are claimed (refused when they exist or are being written) before the checkpoint loads; an
        # error leaves none behind, and the model replaces its file before the card and the runtime do.
        with atomic_files(*outputs, force=args.force) as (model_tmp, card_tmp, *runtime_tmp):
            try:
                policy = load_policy(checkpoint, verify=args.verify)
            except (FileNotFoundError, CheckpointError, ValueError) as err:
                raise ValueError(f"--checkpoint {err}") from err
            if not isinstance(policy, CAPSPolicy):
                raise ValueError(f"--checkpoint {args.checkpoint}: holds a {type(policy).__name__}; only CAPS "
                                 "checkpoints export to ONNX")
            data = training_data(policy_spec(checkpoint))
            if args.calibrate_cost is not None:
                calibration_data = args.data or (data or {}).get("path")
                if calibration_data is None:
                    raise ValueError("--calibrate-cost: the checkpoint records no training data; name the dataset "
                                     "with --data")
                try:
                    calibrate_for_export(policy, Path(calibration_data), args.calibrate_cost, verify=args.verify)
                except ValueError as err:
                    raise ValueError(f"--data {err}") from err
            metadata = write_bundle(policy, checkpoint=checkpoint, model=model_tmp, card=card_tmp,
                                    runtime=runtime_tmp[0] if runtime_tmp else None, named_model=out,
                                    evaluation=checkpoint_evaluation(checkpoint),
                                    calibration=args.calibrate_cost or "")
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (OutputExistsError, OutputNotWritableError) as err:
        print(f"error: --out {err}", file=sys.stderr)
        return 2
    print(f"ONNX model: {out.resolve()}\npolicy card: {card.resolve()}\nruntime: {runtime.resolve()} (the directory "
          f"runs alone: numpy and onnxruntime)\nswitching: head selection {metadata['head_selection']}, Q^c shift "
          f"{float(metadata['cost_shift']):.6g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
