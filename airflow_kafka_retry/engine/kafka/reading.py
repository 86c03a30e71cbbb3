"""
Reading a topic's committed records without committing anything.

An assigned (never subscribed) consumer with a throw-away group id reads each partition from a
start offset to its end, ``read_committed``. The end is where the broker reports partition EOF
or the high watermark seen with the first fetch (not a ListOffsets request), or a fixed end
offset (a replay's snapshot); records appended meanwhile are not chased.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from airflow_kafka_retry.engine.kafka.clients import consumer_config, from_log_start, partition_counts
from airflow_kafka_retry.engine.kafka.messages import offset_of
from airflow_kafka_retry.policy.client_names import READER_GROUP_PREFIX

_POLL_S = 1.0


class ReadError(RuntimeError):
    """A partition could not be read to its end; the message names topic and partition."""


def reader_config(kafka_config: Mapping[str, Any]) -> dict[str, Any]:
    """A read_committed, EOF-reporting consumer configuration whose group is never used to commit."""
    return consumer_config(kafka_config, f"{READER_GROUP_PREFIX}{uuid.uuid4().hex}")


def read_partition(
    consumer: Consumer,
    topic: str,
    partition: int,
    *,
    start: int | None = None,
    end: int | None = None,
    idle_timeout_s: float = 60.0,
) -> Iterator[Message]:
    """
    Yield the records of ``topic[partition]`` from ``start`` (default: the beginning) to its end.

    :param end: stop before this offset (a snapshot taken earlier); default: the partition's end
        as the broker reports it while reading.
    """
    where = f"{topic}[{partition}]"
    if end is not None and start is not None and start >= end:
        return
    first = TopicPartition(topic, partition, OFFSET_BEGINNING if start is None else start)
    consumer.assign(from_log_start(consumer, [first]))
    try:
        high: int | None = None
        idle_since = time.monotonic()
        while True:
            message = consumer.poll(_POLL_S)
            if message is None:
                if time.monotonic() - idle_since > idle_timeout_s:
                    raise ReadError(
                        f"{where}: no records and no end-of-partition from the broker for "
                        f"{idle_timeout_s:.0f}s"
                    )
                continue
            idle_since = time.monotonic()
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return
                raise ReadError(f"{where}: read failed: {error}")
            offset = offset_of(message)
            if start is not None and offset < start:
                continue  # the broker reset a start past the end to the beginning
            if high is None:
                high = consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)[1]
            limit = end if end is not None else high
            if limit is not None and limit >= 0 and offset >= limit:
                return
            yield message
            if end is not None and offset + 1 >= end:
                return
    finally:
        consumer.unassign()


class TopicReader:
    """A context-managed consumer for :func:`read_partition` over several partitions and topics."""

    def __init__(self, kafka_config: Mapping[str, Any]) -> None:
        self.kafka_config = kafka_config  # whose principal errors name (never logged)
        self.consumer = Consumer(reader_config(kafka_config))

    def __enter__(self) -> TopicReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.consumer.close()

    def partitions(self, topic: str, timeout: float = 10.0) -> int:
        return partition_counts(self.consumer, [topic], timeout, kafka_config=self.kafka_config)[topic]

    def read(
        self, topic: str, partition: int, *, start: int | None = None, end: int | None = None
    ) -> Iterator[Message]:
        return read_partition(self.consumer, topic, partition, start=start, end=end)
