"""The optimiser every learner and plain reference loop here uses, and the gradient clip beside it."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from rllib_caps.core.losses import polyak_update
from rllib_caps.core.ray_internals import foreach_mul_, foreach_norm

NON_FINITE_NORM = 10e8  # what RLlib's clip maps an infinite norm to (its ``compute_global_norm``)


def adam(params: Iterable[torch.nn.Parameter], lr: float, *, weight_decay: float | None = None
         ) -> torch.optim.Optimizer:
    """``torch.optim.Adam`` (``AdamW`` with decoupled ``weight_decay`` when one is given).

    On CPU with its multi-tensor (foreach) update: one op per update stage over all parameters instead of a Python
    loop of ~6 ops per parameter, with the per-parameter arithmetic (bit-identical). On CUDA (every learner, eager or
    captured, so that the two differ in the capture alone) fused: the update is one kernel whose step counter lives
    on the device, and it skips a step on the device when its ``found_inf`` tensor is set, as ``torch.amp`` uses
    it."""
    params = list(params)
    kind = {"fused": True, "capturable": True} if params and params[0].is_cuda else {"foreach": True}
    if weight_decay is None:
        return torch.optim.Adam(params, lr=lr, **kind)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, **kind)


def clip_global_norm_(grads: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Scales ``grads`` in place to a global L2 norm of at most ``max_norm`` and returns the norm, on their device
    with no host read (so a captured step can hold it). RLlib's ``clip_gradients(grad_clip_by="global_norm")``
    arithmetic, bit for bit: per-tensor norms with ±inf mapped to ±``NON_FINITE_NORM`` and NaN to 0, their norm
    likewise, and the factor ``max_norm / max(norm + 1e-6, max_norm)``; as multi-tensor ops (one kernel per stage
    instead of one per tensor)."""
    total = _finite(torch.linalg.vector_norm(torch.stack([_finite(norm) for norm in foreach_norm(grads)])))
    foreach_mul_(grads, _clip_factor(total, max_norm))
    return total


def clip_global_norm_per_member_(grads: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """``clip_global_norm_`` for each member of a population's stacked gradients ``(P, ...)``: member i's slices
    scaled to its own global norm of at most ``max_norm``; returns the P norms."""
    members = grads[0].shape[0]
    norms = [_finite(torch.linalg.vector_norm(grad.reshape(members, -1), dim=1)) for grad in grads]
    total = _finite(torch.linalg.vector_norm(torch.stack(norms, dim=1), dim=1))
    factor = _clip_factor(total, max_norm)
    for grad in grads:
        grad.mul_(factor.view(members, *[1] * (grad.dim() - 1)))
    return total


def _finite(norm: torch.Tensor) -> torch.Tensor:
    """RLlib's ``compute_global_norm`` treatment of a norm: ±inf as ±``NON_FINITE_NORM``, NaN as 0."""
    return norm.nan_to_num(neginf=-NON_FINITE_NORM, posinf=NON_FINITE_NORM)


def _clip_factor(total: torch.Tensor, max_norm: float) -> torch.Tensor:
    """The scale RLlib's global-norm clip applies: max_norm / max(total + 1e-6, max_norm), at most 1."""
    return torch.clamp(max_norm / torch.clamp(total + 1e-6, min=max_norm), max=1.0)


def step_with_targets(optimizer: torch.optim.Optimizer, loss: torch.Tensor, online: torch.nn.Module,
                      target: torch.nn.Module, tau: float) -> None:
    """One gradient step on ``loss``, then the Polyak update of ``target`` towards ``online`` (the critics fitted
    after training: FQE and the rule's cost critic)."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    polyak_update(online, target, tau)
