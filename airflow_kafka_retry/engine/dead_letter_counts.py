"""
What a DLT (or parking topic) holds: record counts by exception class and hour of failure.

Read-only: an assigned consumer with no group commits, from the beginning of every partition to its
end (partition EOF), at most ``scan_limit`` records per partition. The exception class is read from
either Spring header family (value or key exception); a record without one counts as ``unknown``.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from airflow_kafka_retry.engine.clients import from_log_start, open_consumer, partition_counts
from airflow_kafka_retry.engine.consumed import headers_of, partition_of
from airflow_kafka_retry.policy.headers import read_exception_classes

UNKNOWN = "unknown"


def hour_of(timestamp_ms: int) -> str:
    return datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:00Z")


@dataclass
class DeadLetterCounts:
    """Counts of a DLT's records, by exception class and by hour; ``error`` names a broker problem."""

    topic: str
    total: int = 0
    by_exception: Counter[str] = field(default_factory=Counter)
    by_hour: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    truncated: bool = False
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "total": self.total,
            "truncated": self.truncated,
            "error": self.error,
            "by_exception": dict(self.by_exception.most_common()),
            "by_hour": [
                {"hour": hour, "counts": dict(counts)} for hour, counts in sorted(self.by_hour.items())
            ],
        }


def count_dead_letters(
    kafka_config: dict[str, Any], topic: str, *, scan_limit: int = 20_000, timeout_s: float = 10.0
) -> DeadLetterCounts:
    """Counts of ``topic``'s records; a broker problem is returned in ``error``, naming the topic."""
    result = DeadLetterCounts(topic)
    try:
        _count(result, kafka_config, scan_limit, timeout_s)
    except (KafkaException, ValueError, TimeoutError) as exc:
        result.error = f"{topic}: {exc}"
    return result


def _count(result: DeadLetterCounts, kafka_config: dict[str, Any], scan_limit: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    config = {**kafka_config, "socket.timeout.ms": int(timeout_s * 1000)}
    with open_consumer(config, f"airflow-kafka-retry-view-{uuid.uuid4().hex[:8]}") as consumer:
        count = partition_counts(consumer, [result.topic], timeout=timeout_s)[result.topic]
        consumer.assign(
            from_log_start(
                consumer, [TopicPartition(result.topic, p, OFFSET_BEGINNING) for p in range(count)]
            )
        )
        scanned = Counter[int]()
        open_parts = set(range(count))
        while open_parts:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no end of partition(s) {sorted(open_parts)} within {timeout_s:.0f}s")
            message = consumer.poll(0.2)
            if message is None or message.partition() not in open_parts:
                continue
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(error)
                open_parts.discard(message.partition())
                continue
            cls = read_exception_classes(headers_of(message))[0] or UNKNOWN
            result.total += 1
            result.by_exception[cls] += 1
            result.by_hour[hour_of(message.timestamp()[1])][cls] += 1
            scanned[partition_of(message)] += 1
            if scanned[partition_of(message)] >= scan_limit:
                result.truncated = True
                open_parts.discard(message.partition())
                consumer.incremental_unassign([TopicPartition(result.topic, partition_of(message))])
