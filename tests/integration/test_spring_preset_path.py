"""A whole retry path under ``compat: spring-3.2``, drained through the CLI in real processes.

Spring's @RetryableTopic names: one reusable ``<topic>-retry`` topic, ``<topic>-dlt`` and the exception
DLT ``<topic><key>-dlt``, each drained by the main group id plus the topic's suffix. Every input ends in
exactly one place, with Spring's attempt count, and each group's committed offsets sit at the partition ends.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from airflow_kafka_retry.policy.headers import codec as H
from airflow_kafka_retry.policy.topology.file import load_topology
from airflow_kafka_retry.sandbox.scratch_topics import unique_topic

from tests.support import ledger

pytestmark = [pytest.mark.integration]
ROOT = Path(__file__).parents[2]
PARTITIONS = 2
# mode -> (home, attempts header in that home): attempts 4, so 'permanent' reaches the DLT at attempt 5
FATES = {
    "ok": ("processed", None),
    "transient:1": ("processed", None),
    "transient:2": ("processed", None),
    "permanent": ("dlt", 5),
    "fatal": ("invalid-dlt", 2),
    "bad-json": ("dlt", 2),
}


def drain(topology_file: Path, tier: str, bootstrap: str, ledger_file: str) -> dict:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_kafka_retry.cli",
            "drain",
            "--topology",
            str(topology_file),
            "--tier",
            tier,
            "--handler",
            f"{ledger.HANDLER_MODULE}:indexed",
            "--value-deserializer",
            f"{ledger.HANDLER_MODULE}:decode",
            "--bootstrap",
            bootstrap,
        ],
        check=False,
        env={**os.environ, "AKR_LEDGER": ledger_file, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


def test_spring_32_path_end_to_end(kafka_bootstrap, tmp_path):
    ledger_file = ledger.ledger_path(tmp_path)
    topic = unique_topic("spring32")
    topology_file = tmp_path / "orders.yaml"
    topology_file.write_text(
        yaml.safe_dump(
            {
                "topic": topic,
                "group_id": "orders-service",
                "compat": "spring-3.2",
                "attempts": 4,
                "backoff": {"kind": "fixed", "delay": "0ms"},
                # as in Spring, routing an exception to its own DLT does not make it fatal: that is
                # not_retryable
                "not_retryable": [f"{ledger.HANDLER_MODULE}.InvalidOrder"],
                "dlt_routing": {"-invalid": [f"{ledger.HANDLER_MODULE}.InvalidOrder"]},
            }
        )
    )
    topology = load_topology(topology_file)
    retry, invalid_dlt, dlt = f"{topic}-retry", f"{topic}-invalid-dlt", f"{topic}-dlt"
    assert [t.topic for t in topology.tiers] == [topic, retry]
    assert sorted(t.topic for t in topology.dlt_tiers) == sorted([dlt, invalid_dlt])
    inputs = ledger.produce_inputs(kafka_bootstrap, topology, 70, PARTITIONS)

    first = drain(topology_file, "0", kafka_bootstrap, ledger_file)
    assert first["group"] == "orders-service"
    runs = []
    while not runs or runs[-1]["totals"]["drained"]:  # the reusable topic: each run meets the next attempt
        runs.append(drain(topology_file, retry, kafka_bootstrap, ledger_file))
        assert runs[-1]["group"] == "orders-service-retry"
        assert len(runs) <= 5, "records kept coming back to the retry topic past their attempts"
    count = Counter(m for m, _, _ in inputs.records.values())
    assert [r["totals"]["drained"] for r in runs] == [
        count["transient:1"] + count["transient:2"] + count["permanent"],
        count["transient:2"] + count["permanent"],
        count["permanent"],
        0,
    ]

    homes: dict[str, list[str]] = {
        rid: ["processed"] * n for rid, n in ledger.processed_ids(ledger_file).items()
    }
    for name, where in ((dlt, "dlt"), (invalid_dlt, "invalid-dlt")):
        for msg in ledger.read_all(kafka_bootstrap, name):
            rid = msg.key().decode()
            homes.setdefault(rid, []).append(where)
            mode, partition, offset = inputs.records[rid]
            assert H.read_attempts(msg.headers()) == FATES[mode][1], (rid, mode)
            coords = H.read_original_coordinates(msg.headers())
            assert (coords.topic, coords.partition, coords.offset, coords.consumer_group) == (
                topic,
                partition,
                offset,
                "orders-service",
            )
            fqcn = H.last_header(msg.headers(), "kafka_exception-fqcn")
            assert H.last_header(msg.headers(), "kafka_exception-cause-fqcn") == fqcn  # Spring's cause rule
            assert msg.partition() == partition
    for rid, (mode, _, _) in inputs.records.items():
        assert homes.get(rid) == [FATES[mode][0]], (rid, mode, homes.get(rid))

    # the reusable topic holds every retried record once per attempt it made there: 2, 3, 4
    seen = Counter()
    for msg in ledger.read_all(kafka_bootstrap, retry):
        rid = msg.key().decode()
        seen[(inputs.records[rid][0], H.read_attempts(msg.headers()))] += 1
    assert seen == Counter(
        {
            ("transient:1", 2): count["transient:1"],
            ("transient:2", 2): count["transient:2"],
            ("transient:2", 3): count["transient:2"],
            ("permanent", 2): count["permanent"],
            ("permanent", 3): count["permanent"],
            ("permanent", 4): count["permanent"],
        }
    )
    for name, group in ((topic, "orders-service"), (retry, "orders-service-retry")):
        ends: dict[int, int] = {}
        for msg in ledger.read_all(kafka_bootstrap, name):
            ends[msg.partition()] = max(ends.get(msg.partition(), 0), msg.offset() + 1)
        assert ledger.committed(kafka_bootstrap, group, name, PARTITIONS) == ends, name
