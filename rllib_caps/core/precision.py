"""The arithmetic of a CUDA learner's matrix products (``matmul_precision``):

- ``"highest"``: IEEE float32;
- ``"high"``: float32 products on TF32 tensor cores (10-bit mantissa inputs, float32 accumulation);
- ``"bf16"``: the forward pass and losses under ``torch.autocast`` to bfloat16 (8-bit mantissa inputs and hidden
  activations, float32 accumulation), with every network's output layer in float32 (``nets.OutputLinear``), and
  parameters, gradients and Adam in float32; the float32 products left are TF32.

CPU learners always compute in float32: autocast is for CUDA learners only.

The default is ``"high"``: on an H200 a captured CAPS(IQL) learner ran 1.25x faster than in float32 (hidden 256,
batch 256), and 10k-step runs from one start evaluated alike (docs/performance.md, "Precision"). ``"bf16"`` is
for populations, where it measured 1.29x TF32 at P = 32; a single learner ran slower in it (its casts cost more
kernels than its products save).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch itself is imported where it is used: bench's --help reads the names above without it
    import torch

MATMUL_PRECISIONS = ("highest", "high", "bf16")
DEFAULT_MATMUL_PRECISION = "high"


def set_matmul_precision(precision: str, device: torch.device) -> None:
    """Sets torch's float32 matmul precision for a learner on ``device`` (CUDA only)."""
    import torch

    if device.type == "cuda":
        torch.set_float32_matmul_precision("highest" if precision == "highest" else "high")


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The context a learner's forward pass and losses run in: bf16 autocast for ``"bf16"`` on CUDA, else none."""
    if precision == "bf16" and device.type == "cuda":
        import torch

        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()
