"""Outputs are safe to point anywhere: ``--force`` replaces only a command's own output (its marker names it), an
output that is, contains or lies inside an input is refused before any work, one writer at a time per output (a
lock beside it), file outputs are checked before the rollouts, a killed writer's temporary siblings are cleaned by
the next one, and a full disk is one line that keeps what was there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_fault_injection import fill, small_disk  # noqa: F401 (small_disk: a fixture)

from data_conversion.dsrl_to_parquet import main as convert_main
from rllib_caps.evaluate import main as evaluate_main
from rllib_caps.export import main as export_main
from rllib_caps.report.__main__ import main as report_main
from rllib_caps.train import main as train_main
from rllib_caps.utils.atomic import (
    OUTPUT_MARKER,
    OutputBusyError,
    atomic_directory,
    atomic_files,
    lock_path,
    output_lock,
)

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "datasets" / "BallCircle"
REPORT_FIXTURE = ROOT / "tests" / "fixtures" / "report_results" / "experiment"


def tree(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` (hidden ones included) and its bytes."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err
    return err


@pytest.fixture
def experiment(tmp_path: Path) -> Path:
    shutil.copytree(REPORT_FIXTURE, tmp_path / "experiment")
    return tmp_path / "experiment"


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    shutil.copytree(BUNDLED, tmp_path / "BallCircle")
    return tmp_path / "BallCircle"


def test_an_output_on_or_around_an_input_is_refused_whatever_the_flags(experiment: Path, dataset: Path,
                                                                       tmp_path: Path, capsys) -> None:
    """The sweep, the dataset and a checkpoint stay as they were; each error names both flags and paths."""
    sweep, data = tree(experiment), tree(dataset)
    cases = [(report_main, [str(experiment), "--out", str(experiment), "--force"], "is the input EXPERIMENT_DIR"),
             (report_main, [str(experiment / "BallCircle_K2_seed0_00000_00000"), "--out", str(experiment),
                            "--force"], "contains the input EXPERIMENT_DIR"),
             (report_main, [str(experiment), "--out", str(experiment / "elsewhere")], "is inside the input"),
             (train_main, ["--task", "BallCircle", "--data", str(dataset), "--out", str(dataset), "--force"],
              "is the input --data"),
             (train_main, ["--task", "BallCircle", "--data", str(dataset), "--out", str(tmp_path), "--force"],
              "contains the input --data"),
             (export_main, ["--checkpoint", str(dataset), "--format", "onnx", "--out", str(dataset / "p.onnx"),
                            "--force"], "is inside the input --checkpoint"),
             (evaluate_main, ["--checkpoint", str(dataset), "--out", str(dataset / "r.json")],
              "is inside the input --checkpoint"),
             (convert_main, ["--task", "BallCircle", "--h5", str(dataset / "metadata.json"), "--out", str(dataset),
                             "--force"], "contains the input --h5")]
    for main, argv, relation in cases:
        assert main(argv) == 2, argv
        err = one_line_error(capsys)
        assert f"--out {Path(argv[argv.index('--out') + 1]).resolve()}: {relation}" in err, err
    assert tree(experiment) == sweep and tree(dataset) == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["BallCircle", "experiment"]


def test_force_replaces_only_the_commands_own_output(experiment: Path, dataset: Path, tmp_path: Path,
                                                     capsys) -> None:
    """A directory that report did not write (no marker naming it, or another command's marker) is not replaced,
    with or without --force, and the error does not suggest --force; report's own output is."""
    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "mine.txt").write_text("keep")
    checkpoint_like = tmp_path / "checkpoint"
    checkpoint_like.mkdir()
    (checkpoint_like / OUTPUT_MARKER).write_text(json.dumps({"command": "rllib_caps.train"}))
    for out in (foreign, checkpoint_like):
        before = tree(out)
        for force in ([], ["--force"]):
            assert report_main([str(experiment), "--out", str(out), *force]) == 2
            err = one_line_error(capsys)
            assert f"{out}: already exists and was not written by rllib_caps.report" in err and "--force" not in err
        assert tree(out) == before
    assert train_main(["--task", "BallCircle", "--data", str(dataset), "--out", str(foreign), "--force"]) == 2
    assert "was not written by rllib_caps.train" in one_line_error(capsys) and tree(foreign) == {"mine.txt": b"keep"}
    assert convert_main(["--task", "BallCircle", "--h5", str(tmp_path / "x.hdf5"), "--out", str(foreign),
                         "--force"]) == 2
    assert "was not written by data_conversion.dsrl_to_parquet" in one_line_error(capsys)

    report = tmp_path / "report"
    assert report_main([str(experiment), "--out", str(report)]) == 0
    assert json.loads((report / OUTPUT_MARKER).read_text()) == {"command": "rllib_caps.report"}
    assert report_main([str(experiment), "--out", str(report)]) == 2
    assert "already exists (use --force to overwrite)" in one_line_error(capsys)
    (report / "stale.md").write_text("from the last run")
    assert report_main([str(experiment), "--out", str(report), "--force"]) == 0
    assert not (report / "stale.md").exists() and (report / "report.md").is_file()


def test_the_bundled_dataset_is_the_converters_own_output_so_force_reconverts_it(dataset: Path) -> None:
    """datasets/BallCircle carries the marker dsrl_to_parquet writes, so a ``--force`` re-conversion over it (or
    ``fetch``/``tune --prepare`` finding it outdated) replaces it; the bundled dataset is what converting its source
    file writes, byte for byte."""
    (dataset / "stray.txt").write_text("not the converter's\n")
    assert convert_main(["--task", "BallCircle", "--h5", str(ROOT / "datasets" / "sources" / "BallCircle.hdf5"),
                         "--out", str(dataset), "--force"]) == 0
    assert tree(dataset) == tree(BUNDLED)


def test_a_second_writer_of_one_output_is_refused_and_no_lock_file_is_left(experiment: Path, dataset: Path,
                                                                           tmp_path: Path, capsys) -> None:
    out = tmp_path / "report"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; from rllib_caps.utils.atomic import output_lock\n"
         "with output_lock(Path(sys.argv[1])):\n    print('held', flush=True)\n    sys.stdin.read()", str(out)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline() == "held\n"  # the other writer holds the lock from here on
        assert report_main([str(experiment), "--out", str(out)]) == 2
        err = one_line_error(capsys)
        assert f"{out}: another run is writing it now (it holds {lock_path(out)})" in err
        assert train_main(["--task", "BallCircle", "--data", str(dataset), "--out", str(out)]) == 2
        assert "another run is writing it now" in one_line_error(capsys)
        assert not out.exists()
    finally:
        holder.stdin.close()
        assert holder.wait(timeout=30) == 0
    assert report_main([str(experiment), "--out", str(out)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["BallCircle", "experiment", "report"]  # no lock file


def test_the_lock_is_one_holder_at_a_time_across_its_removal(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with output_lock(out):
        with pytest.raises(OutputBusyError), output_lock(out):
            pass
        assert lock_path(out).exists()
    assert not lock_path(out).exists()
    with output_lock(out):  # a fresh lock file after the last holder removed its own
        assert lock_path(out).exists()


def test_file_outputs_are_checked_before_the_checkpoint_loads(tmp_path: Path, capsys) -> None:
    """evaluate --out and export --out naming a directory are refused before the checkpoint is even looked at
    (it does not exist here), so before any rollout; export writes neither the model nor its card."""
    directory = tmp_path / "results"
    directory.mkdir()
    missing = str(tmp_path / "no-checkpoint")
    assert evaluate_main(["--checkpoint", missing, "--out", str(directory)]) == 2
    assert f"--out {directory}: is a directory; name a file" in one_line_error(capsys)
    assert evaluate_main(["--checkpoint", missing, "--calibration", str(directory)]) == 2
    assert f"--calibration {directory}: is a directory" in one_line_error(capsys)
    for force in ([], ["--force"]):
        assert export_main(["--checkpoint", missing, "--format", "onnx", "--out", str(directory), *force]) == 2
        assert f"--out {directory}: is a directory; name a file" in one_line_error(capsys)
    (tmp_path / "policy.md").mkdir()
    assert export_main(["--checkpoint", missing, "--format", "onnx", "--out", str(tmp_path / "policy.onnx"),
                        "--force"]) == 2
    assert f"--out {tmp_path / 'policy.md'}: is a directory" in one_line_error(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy.md", "results"]


def test_evaluate_refuses_one_file_for_both_outputs_before_the_checkpoint_loads(tmp_path: Path, capsys) -> None:
    """--out and --calibration naming one file (however spelled) is one line naming both flags, not a lock held by
    "another run"; nothing is written."""
    missing = str(tmp_path / "no-checkpoint")
    same = tmp_path / "eval.json"
    assert evaluate_main(["--checkpoint", missing, "--out", str(same), "--calibration",
                          str(tmp_path / "." / "eval.json")]) == 2
    assert f"--out and --calibration both name {same}" in one_line_error(capsys)
    assert list(tmp_path.iterdir()) == []


def test_what_a_killed_writer_left_is_cleaned_by_the_next_writer(experiment: Path, tmp_path: Path) -> None:
    """Only names of the exact temporary pattern of that output go; a previous output that a kill left moved aside
    (``.old`` without the output) is put back first."""
    out = tmp_path / "report"
    hex32 = "0123456789abcdef" * 2
    stale = [tmp_path / f".report.{hex32}.tmp", tmp_path / f".report.{hex32[::-1]}.old"]
    kept = [tmp_path / ".report.notmine.tmp", tmp_path / f".reports.{hex32}.tmp", tmp_path / f".report.{hex32}.tmpx"]
    for path in stale + kept:
        path.mkdir()
        (path / "file").write_text("x")
    assert report_main([str(experiment), "--out", str(out)]) == 2  # the put-back .old is the previous output
    assert (out / "file").read_text() == "x" and not any(p.exists() for p in stale)
    assert all((p / "file").is_file() for p in kept)
    shutil.rmtree(out)
    with atomic_directory(out, command="rllib_caps.report"):  # as a kill inside the block leaves it
        pass
    (tmp_path / f".report.{hex32}.tmp").mkdir()
    assert report_main([str(experiment), "--out", str(out), "--force"]) == 0
    assert sorted(p for p in tmp_path.iterdir() if p.name.startswith(".")) == sorted(kept)


def test_a_full_disk_is_one_line_and_keeps_the_previous_output(experiment: Path, small_disk: Path,  # noqa: F811
                                                               capsys) -> None:
    out = small_disk / "report"
    assert report_main([str(experiment), "--out", str(out)]) == 0
    before = tree(out)
    filler = fill(small_disk)
    os.truncate(filler, filler.stat().st_size - 2**16)  # room for the tables, not for the plots
    assert report_main([str(experiment), "--out", str(out), "--force"]) == 2
    err = one_line_error(capsys)
    assert f"{out}: no space left on device (nothing written; the previous output is kept)" in err
    assert tree(out) == before
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "report"]


def test_a_full_disk_while_train_saves_keeps_the_previous_checkpoint(ray_session, dataset: Path,
                                                                     small_disk: Path,  # noqa: F811
                                                                     monkeypatch, capsys) -> None:
    """The training is lost (nothing can be saved), but not the checkpoint an earlier run left at --out. The disk
    fills up while the run trains (after the free-space check before it passed), as another writer would fill it."""
    import rllib_caps.train as train_module
    from rllib_caps.algorithms.caps.policy import CAPSPolicy

    monkeypatch.setenv("RLLIB_CAPS_SMOKE_TEST", "1")
    out = small_disk / "checkpoint"
    argv = ["--task", "BallCircle", "--data", str(dataset), "--out", str(out), "--eval-episodes", "0"]
    assert train_main(argv) == 0
    assert OUTPUT_MARKER in json.loads((out / "manifest.json").read_text())["sha256"]  # written before the manifest
    before = tree(out)
    capsys.readouterr()
    trained = train_module.train

    def train_then_fill(*args, **kwargs):
        result = trained(*args, **kwargs)
        filler = fill(small_disk)
        os.truncate(filler, filler.stat().st_size - 2**16)  # less than a checkpoint needs
        return result

    monkeypatch.setattr(train_module, "train", train_then_fill)
    assert train_main([*argv, "--force"]) == 2
    err = capsys.readouterr().err  # after the progress bar of the training
    assert "Traceback" not in err and err.endswith(
        f"\nerror: --out {out}: no space left on device (nothing written; the previous output is kept); the trained "
        "model is lost: free some space and run again\n")
    assert tree(out) == before and sorted(p.name for p in small_disk.iterdir()) == ["checkpoint", "filler"]
    CAPSPolicy.from_checkpoint(out)  # its manifest still verifies


def test_several_file_outputs_are_replaced_in_order_and_a_failed_one_stops_the_rest(tmp_path: Path) -> None:
    """export's model goes before its card: when the model cannot replace its file, the card is not written."""
    model, card = tmp_path / "policy.onnx", tmp_path / "policy.md"
    with pytest.raises(IsADirectoryError), atomic_files(model, card) as (model_tmp, card_tmp):
        model_tmp.write_text("model")
        card_tmp.write_text("card")
        model.mkdir()  # in the way of the model's rename, after the up-front checks
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy.onnx"] and not any(model.iterdir())
    with atomic_files(model.with_suffix(".bin"), card) as (model_tmp, card_tmp):
        model_tmp.write_text("model")
        card_tmp.write_text("card")
    assert card.read_text() == "card" and model.with_suffix(".bin").read_text() == "model"
