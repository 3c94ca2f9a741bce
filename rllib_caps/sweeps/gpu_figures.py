"""A GPU's recorded figures, one JSON file per device: what ``tune --dry-run`` packs GPU trials by and projects their
wall time from (``rllib_caps.sweeps.gpu_plan``). ``python -m rllib_caps.bench --project-grid --figures FILE`` writes
the steps/s of one trial and the member-steps/s of populations; ``benchmarks/bench_gpu_concurrency.py --figures FILE``
adds, to the same file, how several trials sharing one GPU compare with one population of them all.

    {"format": "rllib-caps-gpu-figures/1", "device": "NVIDIA H100 80GB HBM3", "date": "2026-11-27",
     "command": "...", "precision": "high",
     "steps_per_s": {"caps": 797, ...},                    # one trial alone, each algorithm's default sizes
     "population": {"caps": {"3": 1800}, ...},             # member-steps/s of a population of P members
     "sharing": {"members": 3,                             # optional: trials of CAPS populations of 3 members
                 "processes": {"1": 1800, "3": 4200},      #   N such trials on one GPU at once: member-steps/s
                 "one_population": {"3": 1800, "9": 4900}}}  # one population of their N x 3 members instead

Reading the file needs neither torch nor Ray.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

FORMAT = "rllib-caps-gpu-figures/1"


class FiguresError(ValueError):
    """A figures file that cannot be used: the message names the file and the key at fault."""


@dataclass(frozen=True)
class GpuFigures:
    """One device's figures (the file's keys; sizes as ints). ``sharing_processes`` and ``sharing_population`` map a
    number of trials N (or members) to aggregate member-steps/s; empty where not measured."""

    path: str
    device: str
    date: str
    command: str
    steps_per_s: dict[str, float]
    population: dict[str, dict[int, float]]
    sharing_members: int = 0
    sharing_processes: dict[int, float] = field(default_factory=dict)
    sharing_population: dict[int, float] = field(default_factory=dict)


K = TypeVar("K", int, str)


def _rates(path: Path, key: str, value: Any, key_type: Callable[[Any], K] = int) -> dict[K, float]:
    """``{"3": 1800.0}`` -> ``{3: 1800.0}`` (keys converted by ``key_type``: sizes by default, each >= 1), each
    rate > 0; a ``FiguresError`` naming ``path`` and ``key`` otherwise."""
    what = "sizes" if key_type is int else "algorithms"
    try:
        rates = {key_type(name): float(rate) for name, rate in dict(value).items()}
    except (TypeError, ValueError) as err:
        raise FiguresError(f"{path}: {key} must map {what} to steps/s ({err})") from err
    if any(rate <= 0 or (key_type is int and name < 1) for name, rate in rates.items()):
        raise FiguresError(f"{path}: {key} has " + ("a size < 1 or " if key_type is int else "") + "a rate <= 0")
    return rates


def read_figures(path: str | Path) -> GpuFigures:
    """The figures of the file at ``path``; a ``FiguresError`` naming the file (and key) when it cannot be read or
    is not a figures file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as err:
        raise FiguresError(f"{path}: cannot read it ({err.strerror or err})") from err
    except json.JSONDecodeError as err:
        raise FiguresError(f"{path}: not valid JSON ({err})") from err
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise FiguresError(f"{path}: not a GPU figures file (its format must be {FORMAT!r})")
    missing = [key for key in ("device", "date", "command", "steps_per_s") if not data.get(key)]
    if missing:
        raise FiguresError(f"{path}: missing {', '.join(missing)}")
    sharing = data.get("sharing") or {}
    return GpuFigures(
        path=str(path), device=str(data["device"]), date=str(data["date"]), command=str(data["command"]),
        steps_per_s=_rates(path, "steps_per_s", data["steps_per_s"], str),
        population={algo: _rates(path, f"population.{algo}", rates)
                    for algo, rates in (data.get("population") or {}).items()},
        sharing_members=int(sharing.get("members", 0)),
        sharing_processes=_rates(path, "sharing.processes", sharing.get("processes") or {}),
        sharing_population=_rates(path, "sharing.one_population", sharing.get("one_population") or {}))


def check_device(figures: GpuFigures, flag: str, device: str | None) -> None:
    """Refuses figures recorded on another GPU than this machine's ``device`` (None: not known here, e.g. a
    cluster's): a ``FiguresError`` naming ``flag`` and the file."""
    if device is not None and device != figures.device:
        raise FiguresError(f"{flag} {figures.path}: recorded on {figures.device}, but this machine's GPU is {device}; "
                           "record its figures with benchmarks/gpu/run.sh (PARTS=\"grid\") and pass that file")


def merged_figures(path: Path, update: Mapping[str, Any]) -> dict[str, Any]:
    """The figures file at ``path`` (if there is one, of the same device) with ``update``'s keys replaced: the two
    benchmarks that write a device's figures add to one file."""
    old = json.loads(path.read_text()) if path.is_file() else {}
    if old and old.get("device") != update.get("device"):
        raise FiguresError(f"{path}: holds the figures of {old.get('device')}, not {update.get('device')}")
    return {**old, **update, "format": FORMAT}


def write_figures(path: str | Path, update: Mapping[str, Any]) -> None:
    """Writes ``update`` (with ``device``, ``date``, ``command`` ...) into the figures file at ``path``, atomically,
    keeping what another benchmark wrote there for the same device (``merged_figures``)."""
    from rllib_caps.utils.atomic import atomic_file

    path = Path(path)
    with atomic_file(path, lock=True) as tmp:
        tmp.write_text(json.dumps(merged_figures(path, update), indent=1, sort_keys=True) + "\n")


def grid_figures(rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The figures of ``bench --project-grid``'s rows: each algorithm's steps/s alone and its populations' (of a
    task's trials, and of ``merged_population`` members where measured)."""
    return {"steps_per_s": {r["algorithm"]: round(r["steps_per_s"], 1) for r in rows},
            "population": {r["algorithm"]: {str(size): round(r[key], 1)
                                            for size, key in ((r["population"], "population_member_steps_per_s"),
                                                              (r.get("merged_population"),
                                                               "merged_member_steps_per_s"))
                                            if r.get(key) is not None}
                           for r in rows if r["population_member_steps_per_s"] is not None}}
