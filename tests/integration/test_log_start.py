"""Readers of a group that never committed start at the partition's log start, asked of the broker.

``engine.kafka.clients.from_log_start`` replaces ``OFFSET_BEGINNING`` by the log start before the assignment
(librdkafka's own offset query starts the first fetch up to a second later: ``bench/first_fetch.py``
measures it). Here the log start of partition 0 is moved by ``delete_records``, so a reader that used
offset 0, or any fixed offset, instead of the broker's answer fails.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from airflow_kafka_retry.engine.heads.head_watch import HeadWatch
from airflow_kafka_retry.engine.heads.peek import peek_heads
from airflow_kafka_retry.engine.kafka.clients import consumer_config, from_log_start
from airflow_kafka_retry.engine.kafka.reading import TopicReader

pytestmark = [pytest.mark.integration, pytest.mark.requires_capability("delete_records")]

DELETED = 4  # records deleted from the start of partition 0


@pytest.fixture
def topic(kafka_bootstrap: str, new_topic) -> str:
    name = new_topic("log-start", partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(20):
        producer.produce(name, key=str(i).encode(), value=b"x", partition=i % 2)
    assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    tp = TopicPartition(name, 0, DELETED)
    assert admin.delete_records([tp])[tp].result(30).low_watermark == DELETED
    return name


def test_from_log_start_resolves_only_the_beginning(kafka_bootstrap: str, topic: str) -> None:
    consumer = Consumer(consumer_config({"bootstrap.servers": kafka_bootstrap}, f"{topic}-resolve"))
    try:
        resolved = from_log_start(
            consumer,
            [
                TopicPartition(topic, 0, OFFSET_BEGINNING),
                TopicPartition(topic, 1, OFFSET_BEGINNING),
                TopicPartition(topic, 1, 7),
            ],
        )
    finally:
        consumer.close()
    assert [(tp.partition, tp.offset) for tp in resolved] == [(0, DELETED), (1, 0), (1, 7)]


def test_readers_of_a_group_that_never_committed_start_at_the_log_start(
    kafka_bootstrap: str, topic: str
) -> None:
    config = {"bootstrap.servers": kafka_bootstrap}
    # a trigger's head watch (its own consumer)
    watch = HeadWatch(config, [topic], f"{topic}-watch", read_due=False)
    try:
        deadline = time.monotonic() + 30
        while len(watch.heads) < 2:
            assert time.monotonic() < deadline, f"heads never known: {watch.heads}"
            watch.poll()
            time.sleep(0.02)
        assert {k[1]: h.offset for k, h in watch.heads.items()} == {0: DELETED, 1: 0}
    finally:
        watch.close()
    # a tier's peek
    peek = peek_heads(config, topic, f"{topic}-peek")
    assert {h.partition: h.offset for h in peek.heads} == {0: DELETED, 1: 0}
    # a DLT read from its beginning
    with TopicReader(config, idle_timeout_s=30) as reader:
        offsets = [m.offset() for m in reader.read(topic, 0)]
    assert offsets == list(range(DELETED, 10))
