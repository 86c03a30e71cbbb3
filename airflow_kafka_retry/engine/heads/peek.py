"""
Peeking at the head of each partition of a tier: the first record after the group's committed offset.

What a due check needs, and the backlog gauge: per partition, whether a record is pending, when
the first one is due, and the log end the fetch reported with it. Reading never commits and never
moves the group. The engine's one read-to-the-end scan (``engine/kafka/scan.py``) reads each partition to
its first record or its end: partition EOF and the fetch's high watermark, as the drain does (not
ListOffsets, whose high watermark some brokers get wrong). No Airflow
import: the tier-due trigger calls this in a worker thread.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_kafka_retry.engine.kafka.clients import KafkaConfigError, open_consumer, partition_counts
from airflow_kafka_retry.engine.kafka.messages import headers_of, offset_of, partition_of
from airflow_kafka_retry.engine.kafka.scan import ReadError, ReadTimeout, Scan, committed_offsets
from airflow_kafka_retry.policy.headers.codec import MAX_BACKOFF_MS, read_due_ms
from airflow_kafka_retry.policy.routing.resolver import wall_clock_ms


class PeekError(RuntimeError):
    """A tier's partitions could not be peeked at; the message names topic and partition(s)."""


@dataclass(frozen=True)
class PartitionHead:
    """
    The first pending record of a partition.

    :param partition: the partition.
    :param offset: the record's offset (the group's committed offset, or the first readable one).
    :param due_ms: its ``retry_topic-backoff-timestamp``; ``None`` when it carries none (a main-topic
        or DLT record, a Spring record without back-off header): such a record is due at once.
    :param timestamp_ms: the record's own timestamp.
    :param end_offset: the partition's log end (high watermark) carried by the fetch that brought the
        record; None when the client had none.
    """

    partition: int
    offset: int
    due_ms: int | None
    timestamp_ms: int | None = None
    end_offset: int | None = None

    @property
    def backlog(self) -> int:
        """Records from the head to the log end (transaction markers included: an upper bound); at least 1."""
        return max(1, self.end_offset - self.offset) if self.end_offset is not None else 1

    def due_at(self, now_ms: int) -> int:
        """When the record is (or was) due; a record without due header counts as due at ``now_ms``."""
        return self.due_ms if self.due_ms is not None else now_ms

    def is_due(self, now_ms: int) -> bool:
        return self.due_at(now_ms) <= now_ms


@dataclass(frozen=True)
class TierPeek:
    """What a peek saw: every partition looked at, and the head of those with a pending record."""

    topic: str
    group: str
    partitions: tuple[int, ...]
    heads: tuple[PartitionHead, ...]

    @property
    def pending(self) -> bool:
        return bool(self.heads)

    @property
    def backlog(self) -> int:
        """Pending records over every partition looked at (idle partitions count 0)."""
        return sum(h.backlog for h in self.heads)

    def oldest_due_age_ms(self, now_ms: int) -> int:
        """How long the longest-waiting due head has been due (0 when nothing is due yet)."""
        return max((now_ms - h.due_at(now_ms) for h in self.heads if h.is_due(now_ms)), default=0)

    @property
    def idle_partitions(self) -> list[int]:
        busy = {h.partition for h in self.heads}
        return [p for p in self.partitions if p not in busy]

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "group": self.group,
            "partitions": list(self.partitions),
            "heads": [
                {
                    "partition": h.partition,
                    "offset": h.offset,
                    "due_ms": h.due_ms,
                    "timestamp_ms": h.timestamp_ms,
                    "end_offset": h.end_offset,
                }
                for h in self.heads
            ],
        }


def _where(topic: str, partitions: Iterable[int]) -> str:
    return f"{topic}[{', '.join(str(p) for p in sorted(partitions))}]"


def _read_heads(scan: Scan, topic: str, due_horizon_ms: int) -> dict[int, PartitionHead]:
    """The first record of each partition that has one, its read ended there; the others end at their end."""
    found: dict[int, PartitionHead] = {}
    try:
        for message in scan.records():
            partition = partition_of(message)
            _, timestamp = message.timestamp()
            # a due time is read as the drain reads it: a corrupt or far-future one means due now
            due = read_due_ms(headers_of(message), now_ms=wall_clock_ms(), horizon_ms=due_horizon_ms)
            end = scan.high[(topic, partition)]  # the log end as the first fetch carried it
            found[partition] = PartitionHead(
                partition,
                offset_of(message),
                due,
                timestamp if timestamp >= 0 else None,
                end if end >= 0 else None,
            )
            scan.finish((topic, partition))  # the head is known; later records of the partition do not matter
    except ReadTimeout as exc:
        raise PeekError(
            f"{_where(topic, (p for _, p in exc.keys))}: no record and no end-of-partition from the broker "
            "before the peek timed out"
        ) from None
    except ReadError as exc:
        raise PeekError(f"{_where(topic, (p for _, p in exc.keys))}: peek failed: {exc.error}") from None
    return found


def peek_heads(
    kafka_config: Mapping[str, Any],
    topic: str,
    group: str,
    *,
    partitions: Sequence[int] | None = None,
    timeout_s: float = 30.0,
    poll_timeout_s: float = 0.5,
    due_horizon_ms: int = MAX_BACKOFF_MS,
) -> TierPeek:
    """
    Peek at the first pending record of each partition of ``topic`` for consumer group ``group``.

    Reading starts at the group's committed offset (the beginning where nothing is committed), with
    ``read_committed`` isolation; nothing is committed and the group is never joined.

    :param partitions: only these partitions (default: all of the topic's).
    :param timeout_s: the whole peek must finish within this; a :class:`PeekError` names the
        partitions that gave neither a record nor their end in time.
    :param due_horizon_ms: a due time further ahead than this is not believed (the record is due now), as
        the drain does (which allows a day plus the tier's delay).
    """
    deadline = time.monotonic() + timeout_s
    with open_consumer(kafka_config, group) as consumer:
        if partitions is None:
            try:
                count = partition_counts(consumer, [topic], timeout=max(0.1, deadline - time.monotonic()))[
                    topic
                ]
            except KafkaConfigError as exc:
                raise PeekError(str(exc)) from exc
            partitions = range(count)
        chosen = sorted(set(partitions))
        if not chosen:
            return TierPeek(topic, group, (), ())
        keys = [(topic, p) for p in chosen]
        try:
            committed = committed_offsets(consumer, keys, deadline - time.monotonic())
        except ReadError as exc:
            failed = _where(topic, (p for _, p in exc.keys))
            raise PeekError(
                f"{failed}: cannot read the committed offsets: {exc.__cause__}"
            ) from exc.__cause__
        starts = {(topic, tp.partition): tp.offset for tp in committed}
        scan = Scan(consumer, starts, deadline=deadline, poll_s=poll_timeout_s)
        try:
            found = _read_heads(scan, topic, due_horizon_ms)
        finally:
            scan.close()
    heads = tuple(found[p] for p in chosen if p in found)
    return TierPeek(topic, group, tuple(chosen), heads)
