"""A last good copy of Tune's experiment state, so that a sweep whose driver was killed, or whose ``--storage`` filled
up, can still be resumed.

Tune writes its state (``tuner.pkl``; per session, ``experiment_state-<session>.json`` and the search's
``basic-variant-state-<session>.json``, a pickle) atomically in a staging directory, then copies every ``*.json`` and
``*.pkl`` file of it to the experiment directory, in place: a full disk, or a driver killed during the copy, leaves a
file truncated. A resumed run first copies all those files of the experiment directory (older sessions' included)
into its staging directory, so that each later copy rewrites them all again. A restore reads, of each kind of file,
only the newest (the greatest name); a truncated one makes ``Tuner.restore`` fail.

``StateBackup`` (a Tune callback) keeps a copy of the files a restore reads whenever they have changed and all load
completely, in ``.last_good_state/state.pkl`` (all in one file, written atomically: a full disk leaves the previous
copy as it was; in a directory, where Tune's copies never reach it). ``repair_state`` puts them back before
``--resume`` when one is truncated. The copy names the trials' checkpoints of that moment, which Tune deletes as newer
ones arrive (``num_to_keep``); so the copy also keeps hard links to them (``.last_good_state/checkpoints/``: no extra
space while Tune keeps them, at most the space of the checkpoints it rotated out since), and ``repair_state`` puts back
those Tune has deleted.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import re
import shutil
import time
from pathlib import Path
from typing import Any

from rllib_caps.sweeps.options import SweepError
from rllib_caps.utils.atomic import atomic_file
from rllib_caps.utils.manifest import MANIFEST

logger = logging.getLogger("rllib_caps.tune")

BACKUP_DIR = ".last_good_state"  # not a *.json or *.pkl file: Tune never copies it
BACKUP_FILE = f"{BACKUP_DIR}/state.pkl"  # {state file name: its bytes}, taken together so they agree
KEPT_CHECKPOINTS = f"{BACKUP_DIR}/checkpoints"  # TRIAL/checkpoint_NNNNNN: hard links, as of BACKUP_FILE
EXPERIMENT_STATE_PATTERN = "experiment_state-*.json"  # Tune's trials and their checkpoints, one per session
SYNCED_SUFFIXES = (".json", ".pkl")  # the experiment directory's files that Tune copies from its staging directory
SESSION = re.compile(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d")  # Tune's session string, in its per-session file names
LOW_SPACE_BYTES = 64 * 2**20  # below this much free space on --storage's device, a failed sweep says so


def _complete_state(path: Path) -> bytes | None:
    """The file's bytes if they load, as JSON or as a pickle (not truncated, not being rewritten), else None."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    for load in (json.loads, pickle.loads):
        try:
            load(data)
            return data
        except Exception:  # noqa: BLE001  (whatever a truncated file raises: the next format, then None)
            continue
    return None


def _read_backup(experiment_dir: Path) -> dict[str, bytes]:
    try:
        return pickle.loads((experiment_dir / BACKUP_FILE).read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError):
        return {}


def _hard_link_tree(source: Path, target: Path) -> None:
    """``target``: ``source``'s directory tree, its files hard links to ``source``'s (same device, no copy)."""
    shutil.copytree(source, target, copy_function=os.link)


def keep_checkpoint(experiment_dir: Path, checkpoint: Path) -> None:
    """Hard links to ``checkpoint`` (a trial's, in ``experiment_dir``) in ``KEPT_CHECKPOINTS``, unless there
    already are; raises ``OSError`` when that fails (a full disk), leaving nothing half-linked."""
    relative = checkpoint.relative_to(experiment_dir)
    target = experiment_dir / KEPT_CHECKPOINTS / relative
    if target.is_dir() or not checkpoint.is_dir():
        return
    try:
        _hard_link_tree(checkpoint, target)
    except (OSError, shutil.Error) as err:
        shutil.rmtree(target, ignore_errors=True)
        raise OSError(f"{target}: {err}") from err


def _deleted_but_kept(experiment_dir: Path) -> list[Path]:
    """The checkpoints with links in ``KEPT_CHECKPOINTS`` that Tune has deleted, relative to ``experiment_dir``."""
    kept = experiment_dir / KEPT_CHECKPOINTS
    linked = (path.relative_to(kept) for path in kept.glob("*/checkpoint_*"))
    return [checkpoint for checkpoint in linked if not (experiment_dir / checkpoint).exists()]


def _session(name: str) -> str:
    """The Tune session string in a state file's name; "" for an unstamped file (``tuner.pkl``, the plan)."""
    match = SESSION.search(name)
    return match.group() if match else ""


def _synced(path: Path) -> bool:
    return path.suffix in SYNCED_SUFFIXES and path.is_file()


def _restore_read(experiment_dir: Path, staging_dir: Path | None = None) -> list[Path]:
    """The state files a restore reads: of each kind (the file name with its session string as ``*``), the newest, as
    Tune takes it (the greatest name). With ``staging_dir`` (Tune's staging directory), its copy of a file where it
    has one: Tune writes it there in the thread that runs the callbacks, so at a callback it is complete and its
    files agree, while the copy in ``experiment_dir`` may be half rewritten by Tune's upload thread."""
    staged = set(filter(_synced, staging_dir.iterdir())) if staging_dir and staging_dir.is_dir() else set()
    newest: dict[str, Path] = {}
    for path in sorted([*filter(_synced, experiment_dir.iterdir()), *staged],
                       key=lambda path: (path.name, path in staged)):
        newest[SESSION.sub("*", path.name)] = path  # the greatest name last, and of two, the staged copy
    return sorted(newest.values(), key=lambda path: path.name)


def back_up_state(experiment_dir: Path, gone_before: frozenset[Path] = frozenset(),
                  staging_dir: Path | None = None) -> frozenset[Path] | None:
    """Keeps the state files a restore reads (``_restore_read``, from ``staging_dir`` where it has them) in
    ``BACKUP_FILE`` when they have changed since and all load completely (written to a temporary file, then renamed:
    a full disk keeps the previous copy), with links to every checkpoint saved by then (``keep_checkpoint``). Links
    to checkpoints already deleted at the previous copy (``gone_before``, what that call returned) are dropped: this
    state was written after that copy, so it names none of them. Returns the checkpoints deleted by now (for the
    next call), or None when the copy could not be written."""
    state = {path.name: _complete_state(path) for path in _restore_read(experiment_dir, staging_dir)}
    if not any(map(_session, state)) or None in state.values() or state == _read_backup(experiment_dir):
        return gone_before
    backup = experiment_dir / BACKUP_FILE
    try:
        for checkpoint in experiment_dir.glob(f"[!.]*/checkpoint_*/{MANIFEST}"):  # the manifest is written last
            keep_checkpoint(experiment_dir, checkpoint.parent)
        backup.parent.mkdir(exist_ok=True)
        with atomic_file(backup) as tmp:
            tmp.write_bytes(pickle.dumps(state))
    except OSError as err:
        logger.warning("%s: could not keep a copy of Tune's state (%s)", backup, err.strerror or err)
        return None
    for checkpoint in gone_before:
        shutil.rmtree(experiment_dir / KEPT_CHECKPOINTS / checkpoint, ignore_errors=True)
    return frozenset(_deleted_but_kept(experiment_dir))


class StateLostError(SweepError):
    """Tune's state files ``paths`` are damaged and have no last good copy."""

    def __init__(self, message: str, paths: list[Path]) -> None:
        super().__init__(message)
        self.paths = paths


def repair_state(experiment_dir: Path) -> list[Path]:
    """Before ``--resume``: when a state file a restore reads does not load completely, puts back its last good
    copy; returns the files put back. A damaged file of a session is put back with the rest of the copy's session
    (they agree), and the files of sessions after it are deleted, so that Tune resumes from the copy. Raises
    ``StateLostError`` naming the damaged files that have no copy. Older sessions' files, which no restore reads,
    are left as they are."""
    damaged = [path for path in _restore_read(experiment_dir) if _complete_state(path) is None]
    if not damaged:
        return []
    backup = _read_backup(experiment_dir)
    later: list[Path] = []
    put_back = [path for path in damaged if not _session(path.name)]
    session = max(map(_session, backup), default="")  # the copy's
    if len(put_back) < len(damaged) and session:
        later = [path for path in filter(_synced, experiment_dir.iterdir()) if _session(path.name) > session]
        put_back += [experiment_dir / name for name in backup if _session(name)]
    if missing := [path for path in damaged if path not in later and path.name not in backup]:
        raise StateLostError(f"--resume: {missing[0]} is truncated or corrupt (was --storage full, or the sweep "
                             f"killed?) and there is no earlier copy ({experiment_dir / BACKUP_FILE}); finished "
                             "trials keep their results: start a new sweep with another --name, or report them "
                             "with `python -m rllib_caps.report`", missing)
    for path in later:
        path.unlink()
    for path in put_back:
        path.write_bytes(backup[path.name])
    deleted = _deleted_but_kept(experiment_dir)
    for checkpoint in deleted:
        _hard_link_tree(experiment_dir / KEPT_CHECKPOINTS / checkpoint, experiment_dir / checkpoint)
    logger.warning("--resume: %s truncated or corrupt (was --storage full, or the sweep killed?); put back the last "
                   "good copy of Tune's state%s and %d checkpoint(s) Tune had deleted since (trials continue from the "
                   "checkpoints it names; those that finished after it was taken run again)",
                   ", ".join(map(str, damaged)), "".join(f", deleted the later {path.name}" for path in later),
                   len(deleted))
    return sorted(put_back)


def low_space_message(experiment_dir: Path) -> str | None:
    """What to say when a sweep failed with little space left on ``--storage``'s device, else None."""
    free = shutil.disk_usage(experiment_dir if experiment_dir.exists() else experiment_dir.parent).free
    if free >= LOW_SPACE_BYTES:
        return None
    return (f"--storage {experiment_dir}: only {free / 2**20:.1f} MiB left on its device (full?); free some space, "
            "then run the same command with --resume")


def _define_state_backup() -> type:
    from ray.tune import Callback

    class StateBackup(Callback):
        """Tune callback: ``keep_checkpoint`` for each checkpoint as Tune registers it (before it rotates older
        ones out), and ``back_up_state`` (from Tune's staging directory, which every trial's storage names) at most
        every ``interval_s`` seconds (after a failed write, every ``10 interval_s``) and at the end of the run."""

        def __init__(self, experiment_dir: Path, interval_s: float = 5.0) -> None:
            self.experiment_dir, self.interval_s, self._next = experiment_dir, interval_s, 0.0
            self._gone: frozenset[Path] = frozenset()

        def _back_up(self, trials: list) -> None:
            staging = Path(trials[0].storage.experiment_driver_staging_path) if trials else None
            gone = back_up_state(self.experiment_dir, self._gone, staging)
            self._gone = self._gone if gone is None else gone
            self._next = time.monotonic() + self.interval_s * (10 if gone is None else 1)

        def on_checkpoint(self, iteration: int, trials: list, trial: Any, checkpoint: Any, **info: Any) -> None:
            path = Path(checkpoint.path)
            if checkpoint.filesystem.type_name == "local" and path.is_relative_to(self.experiment_dir):
                try:
                    keep_checkpoint(self.experiment_dir, path)
                except OSError as err:
                    logger.warning("could not keep a link to %s (%s)", path, err)

        def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
            if time.monotonic() >= self._next:
                self._back_up(trials)

        def on_experiment_end(self, trials: list, **info: Any) -> None:
            self._back_up(trials)

    StateBackup.__module__ = __name__
    return StateBackup


def state_backup(experiment_dir: Path) -> Any:
    """A ``StateBackup`` callback for the experiment in ``experiment_dir``."""
    if "StateBackup" not in globals():
        globals()["StateBackup"] = _define_state_backup()
    return globals()["StateBackup"](experiment_dir)


def __getattr__(name: str) -> Any:
    """Lazy module attribute: pickle finds ``StateBackup`` through this when Tune restores an experiment's
    callbacks."""
    if name == "StateBackup":
        return type(state_backup(Path()))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
