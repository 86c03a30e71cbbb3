"""
Reading a topic's committed records without committing anything.

A consumer with a throw-away group id reads each partition from a start offset to its end with the
engine's one read-to-the-end scan (:mod:`~airflow_kafka_retry.engine.kafka.scan`): partition EOF, the
high watermark seen with the first fetch, or a fixed end offset (a replay's snapshot); records appended
meanwhile are not chased.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message

from airflow_kafka_retry.engine.kafka.clients import consumer_config, partition_counts
from airflow_kafka_retry.engine.kafka.scan import Scan
from airflow_kafka_retry.policy.client_names import READER_GROUP_PREFIX


def reader_config(kafka_config: Mapping[str, Any]) -> dict[str, Any]:
    """A read_committed, EOF-reporting consumer configuration whose group is never used to commit."""
    return consumer_config(kafka_config, f"{READER_GROUP_PREFIX}{uuid.uuid4().hex}")


class TopicReader:
    """A context-managed consumer reading partitions of several topics to their end, one at a time."""

    def __init__(self, kafka_config: Mapping[str, Any], *, idle_timeout_s: float = 60.0) -> None:
        self.kafka_config = kafka_config  # whose principal errors name (never logged)
        self.consumer = Consumer(reader_config(kafka_config))
        self.idle_timeout_s = idle_timeout_s

    def __enter__(self) -> TopicReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.consumer.close()

    def partitions(self, topic: str, timeout: float = 10.0) -> int:
        return partition_counts(self.consumer, [topic], timeout, kafka_config=self.kafka_config)[topic]

    def read(
        self, topic: str, partition: int, *, start: int | None = None, end: int | None = None
    ) -> Iterator[Message]:
        """
        Yield the records of ``topic[partition]`` from ``start`` (default: the beginning) to its end.

        :param end: stop before this offset (a snapshot taken earlier); default: the partition's end as the
            broker reports it while reading.
        :raises ReadError: naming the partition, when it cannot be read to its end.
        """
        key = (topic, partition)
        scan = Scan(
            self.consumer,
            {key: OFFSET_BEGINNING if start is None else start},
            ends={key: end} if end is not None else None,
            idle_timeout_s=self.idle_timeout_s,
            skip_before_start=True,  # the broker resets a start past the end to the beginning
        )
        try:
            yield from scan.records()
        finally:
            scan.close()
