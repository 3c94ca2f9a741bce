"""The authors' reference runner (``benchmarks/authors_reference.py``) without the authors' virtualenv: its input
errors, a failed run that writes nothing, and the JSON it makes of a run's evaluations."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from benchmarks.authors_reference import AUTHORS_FILES, HDF5_SIGNATURE, main, protocol_args, summary
from rllib_caps.envs.tasks import get_task


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    """A checkout with the authors' file names (empty) and a file that starts as an HDF5 does."""
    code = tmp_path / "CAPS"
    for name in AUTHORS_FILES:
        (code / name).parent.mkdir(parents=True, exist_ok=True)
        (code / name).write_text("")
    h5 = tmp_path / "data.hdf5"
    h5.write_bytes(HDF5_SIGNATURE + b"\0" * 8)
    return {"code": code, "h5": h5, "out": tmp_path / "authors.json"}


def argv(inputs: dict[str, Path], **changes: str) -> list[str]:
    flags = {"authors-code": str(inputs["code"]), "python": "/bin/false", "task": "CarCircle1",
             "h5": str(inputs["h5"]), "seed": "0", "out": str(inputs["out"])} | changes
    return [text for flag, value in flags.items() for text in (f"--{flag}", value)]


@pytest.mark.parametrize(("change", "message"), [
    ({"task": "NoSuchTask"}, "--task NoSuchTask: unknown task"),
    ({"authors-code": "/"}, "not a checkout of yassineCh/CAPS (no examples/train/train_capsiql.py)"),
    ({"python": "/no/python"}, "--python /no/python: not an executable file"),
    ({"h5": "/no/data.hdf5"}, "--h5 /no/data.hdf5: no such file"),
    ({"out": "/no/folder/a.json"}, "its folder does not exist"),
    ({"out": "a.txt"}, "--out a.txt: name a .json file"),
])
def test_a_bad_input_is_named_in_one_line(inputs: dict[str, Path], change: dict, message: str) -> None:
    with pytest.raises(SystemExit, match=message.replace("(", r"\(").replace(")", r"\)")):
        main(argv(inputs, **change))


def test_a_file_that_is_not_hdf5_is_refused(inputs: dict[str, Path]) -> None:
    inputs["h5"].write_text("observations,actions\n")
    with pytest.raises(SystemExit, match="not an HDF5 file"):
        main(argv(inputs))


def test_a_failed_authors_run_writes_nothing(inputs: dict[str, Path]) -> None:
    with pytest.raises(SystemExit, match="the authors' code exited with status 1"):
        main(argv(inputs))
    assert not inputs["out"].exists()


def test_the_json_scores_the_last_evaluation_per_cost_limit_as_this_project_does(inputs: dict[str, Path]) -> None:
    spec = get_task("CarCircle1")
    low, high = spec.min_reward, spec.max_reward
    evaluations = [{"step": step, "cost_limit": kappa, "reward": low + (high - low) * share, "cost": cost}
                   for step, share, cost in ((5, 0.9, 99.0), (10, 0.5, 10.0)) for kappa in spec.thresholds]
    heads = [{"head": 0, "reward": high, "cost": 80.0}, {"head": 1, "reward": low, "cost": 10.0}]
    inner = {"config": {}, "dsrl_reward_bounds": {"min": low, "max": high}, "all_evaluations": evaluations,
             "heads_alone": heads}
    ns = argparse.Namespace(h5=inputs["h5"], seed=3)
    args = protocol_args(spec.id, 3, 10, 2)
    result = summary(ns, spec, args, inner, 1.5, 1.0)
    assert list(result["per_kappa"]) == [str(k) for k in spec.thresholds] == ["20", "40", "80"]
    assert result["mean_normalized_reward"] == pytest.approx(0.5)
    assert result["per_kappa"]["40"]["normalized_cost"] == pytest.approx(0.25)
    assert result["mean_normalized_cost"] == pytest.approx((0.5 + 0.25 + 0.125) / 3)
    assert result["trainer_args"][args.index("--update_steps") + 1] == "10"
    assert [h["normalized_reward"] for h in result["heads_alone"]] == pytest.approx([1.0, 0.0])
    assert result["heads_alone"][1]["normalized_cost"] == pytest.approx({"20": 0.5, "40": 0.25, "80": 0.125})
    with pytest.raises(SystemExit, match="DSRL's reward range"):
        summary(ns, spec, args, {**inner, "dsrl_reward_bounds": {"min": low, "max": high + 1}}, 1.5, 1.0)
