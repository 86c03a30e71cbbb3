"""The engine's one read-to-the-end scan (``engine/kafka/scan.py``, issue 49 item 2) on a real broker.

Every reader goes through it (backlog, dead-letter counts, DLT scan, peek, replay and redelivery logs, the
drain's due records); their own tests cover what each counts. Here: where a partition ends (EOF, the high
watermark of its first fetch, a fixed end), that a consumer's next scan is not held by partitions the
last one ended, and that the whole scan, its log-start lookup included, ends by its deadline naming the
partitions not read to their end.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer

from airflow_kafka_retry.engine.kafka.reading import reader_config
from airflow_kafka_retry.engine.kafka.scan import ReadTimeout, Scan

pytestmark = pytest.mark.integration


def _produce(bootstrap: str, topic: str, partition: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, value=str(i).encode(), partition=partition)
    assert producer.flush(30) == 0


def test_each_partition_ends_at_eof_its_first_fetch_watermark_or_a_fixed_end(kafka_bootstrap, new_topic):
    topic = new_topic("scan", partitions=3)
    _produce(kafka_bootstrap, topic, 0, 5)
    _produce(kafka_bootstrap, topic, 1, 5)
    consumer = Consumer(reader_config({"bootstrap.servers": kafka_bootstrap}))
    try:
        starts = {(topic, 0): -1, (topic, 1): 0, (topic, 2): -1}
        scan = Scan(consumer, starts, ends={(topic, 1): 3}, deadline=time.monotonic() + 30)
        read: dict[int, list[int]] = {0: [], 1: [], 2: []}
        for message in scan.records():
            read[message.partition()].append(message.offset())
            if len(read[0]) == 1 and message.partition() == 0:
                _produce(kafka_bootstrap, topic, 0, 3)  # appended after the first fetch: not chased
        assert read == {0: [0, 1, 2, 3, 4], 1: [0, 1, 2], 2: []}
        assert scan.ends == {(topic, 0): 5, (topic, 1): 3, (topic, 2): 0}
        assert (scan.open, scan.high[(topic, 0)]) == (set(), 5)
        scan.close()

        # the same consumer scans again: the partitions the first scan ended (paused) are read anew
        again = Scan(consumer, {(topic, 0): 2, (topic, 1): -1}, deadline=time.monotonic() + 20)
        offsets = [(m.partition(), m.offset()) for m in again.records()]
        assert sorted(offsets) == [(0, o) for o in range(2, 8)] + [(1, o) for o in range(5)]
    finally:
        consumer.close()


def test_a_scan_past_its_deadline_names_the_partitions_not_at_their_end() -> None:
    consumer = Consumer(reader_config({"bootstrap.servers": "127.0.0.1:1"}))
    try:
        started = time.monotonic()
        starts = {("orders-dlt", 0): 4, ("orders-dlt", 1): -1}  # partition 1's log start is asked first
        scan = Scan(consumer, starts, deadline=started + 1.0, start_timeout_s=60)
        with pytest.raises(ReadTimeout, match=r"^orders-dlt\[0\], orders-dlt\[1\]: no records") as raised:
            list(scan.records())
        assert raised.value.keys == (("orders-dlt", 0), ("orders-dlt", 1))
        # a liveness bound: the log-start lookup waits under the scan's deadline, not its own 60 s
        assert time.monotonic() - started < 30
    finally:
        consumer.close()
