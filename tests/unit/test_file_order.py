"""The order in which parallel workers get the test files (tests/support/file_order.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from tests.support import file_order

if TYPE_CHECKING:
    import pytest

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.integration.test_slow" name="test_a" time="100.5"/>
<testcase classname="tests.integration.test_slow" name="test_b" time="20.0"/>
<testcase classname="tests.unit.test_quick.TestThing" name="test_c" time="0.25"/>
<testcase classname="tests.unit.test_quick" name="test_d[x-y.z]" time="0.5"/>
</testsuite></testsuites>
"""


def test_seconds_per_file_are_summed_from_junit_classnames(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    assert file_order.file_seconds([junit]) == {
        "tests/integration/test_slow.py": 120.5,
        "tests/unit/test_quick.py": 0.8,  # a class's tests count for their file
    }


def test_files_the_record_lacks_are_ranked_by_their_markers() -> None:
    record = {"tests/integration/test_slow.py": 120.5}
    assert file_order.rank("tests/integration/test_slow.py", False, record) == 120.5
    assert file_order.rank("tests/integration/test_new.py", True, record) == file_order.UNKNOWN_LONG_S
    assert file_order.rank("tests/unit/test_new.py", False, record) == file_order.UNKNOWN_S


def test_the_committed_record_names_files_that_exist() -> None:
    record = file_order.load()
    assert record, "tests/file_durations.json is missing or empty"
    root = Path(file_order.__file__).parents[2]
    missing = sorted(path for path in record if not (root / path).is_file())
    assert not missing, f"refresh tests/file_durations.json: {missing} no longer exist"


def test_refreshing_needs_a_junit_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert file_order.main([str(tmp_path / "none.xml")]) == 2
    assert "no such JUnit XML file" in capsys.readouterr().err
    empty = tmp_path / "empty.xml"
    empty.write_text("<testsuites/>")
    assert file_order.main([str(empty)]) == 2
    assert json.loads(file_order.RECORD.read_text())  # the record is left as it was
