"""CAPS's hooks in the generic layers (``core.extension.AlgorithmExtension``): its critic variants (the paper's FQE
ablation) after a sweep trial trains; its evaluation metrics (the heads' usage, Q^c at an episode's first step
against the discounted cost the episode then incurred); the evaluate CLI's ``--head``, ``--critic``, ``--fqe-*``,
``--calibration``, ``--calibrate-cost`` and ``--rule-cost-expectile``; and the report's cost-critic calibration section.

Imports here stay light (the evaluate CLI's ``--help`` builds its parser from this class); the policy, FQE and
the dataset are imported where a hook needs them."""

from __future__ import annotations

import argparse
import copy
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rllib_caps.algorithms.caps.calibration import CALIBRATIONS, Calibration
from rllib_caps.algorithms.caps.critic_variants import (
    CRITICS,
    ENSEMBLE_READINGS,
    FQESettings,
    check_rule_cost_expectile,
    check_rule_cost_members,
)
from rllib_caps.algorithms.caps.keys import HEAD, PREDICTED_COST
from rllib_caps.core.extension import AlgorithmExtension, Evaluation, ReportSection

logger = logging.getLogger("rllib_caps.caps")

HEAD_COUNTS = "head_counts"  # an episode's steps per head (``episode_metrics``)
ONNX_EXPORTER_LOGGERS = ("onnxscript", "onnx_ir")  # torch.onnx's exporter logs its optimiser's passes at INFO


class CAPSExtension(AlgorithmExtension):
    def evaluate_variants(self, algorithm: Any, variants: Sequence[str], settings: Mapping[str, Any]
                          ) -> dict[str, dict[str, Any]]:
        """The trained policy evaluated Ray-free with every critic variant on the same episodes (FQE fitted once
        on the trial's dataset, on CPU, for ``settings["fqe_steps"]`` steps)."""
        from rllib_caps.algorithms.caps.policy import CAPSPolicy
        from rllib_caps.core.rollout import episode_seed
        from rllib_caps.data import TransitionDataset

        config = algorithm.config
        policy = CAPSPolicy(copy.deepcopy(algorithm.get_module()).to("cpu"))
        fqe = FQESettings(steps=settings.get("fqe_steps") or FQESettings.steps, seed=int(config.seed or 0))
        logger.info("FQE for %s seed %s: %d steps, then evaluating critics %s", config.task.name, config.seed,
                    fqe.steps, list(variants))
        return policy.evaluate_critics(TransitionDataset.from_parquet(config.input_), config.task, config.thresholds,
                                       config.evaluation_duration, variants, fqe, seed=episode_seed(policy),
                                       progress=False)

    def episode_metrics(self, module: Any, outputs: Mapping[str, np.ndarray], costs: np.ndarray) -> dict[str, Any]:
        """Steps per head, Q^c(s₀, a₀) of the action taken first, and the episode's cost discounted by γ_c (what
        that Q^c predicts)."""
        heads = np.asarray(outputs[HEAD], dtype=np.int64).reshape(-1)
        return {HEAD_COUNTS: np.bincount(heads, minlength=module.num_heads),
                "predicted_cost": float(np.asarray(outputs[PREDICTED_COST]).reshape(-1)[0]),
                "discounted_cost": float(costs @ module.cost_gamma ** np.arange(len(costs)))}

    def threshold_metrics(self, episodes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """``head_usage`` (head index -> fraction of all steps it acted), the mean ``predicted_cost`` and the mean
        ``discounted_cost``."""
        counts = np.sum([e[HEAD_COUNTS] for e in episodes], axis=0).astype(float)
        usage = counts / max(counts.sum(), 1.0)
        return {"head_usage": {str(k): float(u) for k, u in enumerate(usage)},
                "predicted_cost": float(np.mean([e["predicted_cost"] for e in episodes])),
                "discounted_cost": float(np.mean([e["discounted_cost"] for e in episodes]))}

    def add_evaluate_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--head", type=int, help="act with this head alone instead of switching (ablation)")
        parser.add_argument("--critic", nargs="+", default=["offline"], choices=CRITICS,
                            help="critics the switching rule reads: offline (the trained Q^r, Q^c), fqe-reward (FQE "
                                 "Q̂^r with the offline Q^c), fqe-both (FQE Q̂^r and Q̂^c), fqe-fallback (the offline "
                                 "Q^r; a head is feasible when acting with it once and with the cost head after fits "
                                 "the budget, by the cost head's FQE Q̂^c); several are evaluated on the same episodes "
                                 "and share one FQE fit [offline]")
        parser.add_argument("--rule-cost-expectile", type=float, metavar="TAU",
                            help="before acting, refit the cost critic the switching rule reads on the dataset "
                                 "(--data) by IQL at V^c expectile TAU (< 0.7, the trained one: costlier "
                                 "continuations), the heads unchanged; needs --calibrate-cost, as the checkpoint's "
                                 "shift was fitted for its own critic (docs/paper.md, 'A cost critic for the rule "
                                 "alone')")
        parser.add_argument("--rule-cost-members", type=int, default=1, metavar="N",
                            help="with --rule-cost-expectile: fit N cost critics, from FQE's seed and the N − 1 "
                                 "after it, and read them as one (--rule-cost-reading) [1]")
        parser.add_argument("--rule-cost-reading", choices=ENSEMBLE_READINGS, default="max",
                            help="how the rule reads N > 1 refit cost critics: max, the largest cost of any (an upper "
                                 "confidence bound where the fits disagree); mean, their mean [max]")
        parser.add_argument("--data", help="converted dataset FQE, the rule's refit cost critic and the cost "
                                           "calibration read [datasets/<the checkpoint's task>]")
        parser.add_argument("--fqe-steps", type=int, default=FQESettings.steps,
                            help=f"gradient steps of a critic fitted after training (FQE, --rule-cost-expectile) "
                                 f"[{FQESettings.steps}]")
        parser.add_argument("--fqe-batch-size", type=int, default=FQESettings.batch_size,
                            help=f"batch size of a critic fitted after training [{FQESettings.batch_size}]")
        parser.add_argument("--calibration", metavar="PNG",
                            help="also compare the policy's cost critic Q^c(s, a) with the discounted cost-to-go the "
                                 "dataset (--data) realised: bias (> 0: pessimistic), centred RMSE and correlation in "
                                 "the output (JSON key calibration), a reliability plot to this PNG")
        parser.add_argument("--calibrate-cost", choices=CALIBRATIONS, metavar="MODE",
                            help="before acting, set the shift of the policy's cost critic from its bias on the "
                                 "dataset (--data): 'pessimism' removes measured pessimism only (training's default), "
                                 "'mean' the bias either way, 'none' no shift; 'per_step' and 'per_step_pessimism' the "
                                 "same per time bin of the episode, fitted on held-out episodes (docs/paper.md, "
                                 "'Calibrated Q^c'). "
                                 "Default: the checkpoint's shift, set by its training's cost_calibration. The shift "
                                 "acted with is in the output (JSON key cost_shift, and cost_step_shifts for a "
                                 "per-step table; with several --critic, in the "
                                 "offline entry)")

    def evaluate_outputs(self, args: argparse.Namespace) -> dict[str, str]:
        return {"--calibration": args.calibration} if args.calibration else {}

    def prepare_evaluation(self, policy: Any, task: Any, args: argparse.Namespace,
                           outputs: Mapping[str, str]) -> Any:
        """Checks ``--head`` against the checkpoint's heads and the FQE settings; loads ``--data`` (checked against
        the task and apart from every output) when FQE or the calibration reads it, else None."""
        from rllib_caps.data import TransitionDataset
        from rllib_caps.data.schema import OBS
        from rllib_caps.data.validation import check_dataset
        from rllib_caps.utils.checks import check_apart

        FQESettings(steps=args.fqe_steps, batch_size=args.fqe_batch_size)  # refuses bad values
        critics = _critics(args)
        if args.head is not None and not 0 <= args.head < policy.num_heads:
            raise ValueError(f"--head {args.head}: the checkpoint has heads 0 to {policy.num_heads - 1}")
        if args.head is not None and critics != ["offline"]:
            raise ValueError("--head acts with one head, no critic is read: leave out --critic")
        if args.rule_cost_expectile is not None:
            if args.head is not None:
                raise ValueError("--head acts with one head, no critic is read: leave out --rule-cost-expectile")
            if args.calibrate_cost is None:
                raise ValueError("--rule-cost-expectile refits the cost critic, and the checkpoint's Q^c shift was "
                                 "fitted for the old one: give --calibrate-cost (pessimism is training's default)")
            check_rule_cost_expectile(args.rule_cost_expectile)
        check_rule_cost_members(args.rule_cost_members)
        if args.rule_cost_expectile is None and (args.rule_cost_members != 1 or args.rule_cost_reading != "max"):
            raise ValueError("--rule-cost-members and --rule-cost-reading shape the refit cost critic: give "
                             "--rule-cost-expectile")
        uses = [use for use, asked in (("FQE", critics != ["offline"]),
                                       ("the rule's cost critic", args.rule_cost_expectile is not None),
                                       ("the cost calibration", args.calibrate_cost not in (None, "none")),
                                       ("the calibration diagnostics", args.calibration)) if asked]
        if not uses:
            return None
        data = Path(args.data or Path("datasets") / task.name)
        for flag, path in outputs.items():
            check_apart(path, flag, {"--data": data})
        logger.info("loading %s for %s", data, " and ".join(uses))
        check_dataset(data, task=task.name, obs_dim=task.obs_dim, act_dim=task.act_dim,
                      allow_task_mismatch=args.allow_task_mismatch, verify=args.verify)
        dataset = TransitionDataset.from_parquet(data)
        if dataset.tensors[OBS].shape[1:] != policy.module.observation_space.shape:
            raise ValueError(f"--data {data}: observations of size {dataset.tensors[OBS].shape[1]}; "
                             f"the checkpoint's have {policy.module.observation_space.shape[0]}")
        return dataset

    def evaluate(self, policy: Any, task: Any, args: argparse.Namespace, *, thresholds: Sequence[float],
                 seed: int, prepared: Any, files: Mapping[str, Path]) -> Evaluation:
        """With ``--calibrate-cost`` the Q^c shift set first; one rollout per ``--critic`` (``--head``: that head
        alone); with ``--calibration`` Q^c against the dataset's realised cost-to-go, and its plot."""
        from rllib_caps.algorithms.caps.calibration import calibrate_cost_critic, dataset_calibration
        from rllib_caps.core.results import format_results_table
        from rllib_caps.core.rollout import evaluate_policy

        critics = _critics(args)
        columns = None if prepared is None else prepared.numpy_columns()
        settings = FQESettings(steps=args.fqe_steps, batch_size=args.fqe_batch_size)
        if args.rule_cost_expectile is not None:
            from rllib_caps.algorithms.caps.rule_critic import refit_rule_cost_critic

            logger.info("refitting the rule's cost critic at expectile %g (%d member(s) of %d steps, read by %s)",
                        args.rule_cost_expectile, args.rule_cost_members, settings.steps, args.rule_cost_reading)
            refit_rule_cost_critic(policy.module, prepared, args.rule_cost_expectile, settings,
                                   members=args.rule_cost_members, reading=args.rule_cost_reading)
        if args.calibrate_cost is not None:
            calibrate_cost_critic(policy, columns, args.calibrate_cost)
        logger.info("the switching rule reads Q^c − %.4g (cost calibration)", policy.cost_shift)
        if args.head is not None:
            results = {"offline": evaluate_policy(policy.with_head(args.head), task, thresholds, args.episodes,
                                                  seed=seed)}
        else:
            results = policy.evaluate_critics(prepared, task, thresholds, args.episodes, critics, settings, seed=seed)
        if "offline" in results:  # the shift of the policy's own Q^c (and its per-step table, where it has one)
            step_shifts = policy.cost_step_shifts.tolist()
            results["offline"] = {**results["offline"], "cost_shift": policy.cost_shift,
                                  **({"cost_step_shifts": step_shifts} if any(step_shifts) else {}),
                                  **({"rule_cost_expectile": args.rule_cost_expectile,
                                      "rule_cost_members": args.rule_cost_members,
                                      "rule_cost_reading": args.rule_cost_reading}
                                     if args.rule_cost_expectile is not None else {})}
        output = dict(results[critics[0]] if len(critics) == 1 else results)
        tables = [format_results_table(r, title=task.name + ("" if critic == "offline" else f" ({critic} critics)"))
                  for critic, r in results.items()]
        if args.calibration:
            from rllib_caps.algorithms.caps.critic_calibration import plot_calibration

            calibration = dataset_calibration(policy, columns)
            output["calibration"] = calibration.as_dict()
            plot_calibration({"": calibration}, files["--calibration"],
                             f"{task.name}: cost critic on its dataset ({calibration.rows:,} rows)")
            tables.append(format_calibration(calibration, args.calibration))
        return Evaluation(output=output, tables=tables)

    def report_sections(self, records: Sequence[Any], *, verify: bool) -> list[ReportSection]:
        """The cost critic on its dataset: ``critic_calibration``'s table, and a reliability plot per task."""
        from rllib_caps.algorithms.caps.critic_calibration import calibration_section

        return calibration_section(records, verify=verify)

    def deployment_bundle(self, checkpoint: Path, out_dir: Path, evaluation: Mapping[str, Any] | None
                          ) -> list[Path]:
        """The checkpoint's ONNX bundle: the model, its policy card and the runtime (as ``python -m
        rllib_caps.export``)."""
        from rllib_caps.algorithms.caps.export import RUNTIME_FILE, write_bundle
        from rllib_caps.algorithms.caps.policy import CAPSPolicy

        for exporter in ONNX_EXPORTER_LOGGERS:  # their INFO lines (passes run, nodes removed) say nothing here
            logging.getLogger(exporter).setLevel(logging.WARNING)
        model, card, runtime = out_dir / "policy.onnx", out_dir / "policy.md", out_dir / RUNTIME_FILE
        write_bundle(CAPSPolicy.from_checkpoint(checkpoint), checkpoint=checkpoint, model=model, card=card,
                     runtime=runtime, evaluation=None if evaluation is None else dict(evaluation))
        return [model, card, runtime]


def _critics(args: argparse.Namespace) -> list[str]:
    return list(dict.fromkeys(args.critic))


def format_calibration(calibration: Calibration, png: str) -> str:
    """The calibration as a few lines: what the bias and the centred error say, and where the plot is."""
    c = calibration
    return (f"Cost critic on its dataset ({c.rows:,} rows): mean predicted Q^c {c.mean_predicted:.3g}, realised "
            f"discounted cost-to-go {c.mean_realised:.3g}\n"
            f"  bias {c.bias:+.3g} ({'pessimistic' if c.bias > 0 else 'optimistic'}), centred RMSE "
            f"{c.centred_rmse:.3g}, correlation {c.correlation:.3f}; plot: {png}")
