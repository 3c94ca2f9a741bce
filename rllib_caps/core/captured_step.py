"""A whole gradient step recorded once as a CUDA graph and replayed: one launch per step instead of the few hundred
small kernels (and their Python dispatch) that an eager step issues.

``CapturedStep(step)`` runs ``step()`` eagerly for ``warmup`` steps on a side stream (they create the optimiser
state and the cuBLAS workspaces, and are real training steps), then records one call of ``step()`` with
``torch.cuda.graph`` and replays the recording for every later step. So ``captured(n)`` is always exactly ``n``
steps. ``step`` must be capturable: no host-device sync, no data-dependent shapes, no Python state that changes
from step to step; the tensors it allocates live in the graph's private memory pool and are overwritten by every
replay (read them after the replay, before the next one). Random numbers come from the registered generators:
each replay advances them exactly as an eager step would, so a captured run draws the same numbers as an eager one.
Beside it, the finiteness checks of gradients: on the host for an eager step (``all_finite``), on the device for a
captured one (``NonFiniteSkip``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from rllib_caps.core.ray_internals import non_finite_check_and_unscale_


def all_finite(tensors: list[torch.Tensor]) -> bool:
    """Whether every entry of ``tensors`` (on one device) is finite: one multi-tensor kernel and one device sync,
    the eager step's check (a captured step skips on the device instead: ``NonFiniteSkip``).

    It is the check ``torch.amp.GradScaler`` runs before each optimiser step, with an unscale factor of 1, so the
    tensors keep their values bit for bit; on CPU it is several times faster than a norm per tensor.
    """
    found = torch.zeros(1, device=tensors[0].device)
    non_finite_check_and_unscale_(tensors, found, torch.ones(1, device=found.device))
    return not bool(found)


class NonFiniteSkip:
    """Skips, on the device, a step whose gradients are not all finite: ``check(grads)`` sets the ``found_inf``
    flag that fused Adam optimisers (``rllib_caps.core.optim.adam`` on CUDA, given to ``attach``) read to skip
    their update, and counts such steps in ``skipped`` (read once per update call, not per step: no host sync)."""

    def __init__(self, device: torch.device | str) -> None:
        self.found_inf = torch.zeros(1, device=device)
        self.skipped = torch.zeros(1, device=device)

    def attach(self, optimizers: Sequence[torch.optim.Optimizer]) -> None:
        for optimizer in optimizers:  # a 0-d view: fused Adam subtracts it from its 0-d step counts (torch 2.11)
            optimizer.found_inf = self.found_inf.view(())

    def check(self, grads: Sequence[torch.Tensor]) -> None:
        self.found_inf.zero_()
        non_finite_check_and_unscale_(list(grads), self.found_inf, self.found_inf.new_ones(1))
        self.skipped.add_(self.found_inf)

    def pop_skipped(self) -> int:
        """Steps skipped since the last call (one device read)."""
        skipped = int(self.skipped.item())
        self.skipped.zero_()
        return skipped


class CapturedStep:
    """``step`` replayed as a CUDA graph; ``__call__(n)`` runs ``n`` steps and returns the last one's output."""

    def __init__(self, step: Callable[[], Any], *, warmup: int = 3,
                 generators: Sequence[torch.Generator] = ()) -> None:
        if not torch.cuda.is_available():
            raise RuntimeError("a captured step needs a CUDA device (torch.cuda.is_available() is False)")
        self.step, self.warmup, self.generators = step, warmup, list(generators)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.output: Any = None
        self.steps_taken = 0

    def __call__(self, n: int) -> Any:
        """``n`` gradient steps: eager warm-up steps while fewer than ``warmup`` have run, then graph replays."""
        eager = max(0, min(n, self.warmup - self.steps_taken))
        if eager:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(eager):
                    self.output = self.step()
            torch.cuda.current_stream().wait_stream(side)
            self.steps_taken += eager
        if n > eager and self.graph is None:
            self.graph = torch.cuda.CUDAGraph()
            for generator in self.generators:
                self.graph.register_generator_state(generator)
            with torch.cuda.graph(self.graph):
                self.output = self.step()
        for _ in range(n - eager):
            self.graph.replay()
        self.steps_taken += n - eager
        return self.output
