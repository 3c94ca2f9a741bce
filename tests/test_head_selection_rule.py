"""The quality issue's default rule (``benchmarks/head_selection.py``), fixed before the measurements: safe at
every (dataset, seed, κ), then the best mean ratio to the authors' code; the paper's arm unless one beats it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.head_selection import (
    ARMS,
    COST_HEAD_ARM,
    apply_rule,
    main,
    measured_everywhere,
    with_pessimism_arms,
)


def seed(shift: float = 0.0, **arms: tuple[float, float]) -> dict[str, dict]:
    """One seed's arms: name -> (mean normalised reward, largest normalised cost); unnamed arms get (0.1, 0.0);
    ``shift``: the ``+calibrated`` arms' shift."""
    values = {arm: (0.1, 0.0) for arm in ARMS} | {name.replace("_cal", "+calibrated"): v for name, v in arms.items()}
    return {arm: {"mean_nr": nr, "max_nc": nc, "shift": shift if arm.endswith("+calibrated") else 0.0}
            for arm, (nr, nc) in values.items()}


@pytest.mark.parametrize(("shift", "source"),
                         [(2.5, "head_order+calibrated"), (-2.5, "head_order"), (0.0, "head_order")])
def test_a_pessimism_arm_is_the_calibrated_arm_where_the_critic_was_pessimistic_else_the_uncalibrated(
        shift: float, source: str) -> None:
    measured = {arm: row for arm, row in seed(shift, head_order=(0.2, 0.5), head_order_cal=(0.4, 0.7)).items()
                if not arm.endswith("+pessimism")}
    rows = with_pessimism_arms(measured)
    assert rows["head_order+pessimism"]["mean_nr"] == measured[source]["mean_nr"]
    assert rows["head_order+pessimism"]["shift"] == max(shift, 0.0)
    assert rows["q_reward+pessimism"]["mean_nr"] == 0.1


def test_an_unsafe_arm_never_wins_however_much_reward_it_earns() -> None:
    arms = {"A": [seed(head_order_cal=(0.9, 0.5)), seed(head_order_cal=(0.9, 1.2))],
            "B": [seed(q_reward=(0.5, 0.2), head_order=(0.6, 0.3))]}
    default, verdict = apply_rule(arms, {"A": [0.2, 0.2], "B": [0.5]})
    assert not verdict["head_order+calibrated"]["safe"] and default == "head_order"
    assert verdict["head_order"]["ratios"]["B"] == pytest.approx(1.2)


def test_the_score_is_the_mean_over_datasets_of_the_ratio_to_the_authors() -> None:
    arms = {"A": [seed(q_reward=(0.2, 0.1), head_order=(0.1, 0.1))],  # head_order 0.5x here ...
            "B": [seed(q_reward=(0.5, 0.1), head_order=(1.0, 0.1))]}  # ... and 2x here: mean 1.25 against 1.5
    default, verdict = apply_rule(arms, {"A": [0.2], "B": [0.5]})
    assert verdict["q_reward"]["score"] == pytest.approx(1.0) and verdict["head_order"]["score"] == pytest.approx(1.25)
    assert default == "head_order"


def test_the_paper_arm_stays_on_a_tie_and_a_dataset_without_reference_is_an_error(tmp_path: Path, capsys) -> None:
    default, _ = apply_rule({"A": [seed(q_reward=(0.1, 0.0))]}, {"A": [0.1]})  # every arm 0.1: a tie
    assert default == "q_reward"
    with pytest.raises(ValueError, match="no reference .* for B"):
        apply_rule({"A": [seed()], "B": [seed()]}, {"A": [0.1]})
    arms, ref = tmp_path / "a.json", tmp_path / "r.json"
    arms.write_text(json.dumps(seed(head_order=(0.3, 0.5))))
    ref.write_text(json.dumps({"mean_nr": 0.2}))
    assert main(["rule", "--arms", f"A={arms}", "--reference", f"A={ref}"]) == 0
    printed = capsys.readouterr().out
    assert "default by the rule: head_order" in printed and "| A | head_order | 0.300 / 0.50 | 0.300 |" in printed
    ref.write_text(json.dumps({"mean_normalized_reward": 0.3}))  # the authors' code's run; a number: a published one
    assert main(["rule", "--arms", f"A={arms}", "--reference", f"A={ref}", "A=0.1"]) == 0
    assert "| A | authors' code | 0.300 | 0.100 | 0.200 |" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--arms A: expected DATASET=FILE.json"):
        main(["rule", "--arms", "A", "--reference", f"A={ref}"])


def test_arms_absent_from_old_jsons_are_shown_as_missing_and_left_out_of_the_rule(tmp_path: Path, capsys) -> None:
    """A JSON from before "q_trust", the per-step calibrations and the cost head (the repository's BallCircle seed 0,
    four arms) beside one with every arm: the rule ranks only the arms both have, and the table marks the missing
    cells."""
    old = Path(__file__).resolve().parents[1] / "benchmarks" / "quality_runs" / "BallCircle-s0-arms.json"
    assert "q_trust" not in json.loads(old.read_text())
    new = tmp_path / "new.json"
    new.write_text(json.dumps(seed(q_trust=(0.9, 0.5)) | {COST_HEAD_ARM: {"mean_nr": 0.05, "max_nc": 0.3, "shift": 0}}))
    measured = {"A": [with_pessimism_arms(json.loads(old.read_text())), json.loads(new.read_text())]}
    assert measured_everywhere(measured) == [f"{selection}{critic}" for selection in ("q_reward", "head_order")
                                             for critic in ("", "+calibrated", "+pessimism")]  # the old JSON's
    default, verdict = apply_rule(measured, {"A": [0.5, 0.5]})
    assert "q_trust" not in verdict and default in verdict
    assert main(["rule", "--arms", f"A={old}", f"A={new}", "--reference", "A=0.5", "A=0.5"]) == 0
    printed = capsys.readouterr().out
    assert "| A | q_trust | — | 0.900 / 0.50 | 0.900 |" in printed
    assert "| A | cost_head | — | 0.050 / 0.30 | 0.050 |" in printed
    assert "\n| q_trust |" not in printed  # no verdict row
    default, verdict = apply_rule({"A": [json.loads(new.read_text())]}, {"A": [0.5]})  # measured everywhere: ranked
    assert default == "q_trust" and COST_HEAD_ARM not in verdict


def test_arms_rolls_out_every_selection_and_the_cost_head_alone(tmp_path: Path) -> None:
    """``arms`` on an untrained BallCircle checkpoint, one episode per κ: every arm is written; the cost head ignores
    the budget, so with the same episode seeds it earns and spends the same at every κ."""
    from test_export import BUNDLED, untrained_checkpoint

    checkpoint = untrained_checkpoint(tmp_path / "checkpoint")
    out = tmp_path / "arms.json"
    assert main(["arms", "--checkpoint", str(checkpoint), "--data", str(BUNDLED), "--task", "BallCircle",
                 "--episodes", "1", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert set(rows) == {*ARMS, COST_HEAD_ARM}
    cost_head = rows[COST_HEAD_ARM]["per_kappa"]  # κ -> (normalised reward, cost ÷ κ)
    assert len({nr for nr, _ in cost_head.values()}) == 1
    assert len({round(nc * float(kappa), 9) for kappa, (_, nc) in cost_head.items()}) == 1
    assert rows["q_trust+calibrated"]["shift"] == rows["q_reward+calibrated"]["shift"] != 0.0
