"""The arithmetic of a CUDA learner's matrix products (``matmul_precision``):

- ``"highest"``: IEEE float32;
- ``"high"``: float32 products on TF32 tensor cores (10-bit mantissa inputs, float32 accumulation);
- ``"bf16"``: the forward pass and losses under ``torch.autocast`` to bfloat16 (8-bit mantissa inputs and hidden
  activations, float32 accumulation), with every network's output layer in float32 (``nets.OutputLinear``), and
  parameters, gradients and Adam in float32; the float32 products left are TF32.

CPU learners always compute in float32: autocast is for CUDA learners only.
"""

from __future__ import annotations

import contextlib

import torch

MATMUL_PRECISIONS = ("highest", "high", "bf16")


def set_matmul_precision(precision: str, device: torch.device) -> None:
    """Sets torch's float32 matmul precision for a learner on ``device`` (CUDA only)."""
    if device.type == "cuda":
        torch.set_float32_matmul_precision("highest" if precision == "highest" else "high")


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The context a learner's forward pass and losses run in: bf16 autocast for ``"bf16"`` on CUDA, else none."""
    if precision == "bf16" and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()
