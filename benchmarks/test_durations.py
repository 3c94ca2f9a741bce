"""Where the test suite's time goes: the slowest tests and the per-file totals of a pytest run, as the Markdown
tables of docs/testing.md, from the JUnit XML that pytest writes (``--junitxml``; a test's time there is its setup,
call and teardown together).

    python -m pytest --junitxml=junit.xml
    python -m benchmarks.test_durations junit.xml [--top 40]
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def durations_of(junit: Path) -> dict[str, float]:
    """``file::test[params]`` -> seconds, for every test case in the JUnit XML file ``junit``."""
    times = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        times[f"{module}.py::{case.get('name')}"] = float(case.get("time", 0.0))
    return times


def tables(times: dict[str, float], top: int) -> str:
    """The ``top`` slowest tests and the totals per file, slowest first, as Markdown."""
    total = sum(times.values())
    lines = [f"{len(times)} tests, {total:.0f} s in all ({total / 60:.1f} min).", "",
             f"| the {top} slowest tests | s |", "|---|---:|"]
    for name, seconds in sorted(times.items(), key=lambda item: -item[1])[:top]:
        lines.append(f"| `{name}` | {seconds:.1f} |")
    per_file: dict[str, list[float]] = defaultdict(list)
    for name, seconds in times.items():
        per_file[name.split("::")[0]].append(seconds)
    lines += ["", "| file | tests | s | share |", "|---|---:|---:|---:|"]
    for path, seconds in sorted(per_file.items(), key=lambda item: -sum(item[1])):
        lines.append(f"| `{path}` | {len(seconds)} | {sum(seconds):.0f} | {sum(seconds) / total:.1%} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("junit", type=Path, help="the JUnit XML file pytest wrote (--junitxml)")
    parser.add_argument("--top", type=int, default=40, help="how many of the slowest tests to list [40]")
    args = parser.parse_args(argv)
    try:
        times = durations_of(args.junit)
    except (OSError, ET.ParseError) as err:
        print(f"error: {args.junit}: {err}", file=sys.stderr)
        return 2
    print(tables(times, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
