"""
Reading one partition of a tier: from the committed offset to the first record not yet due.

Read with the engine's one read-to-the-end scan (``engine/kafka/scan.py``): the end of the partition
is taken from fetch responses (partition EOF and the high watermark carried with fetched records), not
from a ListOffsets request, and records appended after the first fetch are not chased: a run drains
what was there when it looked.

Never early. A pass may start a little before its records fall due (``follow.py``: the lead), with a
cutoff a little after: a record due by the cutoff but not yet due is held (the read sleeps) until it is
due, then handed on. The hold is bounded by ``hold_ms`` from the reader's creation (the clock's, never the
record's): a record due later than that but by the cutoff (a caller's explicit cutoff far ahead) is
handed on at once, as the cutoff says. Records without a due time (the main topic) are never held.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from airflow_kafka_retry.engine.drain.follow import MAX_HOLD_MS
from airflow_kafka_retry.engine.kafka.deadlines import CallDeadlines
from airflow_kafka_retry.engine.kafka.messages import headers_of, offset_of
from airflow_kafka_retry.engine.kafka.scan import ReadError, Scan, committed_offsets
from airflow_kafka_retry.policy.headers.codec import MAX_BACKOFF_MS, Header, read_retry_state
from airflow_kafka_retry.policy.routing.resolver import wall_clock_ms

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Message

StopReason = Literal["end", "not_due", "limit", "chunk"]

_HOLD_STEP_MS = 100  # a hold looks at the attempt's deadlines (an abort) this often
_HOLD_GATHER_MS = 10  # a hold lasts this much past its record's due time: the records due then go along


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
    :param hold_ms: a record due by the cutoff and by this long after the reader's creation is held until
        it is due (see the module); 0: never held.
    :param clock: epoch milliseconds; ``sleep``: seconds (a test's).
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
        hold_ms: int = MAX_HOLD_MS,
        clock: Callable[[], int] = wall_clock_ms,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        self.consumer = consumer
        self.clock, self.sleep = clock, sleep
        self.deadlines = deadlines or CallDeadlines(f"{topic}[{partition}]")
        self.call_timeout_s = call_timeout_s
        self.topic = topic
        self.partition = partition
        self.cutoff_ms = cutoff_ms
        self.poll_timeout_s = poll_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.due_horizon_ms = due_horizon_ms
        self._now = clock()  # the clock's last reading: a record due by then is due
        self.hold_until = min(cutoff_ms, self._now + max(0, hold_ms))
        self._hold_ms, self._held_ms = max(0, self.hold_until - self._now), 0
        self._pending: Message | None = None  # read, and held: the next read's first record
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

    def _held(self, due: int) -> bool:
        """Whether the record due at ``due`` (by the cutoff, not due at the clock's last reading) is held."""
        self._now = self.clock()
        return self._now < due <= self.hold_until and self._held_ms < self._hold_ms

    def _hold(self, due: int) -> None:
        """
        Sleep until ``due`` (and a little longer, to gather the records due just after it into one piece).

        The sleeps, in all, never pass the hold's length: a clock that stands still (a test's) or goes back
        cannot make the read wait longer; a real clock reaches ``due`` first, as a sleep is never short.
        """
        until, now = min(due + _HOLD_GATHER_MS, self.hold_until), self._now
        while until > now and self._held_ms < self._hold_ms:
            step = min(until - now, _HOLD_STEP_MS, self._hold_ms - self._held_ms)
            self.sleep(step / 1000)
            self._held_ms += step
            self.deadlines.check()  # an attempt stopped at once ends here
            now = self.clock()
        self._now = max(now, due)

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
            pending, self._pending = (self._pending, None) if limit > 0 else (None, self._pending)
            records = self._records if pending is None else itertools.chain((pending,), self._records)
            for message in records if limit > 0 else ():
                headers = headers_of(message)
                attempt, due = read_retry_state(headers, now_ms=cutoff, horizon_ms=horizon)
                if due is not None and due > cutoff:
                    stop = "not_due"
                    chunk.not_due_offset, chunk.not_due_ms = offset_of(message), due
                    break
                if due is not None and due > self._now and self._held(due):
                    if messages:  # what is due goes to the handler first; this record waits in the next read
                        self._pending = message
                        break
                    self._hold(due)
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
