"""``bench/results_file.py`` stores each run whole, in its own file, and never over another run's."""

from __future__ import annotations

import datetime
import json

import pytest

from bench.results_file import claim_result_file, write_new_result


def test_each_run_claims_its_own_file_and_never_another_runs(tmp_path):
    stamp = datetime.datetime(2026, 11, 25, 18, 40, 5, tzinfo=datetime.UTC)
    first = claim_result_file(tmp_path / "results", stamp)
    assert first.name == "2026-11-25T184005Z-event-tiers.json"
    first.write_text('{"results": [1]}\n')
    later = claim_result_file(tmp_path / "results", stamp + datetime.timedelta(seconds=1), "capacity")
    assert later.name == "2026-11-25T184006Z-capacity.json"
    with pytest.raises(FileExistsError):
        claim_result_file(tmp_path / "results", stamp)
    assert first.read_text() == '{"results": [1]}\n'


def test_a_result_written_whole_never_replaces_a_stored_one(tmp_path):
    path = tmp_path / "results" / "2026-11-26T041000-headers-both.json"
    assert write_new_result(path, {"cases": [1]}) == path
    with pytest.raises(FileExistsError):
        write_new_result(path, {"cases": [2]})
    assert json.loads(path.read_text()) == {"cases": [1]}
