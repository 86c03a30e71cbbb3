"""
Reading one partition of a tier: from the committed offset to the first record not yet due.

The end of the partition is taken from fetch responses (partition EOF and the high watermark
carried with fetched records), not from a ListOffsets request, and records appended after the
first fetch are not chased: a run drains what was there when it looked.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from airflow_kafka_retry.engine.kafka.clients import from_log_start
from airflow_kafka_retry.engine.kafka.deadlines import CallDeadlines
from airflow_kafka_retry.engine.kafka.messages import headers_of, offset_of
from airflow_kafka_retry.policy.headers import MAX_BACKOFF_MS, Header, read_retry_state

StopReason = Literal["end", "not_due", "limit", "chunk"]
_FETCH_BATCH = 500  # messages taken from the client's queue at once


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
    :param watch: the engine's deadlines for the blocking calls (``engine/kafka/deadlines.py``).
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
        watch: CallDeadlines | None = None,
        call_timeout_s: float = 30.0,
    ) -> None:
        self.consumer = consumer
        self.watch = watch or CallDeadlines(f"{topic}[{partition}]")
        self.call_timeout_s = call_timeout_s
        self.topic = topic
        self.partition = partition
        self.cutoff_ms = cutoff_ms
        self.poll_timeout_s = poll_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.due_horizon_ms = due_horizon_ms
        self.start_offset = self._committed_offset()
        self.position = self.start_offset
        self.end_offset: int | None = None  # high watermark seen with the first fetch (-1: unknown)
        self.finished = False
        self._pending: list[Message] = []  # fetched, not yet read: self._pending[self._next:]
        self._next = 0
        start = self.start_offset if self.start_offset >= 0 else OFFSET_BEGINNING
        timeout = self.watch.timeout(min(5.0, call_timeout_s))
        with self.watch.call("get_watermark_offsets", timeout, f"the leader of {self.where}"):
            first = from_log_start(consumer, [TopicPartition(topic, partition, start)], timeout)
        consumer.assign(first)

    @property
    def where(self) -> str:
        return f"{self.topic}[{self.partition}]"

    def _committed_offset(self) -> int:
        timeout = self.watch.timeout(self.call_timeout_s)
        try:
            with self.watch.call("committed", timeout, f"the group coordinator of {self.where}'s group"):
                committed = self.consumer.committed(
                    [TopicPartition(self.topic, self.partition)], timeout=timeout
                )
        except KafkaException as exc:
            raise DrainError(f"{self.where}: cannot read the committed offset: {exc}") from exc
        offset = committed[0].offset
        if committed[0].error is not None:
            raise DrainError(f"{self.where}: cannot read the committed offset: {committed[0].error}")
        return offset if offset >= 0 else -1

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
        idle_since = time.monotonic()
        while len(messages) < limit:
            if self._next >= len(self._pending):
                if not self._fetch():
                    if time.monotonic() - idle_since > self.idle_timeout_s:
                        silent = DrainError(
                            f"{self.where}: no records and no end-of-partition from the broker "
                            f"for {self.idle_timeout_s:.0f}s after offset {self.position}"
                        )
                        silent.transient = True
                        raise silent
                    continue
                idle_since = time.monotonic()
            pending, first = self._pending, self._next
            last = min(len(pending), first + limit - len(messages))
            self._next = last
            stop: StopReason | None = None
            for i in range(first, last):
                message = pending[i]
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise DrainError(f"{self.where}: read failed after offset {self.position}: {error}")
                    stop = "end"
                    break
                offset = offset_of(message)
                if self.end_offset is None:
                    marks = self.consumer.get_watermark_offsets(
                        TopicPartition(self.topic, self.partition), cached=True
                    )
                    self.end_offset = marks[1] if marks else -1
                if 0 <= self.end_offset <= offset:  # appended during the run: not chased
                    stop = "end"
                    break
                headers = headers_of(message)
                attempt, due = read_retry_state(headers, now_ms=cutoff, horizon_ms=horizon)
                if due is not None and due > cutoff:
                    stop = "not_due"
                    chunk.not_due_offset, chunk.not_due_ms = offset, due
                    break
                messages.append(message)
                header_lists.append(headers)
                attempts_of.append(attempt)
                due_of.append(due)
            if messages:
                self.position = chunk.next_offset = offset_of(messages[-1]) + 1
            if stop is not None:
                self.finished = True
                chunk.stop = stop
                return chunk
        chunk.stop = "limit"
        return chunk

    def _fetch(self) -> bool:
        """Refill the pending batch; False when the broker had nothing within the poll timeout."""
        # consume() waits its whole timeout unless the batch fills up: wait for one event, then
        # take whatever else is already queued without waiting.
        with self.watch.call("poll", self.poll_timeout_s, f"the leader of {self.where}"):
            first = self.consumer.poll(self.poll_timeout_s)
        if first is None:
            self._pending, self._next = [], 0
            return False
        self._pending = [first, *self.consumer.consume(num_messages=_FETCH_BATCH - 1, timeout=0)]
        self._next = 0
        return True
