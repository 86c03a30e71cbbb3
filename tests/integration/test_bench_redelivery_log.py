"""A tiny run of ``python -m bench.redelivery_log``: it runs, and its results file says what the lane did.

No figure is asserted (the bench is for humans); only what the run must account for.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).parents[2]


def test_a_tiny_redelivery_log_bench_writes_its_result(kafka_bootstrap: str, tmp_path: Path) -> None:
    out = tmp_path / "results"
    command = [sys.executable, "-m", "bench.redelivery_log", "--entries", "3000", "--in-flight", "200"]
    command += ["--dead-letters", "20", "--bootstrap", kafka_bootstrap, "--out", str(out)]
    done = subprocess.run(command, check=False, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    [file] = out.glob("*-redelivery-log.json")
    result = json.loads(file.read_text())["result"]
    written = result["log_written"]
    assert (written["entries"], written["tombstones"]) == (3000, 2772)  # every 100th never used
    first, second = result["lane"]["first_run"], result["lane"]["second_run"]
    assert first["dead_letters"] == 20
    assert list(first["routed"].values()) == [20]  # every dead letter found its round 2 in the log
    assert list(second["routed"].values()) == [second["dead_letters"]]
    # the log holds 3000 entries and 2772 tombstones; the live ones: 200 in flight and 28 accepted (the
    # tombstones of the 20 used come after the first run's read)
    assert first["live_entries"] == 200 + 28
    assert first["log_records_read"] <= 5772
    appended = result["lane"]["appended"]
    # the second run read the first run's 20 tombstones and what was appended, nothing before
    assert second["log_records_read"] == 20 + appended["entries"] + appended["tombstones"]
    assert result["old_behaviour_bytes"] == 416 * 3003
