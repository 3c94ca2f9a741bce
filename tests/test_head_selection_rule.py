"""The quality issue's default rule (``benchmarks/head_selection.py``), fixed before the measurements: safe at
every (dataset, seed, κ), then the best mean ratio to the authors' code; the paper's arm unless one beats it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.head_selection import ARMS, apply_rule, main, with_pessimism_arms


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
