"""A tiny run of ``python -m bench``: every case runs and the results file is well formed.

2,000 records (``--records``, one round) and a sweep of 400/800/2,000: every case, the headerless workload,
the sweep, the profile and the verdict take the same paths as ``--small``'s 20,000; only the counts differ.

No timing is asserted: the numbers of a shared CI machine mean nothing; the bench is for humans.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# a guard against a hang above the bench's own 900 s (the suite's 600 s default failed at a load of 60)
pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1200)]

REPO = Path(__file__).parents[2]
CASES = [
    "raw",
    "raw_headers",
    "provider",
    "local_txn",
    "local_no_txn",
    "local_threads",
    "spark",
    "spark_without_startup",
]
HEADERLESS_CASES = ["raw", "local_txn", "local_no_txn"]
RECORDS = 2_000  # 1 % failing: 20, half routed to the next tier, half to the DLT
SWEEP = [400, 800, 2_000]  # multiples of the 8 partitions: each partition drains size // 8


def test_small_bench_writes_every_case(kafka_bootstrap, tmp_path):
    out = tmp_path / "results"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "bench", "--records", str(RECORDS), "--repeat", "1"),
            *("--sweep", ",".join(map(str, SWEEP)), "--bootstrap", kafka_bootstrap, "--out", str(out)),
        ],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    files = list(out.glob("*.json"))
    assert len(files) == 1
    doc = json.loads(files[0].read_text())
    assert (
        files[0].name == f"{doc['date'][:19].replace(':', '')}-headers-external.json"
    )  # the time: one per run
    assert doc["broker"] == {"kind": "external"}

    records = doc["workload"]["records"]
    assert records == RECORDS
    assert doc["workload"]["partitions"] == 8
    assert doc["workload"]["failing"] == RECORDS // 100
    assert doc["workload"]["headers"] == "spring"
    rows = {row["case"]: row for row in doc["cases"]}
    assert list(rows) == CASES
    plain = {row["case"]: row for row in doc["headerless"]["cases"]}
    assert list(plain) == HEADERLESS_CASES
    for name, row in [*rows.items(), *plain.items()]:
        assert row["records"] == records, name
        assert row["label"] in doc["markdown"]
        assert row["label"] in done.stdout
        assert row["peak_rss_mb"] > 0, (name, row)
        assert row["wall_s"] > 0, (name, row)
        assert row["records_per_s"] > 0, (name, row)
    for table in (rows, plain):
        for name, row in table.items():
            assert row[
                "ratio_to_raw"
            ] == pytest.approx(  # rounded to 3 decimals: a small ratio is off by 5e-4
                row["records_per_s"] / table["raw"]["records_per_s"], rel=1e-2, abs=5e-4
            ), name
    assert rows["raw"]["ratio_to_raw"] == 1.0
    assert 0 < rows["spark_without_startup"]["wall_s"] < rows["spark"]["wall_s"]  # tasks are part of the run
    # the engines did their work: every failing record routed (half to the next tier, half to the DLT)
    results = [
        *(doc["raw_results"][n] for n in ("local_txn", "local_no_txn", "local_threads", "spark")),
        *(doc["headerless"]["raw_results"][n] for n in ("local_txn", "local_no_txn")),
    ]
    for result in results:
        totals = result["totals"]
        assert totals["drained"] == records, result["case"]
        assert totals["succeeded"] == records - RECORDS // 100, result["case"]
        assert sorted(totals["routed"].values()) == [RECORDS // 200] * 2, result["case"]
    assert doc["raw_results"]["local_txn"]["transactions"] >= 8
    assert doc["raw_results"]["local_no_txn"]["transactions"] == 0
    assert [p["records"] for p in doc["sweep"]] == SWEEP
    assert all(p["peak_rss_mb"] > 0 and p["records_per_s"] > 0 for p in doc["sweep"])
    targets = doc["verdict"]["targets"]
    assert len(targets) == 6
    assert all(isinstance(t["met"], bool) for t in targets)
    assert doc["verdict"]["met"] == all(t["met"] for t in targets)
    if not doc["verdict"]["met"]:
        assert "where_the_time_goes" in doc["verdict"]
    phases = doc["profile"]["phases"]
    assert set(phases) == {"start", "read", "handle", "commit", "job"}
    assert phases["job"]["wall_s"] > 0
    assert doc["profile"]["top_functions"]
    assert "markdown" in doc
