"""The "Retry tiers" view's DLT card reads every dead-letter family (issue 41): counts by failure, family,
missing field and unreadable header, and the newest records described by their original coordinates and
failure, never their key or value (``engine/scans/dead_letter_counts.py``, the part after the broker read)."""

from __future__ import annotations

import json
import struct
from typing import Any

from airflow_kafka_retry.engine.scans.dead_letter_counts import SAMPLES, DeadLetterCounts
from airflow_kafka_retry.plugin import scans
from airflow_kafka_retry.policy.headers.bounds import MAX_VALUE_CHARS

HOUR = 1_768_464_000_000  # 2026-01-15T08:00Z
SECRET = b"card 4111-1111-1111-1111"


class FakeMessage:
    """A consumed record as confluent_kafka returns it."""

    def __init__(self, partition, offset, headers, *, ts=HOUR, key=SECRET, value=SECRET):
        self._p, self._o, self._h, self._ts, self._k, self._v = partition, offset, headers, ts, key, value

    def topic(self):
        return "orders-dlt"

    def partition(self):
        return self._p

    def offset(self):
        return self._o

    def timestamp(self):
        return (1, self._ts)

    def headers(self):
        return self._h

    def key(self):
        return self._k

    def value(self):
        return self._v


def message(*args: Any, **kwargs: Any) -> Any:
    """A :class:`FakeMessage`, typed as the confluent_kafka ``Message`` it stands for."""
    return FakeMessage(*args, **kwargs)


def spring_dead_letter(offset: int) -> list:
    """A plain DeadLetterPublishingRecoverer's headers (spring-kafka's DLT_* names, putInt / putLong)."""
    return [
        ("kafka_dlt-original-topic", b"payments"),
        ("kafka_dlt-original-partition", struct.pack(">i", 1)),
        ("kafka_dlt-original-offset", struct.pack(">q", offset)),
        ("kafka_dlt-original-timestamp", struct.pack(">q", HOUR - 5_000)),
        ("kafka_dlt-original-timestamp-type", b"CreateTime"),
        ("kafka_dlt-original-consumer-group", b"payments-service"),
        ("kafka_dlt-exception-fqcn", b"org.springframework.kafka.listener.ListenerExecutionFailedException"),
        ("kafka_dlt-exception-cause-fqcn", b"com.example.PoisonOrderException"),
        ("kafka_dlt-exception-message", b"Listener method '" + b"x" * 300 + b"' threw exception; no rate"),
    ]


CONNECT = [
    ("__connect.errors.topic", b"invoices"),
    ("__connect.errors.partition", b"2"),
    ("__connect.errors.offset", b"9000000000"),
    ("__connect.errors.connector.name", b"invoices-sink"),
    ("__connect.errors.task.id", b"0"),
    ("__connect.errors.exception.class.name", b"org.apache.kafka.connect.errors.DataException"),
    ("__connect.errors.exception.message", b"Converting byte[] to Kafka Connect data failed"),
]
SHARE = [
    ("__dlq.errors.topic", b"orders"),
    ("__dlq.errors.partition", b"0"),
    ("__dlq.errors.offset", b"78"),
    ("__dlq.errors.group", b"workers"),
    ("__dlq.errors.delivery.count", b"oops"),  # unreadable: not decimal text
    ("__dlq.errors.message", b"Offset rejected by client."),
]


def counted() -> dict:
    counts = DeadLetterCounts("orders-dlt")
    for offset in range(3):
        counts.add(message(0, offset, spring_dead_letter(40 + offset), ts=HOUR + offset))
    counts.add(message(1, 0, CONNECT, ts=HOUR - 60_000))  # Connect keeps the source's timestamp
    counts.add(message(1, 1, SHARE, ts=HOUR + 10, key=None, value=None))  # the broker copied no record
    counts.add(message(1, 2, None, ts=HOUR + 20))  # no header: Airflow's, or anyone's
    return counts.to_dict()


def test_every_family_counted_by_failure_family_and_what_it_lacks():
    counts = counted()
    assert counts["total"] == 6
    assert counts["by_exception"] == {
        "org.springframework.kafka.listener.ListenerExecutionFailedException": 3,
        "<share-group: Offset rejected by client.>": 1,
        "org.apache.kafka.connect.errors.DataException": 1,
        "unknown": 1,
    }
    assert counts["by_family"] == {
        "spring-dead-letter": 3,
        "kafka-connect": 1,
        "share-group": 1,
        "unknown": 1,
    }
    assert counts["missing"]["delivery_count"] == 6  # Spring's plain recoverer and Connect write none
    assert counts["missing"]["failure_class"] == 2  # the share group's and the headerless one
    assert counts["missing"]["original_topic"] == 1
    assert counts["unreadable"] == {"__dlq.errors.delivery.count": 1}
    assert counts["not_replayable"] == 1


def test_the_newest_records_described_by_their_original_coordinates_and_failure():
    samples = counted()["samples"]
    assert len(samples) == SAMPLES
    # newest first; the oldest (Connect's, which keeps its source's timestamp) left out
    assert [(s["partition"], s["offset"]) for s in samples] == [(1, 2), (1, 1), (0, 2), (0, 1), (0, 0)]
    headerless, share, spring = samples[0], samples[1], samples[2]
    assert (headerless["family"], headerless["original_topic"], headerless["failure_class"]) == (
        "unknown",
        None,
        None,
    )
    assert "original_topic" in headerless["missing"]
    assert (
        share["family"],
        share["original_topic"],
        share["original_partition"],
        share["original_offset"],
    ) == (
        "share-group",
        "orders",
        0,
        78,
    )
    assert (share["group"], share["failure_message"], share["record_copied"]) == (
        "workers",
        "Offset rejected by client.",
        False,
    )
    assert share["unreadable"] == {"__dlq.errors.delivery.count": "not decimal text ('oops')"}
    assert (
        spring["family"],
        spring["original_topic"],
        spring["original_partition"],
        spring["original_offset"],
    ) == (
        "spring-dead-letter",
        "payments",
        1,
        42,
    )
    assert (spring["original_timestamp_ms"], spring["failed_at_ms"]) == (HOUR - 5_000, HOUR + 2)
    assert spring["failure_cause"] == "com.example.PoisonOrderException"
    assert spring["failure_message"].endswith("threw exception; no rate")  # the cause's message is kept
    assert len(spring["failure_message"]) <= MAX_VALUE_CHARS
    assert (spring["delivery_count"], spring["missing"]) == (None, ["delivery_count"])


def test_a_connect_record_is_described_with_its_connector():
    counts = DeadLetterCounts("orders-dlt")
    counts.add(message(0, 7, CONNECT))
    [sample] = counts.to_dict()["samples"]
    assert (sample["family"], sample["original_topic"], sample["original_partition"]) == (
        "kafka-connect",
        "invoices",
        2,
    )
    assert (sample["original_offset"], sample["connector"]) == (9_000_000_000, "invoices-sink")
    assert (sample["original_timestamp_ms"], sample["failed_at_ms"]) == (HOUR, None)
    assert "failed_at" in sample["missing"]
    assert "group_or_connector" not in sample["missing"]


def test_no_key_or_value_reaches_the_view():
    assert SECRET.decode() not in json.dumps(counted())


class Backlog:
    def to_dict(self):
        return {"topic": "orders", "totals": {"backlog": 0}}


def test_the_view_passes_the_family_fields_through_its_scan(monkeypatch):
    from airflow_kafka_retry.plugin.settings import ViewSettings
    from airflow_kafka_retry.policy.topology.model import Topology

    dead = DeadLetterCounts("orders-dlt")
    dead.add(message(0, 0, CONNECT))
    monkeypatch.setattr(scans, "count_dead_letters", lambda *args, **kwargs: dead)
    monkeypatch.setattr(scans, "scan_backlog", lambda *args, **kwargs: Backlog())
    topology = Topology.from_mapping({"topic": "orders", "group_id": "svc", "attempts": 2})
    settings = ViewSettings(
        topologies=(),
        kafka_conn_id="kafka_default",
        dag_id_template="{topic}",
        replay_dag_id_template="{topic}",
        timeout_s=5,
        runs=1,
    )
    scan = scans.read_topology(topology, settings, {}, now_ms=0)
    shown = scan.dead["orders-dlt"]
    assert shown["by_family"] == {"kafka-connect": 1}
    assert shown["samples"][0]["connector"] == "invoices-sink"
