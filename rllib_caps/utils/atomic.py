"""Atomic outputs, the one helper for them: write into a temporary sibling, then rename into place.

A failed or interrupted write leaves the old output (if any) untouched and nothing half-written behind,
not even the parent directories it had to create. Existing outputs are replaced only with ``force``, and a
directory only when its ``OUTPUT_MARKER`` says that the same command wrote it. One writer at a time: a writer holds
an advisory lock on ``.NAME.lock`` beside the output from its checks to the final rename, and removes the temporary
siblings (``.NAME.<32 hex>.tmp``/``.old``) that a killed writer of the same output left. A full disk while writing
is one ``OutputNoSpaceError`` naming the output.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

OUTPUT_MARKER = ".rllib-caps-output.json"  # in every directory output: {"command": the command that wrote it}

logger = logging.getLogger("rllib_caps.outputs")


class OutputExistsError(FileExistsError):
    """The output path exists and ``--force`` was not given."""


class ForeignOutputError(OutputExistsError):
    """The output exists and this command did not write it, so even ``--force`` does not replace it."""


class OutputBusyError(OutputExistsError):
    """Another process is writing the same output now."""


class OutputNotWritableError(PermissionError):
    """The output's directory cannot be created (read-only, or a file in the way); the message names it."""


class OutputNoSpaceError(OutputNotWritableError):
    """The output's device filled up while it was written; the message names the output."""


def temporary_sibling(path: Path, suffix: str = ".tmp") -> Path:
    """A fresh hidden name beside ``path`` (same filesystem, so the final rename is atomic)."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex}{suffix}")


def lock_path(out: Path) -> Path:
    """The lock file beside ``out`` that its writer holds."""
    return out.with_name(f".{out.name}.lock")


def _is_full_disk(err: BaseException | None) -> bool:
    """Whether ``err`` or an error it came from says the device is full (torch and pyarrow wrap the OSError)."""
    seen = set()
    while err is not None and id(err) not in seen:
        if (isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT)) or \
                "No space left on device" in str(err):
            return True
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return False


@contextmanager
def output_lock(out: Path) -> Iterator[None]:
    """Holds an exclusive advisory lock on ``lock_path(out)``; ``OutputBusyError`` at once when another process (or
    another open of it) holds it. The lock file is removed on exit, still locked, so a writer that opened it before
    the removal locks a deleted file: it sees that and opens the new one."""
    lock = lock_path(out)
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise OutputNotWritableError(f"{out}: cannot write there ({err.strerror})") from err
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputBusyError(f"{out}: another run is writing it now (it holds {lock}); wait for it to end or "
                                  "choose another output") from None
        try:
            if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)
        os.close(fd)


def _clean_stale_siblings(out: Path) -> None:
    """Removes the temporary siblings of ``out`` a killed writer left (only names of the exact pattern); with the
    output itself missing, the newest ``.old`` (the previous output, moved aside just before a kill) is put back."""
    pattern = re.compile(rf"\.{re.escape(out.name)}\.[0-9a-f]{{32}}\.(tmp|old)(?:{re.escape(out.suffix)})?")
    stale = sorted((p for p in out.parent.iterdir() if pattern.fullmatch(p.name)), key=lambda p: p.lstat().st_mtime)
    olds = [p for p in stale if pattern.fullmatch(p.name).group(1) == "old"]
    if olds and not out.exists():
        olds[-1].rename(out)
        logger.warning("%s: put back the previous output, which a killed run had moved to %s", out, olds[-1].name)
        stale.remove(olds[-1])
    for path in stale:
        logger.info("%s: removing %s, left by a killed run", out, path.name)
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() and not path.is_symlink() else path.unlink()


@contextmanager
def _claimed(out: Path, tmp: Path, *, lock: bool = True) -> Iterator[None]:
    """Creates ``out``'s missing parents and (``lock``) takes ``out``'s lock, cleaning what killed writers left; on
    an error in the block removes ``tmp`` and the parents it created (a full disk becomes ``OutputNoSpaceError``)."""
    created = [p for p in (out.parent, *out.parent.parents) if not p.exists()]
    blocking = next((p for p in (out.parent, *out.parent.parents) if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise OutputNotWritableError(f"{out}: cannot write there ({blocking} is a file, not a directory)")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputNotWritableError(f"{out}: cannot write there ({err.strerror})") from err
    try:
        with output_lock(out) if lock else contextlib.nullcontext():
            if lock:
                _clean_stale_siblings(out)
            try:
                yield
            except BaseException as err:
                shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink(missing_ok=True)
                if _is_full_disk(err):
                    kept = "; the previous output is kept" if out.exists() else ""
                    raise OutputNoSpaceError(f"{out}: no space left on device (nothing written{kept})") from err
                raise
    except BaseException:
        for parent in created:  # deepest first
            with contextlib.suppress(OSError):
                parent.rmdir()
        raise


def _check_replaceable(out: Path, *, force: bool, command: str | None) -> None:
    """Refuses an existing ``out`` without ``force``, and (for a directory output, ``command`` given) one whose
    marker does not name ``command`` even with it, unless it is an empty directory (nothing to lose)."""
    if not out.exists():
        return
    if command is not None and _writer(out) != command and not (out.is_dir() and not any(out.iterdir())):
        raise ForeignOutputError(f"{out}: already exists and was not written by {command} (no {OUTPUT_MARKER} naming "
                                 "it), so it is not replaced; choose another output or move it away yourself")
    if not force:
        raise OutputExistsError(f"{out}: already exists (use --force to overwrite)")


def _writer(out: Path) -> str | None:
    """The command that ``out``'s marker names, or None."""
    try:
        return json.loads((out / OUTPUT_MARKER).read_text()).get("command")
    except (OSError, ValueError, AttributeError):
        return None


@contextmanager
def atomic_directory(out: str | Path, *, command: str, force: bool = False) -> Iterator[Path]:
    """Yields a temporary directory beside ``out`` that becomes ``out`` only if the block succeeds; it already holds
    ``OUTPUT_MARKER`` naming ``command`` (so a checkpoint's manifest, written in the block, lists it).

    An existing ``out`` is replaced only with ``force`` and only when its marker names ``command`` (or it is
    empty); it is moved aside first and deleted after the rename."""
    out = Path(out).resolve()
    _check_replaceable(out, force=force, command=command)
    tmp = temporary_sibling(out)
    with _claimed(out, tmp):
        _check_replaceable(out, force=force, command=command)  # again under the lock: a writer may have just ended
        try:
            tmp.mkdir()
        except OSError as err:
            raise OutputNotWritableError(f"{out}: cannot write there ({err.strerror})") from err
        (tmp / OUTPUT_MARKER).write_text(json.dumps({"command": command}) + "\n")
        yield tmp
        old = temporary_sibling(out, ".old")
        if out.exists():
            out.rename(old)
        try:
            tmp.rename(out)
        except OSError:
            if old.exists():
                old.rename(out)
            raise
        shutil.rmtree(old, ignore_errors=True)


@contextmanager
def atomic_file(out: str | Path, *, force: bool = True, lock: bool = False) -> Iterator[Path]:
    """Yields a temporary path beside ``out`` to write; it replaces ``out`` only if the block succeeds. A directory
    at ``out`` is refused. ``lock`` (a command's own output): one writer at a time, and what killed writers of
    ``out`` left is cleaned."""
    out = Path(out).resolve()
    if out.is_dir():
        raise OutputNotWritableError(f"{out}: is a directory; name a file")
    _check_replaceable(out, force=force, command=None)
    tmp = temporary_sibling(out, ".tmp" + out.suffix)
    with _claimed(out, tmp, lock=lock):
        yield tmp
        os.replace(tmp, out)


@contextmanager
def atomic_files(*outs: str | Path, force: bool = True) -> Iterator[list[Path]]:
    """``atomic_file`` (locked) for several outputs as one: all are claimed or none, and when the block succeeds
    each replaces its output in the order given, so a failed replace leaves the later ones unwritten."""
    with contextlib.ExitStack() as stack:
        tmps = [stack.enter_context(atomic_file(out, force=force, lock=True)) for out in reversed(outs)]
        yield tmps[::-1]
