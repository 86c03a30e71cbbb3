"""
A tier's backlog: records after the group's committed offset, bucketed by how soon they are due.

Read-only (never commits), with the engine's one read-to-the-end scan (``engine/kafka/scan.py``): the
end of each partition comes from partition EOF and the high watermark of its first fetch, as the drain
finds it, not from a ListOffsets request; the records are read anyway for their due
headers, so a partition read to its end counts exactly the records a drain would see (transaction
markers and aborted records take offsets but are not records). At most ``scan_limit`` records per
partition are read: beyond that the backlog is estimated from the high watermark carried by the
fetches (markers included) and the remainder is reported as not scanned.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import KafkaException, Message

from airflow_kafka_retry.engine.kafka.clients import open_consumer, partition_counts
from airflow_kafka_retry.engine.kafka.messages import headers_of, offset_of, partition_of, topic_of
from airflow_kafka_retry.engine.kafka.scan import ReadError, Scan, committed_offsets
from airflow_kafka_retry.policy.headers.codec import read_due_ms

#: Due-time buckets, by how far in the future a record is due (upper bounds in ms; ``None`` = beyond).
DUE_BUCKETS: tuple[tuple[str, int | None], ...] = (
    ("now", 0),
    ("minute", 60_000),
    ("hour", 3_600_000),
    ("day", 86_400_000),
    ("later", None),
)


def due_bucket(due_ms: int | None, now_ms: int) -> str:
    """The bucket of a record due at ``due_ms`` (no due header: due now)."""
    wait = 0 if due_ms is None else due_ms - now_ms
    for name, bound in DUE_BUCKETS:
        if bound is None or wait <= bound:
            return name
    raise AssertionError("unreachable")


@dataclass
class PartitionBacklog:
    """One partition: where the group is, where the log ends, and when the records in between are due."""

    partition: int
    committed: int | None = None  # the group's committed offset (None: nothing committed yet)
    end: int | None = None  # log end seen by this scan
    backlog: int = 0  # records after the committed offset
    scanned: int = 0  # of which were read for their due time
    due: dict[str, int] = field(default_factory=lambda: {name: 0 for name, _ in DUE_BUCKETS})
    next_due_ms: int | None = None  # earliest due time among the scanned records not yet due
    first_scanned: int | None = None  # offset of the first record read (where a group with no commit starts)
    truncated: bool = False  # the scan limit stopped the read: ``backlog`` is estimated from the log end


@dataclass
class TopicBacklog:
    """The backlog of one topic for one consumer group, or the error that prevented reading it."""

    topic: str
    group: str
    partitions: list[PartitionBacklog] = field(default_factory=list)
    error: str | None = None

    def totals(self) -> dict[str, Any]:
        due = {name: sum(p.due[name] for p in self.partitions) for name, _ in DUE_BUCKETS}
        waiting = [p.next_due_ms for p in self.partitions if p.next_due_ms is not None]
        return {
            "backlog": sum(p.backlog for p in self.partitions),
            "scanned": sum(p.scanned for p in self.partitions),
            "due": due,
            "next_due_ms": min(waiting) if waiting else None,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "group": self.group,
            "error": self.error,
            "totals": self.totals(),
            "partitions": [asdict(p) for p in self.partitions],
        }


def scan_backlog(
    kafka_config: dict[str, Any],
    topic: str,
    group: str,
    *,
    now_ms: int,
    scan_limit: int = 10_000,
    timeout_s: float = 10.0,
) -> TopicBacklog:
    """The backlog of ``topic`` for ``group``; a broker problem is returned in ``error``, naming the topic."""
    result = TopicBacklog(topic, group)
    try:
        _scan(result, kafka_config, now_ms, scan_limit, timeout_s)
    except (KafkaException, ReadError, ValueError, TimeoutError) as exc:
        result.error = f"{topic}: {exc}"
    return result


def _scan(
    result: TopicBacklog, kafka_config: dict[str, Any], now_ms: int, scan_limit: int, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    config = {**kafka_config, "socket.timeout.ms": int(timeout_s * 1000), "session.timeout.ms": 6000}
    with open_consumer(config, result.group) as consumer:
        count = partition_counts(consumer, [result.topic], timeout=timeout_s)[result.topic]
        committed = committed_offsets(consumer, [(result.topic, p) for p in range(count)], timeout_s)
        parts = {
            tp.partition: PartitionBacklog(tp.partition, tp.offset if tp.offset >= 0 else None)
            for tp in committed
        }
        result.partitions = [parts[p] for p in sorted(parts)]
        scan = Scan(
            consumer,
            {
                (result.topic, p.partition): -1 if p.committed is None else p.committed
                for p in result.partitions
            },
            deadline=deadline,
            poll_s=0.2,
        )
        for message in scan.records():
            _count(parts[partition_of(message)], message, now_ms, scan_limit, scan)
        for key, end in scan.ends.items():
            parts[key[1]].end = end
        for part in result.partitions:
            start = part.committed if part.committed is not None else part.first_scanned
            part.backlog = part.scanned
            if part.truncated and part.end is not None and start is not None:
                part.backlog = max(part.scanned, part.end - start)


def _count(part: PartitionBacklog, message: Message, now_ms: int, scan_limit: int, scan: Scan) -> None:
    """Count one record of ``part`` by its due time; stop its read at ``scan_limit`` records."""
    if part.first_scanned is None:
        part.first_scanned = offset_of(message)
    part.scanned += 1
    due_ms = read_due_ms(headers_of(message))
    bucket = due_bucket(due_ms, now_ms)
    part.due[bucket] += 1
    if due_ms is not None and bucket != "now" and (part.next_due_ms is None or due_ms < part.next_due_ms):
        part.next_due_ms = due_ms
    if part.scanned >= scan_limit:
        part.truncated = True
        key = (topic_of(message), part.partition)
        high = scan.high.get(key, -1)
        scan.finish(key, high if high >= 0 else offset_of(message) + 1)
