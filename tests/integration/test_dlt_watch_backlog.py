"""A DLT backlog larger than one scan is worked off over several runs (issue 38, item 8), real broker.

The scan used to commit nothing unless it reached the end of every partition within its timeout: a
backlog that one scan could not read never made progress, and every run reported the same records. Now
a scan that runs out of time stops, the run reports and commits what it read, and the next run goes on
from there. Time is made to pass one second per record read, so each scan of 8.5 s reads about eight.
"""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer

from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.engine.scans import dlt_scan as engine_watch
from airflow_kafka_retry.operators.dlt_watch import DltWatchOperator
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.sandbox.scratch_topics import unique_topic

pytestmark = pytest.mark.integration

RECORDS = {0: 30, 1: 10}  # per DLT partition


class _SlowClock:
    """``time`` for the scan: one more second passes with every record it reads."""

    def __init__(self) -> None:
        self.records = 0

    def monotonic(self) -> float:
        return time.monotonic() + self.records


def test_a_backlog_larger_than_one_scan_is_reported_once_over_several_runs(kafka_bootstrap, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_AKR_BACKLOG_TEST",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap}}),
    )
    topic = unique_topic("backlog")
    topology = Topology.from_mapping({"topic": topic, "group_id": f"{topic}-svc", "attempts": 2})
    ensure_topics(topology, {"bootstrap.servers": kafka_bootstrap}, partitions=len(RECORDS))
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    for partition, count in RECORDS.items():
        for _ in range(count):
            producer.produce(
                topology.dlt_topic,
                value=b"v",
                partition=partition,
                headers=[("kafka_dlt-exception-fqcn", b"com.acme.Broken")],
            )
    assert producer.flush(30) == 0

    clock = _SlowClock()
    monkeypatch.setattr(engine_watch, "time", clock)
    add = engine_watch.DltWatchSummary.add

    def slow_add(self, message):
        clock.records += 1
        add(self, message)

    monkeypatch.setattr(engine_watch.DltWatchSummary, "add", slow_add)
    calls: list[dict] = []

    def watch() -> dict:
        return DltWatchOperator(
            task_id="watch_dlt",
            topology=topology,
            kafka_conn_id="akr_backlog_test",
            on_dlt=lambda context: calls.append(context["kafka_retry_summary"]),
            scan_timeout=8.5,
        ).execute({})

    runs = [watch()]
    assert 0 < runs[0]["totals"]["new_records"] < sum(RECORDS.values())
    assert runs[0]["complete"] is False
    assert runs[0]["unfinished"], runs[0]
    while runs[-1]["complete"] is False and len(runs) < 12:
        runs.append(watch())
    assert runs[-1]["complete"] is True, [r["totals"]["new_records"] for r in runs]
    assert len(runs) > 2
    reported = [(d["dlt_partition"], d["dlt_offset"]) for r in runs for d in r["dead_letters"]]
    assert sorted(reported) == sorted((p, o) for p, n in RECORDS.items() for o in range(n)), (
        "a record was reported twice or never"
    )
    # each run with new records notified once (a run can end before the end-of-partition that follows its
    # last record: the next one then reads nothing new and notifies nobody)
    assert len(calls) == sum(1 for r in runs if r["totals"]["new_records"])
    last = watch()
    assert (last["totals"]["new_records"], last["complete"], last["unfinished"]) == (0, True, [])
