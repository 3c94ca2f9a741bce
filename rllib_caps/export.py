"""Export a trained CAPS checkpoint to ONNX, with a Markdown policy card beside it.

    python -m rllib_caps.export --checkpoint CKPT --format onnx --out policy.onnx

The model (``rllib_caps.algorithms.caps.export``) runs under ONNX Runtime with ``rllib_caps/onnx_runtime.py``, which
needs no torch, Ray or rllib_caps.
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
                    "with rllib_caps/onnx_runtime.py (numpy and onnxruntime only), which carries the budget between "
                    "steps.",
    )
    p.add_argument("--checkpoint", required=True, help="CAPS checkpoint directory (from rllib_caps.train or a sweep)")
    p.add_argument("--format", required=True, choices=FORMATS, help="export format (onnx)")
    add_task_file_argument(p)
    p.add_argument("--out", required=True, help="model file to write (atomically), e.g. policy.onnx; the card goes "
                                                "to the same path with the suffix .md")
    p.add_argument("--force", action="store_true", help="overwrite --out and its card if they exist")
    p.add_argument("--no-verify", dest="verify", action="store_false",
                   help="load a checkpoint without manifest.json without checking its files (logged)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    divert_library_notices()
    from rllib_caps.algorithms.caps.export import export_onnx, policy_card, training_data
    from rllib_caps.algorithms.caps.policy import CAPSPolicy
    from rllib_caps.algorithms.registry import load_policy
    from rllib_caps.core.deployment import policy_spec
    from rllib_caps.report.records import checkpoint_evaluation
    from rllib_caps.utils.paths import resolve_local

    out, checkpoint = Path(args.out), Path(resolve_local(args.checkpoint))
    card = out.with_suffix(".md")
    try:
        if out.suffix == ".md":
            raise ValueError(f"--out {args.out}: the policy card takes the suffix .md; name the model e.g. "
                             f"{out.with_suffix('.onnx').name}")
        for path in (out, card):
            check_output(path, "--out", {"--checkpoint": checkpoint}, file=True)
    except (ValueError, OutputNotWritableError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        # Both outputs are claimed (refused when they exist or are being written) before the checkpoint loads; an
        # error leaves neither behind, and the model replaces its file before the card does.
        with atomic_files(out, card, force=args.force) as (model_tmp, card_tmp):
            try:
                policy = load_policy(checkpoint, verify=args.verify)
            except (FileNotFoundError, CheckpointError, ValueError) as err:
                raise ValueError(f"--checkpoint {err}") from err
            if not isinstance(policy, CAPSPolicy):
                raise ValueError(f"--checkpoint {args.checkpoint}: holds a {type(policy).__name__}; only CAPS "
                                 "checkpoints export to ONNX")
            export_onnx(policy.module, model_tmp)
            card_tmp.write_text(policy_card(policy.module, model=out, checkpoint=checkpoint,
                                            data=training_data(policy_spec(checkpoint)),
                                            evaluation=checkpoint_evaluation(checkpoint)))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (OutputExistsError, OutputNotWritableError) as err:
        print(f"error: --out {err}", file=sys.stderr)
        return 2
    print(f"ONNX model: {out.resolve()}\npolicy card: {card.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
