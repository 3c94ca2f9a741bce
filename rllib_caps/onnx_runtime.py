"""Run a CAPS policy exported by ``python -m rllib_caps.export`` with ONNX Runtime: no torch, no Ray, no rllib_caps.

This file imports only numpy and onnxruntime, so it can be copied next to the model and used on its own::

    policy = ONNXCAPSPolicy("policy.onnx")
    policy.reset(threshold=20.0)               # or reset(threshold, batch_size=N) for N envs
    obs, info = env.reset(seed=0)
    cost = 0.0
    while True:
        action = policy.act(obs, cost)         # cost: info["cost"] of the previous step
        obs, reward, terminated, truncated, info = env.step(action)
        cost = info["cost"]
        ...

The model holds the switching rule; this class holds the budget: the cost spent so far (c_<t) and the step index
(t) of each episode, kept exactly as ``CAPSPolicy``'s ``BudgetTracker`` keeps them (the cost passed to ``act`` is
added, and t advances, from the second call of an episode on).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime


def budget_input(value: object, name: str, num_envs: int | None = None) -> np.ndarray:
    """κ (``num_envs`` None: one number >= 0, +inf allowed) or the previous step's cost (one finite number >= 0, or
    one per env) as float64, refused as ``CAPSPolicy`` refuses them (``rllib_caps.core.budget.check_budget_input``:
    this file cannot import it)."""
    array = np.asarray(value)
    if array.dtype.kind not in "iuf":
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    array = array.astype(np.float64)
    shapes = [()] if num_envs is None else [(), (num_envs,)]
    if array.shape not in shapes:
        raise ValueError(f"{name} has shape {array.shape}, expected {' or '.join(map(str, shapes))}")
    if not (array >= 0).all():  # also NaN
        raise ValueError(f"{name} must be >= 0 (not NaN), got {value!r}")
    if num_envs is not None and not np.isfinite(array).all():
        raise ValueError(f"{name} must be finite (info['cost'] of the previous step), got {value!r}")
    return array if num_envs is None else np.broadcast_to(array, (num_envs,))


class ONNXCAPSPolicy:
    """The exported CAPS policy for ``batch_size`` parallel episodes; ``last_heads`` is the head that acted."""

    def __init__(self, path: str | Path, providers: list[str] | None = None) -> None:
        self.session = onnxruntime.InferenceSession(str(path), providers=providers or ["CPUExecutionProvider"])
        metadata = self.session.get_modelmeta().custom_metadata_map
        self.num_heads = int(metadata["num_heads"])
        self.task = metadata.get("task") or None
        self.obs_dim = int(self.session.get_inputs()[0].shape[1])
        self.threshold: float | None = None

    def reset(self, threshold: float, batch_size: int = 1) -> None:
        """Starts new episode(s) with the cost limit κ = ``threshold`` (undiscounted, in the env's cost units)."""
        threshold = float(budget_input(threshold, "threshold (the cost limit κ)"))
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.threshold = threshold
        self.spent = np.zeros(batch_size, dtype=np.float64)
        self.step = np.zeros(batch_size, dtype=np.int64)
        self._acted = np.zeros(batch_size, dtype=bool)  # an action whose cost has not been recorded yet
        self.last_heads = np.zeros(batch_size, dtype=np.int64)

    def reset_envs(self, mask: np.ndarray) -> None:
        """Restarts the episodes where the boolean ``mask`` is True (a vector env's autoreset)."""
        mask = np.asarray(mask)
        if mask.dtype != np.bool_ or mask.shape != self.spent.shape:
            raise ValueError(f"reset_envs takes a boolean mask of shape {self.spent.shape}, got {mask.dtype} "
                             f"{mask.shape}")
        self.spent[mask], self.step[mask], self._acted[mask] = 0.0, 0, False

    def act(self, obs: np.ndarray, cost: float | np.ndarray = 0.0) -> np.ndarray:
        """The action(s) in the env's bounds for one observation ``(D,)`` or a batch ``(N, D)``; ``cost`` is the
        previous step's ``info["cost"]`` (ignored on the first call of an episode)."""
        if self.threshold is None:
            raise RuntimeError("call reset(threshold) before act(): the policy needs the cost limit κ")
        batch = np.atleast_2d(np.asarray(obs, dtype=np.float32))
        if batch.shape != (len(self.spent), self.obs_dim):
            raise ValueError(f"obs has shape {np.shape(obs)}; expected ({self.obs_dim},) per env for "
                             f"{len(self.spent)} env(s)")
        if not np.isfinite(batch).all():  # as CAPSPolicy refuses them: NaN would become a NaN action
            raise ValueError("obs contains NaN or inf")
        costs = budget_input(cost, "cost", len(self.spent))
        self.spent[self._acted] += costs[self._acted]
        self.step[self._acted] += 1
        actions, heads = self.session.run(["action", "head"], {
            "obs": batch, "cost_spent": self.spent, "step": self.step,
            "kappa": np.full(self.spent.shape, self.threshold, dtype=np.float64)})
        self._acted[:] = True
        self.last_heads = heads
        return actions[0] if np.ndim(obs) == 1 else actions
