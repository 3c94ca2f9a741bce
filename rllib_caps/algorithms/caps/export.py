"""Export a trained CAPS bundle to ONNX: every head's actor, the critics the switching rule reads and the switching
rule itself in one graph, plus a Markdown policy card.

The graph computes what ``CAPSPolicy.act`` computes after its budget bookkeeping, by tracing the same module method
(``switching_actions``: ``head_values``, ``remaining_budget_threshold``, ``select_heads``) and the map to the env's
action bounds. Inputs (batch ``B``): ``obs`` float32 ``(B, D)``, ``cost_spent`` (c_<t) float64 ``(B,)``, ``step``
(t) int64 ``(B,)``, ``kappa`` (κ) float64 ``(B,)``. Outputs: ``action`` float32 ``(B, A)`` in the env's bounds and
``head`` int64 ``(B,)``. ``rllib_caps/onnx_runtime.py`` runs it with ONNX Runtime alone and carries c_<t and t.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from torch import nn

from rllib_caps.core.results import format_results_table
from rllib_caps.data.schema import METADATA_FILE

INPUTS = ("obs", "cost_spent", "step", "kappa")
OUTPUTS = ("action", "head")
BACKBONES = {"iql": "IQL", "sacbc": "SAC+BC"}  # the card's names of the backbones
OPSET = 18  # the torch.export-based exporter's default opset; ONNX Runtime 1.17+ runs it


class SwitchingGraph(nn.Module):
    """``module.switching_actions`` followed by the map of normalised actions to the env's bounds that
    ``CAPSPolicy`` applies (RLlib's ``unsquash_action``: scale [−1, 1] to [low, high], then clip)."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module
        space = module.action_space
        self.bounded = bool(np.all(space.bounded_below) and np.all(space.bounded_above))
        self.register_buffer("low", torch.as_tensor(space.low, dtype=torch.float32))
        self.register_buffer("high", torch.as_tensor(space.high, dtype=torch.float32))

    def forward(self, obs: torch.Tensor, cost_spent: torch.Tensor, step: torch.Tensor, kappa: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        actions, heads = self.module.switching_actions(obs, cost_spent, step.to(cost_spent.dtype), kappa)
        if self.bounded:
            actions = torch.clamp(self.low + (actions + 1.0) * (self.high - self.low) / 2.0, self.low, self.high)
        return actions, heads


def model_metadata(module: nn.Module) -> dict[str, str]:
    """What the ONNX file records about the bundle (``custom_metadata_map`` in ONNX Runtime)."""
    return {"algorithm": "caps", "backbone": module.backbone, "num_heads": str(module.num_heads),
            "task": module.model_config.get("task") or "", "horizon": str(module.horizon),
            "cost_gamma": repr(module.cost_gamma), "time_aware": str(module.time_aware).lower(),
            "inputs": ",".join(INPUTS), "outputs": ",".join(OUTPUTS)}


def export_onnx(module: nn.Module, path: Path) -> None:
    """Writes the switching policy of a CAPS ``module`` to ``path`` as one ONNX graph with a dynamic batch axis."""
    graph = SwitchingGraph(module.eval()).eval()
    batch = 2  # not 1: the exporter would specialise a batch of one
    example = (torch.zeros(batch, *module.observation_space.shape), torch.zeros(batch, dtype=torch.float64),
               torch.zeros(batch, dtype=torch.int64), torch.zeros(batch, dtype=torch.float64))
    dim = torch.export.Dim("batch")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="# The axis name")  # the one batch axis is named twice, fine
        warnings.filterwarnings("ignore", message=".*LeafSpec", category=FutureWarning)  # torch.export's own
        program = torch.onnx.export(graph, example, dynamo=True, opset_version=OPSET, input_names=list(INPUTS),
                                    output_names=list(OUTPUTS), dynamic_shapes=tuple({0: dim} for _ in INPUTS),
                                    verbose=False)
    proto = program.model_proto
    onnx.helper.set_model_props(proto, model_metadata(module))
    onnx.checker.check_model(proto)
    onnx.save_model(proto, str(path))


def training_data(spec: dict[str, Any]) -> dict[str, Any] | None:
    """The dataset a checkpoint was trained on (recorded in its policy ``spec``, ``core.deployment.policy_spec``)
    with the sha256 of its source file and Parquet files from the dataset's ``metadata.json``; None if none was
    recorded."""
    if not spec.get("training_data"):
        return None
    data = Path(spec["training_data"])
    metadata_file = (data.parent if data.is_dir() else data.parent.parent) / METADATA_FILE
    metadata = json.loads(metadata_file.read_text()) if metadata_file.is_file() else {}
    return {"path": str(data), "source": metadata.get("source"), "files": metadata.get("files")}


def policy_card(module: nn.Module, *, model: Path, checkpoint: Path, data: dict[str, Any] | None,
                evaluation: dict[str, Any] | None) -> str:
    """A short Markdown card: task, algorithm, training data sha256, the per-κ evaluation, how to run the model."""
    cfg = module.model_config
    lines = [f"# CAPS policy: {cfg.get('task') or 'custom env'}", "",
             f"- **Model**: `{model.name}` (ONNX opset {OPSET}), exported from `{checkpoint}`",
             f"- **Task**: {cfg.get('task') or 'custom env (not a DSRL task)'}, episode length {module.horizon}",
             f"- **Algorithm**: CAPS({BACKBONES.get(module.backbone, module.backbone)}), K = {module.num_heads} "
             f"heads, hidden {list(cfg['hidden'])}, critics' time limit {cfg.get('time_limit', 'bootstrap')}, cost "
             f"γ {module.cost_gamma:g}, training seed {cfg.get('seed')}"]
    if data is None:
        lines.append("- **Training data**: not recorded in the checkpoint")
    else:
        lines.append(f"- **Training data**: `{data['path']}`")
        if data["source"]:
            lines.append(f"  - source `{data['source'].get('file')}` sha256 `{data['source'].get('sha256')}`")
        lines += [f"  - `{name}` sha256 `{digest}`" for name, digest in sorted((data["files"] or {}).items())]
        if not data["source"] and not data["files"]:
            lines.append("  - sha256: none recorded (the dataset's metadata.json is missing or has no checksums)")
    lines += ["", "## Evaluation", ""]
    lines.append(format_results_table(evaluation) if evaluation else
                 "None recorded with the checkpoint.")
    lines += ["", "## Run it", "",
              "Inputs (batch B): `obs` float32 (B, D), `cost_spent` float64 (B,) (cost incurred so far in the "
              "episode), `step` int64 (B,) (0-based step index), `kappa` float64 (B,) (the cost limit κ). Outputs: "
              "`action` float32 (B, A) in the env's bounds, `head` int64 (B,) (the head that acted).",
              "", "`rllib_caps/onnx_runtime.py` (numpy and onnxruntime only; copy it next to the model) carries the "
              "budget between steps:", "", "```python", "from onnx_runtime import ONNXCAPSPolicy", "",
              f"policy = ONNXCAPSPolicy(\"{model.name}\")", "policy.reset(threshold=20.0)",
              "action = policy.act(obs, cost)   # cost: info[\"cost\"] of the previous step", "```", ""]
    return "\n".join(lines)
