"""Checks of user input before any work, shared by the CLIs' flags and the sweep YAML: numbers of the right type
and range, seeds (one valid range everywhere), output locations that can be written and outputs apart from the
inputs and from each other.

Each check raises ``ValueError`` (``OutputNotWritableError`` for a location) whose message says what was expected;
the caller names the flag, key or file. ``number_type`` turns a check into an argparse ``type``, so argparse names
the flag and exits 2 with one line.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable, Mapping
from numbers import Integral, Real
from pathlib import Path
from typing import Any

from rllib_caps.utils.atomic import OutputNotWritableError

SEED_LIMIT = 2**32  # seeds are integers in [0, 2**32): numpy's and gymnasium's range


def check_number(value: Any, *, integer: bool = False, minimum: float | None = None, positive: bool = False,
                 below: int | None = None) -> int | float:
    """``value`` if it is a number (an integer when ``integer``; a bool is neither) that is ``>= minimum``
    (``> 0`` when ``positive``) and ``< below``; else a ValueError saying what was expected."""
    kind = "an integer" if integer else "a number"
    bounds = [f">= {minimum:g}"] if minimum is not None else []
    bounds += ["> 0"] if positive else []
    bounds += [f"< {below}"] if below is not None else []
    expected = " ".join([kind, " and ".join(bounds)]).strip()
    ok_type = isinstance(value, Integral if integer else Real) and not isinstance(value, bool)
    if not ok_type or value != value:  # NaN is no number here
        raise ValueError(f"must be {expected}, got {value!r}")
    if (minimum is not None and value < minimum) or (positive and value <= 0) or (below is not None
                                                                                   and value >= below):
        raise ValueError(f"must be {expected}, got {value!r}")
    return int(value) if integer else float(value)


def check_seed(value: Any) -> int:
    """``value`` as a seed: an integer in [0, 2**32)."""
    return int(check_number(value, integer=True, minimum=0, below=SEED_LIMIT))


def number_type(*, integer: bool = False, minimum: float | None = None, positive: bool = False,
                below: int | None = None) -> Callable[[str], int | float]:
    """An argparse ``type`` that parses a flag's text as ``check_number`` with these bounds checks it."""

    def parse(text: str) -> int | float:
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            value = text
        try:
            return check_number(value, integer=integer, minimum=minimum, positive=positive, below=below)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return parse


def seed_type(text: str) -> int:
    """The argparse ``type`` of every seed flag (``train --seed``, ``evaluate --seed``, ``tune --seeds``)."""
    return number_type(integer=True, minimum=0, below=SEED_LIMIT)(text)


def check_writable(path: str | Path, flag: str) -> None:
    """Refuses an output location that cannot be created, before any work: outputs are made inside their parent
    (atomically, through a sibling), so the nearest existing ancestor of ``path``'s parent must be a writable
    directory. Raises ``OutputNotWritableError`` naming ``flag`` and the path."""
    path = Path(path).resolve()
    existing = next(p for p in path.parents if p.exists())
    if not existing.is_dir():
        problem = f"{existing} is a file, not a directory"
    else:
        try:  # a real write: permissions, read-only mounts and ACLs all answer
            tempfile.TemporaryFile(dir=existing).close()
            return
        except OSError as err:
            problem = f"{existing}: {err.strerror}"
    raise OutputNotWritableError(f"{flag} {path}: cannot write there ({problem})")


def check_apart(out: str | Path, flag: str, inputs: Mapping[str, str | Path | None]) -> None:
    """Refuses an output that is, contains or lies inside one of ``inputs`` (flag -> path; None: not given), before
    any work and whatever the other flags: writing it would change or delete the input. Raises
    ``OutputNotWritableError`` naming both flags and paths."""
    out = Path(out).resolve()
    for input_flag, given in inputs.items():
        if given is None:
            continue
        path = Path(given).resolve()
        relation = ("is" if out == path else "contains" if out in path.parents else "is inside" if path in out.parents
                    else None)
        if relation is not None:
            raise OutputNotWritableError(f"{flag} {out}: {relation} the input {input_flag} {path}; write the output "
                                         "somewhere else")


def check_distinct(outputs: Mapping[str, str | Path]) -> None:
    """Refuses two output flags (flag -> path) naming one file, before any work: each output is written whole, so
    one would replace the other. Raises ``OutputNotWritableError`` naming both flags and the path."""
    seen: dict[Path, str] = {}
    for flag, given in outputs.items():
        path = Path(given).resolve()
        if path in seen:
            raise OutputNotWritableError(f"{seen[path]} and {flag} both name {path}; give each output its own file")
        seen[path] = flag


def check_output(path: str | Path, flag: str, inputs: Mapping[str, str | Path | None], *, file: bool = False) -> None:
    """Every check of an output before any work: apart from ``inputs`` (``check_apart``), writable
    (``check_writable``) and, for a ``file`` output, not an existing directory."""
    check_apart(path, flag, inputs)
    check_writable(path, flag)
    if file and Path(path).is_dir():
        raise OutputNotWritableError(f"{flag} {Path(path).resolve()}: is a directory; name a file")


def check_local_gpus(flag: str, requested: float) -> None:
    """Refuses more GPUs than this machine has (torch's count of CUDA devices, after ``CUDA_VISIBLE_DEVICES``): a
    ValueError naming ``flag``, raised before Ray starts. Imports torch only when GPUs are asked for."""
    if requested > 0:
        import torch

        if torch.cuda.device_count() < requested:
            raise ValueError(f"{flag} {requested:g}: this machine has {torch.cuda.device_count()} CUDA GPUs")


def local_gpu_name() -> str | None:
    """The name of this machine's first CUDA GPU (``NVIDIA H100 80GB HBM3``); None without one."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def read_yaml(path: Path) -> Any:
    """The parsed YAML document at ``path``; a ValueError saying it cannot be read or is not valid YAML (the
    caller names the flag or file)."""
    import yaml

    try:
        return yaml.safe_load(path.read_text())
    except OSError as err:
        raise ValueError(f"cannot read it ({err.strerror or err})") from err
    except yaml.YAMLError as err:
        raise ValueError(f"not valid YAML ({str(err).splitlines()[0]})") from err
