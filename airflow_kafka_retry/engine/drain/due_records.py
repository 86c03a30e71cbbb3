"""
Reading one partition of a tier: from the committed offset to the first record not yet due.

Read with the engine's one read-to-the-end scan (``engine/kafka/scan.py``): the end of the partition
is taken from fetch responses (partition EOF and the high watermark carried with fetched records), not
from a ListOffsets request, and records appended after the first fetch are not chased: a run drains
what was there when it looked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from airflow_kafka_retry.engine.kafka.deadlines import CallDeadlines
from airflow_kafka_retry.engine.kafka.messages import headers_of, offset_of
from airflow_kafka_retry.engine.kafka.scan import ReadError, Scan, committed_offsets
from airflow_kafka_retry.policy.headers.codec import MAX_BACKOFF_MS, Header, read_retry_state

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Message

StopReason = Literal["end", "not_due", "limit", "chunk"]


class DrainError(RuntimeError):
    """
    A partition could not be read; the message names topic and partition.

    ``transient``: the broker did not answer (None: the cause's Kafka error says whether it was the cluster).
    """

    transient: bool | None = None


@dataclass
class Chunk:
    """
    Due records read in one go, and where reading stopped.

    ``headers``, ``attempts`` and ``due_ms`` run parallel to ``messages``: each message's headers
    (read once) and the attempt and due time they say, so nothing reads a record's headers twice.
    """

    messages: list[Message] = field(default_factory=list)
    headers: list[list[Header] | None] = field(default_factory=list)
    attempts: list[int] = field(default_factory=list)
    due_ms: list[int | None] = field(default_factory=list)
    next_offset: int | None = None  # offset to commit once every message has a home; None: nothing read
    stop: StopReason = "chunk"
    not_due_offset: int | None = None  # the first record that was not yet due, if that stopped the read
    not_due_ms: int | None = None


class PartitionReader:
    """
    Reads due records of one topic-partition through an assigned (not subscribed) consumer.

    :param consumer: a consumer of the tier's group (read_committed, partition EOF on, no auto-commit).
    :param cutoff_ms: records due later than this stay for a later run.
    :param idle_timeout_s: give up when the broker sends neither records nor EOF for this long.
    :param due_horizon_ms: a due time further than this after ``cutoff_ms`` is not believed (a
        corrupt header must not hold the partition back forever): the record is due at once.
    :param deadlines: the engine's deadlines for the blocking calls (``engine/kafka/deadlines.py``).
    :param call_timeout_s: the timeout handed to the committed-offset and log-start requests.
    """

    def __init__(
        self,
        consumer: Consumer,
        topic: str,
        partition: int,
        *,
        cutoff_ms: int,
        poll_timeout_s: float = 1.0,
        idle_timeout_s: float = 60.0,
        due_horizon_ms: int = MAX_BACKOFF_MS,
        deadlines: CallDeadlines | None = None,
        call_timeout_s: float = 30.0,
    ) -> None:
        self.consumer = consumer
        self.deadlines = deadlines or CallDeadlines(f"{topic}[{partition}]")
        self.call_timeout_s = call_timeout_s
        self.topic = topic
        self.partition = partition
        self.cutoff_ms = cutoff_ms
        self.poll_timeout_s = poll_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.due_horizon_ms = due_horizon_ms
        self.start_offset = self._committed_offset()
        self.position = self.start_offset
        self.finished = False
        self._key = (topic, partition)
        self._scan = Scan(
            consumer,
            {self._key: self.start_offset},
            idle_timeout_s=idle_timeout_s,
            poll_s=poll_timeout_s,
            deadlines=self.deadlines,
            waits_for=f"the leader of {self.where}",
            start_timeout_s=min(5.0, call_timeout_s),
        )
        self._records = self._scan.records()

    @property
    def end_offset(self) -> int | None:
        """The high watermark seen with the first fetch (-1: unknown; None: nothing fetched yet)."""
        return self._scan.high.get(self._key)

    @property
    def where(self) -> str:
        return f"{self.topic}[{self.partition}]"

    def _committed_offset(self) -> int:
        timeout, key = self.deadlines.timeout(self.call_timeout_s), (self.topic, self.partition)
        waits_for = f"the group coordinator of {self.where}'s group"
        try:
            committed = committed_offsets(
                self.consumer, [key], timeout, deadlines=self.deadlines, waits_for=waits_for
            )
        except ReadError as exc:
            raise DrainError(str(exc)) from exc.__cause__
        return max(-1, committed[0].offset)

    def read(self, limit: int) -> Chunk:
        """Read up to ``limit`` due records after the current position."""
        chunk = Chunk(next_offset=self.position if self.position >= 0 else None)
        if self.finished:
            chunk.stop = "end"
            return chunk
        messages, header_lists, attempts_of, due_of = (
            chunk.messages,
            chunk.headers,
            chunk.attempts,
            chunk.due_ms,
        )
        cutoff, horizon = self.cutoff_ms, self.due_horizon_ms
        stop: StopReason = "limit"
        try:
            for message in self._records if limit > 0 else ():
                headers = headers_of(message)
                attempt, due = read_retry_state(headers, now_ms=cutoff, horizon_ms=horizon)
                if due is not None and due > cutoff:
                    stop = "not_due"
                    chunk.not_due_offset, chunk.not_due_ms = offset_of(message), due
                    break
                messages.append(message)
                header_lists.append(headers)
                attempts_of.append(attempt)
                due_of.append(due)
                if len(messages) >= limit:
                    break
            else:
                stop = "end" if limit > 0 else "limit"
        except (
            ReadError
        ) as exc:  # a timeout is transient (``exc.transient``), a read failure as its cause says
            raise DrainError(f"{exc} (after offset {self.position})") from exc
        if messages:
            self.position = chunk.next_offset = offset_of(messages[-1]) + 1
        self.finished = stop != "limit"
        chunk.stop = stop
        return chunk
