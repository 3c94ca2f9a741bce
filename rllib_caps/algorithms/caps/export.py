"""Export a trained CAPS policy to an ONNX bundle: one graph holding every head's actor, the critics the switching
rule reads and the switching rule itself; a Markdown policy card; and the runtime that runs the graph
(``rllib_caps/onnx_runtime.py``, numpy and onnxruntime only), all three in one directory that works when copied
alone.

The graph computes what ``CAPSPolicy.act`` computes after its budget bookkeeping, by tracing the same module method
(``switching_actions``: ``head_values``, ``remaining_budget_threshold``, ``select_heads``) and the map to the env's
action bounds, with the policy's head selection and Q^c shift as they are at export. Inputs (batch ``B``): ``obs``
float32 ``(B, D)``, ``cost_spent`` (c_<t) float64 ``(B,)``, ``step`` (t) int64 ``(B,)``, ``kappa`` (κ) float64
``(B,)``. Outputs: ``action`` float32 ``(B, A)`` in the env's bounds and ``head`` int64 ``(B,)``. The model's
metadata (``model_metadata``) and the card record the graph's shapes (``graph_signature``), the head selection,
the shift and the opset.
"""

from __future__ import annotations

import json
import os
import warnings
from importlib.resources import files
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
TENSORS = {"obs": "observations", "cost_spent": "c_<t: the cost incurred so far in the episode",
           "step": "t: the 0-based step index", "kappa": "κ: the cost limit",
           "action": "the action, in the env's bounds", "head": "the head that acted"}  # the card's meanings
BACKBONES = {"iql": "IQL", "sacbc": "SAC+BC"}  # the card's names of the backbones
OPSET = 18  # the torch.export-based exporter's default opset; ONNX Runtime 1.17+ runs it
RUNTIME_FILE = "onnx_runtime.py"  # the bundle's runtime: a copy of rllib_caps/onnx_runtime.py


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


def graph_signature(proto: onnx.ModelProto) -> dict[str, str]:
    """Each input and output of the graph (in order) -> its dtype and shape as the graph declares them
    (``float32 [batch, 8]``: named dimensions are dynamic)."""
    signature = {}
    for value in (*proto.graph.input, *proto.graph.output):
        tensor = value.type.tensor_type
        dims = ", ".join(d.dim_param or str(d.dim_value) for d in tensor.shape.dim)
        signature[value.name] = f"{onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)} [{dims}]"
    return signature


def graph_opset(proto: onnx.ModelProto) -> int:
    """The version of the default ONNX operator set the graph imports."""
    return next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))


def model_metadata(module: nn.Module, proto: onnx.ModelProto, calibration: str = "") -> dict[str, str]:
    """What the ONNX file records about the policy (``custom_metadata_map`` in ONNX Runtime): the module's settings,
    the head selection and Q^c shift the graph acts with (``cost_step_shifts``: its per-step table, JSON, one value per
    equal time bin; ``cost_calibration``: the mode the shift was set by at
    export, empty for the checkpoint's own), the opset, and the inputs' and outputs' shapes (``shapes``: JSON of
    ``graph_signature``)."""
    return {"algorithm": "caps", "backbone": module.backbone, "num_heads": str(module.num_heads),
            "task": module.model_config.get("task") or "", "horizon": str(module.horizon),
            "cost_gamma": repr(module.cost_gamma), "time_aware": str(module.time_aware).lower(),
            "head_selection": module.head_selection, "cost_shift": repr(module.cost_shift),
            "cost_step_shifts": json.dumps(module.cost_step_shifts.tolist()),
            "cost_calibration": calibration,
            "opset": str(graph_opset(proto)), "inputs": ",".join(INPUTS), "outputs": ",".join(OUTPUTS),
            "shapes": json.dumps(graph_signature(proto))}


def export_onnx(module: nn.Module, path: Path, calibration: str = "") -> dict[str, str]:
    """Writes the switching policy of a CAPS ``module`` to ``path`` as one ONNX graph with a dynamic batch axis;
    returns the metadata recorded in it (``model_metadata``; ``calibration``: how the shift was set at export)."""
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
    metadata = model_metadata(module, proto, calibration)
    onnx.helper.set_model_props(proto, metadata)
    onnx.checker.check_model(proto)
    onnx.save_model(proto, str(path))
    return metadata


def write_bundle(policy: Any, *, checkpoint: Path, model: Path, card: Path, runtime: Path | None,
                 named_model: Path | None = None, evaluation: dict[str, Any] | None = None,
                 calibration: str = "") -> dict[str, str]:
    """The deployable bundle of a CAPS ``policy`` loaded from ``checkpoint``: the ONNX model (``export_onnx``), its
    card (``policy_card``) and, unless ``runtime`` is None, ``onnx_runtime.py``; returns the model's metadata.
    ``named_model``: the path the model will have, when ``model`` is a temporary file that replaces it (the card
    names it and its bundle's paths)."""
    from rllib_caps.core.deployment import policy_spec

    metadata = export_onnx(policy.module, model, calibration)
    card.write_text(policy_card(policy.module, model=named_model or model, checkpoint=checkpoint,
                                data=training_data(policy_spec(checkpoint)), evaluation=evaluation,
                                metadata=metadata))
    if runtime is not None:
        runtime.write_text(runtime_source())
    return metadata


def runtime_source() -> str:
    """The text of ``rllib_caps/onnx_runtime.py``, which the bundle carries as ``RUNTIME_FILE``."""
    return (files("rllib_caps") / RUNTIME_FILE).read_text()


def bundle_path(path: str | Path, bundle: Path) -> str:
    """``path`` relative to the bundle's directory (POSIX separators): the card records no absolute path."""
    return Path(os.path.relpath(Path(path).resolve(), bundle.resolve())).as_posix()


def calibrate_for_export(policy: Any, data: Path, mode: str, *, verify: bool = True) -> float:
    """Sets ``policy``'s Q^c shift by ``mode`` (``calibration.CALIBRATIONS``) from its cost critic's bias on the
    dataset at ``data`` (checked against the policy's task and spaces first: a ``DatasetError`` names what is
    wrong), as ``evaluate --calibrate-cost`` does; returns the shift."""
    from rllib_caps.algorithms.caps.calibration import calibrate_cost_critic
    from rllib_caps.algorithms.caps.critic_calibration import calibration_columns
    from rllib_caps.data.validation import check_dataset

    module = policy.module
    check_dataset(data, task=policy.task or "", obs_dim=module.observation_space.shape[0],
                  act_dim=module.action_space.shape[0], allow_task_mismatch=policy.task is None, verify=verify)
    return calibrate_cost_critic(policy, calibration_columns(Path(data)), mode)


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
                evaluation: dict[str, Any] | None, metadata: dict[str, str]) -> str:
    """A short Markdown card: task, algorithm, how the graph switches (head selection, Q^c shift), training data
    sha256, the per-κ evaluation, the graph's inputs and outputs (``metadata``, from ``export_onnx``) and how to run
    it; every path relative to the bundle (``model``'s directory)."""
    cfg, bundle = module.model_config, model.parent
    lines = [f"# CAPS policy: {cfg.get('task') or 'custom env'}", "",
             f"- **Model**: `{model.name}` (ONNX opset {metadata['opset']}), exported from "
             f"`{bundle_path(checkpoint, bundle)}`",
             f"- **Task**: {cfg.get('task') or 'custom env (not a DSRL task)'}, episode length {module.horizon}",
             f"- **Algorithm**: CAPS({BACKBONES.get(module.backbone, module.backbone)}), K = {module.num_heads} "
             f"heads, hidden {list(cfg['hidden'])}, critics' time limit {cfg.get('time_limit', 'bootstrap')}, cost "
             f"γ {module.cost_gamma:g}, training seed {cfg.get('seed')}",
             f"- **Switching**: head selection `{metadata['head_selection']}`; cost shift "
             f"{float(metadata['cost_shift']):.6g} (the rule reads Q^c − shift; "
             + (f"set at export by cost calibration `{metadata['cost_calibration']}`, so the evaluation below, "
                "recorded with the checkpoint, did not act with it)" if metadata["cost_calibration"] else
                "the checkpoint's)")]
    step_shifts = json.loads(metadata["cost_step_shifts"])
    if any(step_shifts):
        lines.append(f"  - per-step cost shift, over {len(step_shifts)} equal time bins of the episode (the rule reads "
                     f"Q^c − shift − table[bin of t]): {', '.join(f'{v:.4g}' for v in step_shifts)}")
    if data is None:
        lines.append("- **Training data**: not recorded in the checkpoint")
    else:
        lines.append(f"- **Training data**: `{bundle_path(data['path'], bundle)}`")
        if data["source"]:
            lines.append(f"  - source `{data['source'].get('file')}` sha256 `{data['source'].get('sha256')}`")
        lines += [f"  - `{name}` sha256 `{digest}`" for name, digest in sorted((data["files"] or {}).items())]
        if not data["source"] and not data["files"]:
            lines.append("  - sha256: none recorded (the dataset's metadata.json is missing or has no checksums)")
    lines += ["", "## Evaluation", ""]
    lines.append(format_results_table(evaluation) if evaluation else
                 "None recorded with the checkpoint.")
    shapes = json.loads(metadata["shapes"])
    lines += ["", "## Inputs and outputs", "", "| tensor | | dtype [shape] | meaning |", "|:---|:---|:---|:---|"]
    lines += [f"| `{name}` | {'input' if name in INPUTS else 'output'} | {shapes[name]} | {TENSORS[name]} |"
              for name in (*INPUTS, *OUTPUTS)]
    lines += ["", "## Run it", "",
              f"`{RUNTIME_FILE}` beside this card (numpy and onnxruntime only) carries the budget between steps:",
              "", "```python", f"from {Path(RUNTIME_FILE).stem} import ONNXCAPSPolicy", "",
              f"policy = ONNXCAPSPolicy(\"{model.name}\")", "policy.reset(threshold=20.0)",
              "action = policy.act(obs, cost)   # cost: info[\"cost\"] of the previous step", "```", ""]
    return "\n".join(lines)
