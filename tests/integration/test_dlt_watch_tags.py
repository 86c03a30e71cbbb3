"""The DLT watch's metric tags from record headers are sanitized and capped per topology (issue 29, item 3).

Real broker, the DltWatchOperator in a process of its own with Airflow's StatsD metrics (InfluxDB-style
tags) sent to a socket this test reads. Anyone who can write to a DLT chooses the exception header.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.observability.metrics import MAX_EXCEPTION_TAGS

from tests.integration.test_observability_dag import StatsdListener, parse_statsd
from tests.support import ledger

pytestmark = pytest.mark.integration

REPO = Path(__file__).parents[2]
NAME = "kafka_retry.dlt.new_records"
TAG = re.compile(r"^[A-Za-z0-9_.$-]+$")
WATCH = """
from airflow_kafka_retry.operators.dlt_watch import DltWatchOperator
from airflow_kafka_retry.policy.topology.model import Topology
import json, sys
topology = Topology.from_mapping(json.loads(sys.argv[1]))
DltWatchOperator(task_id="watch", topology=topology, kafka_conn_id="akr_tags").execute({})
"""


def _watch(bootstrap: str, mapping: dict) -> list[tuple[dict, float]]:
    listener = StatsdListener()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "AIRFLOW_CONN_AKR_TAGS": json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}
        ),
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": str(listener.port),
        "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
        "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True",
    }
    try:
        run = subprocess.run(
            [sys.executable, "-c", WATCH, json.dumps(mapping)],
            check=False,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        time.sleep(1)  # UDP: let the last datagrams arrive
    finally:
        lines = listener.close()
    return [
        (dict(tags), sum(v for _, v in values))
        for (name, tags), values in parse_statsd(lines).items()
        if name == NAME
    ]


def _produce(bootstrap: str, topic: str, exceptions: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for exc in exceptions:
        producer.produce(
            topic, value=b"x", key=b"k", partition=0, headers=[("kafka_dlt-exception-fqcn", exc)]
        )
    assert producer.flush(30) == 0


def _topology_and_mapping(bootstrap: str):
    topology = ledger.make_topology("tags")
    mapping = {
        "topic": topology.topic,
        "group_id": topology.group_id,
        "attempts": topology.attempts,
        "not_retryable": list(topology.not_retryable),
    }
    ensure_topics(topology, {"bootstrap.servers": bootstrap}, partitions=1)
    return topology, mapping


def _first_run(bootstrap: str) -> tuple[object, dict]:
    topology, mapping = _topology_and_mapping(bootstrap)
    nasty = [b"a,b=c|d\nx:1|c", b"evil tag=1", "caf\u00e9.Err".encode()]
    first = nasty + [f"com.acme.First{i}".encode() for i in range(MAX_EXCEPTION_TAGS)]
    _produce(bootstrap, topology.dlt_topic, first)
    seen = _watch(bootstrap, mapping)
    assert sum(v for _, v in seen) == len(first), seen
    values = {tags["exception"] for tags, _ in seen}
    assert all(TAG.match(v) for v in values), sorted(values)
    assert all(set(tags) == {"topology", "dlt_topic", "family", "exception"} for tags, _ in seen), seen
    assert {tags["family"] for tags, _ in seen} == {"spring-dead-letter"}, seen
    assert "other" in values, sorted(values)
    assert len(values - {"other"}) <= MAX_EXCEPTION_TAGS, sorted(values)
    return topology, mapping


def test_exception_tags_are_sanitized_and_capped(kafka_bootstrap):
    _first_run(kafka_bootstrap)


@pytest.mark.requires_capability("commit_metadata")
def test_the_exception_tag_cap_holds_for_the_topology_across_runs(kafka_bootstrap):
    topology, mapping = _first_run(kafka_bootstrap)
    # a later run with new names adds no series: the admitted tags travel with the watch group's commit
    _produce(kafka_bootstrap, topology.dlt_topic, [f"com.acme.Second{i}".encode() for i in range(5)])
    again = _watch(kafka_bootstrap, mapping)
    assert {tags["exception"] for tags, _ in again} == {"other"}, again
    assert sum(v for _, v in again) == 5
