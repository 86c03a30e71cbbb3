"""
What a keeper reads beside its main partition: its order state, its hold partition, held copies by offset.

Each read is the one scan (``engine/kafka/scan.py``, read_committed), bounded by the
run's deadlines and idle timeout.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from airflow_kafka_retry.engine.kafka.clients import from_log_start
from airflow_kafka_retry.engine.kafka.messages import offset_of
from airflow_kafka_retry.engine.kafka.scan import ReadError, Scan, committed_offsets
from airflow_kafka_retry.policy.ordering.book import OrderBook, ReleaseOn
from airflow_kafka_retry.policy.ordering.entries import KEY_ID_BYTES, BlockedKey, OrderStateError

if TYPE_CHECKING:
    from confluent_kafka import Message

    from airflow_kafka_retry.engine.kafka.deadlines import CallDeadlines


class SideReader:
    """
    Reads ``topic[partition]`` partitions other than the run's own with a consumer of the run's group.

    :param consumer: read_committed, partition EOF on (``consumer_config``), never subscribed.
    """

    def __init__(
        self,
        consumer: Consumer,
        partition: int,
        *,
        deadlines: CallDeadlines,
        call_timeout_s: float,
        idle_timeout_s: float,
    ) -> None:
        self.consumer = consumer
        self.partition = partition
        self.deadlines = deadlines
        self.call_timeout_s = call_timeout_s
        self.idle_timeout_s = idle_timeout_s

    def scan(self, topic: str, start: int, end: int | None = None) -> Iterable[Message]:
        """The records of ``topic[partition]`` from ``start`` (negative: the first) to its end or ``end``."""
        return self._scan(topic, start, end).records()

    def tail(self, topic: str, start: int) -> tuple[list[Message], int | None]:
        """The records of ``topic[partition]`` from ``start`` to its end, and that end (None: not known)."""
        scan = self._scan(topic, start)
        return list(scan.records()), scan.ends.get((topic, self.partition))

    def _scan(self, topic: str, start: int, end: int | None = None) -> Scan:
        key = (topic, self.partition)
        return Scan(
            self.consumer,
            {key: start},
            ends=None if end is None else {key: end},
            idle_timeout_s=self.idle_timeout_s,
            deadlines=self.deadlines,
            waits_for=f"the leader of {topic}[{self.partition}]",
            start_timeout_s=min(5.0, self.call_timeout_s),
        )

    def committed(self, topic: str) -> int:
        """The group's committed offset of ``topic[partition]`` (-1: none)."""
        timeout = self.deadlines.timeout(self.call_timeout_s)
        found = committed_offsets(
            self.consumer,
            [(topic, self.partition)],
            timeout,
            deadlines=self.deadlines,
            waits_for=f"the group coordinator of {topic}[{self.partition}]'s group",
        )
        return max(-1, found[0].offset)

    def end(self, topic: str) -> int:
        """The end of ``topic[partition]`` the broker reports now (ListOffsets)."""
        timeout = self.deadlines.timeout(min(5.0, self.call_timeout_s))
        leader = f"the leader of {topic}[{self.partition}]"
        with self.deadlines.call("get_watermark_offsets", timeout, leader):
            _, high = self.consumer.get_watermark_offsets(
                TopicPartition(topic, self.partition), timeout=timeout, cached=False
            )
        return int(high)

    def book(
        self, topic: str, release_on: ReleaseOn, known: Mapping[bytes, BlockedKey], start: int
    ) -> tuple[OrderBook, int]:
        """
        The order book of the partition, and the offset its read ended at.

        ``known``: the state entries read up to ``start`` (by an earlier run of this process, ``kept.py``);
        the state topic is read from there to its end. It keeps every entry until its segments are compacted:
        reading them all at each run's start costs more with every chunk the keepers committed. Of the entries
        of a key, only the last read is decoded: the others are what compaction removes.
        """
        messages, end = self.tail(topic, start)
        if messages and start >= 0 and offset_of(messages[0]) < start:  # the topic was made again: from 0
            known = {}
        last: dict[bytes, Message] = {}
        for message in messages:
            kid = message.key()
            if not isinstance(kid, bytes) or len(kid) != KEY_ID_BYTES:
                raise OrderStateError(
                    f"{topic}[{self.partition}]@{offset_of(message)}: a state entry's record key must be a "
                    f"{KEY_ID_BYTES}-byte key id"
                )
            last.pop(kid, None)  # kept in the order the entries were written
            last[kid] = message
        book = OrderBook(release_on)
        book.entries = dict(known)
        for kid, message in last.items():
            value = message.value()
            where = f"{topic}[{self.partition}]@{offset_of(message)}"
            book.load(kid, None if value is None else BlockedKey.from_bytes(value, where))
        position = end if end is not None else (offset_of(messages[-1]) + 1 if messages else start)
        return book, position

    def held(self, topic: str, offsets: Iterable[int]) -> dict[int, Message]:
        """The held copies at ``offsets`` of ``topic[partition]``; a missing one is an error naming it."""
        wanted = set(offsets)
        if not wanted:
            return {}
        found: dict[int, Message] = {}
        for first, last in _runs(sorted(wanted)):  # far-apart copies are not read through what lies between
            for message in self.scan(topic, first, last + 1):
                offset = offset_of(message)
                if offset in wanted:
                    found[offset] = message
        missing = sorted(wanted - found.keys())
        if missing:
            raise OrderStateError(
                f"{topic}[{self.partition}]: {len(missing)} held record(s) the order state names are gone "
                f"(offsets {missing[:5]}): restore the topic, or release their keys (airflow-kafka-retry "
                "ordering release)"
            )
        return found


class HoldTail:
    """
    A hold partition followed by a consumer of its own, never unassigned: its fetches run in the background.

    :meth:`take` returns what they brought since, without waiting (read_committed, so only committed marks).
    Its fetches wait up to :data:`TAIL_FETCH_WAIT_MS` at the partition's end (a record that comes ends the
    wait at once): a tail a process keeps between runs (``kept.py``) costs the broker little while idle.
    ``deadlines``: those of the run using it.
    """

    def __init__(
        self, config: Mapping[str, Any], topic: str, partition: int, deadlines: CallDeadlines
    ) -> None:
        self.topic, self.partition, self.deadlines = topic, partition, deadlines
        self.consumer = Consumer({**config, "fetch.wait.max.ms": TAIL_FETCH_WAIT_MS})

    def start(self, offset: int) -> None:
        """Follow the partition from ``offset`` (negative: its beginning), from wherever it was."""
        tp = TopicPartition(self.topic, self.partition, offset if offset >= 0 else OFFSET_BEGINNING)
        leader = f"the leader of {self.topic}[{self.partition}]"
        with self.deadlines.call("get_watermark_offsets", 5.0, leader):  # a logical start fetches 0.5 s later
            self.consumer.assign(from_log_start(self.consumer, [tp], 5.0))

    def take(self) -> list[Message]:
        """The records fetched since the last take, in order; a fetch error raises, naming the partition."""
        out: list[Message] = []
        while True:
            with self.deadlines.call("consume", 5.0, f"the leader of {self.topic}[{self.partition}]"):
                batch = self.consumer.consume(_TAKE, timeout=0)
            for message in batch:
                error = message.error()
                if error is None:
                    out.append(message)
                elif error.code() != KafkaError._PARTITION_EOF:
                    keys = [(self.topic, self.partition)]
                    raise ReadError(f"{self.topic}[{self.partition}]: read failed: {error}", keys, error)
            if len(batch) < _TAKE:
                return out

    def close(self) -> None:
        with self.deadlines.call("close", 10.0, "the group coordinator"):
            self.consumer.close()


_TAKE = 500
#: A hold tail's longest wait for an empty fetch.
TAIL_FETCH_WAIT_MS = 500

#: Held copies further apart than this are read in separate scans (a seek each) rather than read through.
_GAP = 1000


def _runs(offsets: list[int]) -> list[tuple[int, int]]:
    """Sorted ``offsets`` as (first, last) runs whose neighbours are at most ``_GAP`` apart."""
    runs: list[tuple[int, int]] = []
    for offset in offsets:
        if runs and offset - runs[-1][1] <= _GAP:
            runs[-1] = (runs[-1][0], offset)
        else:
            runs.append((offset, offset))
    return runs
