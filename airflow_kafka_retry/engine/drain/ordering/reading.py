"""
What a keeper reads beside its main partition: its order state, its hold partition, held copies by offset.

Each read is the one scan (``engine/kafka/scan.py``, read_committed), bounded by the
run's deadlines and idle timeout.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from airflow_kafka_retry.engine.kafka.messages import offset_of
from airflow_kafka_retry.engine.kafka.scan import Scan, committed_offsets
from airflow_kafka_retry.policy.ordering.book import OrderBook, ReleaseOn
from airflow_kafka_retry.policy.ordering.entries import KEY_ID_BYTES, BlockedKey, OrderStateError

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Message

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
        key = (topic, self.partition)
        return Scan(
            self.consumer,
            {key: start},
            ends=None if end is None else {key: end},
            idle_timeout_s=self.idle_timeout_s,
            deadlines=self.deadlines,
            waits_for=f"the leader of {topic}[{self.partition}]",
            start_timeout_s=min(5.0, self.call_timeout_s),
        ).records()

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

    def book(self, topic: str, release_on: ReleaseOn) -> OrderBook:
        """The order book of the partition, from the state topic read to its end."""
        book = OrderBook(release_on)
        for message in self.scan(topic, -1):
            where = f"{topic}[{self.partition}]@{offset_of(message)}"
            kid, value = message.key(), message.value()
            if not isinstance(kid, bytes) or len(kid) != KEY_ID_BYTES:
                raise OrderStateError(
                    f"{where}: a state entry's record key must be a {KEY_ID_BYTES}-byte key id"
                )
            book.load(kid, None if value is None else BlockedKey.from_bytes(value, where))
        return book

    def held(self, topic: str, offsets: Iterable[int]) -> dict[int, Message]:
        """The held copies at ``offsets`` of ``topic[partition]``; a missing one is an error naming it."""
        wanted = set(offsets)
        if not wanted:
            return {}
        found: dict[int, Message] = {}
        for message in self.scan(topic, min(wanted), max(wanted) + 1):
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
