"""The view's Kafka reads on the embedded broker: tier backlog with due-time buckets, DLT counts, broker
down."""

from __future__ import annotations

import socket
from datetime import UTC, datetime

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from airflow_kafka_retry.engine.scans.backlog import scan_backlog
from airflow_kafka_retry.engine.scans.dead_letter_counts import count_dead_letters
from airflow_kafka_retry.policy.headers.codec import BACKOFF_TIMESTAMP, encode_big_integer

pytestmark = pytest.mark.integration

NOW = 1_800_000_000_000


def produce(
    bootstrap: str, topic: str, rows: list[tuple[int, list[tuple[str, bytes]]]], ts_ms: int | None = None
) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    errors: list[object] = []
    for partition, headers in rows:
        producer.produce(
            topic,
            b"payload-not-shown",
            partition=partition,
            headers=headers,
            on_delivery=lambda err, _msg: errors.append(err) if err is not None else None,
            **({"timestamp": ts_ms} if ts_ms else {}),
        )
    assert producer.flush(15) == 0
    assert errors == [], f"the broker refused records of {topic}: {errors}"


def due(ms: int) -> list[tuple[str, bytes]]:
    return [(BACKOFF_TIMESTAMP, encode_big_integer(ms))]


def commit(bootstrap: str, group: str, topic: str, partition: int, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=False)
    finally:
        consumer.close()


def test_backlog_counts_from_the_committed_offset_and_buckets_due_times(kafka_bootstrap, new_topic):
    topic = new_topic("view-tier", partitions=2)
    group = f"{topic}-group"
    # partition 0: 2 already handled (committed), then due now, due in 30 s, due in 30 min, due in 2 days
    produce(
        kafka_bootstrap,
        topic,
        [(0, due(NOW - 5000))] * 2
        + [
            (0, due(NOW - 1)),
            (0, due(NOW + 30_000)),
            (0, due(NOW + 1_800_000)),
            (0, due(NOW + 2 * 86_400_000)),
        ],
    )
    # partition 1: nothing committed; one without a due header (due now), one due in 10 hours
    produce(kafka_bootstrap, topic, [(1, []), (1, due(NOW + 36_000_000))])
    commit(kafka_bootstrap, group, topic, 0, 2)

    result = scan_backlog({"bootstrap.servers": kafka_bootstrap}, topic, group, now_ms=NOW, timeout_s=20)

    assert result.error is None
    p0, p1 = result.partitions
    assert (p0.committed, p0.end, p0.backlog, p0.scanned) == (2, 6, 4, 4)
    assert p0.due == {"now": 1, "minute": 1, "hour": 1, "day": 0, "later": 1}
    assert p0.next_due_ms == NOW + 30_000
    assert (p1.committed, p1.end, p1.backlog) == (None, 2, 2)
    assert p1.due == {"now": 1, "minute": 0, "hour": 0, "day": 1, "later": 0}
    totals = result.totals()
    assert totals["backlog"] == 6
    assert totals["due"]["now"] == 2
    assert totals["next_due_ms"] == NOW + 30_000
    # reading never commits
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
    try:
        offsets = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)
    finally:
        consumer.close()
    assert next(tp.offset for tp in offsets) == 2
    assert offsets[1].offset < 0


def test_backlog_beyond_the_scan_limit_is_counted_not_read(kafka_bootstrap, new_topic):
    topic = new_topic("view-big", partitions=1)
    produce(kafka_bootstrap, topic, [(0, due(NOW - 1))] * 30)
    result = scan_backlog(
        {"bootstrap.servers": kafka_bootstrap}, topic, f"{topic}-g", now_ms=NOW, scan_limit=10, timeout_s=20
    )
    [part] = result.partitions
    assert part.scanned == 10
    assert part.due["now"] == 10
    assert part.backlog == 30, "the high watermark carried by the fetches counts what was not read"


def test_dead_letter_counts_read_either_header_family(kafka_bootstrap, new_topic):
    topic = new_topic("view-dlt", partitions=2)
    # a past hour: Kafka 4 refuses timestamps more than an hour ahead (log.message.timestamp.after.max.ms)
    hour = int(datetime(2026, 1, 15, 8, tzinfo=UTC).timestamp() * 1000)
    produce(
        kafka_bootstrap,
        topic,
        [
            (0, [("kafka_exception-fqcn", b"myapp.errors.InvalidOrder")]),
            (1, [("kafka_exception-fqcn", b"myapp.errors.InvalidOrder")]),
            (
                0,
                [("kafka_dlt-exception-fqcn", b"java.lang.IllegalStateException")],
            ),  # a Spring DeadLetterPublishingRecoverer
            (1, [("kafka_key-exception-fqcn", b"airflow_kafka_retry.errors.DeserializationError")]),
            (0, []),
        ],
        ts_ms=hour + 60_000,
    )
    counts = count_dead_letters({"bootstrap.servers": kafka_bootstrap}, topic, timeout_s=20).to_dict()
    assert counts["error"] is None
    assert counts["total"] == 5
    assert not counts["truncated"]
    assert counts["by_exception"] == {
        "myapp.errors.InvalidOrder": 2,
        "java.lang.IllegalStateException": 1,
        "airflow_kafka_retry.errors.DeserializationError": 1,
        "unknown": 1,
    }
    assert counts["by_hour"] == [{"hour": "2026-01-15T08:00Z", "counts": counts["by_exception"]}]
    assert "payload" not in repr(counts)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_broker_is_reported_by_topic_within_the_timeout():
    config = {"bootstrap.servers": f"127.0.0.1:{_closed_port()}"}
    backlog = scan_backlog(config, "orders-retry-1", "g", now_ms=NOW, timeout_s=2)
    dead = count_dead_letters(config, "orders-dlt", timeout_s=2)
    assert backlog.error is not None, backlog.error
    assert backlog.error.startswith("orders-retry-1: "), backlog.error
    assert dead.error is not None, dead.error
    assert dead.error.startswith("orders-dlt: "), dead.error


def test_transaction_markers_are_not_counted_as_backlog(kafka_bootstrap, new_topic):
    """Tiers are written in transactions: each commit marker takes an offset but is not a record."""
    topic = new_topic("view-txn", partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{topic}-txn"})
    producer.init_transactions(15)
    for _batch in range(3):
        producer.begin_transaction()
        producer.produce(topic, b"x", partition=0, headers=due(NOW - 1))
        producer.commit_transaction(15)
    group = f"{topic}-group"
    before = scan_backlog({"bootstrap.servers": kafka_bootstrap}, topic, group, now_ms=NOW, timeout_s=20)
    [part] = before.partitions
    assert (part.backlog, part.scanned) == (3, 3), part
    assert part.end is not None, part
    assert part.end > 3, part
    # what a drain commits: the offset after the last record it read, which is the last commit marker's offset
    commit(kafka_bootstrap, group, topic, 0, part.end - 1)
    [drained] = scan_backlog(
        {"bootstrap.servers": kafka_bootstrap}, topic, group, now_ms=NOW, timeout_s=20
    ).partitions
    assert drained.backlog == 0, drained
