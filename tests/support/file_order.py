"""The order in which parallel workers get the test files: the longest first.

pytest-xdist's ``--dist loadfile`` hands out whole files in collection order (``scripts/test`` turns off
its own reordering by test count, which put the one-test files that run for minutes last). A worker
that starts a minutes-long file when the others are nearly done makes the whole run wait for it, so
the files go out longest first, by the seconds each took in a recorded run (``tests/file_durations.json``).
A file the record does not know is ranked by its markers: one with a long test (:data:`LONG_MARKERS`)
as :data:`UNKNOWN_LONG_S`, any other as :data:`UNKNOWN_S`.

Refresh the record from a run's JUnit XML (every ``scripts/test`` run keeps one in ``.artifacts/``)::

    .venv/bin/python -m tests.support.file_order .artifacts/junit-<UTC time>.xml

It only orders the files; a stale record makes a run slower, never different.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

RECORD = Path(__file__).parents[1] / "file_durations.json"
#: markers of tests that take long: a file with one, absent from the record, is ranked as this many seconds
LONG_MARKERS = ("slow", "spark", "interop", "faults")
UNKNOWN_LONG_S = 60.0
UNKNOWN_S = 1.0


def load(record: Path = RECORD) -> dict[str, float]:
    """Seconds per test file (a path relative to the repository), or nothing if there is no record."""
    try:
        return {str(k): float(v) for k, v in json.loads(record.read_text()).items()}
    except FileNotFoundError:
        return {}


def file_seconds(junit_files: Iterable[Path]) -> dict[str, float]:
    """Seconds per test file in JUnit XML records (setup, call and teardown of its tests), summed."""
    seconds: Counter[str] = Counter()
    for junit in junit_files:
        for case in ET.parse(junit).getroot().iter("testcase"):
            classname = case.get("classname") or ""
            # pytest writes "tests.integration.test_x" (or "...test_x.Class") as the classname
            parts = classname.split(".")
            while parts and not parts[-1].startswith("test_"):
                parts.pop()
            if parts:
                seconds["/".join(parts) + ".py"] += float(case.get("time") or 0)
    return {path: round(s, 1) for path, s in sorted(seconds.items(), key=lambda kv: (-kv[1], kv[0]))}


def rank(path: str, long: bool, record: dict[str, float]) -> float:
    """The seconds a file is expected to take: recorded, or estimated from its markers."""
    if path in record:
        return record[path]
    return UNKNOWN_LONG_S if long else UNKNOWN_S


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m tests.support.file_order JUNIT.xml [JUNIT.xml ...]", file=sys.stderr)
        return 2
    missing = [a for a in argv if not Path(a).is_file()]
    if missing:
        print(f"no such JUnit XML file: {', '.join(missing)}", file=sys.stderr)
        return 2
    seconds = file_seconds(Path(a) for a in argv)
    if not seconds:
        print(f"no test cases in {', '.join(argv)}", file=sys.stderr)
        return 2
    RECORD.write_text(json.dumps(seconds, indent=1) + "\n")
    print(f"{RECORD}: {len(seconds)} files, {sum(seconds.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
