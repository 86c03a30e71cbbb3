"""
The one read-to-the-end scan: assigned partitions read from their start offsets to their end.

Every reader of the engine reads so (backlog, dead-letter counts, DLT scan, peek, replay and redelivery
logs, the drain's due records): an assigned consumer (``read_committed``, partition EOF on) reads each
partition from a start offset (default: the beginning) to the first end met: partition EOF; the high
watermark carried by the partition's first fetch (not ListOffsets, which some brokers get wrong), so
records appended meanwhile are not chased; or a fixed end (a snapshot), never waited for past it. The
caller may end a partition sooner (:meth:`Scan.finish`). Every wait is bounded: under the caller's
:class:`CallDeadlines` where it has them, and by the scan's ``deadline`` or ``idle_timeout_s``
(:class:`ReadTimeout`). An error names topic and partition (:class:`ReadError`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from airflow_kafka_retry.engine.kafka.clients import coordinator_busy, from_log_start
from airflow_kafka_retry.engine.kafka.messages import offset_of

if TYPE_CHECKING:
    from airflow_kafka_retry.engine.kafka.deadlines import CallDeadlines

Key = tuple[str, int]
#: Messages taken from the client's queue at once.
FETCH_BATCH = 500


def where(keys: Iterable[Key]) -> str:
    """``topic[partition]`` of each key, sorted, comma-separated."""
    return ", ".join(f"{t}[{p}]" for t, p in sorted(keys))


class ReadError(RuntimeError):
    """
    A partition could not be read to its end; the message names topic and partition.

    ``keys``: the partitions concerned; ``error``: the Kafka error reported (None: a timeout).
    """

    transient: bool | None = None  # as the engine's supervisor reads it (None: as the cause says)

    def __init__(self, message: str, keys: Iterable[Key] = (), error: KafkaError | None = None) -> None:
        super().__init__(message)
        self.keys = tuple(sorted(keys))
        self.error = error


class ReadTimeout(ReadError):
    """The scan's deadline passed, or the broker sent nothing for too long; ``keys``: those not at an end."""

    transient = True


def committed_offsets(
    consumer: Consumer,
    keys: Sequence[Key],
    timeout_s: float,
    *,
    retry_s: float | None = None,
    deadlines: CallDeadlines | None = None,
    waits_for: str = "the group coordinator",
    clock: Callable[[], float] = time.monotonic,
) -> list[TopicPartition]:
    """
    The consumer's group's committed offsets of ``keys`` (negative: nothing committed), with their metadata.

    With ``retry_s``, asked again every ``retry_s`` while the group's coordinator loads or moves (a rolling
    restart: ``NOT_COORDINATOR``); any other error, or ``timeout_s`` passed, raises a :class:`ReadError`
    naming the partition(s). Each request is made under ``deadlines`` where the caller has them.
    """
    deadline = clock() + timeout_s
    tps = [TopicPartition(t, p) for t, p in keys]
    while True:
        timeout = max(0.1, deadline - clock())
        try:
            with deadlines.call("committed", timeout, waits_for) if deadlines else nullcontext():
                found = consumer.committed(tps, timeout=timeout)
            failed = next((tp for tp in found if tp.error is not None), None)
            if failed is None:
                return found
            failed_keys, error = [(failed.topic, failed.partition)], KafkaException(failed.error)
        except KafkaException as exc:
            failed_keys, error = list(keys), exc
        if retry_s is None or not coordinator_busy(error) or clock() + retry_s >= deadline:
            message = f"{where(failed_keys)}: cannot read the committed offsets: {error}"
            raise ReadError(message, failed_keys, error.args[0] if error.args else None) from error
        time.sleep(retry_s)


class Scan:
    """
    One read-to-the-end scan of ``consumer`` (see the module's docstring); iterate :meth:`records`.

    :param starts: the partitions and their start offsets (negative or ``OFFSET_BEGINNING``: the beginning).
    :param ends: fixed ends (stop before these offsets) of some partitions; the others end as the broker says.
    :param deadline: a monotonic time the whole scan must end by.
    :param idle_timeout_s: the longest time the broker may send neither records nor an end.
    :param skip_before_start: skip records before a given start (a start past the log's end that the
        client reset to the beginning); off for committed offsets, which a recreated topic resets rightly.
    :param deadlines: the caller's deadlines: the log-start lookup and each fetch are made under them.
    :param waits_for: what a fetch waits for, for the deadlines' messages.
    :param start_timeout_s: the timeout of the log-start lookup (:func:`from_log_start`).
    :param clock: monotonic seconds, the clock of ``deadline`` (a test's).
    """

    def __init__(
        self,
        consumer: Consumer,
        starts: Mapping[Key, int],
        *,
        ends: Mapping[Key, int] | None = None,
        deadline: float | None = None,
        idle_timeout_s: float | None = None,
        poll_s: float = 1.0,
        skip_before_start: bool = False,
        deadlines: CallDeadlines | None = None,
        waits_for: str | None = None,
        start_timeout_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.consumer = consumer
        self.deadline, self.idle_timeout_s, self.poll_s = deadline, idle_timeout_s, poll_s
        self.deadlines, self.clock = deadlines, clock
        self.waits_for = waits_for or f"the leaders of {where(starts)}"
        self.fixed_ends = dict(ends or {})
        self.starts = {key: offset if offset >= 0 else OFFSET_BEGINNING for key, offset in starts.items()}
        self.skip = {key: o for key, o in self.starts.items() if skip_before_start and o >= 0}
        #: partitions not at their end yet
        self.open = {key for key in self.starts if self.starts[key] < self.fixed_ends.get(key, 1 << 62)}
        #: where each partition ended: its EOF offset, its high watermark or its fixed end
        self.ends: dict[Key, int] = {key: self.fixed_ends[key] for key in self.starts if key not in self.open}
        #: the high watermark seen with each partition's first record (-1: the client had none)
        self.high: dict[Key, int] = {}
        if self.open:
            tps = [TopicPartition(t, p, self.starts[(t, p)]) for t, p in sorted(self.open)]
            timeout = deadlines.timeout(start_timeout_s) if deadlines else start_timeout_s
            if deadline is not None:  # the log-start lookup is part of the scan: under its deadline too
                timeout = max(0.1, min(timeout, deadline - clock()))
            # a partition an earlier scan of this consumer ended stays paused: resumed before it is assigned
            # again, as resumed after, its first fetch waited for the client's next wake-up (1 s)
            consumer.resume(tps)
            with self._call("get_watermark_offsets", timeout):
                consumer.assign(from_log_start(consumer, tps, timeout))

    def _call(self, name: str, timeout_s: float) -> AbstractContextManager[None]:
        if self.deadlines is None:
            return nullcontext()
        return self.deadlines.call(name, timeout_s, self.waits_for)

    def finish(self, key: Key, end: int | None = None) -> None:
        """End ``key``'s read here (its fetches paused); ``end``: where it ended, if the caller knows."""
        if key in self.open:
            self.open.discard(key)
            if end is not None:
                self.ends[key] = end
            self.consumer.pause([TopicPartition(*key)])

    def close(self) -> None:
        """Unassign every partition (the consumer stays open)."""
        self.consumer.unassign()

    def records(self) -> Iterator[Message]:
        """Each record of the open partitions up to its end, in the order fetched."""
        open_keys, fixed, skips, deadline = self.open, self.fixed_ends, self.skip, self.deadline
        idle_since: float | None = None
        while open_keys:
            started = self.clock()
            batch = self._fetch(started)
            if not batch:
                idle_since = idle_since if idle_since is not None else started
                if self.idle_timeout_s is not None and self.clock() - idle_since > self.idle_timeout_s:
                    raise ReadTimeout(
                        f"{where(open_keys)}: no records and no end-of-partition from the broker for "
                        f"{self.idle_timeout_s:.0f}s",
                        open_keys,
                    )
                continue
            idle_since = None
            key: Key | None = None
            skip = limit = -1
            for message in batch:  # kept lean: the drain reads every record through it
                if deadline is not None and self.clock() >= deadline:
                    raise self._timed_out()  # a record at a time, as a slow reader of the batch meets it
                if message.error() is not None:
                    self._event(message)
                    continue
                topic, partition = message.topic(), message.partition()
                if key is None or partition != key[1] or topic != key[0]:  # a run of another partition
                    if topic is None or partition is None:
                        raise ReadError(f"{where(open_keys)}: a record named no partition", open_keys)
                    key = (topic, partition)
                    skip = skips.get(key, -1)
                    limit = fixed.get(key, -1)
                if key not in open_keys:
                    continue
                offset = offset_of(message)
                if offset < skip:
                    continue
                if limit < 0 and key not in fixed:
                    limit = self._high(key)
                if 0 <= limit <= offset:  # appended after the first fetch, or past the fixed end
                    self.finish(key, limit)
                    continue
                yield message
                if offset + 1 == limit:  # the end reached: not waited for past it
                    self.finish(key, limit)

    def _high(self, key: Key) -> int:
        """The high watermark of ``key`` as the fetches carried it (-1: the client has none)."""
        if key not in self.high:
            marks = self.consumer.get_watermark_offsets(TopicPartition(*key), cached=True)
            self.high[key] = marks[1] if marks else -1
        return self.high[key]

    def _event(self, message: Message) -> None:
        """A partition's EOF (it ends there) or an error (raised, naming the partition, else all open)."""
        error = message.error()
        topic, partition = message.topic(), message.partition()
        keys = (
            ((topic, partition),)
            if topic is not None and partition is not None and partition >= 0
            else tuple(self.open)
        )
        if error is None or error.code() == KafkaError._PARTITION_EOF:
            if keys[0] in self.open:
                self.finish(keys[0], message.offset())
            return
        if all(key not in self.open for key in keys):
            return  # a partition whose read already ended
        raise ReadError(f"{where(keys)}: read failed: {error}", keys, error)

    def _timed_out(self) -> ReadTimeout:
        return ReadTimeout(
            f"{where(self.open)}: no records and no end-of-partition from the broker before the "
            "scan's deadline",
            self.open,
        )

    def _fetch(self, now: float) -> list[Message]:
        """One event, then whatever else the client has queued; empty when nothing came within the poll."""
        timeout = self.poll_s
        if self.deadline is not None:
            remaining = self.deadline - now
            if remaining <= 0:
                raise self._timed_out()
            timeout = min(timeout, remaining)
        # consume() waits its whole timeout unless the batch fills up: wait for one event, then take
        # whatever else is already queued without waiting.
        with self._call("poll", timeout):
            first = self.consumer.poll(timeout)
            if first is None:
                return []
            return [first, *self.consumer.consume(FETCH_BATCH - 1, timeout=0)]
