"""``bench/event_tiers.py`` stores each run whole, in its own file, and never over another run's."""

from __future__ import annotations

import datetime
import json

import pytest

from bench.event_tiers import write_result


def test_each_run_is_written_whole_to_its_own_file_and_never_over_another(tmp_path):
    stamp = datetime.datetime(2026, 11, 25, 18, 40, 5, tzinfo=datetime.UTC)
    first = write_result({"results": [1]}, tmp_path / "results", stamp)
    assert first.name == "2026-11-25T184005Z-event-tiers.json"
    assert json.loads(first.read_text()) == {"results": [1]}
    later = write_result({"results": [2]}, tmp_path / "results", stamp + datetime.timedelta(seconds=1))
    assert later != first
    assert json.loads(first.read_text()) == {"results": [1]}
    with pytest.raises(FileExistsError):
        write_result({"results": [3]}, tmp_path / "results", stamp)
    assert json.loads(first.read_text()) == {"results": [1]}
