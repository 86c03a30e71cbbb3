"""
The blocked keys of an ``ordering: key`` topology, read from its compacted ``<topic>-order-state``.

Read-only (no group commits), ``read_committed``, with the engine's one read-to-the-end scan
(``engine/kafka/scan.py``) under a deadline: each partition from its log start to its end, the last entry of
each key id winning (a tombstone frees the key), as the keeper loads it. Per partition: how many keys are
blocked, how many records they hold, and the oldest block (since when, its head, how many it holds, the head's
main-topic offset). Never a key or a payload: :meth:`OrderState.to_dict` names no key id either.

An entry that cannot be read (not ours, a wrong version) is counted and named (``topic[p]@offset``) and its
key is left out: a view goes on; the keeper is the one that stops on it.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException

from airflow_kafka_retry.engine.kafka.clients import open_consumer, partition_counts
from airflow_kafka_retry.engine.kafka.messages import offset_of, partition_of
from airflow_kafka_retry.engine.kafka.scan import ReadError, Scan
from airflow_kafka_retry.policy.client_names import READER_GROUP_PREFIX
from airflow_kafka_retry.policy.ordering.entries import KEY_ID_BYTES, BlockedKey, OrderStateError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from confluent_kafka import Message

#: How many bad entries a partition names (all are counted).
NAMED_BAD = 5


@dataclass
class PartitionOrder:
    """One partition's blocked keys (by key id: for the release command, never shown) and its bad entries."""

    partition: int
    entries: dict[bytes, BlockedKey] = field(default_factory=dict)
    bad_entries: int = 0
    bad: list[str] = field(default_factory=list)
    end: int | None = None

    @property
    def held_records(self) -> int:
        return sum(len(e.held) for e in self.entries.values())

    def oldest(self) -> BlockedKey | None:
        """The entry blocked longest (the lowest head main offset breaks a tie)."""
        if not self.entries:
            return None
        return min(self.entries.values(), key=lambda e: (e.since_ms, e.head_main_offset or 0))

    def add(self, message: Message, topic: str) -> None:
        key, value = message.key(), message.value()
        where = f"{topic}[{self.partition}]@{offset_of(message)}"
        try:
            if key is None or len(key) != KEY_ID_BYTES:
                raise OrderStateError(f"{where}: a state entry's record key must be a {KEY_ID_BYTES}-byte id")
            if value is None:
                self.entries.pop(key, None)
                return
            self.entries[key] = BlockedKey.from_bytes(value, where)
        except OrderStateError as exc:
            self.bad_entries += 1
            if len(self.bad) < NAMED_BAD:
                self.bad.append(str(exc))
            if key is not None:
                self.entries.pop(key, None)

    def to_dict(self, now_ms: int) -> dict[str, Any]:
        oldest = self.oldest()
        return {
            "partition": self.partition,
            "blocked_keys": len(self.entries),
            "held_records": self.held_records,
            "oldest": None if oldest is None else describe(oldest, now_ms),
            "bad_entries": self.bad_entries,
            "bad": list(self.bad),
        }


def describe(entry: BlockedKey, now_ms: int) -> dict[str, Any]:
    """A blocked key as shown: since when (and how long), its head, how many it holds; never the key."""
    return {
        "since_ms": entry.since_ms,
        "age_s": max(0.0, (now_ms - entry.since_ms) / 1000),
        "head": str(entry.head),
        "head_main_offset": entry.head_main_offset,
        "held": len(entry.held),
        "in_dlt": entry.in_dlt,
    }


@dataclass
class OrderState:
    """
    The blocked keys of each partition of ``topic`` (a state topic), or the error that kept it unread.

    ``now_ms``: the wall clock the ages are counted to.
    """

    topic: str
    now_ms: int = 0
    partitions: list[PartitionOrder] = field(default_factory=list)
    error: str | None = None

    def find(self, kid: bytes) -> tuple[int, BlockedKey] | None:
        """The partition whose state blocks ``kid``, and its entry; None when no partition does."""
        for part in self.partitions:
            if kid in part.entries:
                return part.partition, part.entries[kid]
        return None

    def totals(self, now_ms: int | None = None) -> dict[str, Any]:
        now_ms = self.now_ms if now_ms is None else now_ms
        oldest = [o for p in self.partitions if (o := p.oldest()) is not None]
        first = min(oldest, key=lambda e: e.since_ms) if oldest else None
        return {
            "blocked_keys": sum(len(p.entries) for p in self.partitions),
            "held_records": sum(p.held_records for p in self.partitions),
            "oldest": None if first is None else describe(first, now_ms),
            "bad_entries": sum(p.bad_entries for p in self.partitions),
        }

    def to_dict(self, now_ms: int | None = None) -> dict[str, Any]:
        now_ms = self.now_ms if now_ms is None else now_ms
        return {
            "topic": self.topic,
            "error": self.error,
            "totals": self.totals(now_ms),
            "partitions": [p.to_dict(now_ms) for p in self.partitions],
        }


def read_order_state(
    kafka_config: Mapping[str, Any],
    topic: str,
    *,
    timeout_s: float = 10.0,
    raise_errors: bool = False,
    now_ms: int | None = None,
) -> OrderState:
    """
    The blocked keys of the state topic ``topic``, each partition read to its end within ``timeout_s``.

    A broker problem (the topic missing, not authorized, the deadline passed) is returned in ``error``
    naming the topic; with ``raise_errors`` it is raised instead (``KafkaConfigError``, ``ReadError``, ...).
    ``now_ms``: the wall clock ages are counted to (default: now).
    """
    result = OrderState(topic, int(time.time() * 1000) if now_ms is None else now_ms)
    try:
        _read(result, kafka_config, timeout_s)
    except (KafkaException, ReadError, ValueError, TimeoutError) as exc:
        if raise_errors:
            raise
        result.error = f"{topic}: {exc}"
    return result


def _read(result: OrderState, kafka_config: Mapping[str, Any], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    config = {**kafka_config, "socket.timeout.ms": int(timeout_s * 1000)}
    with open_consumer(config, f"{READER_GROUP_PREFIX}order-{uuid.uuid4().hex[:8]}") as consumer:
        count = partition_counts(consumer, [result.topic], timeout=timeout_s, kafka_config=kafka_config)[
            result.topic
        ]
        parts = {p: PartitionOrder(p) for p in range(count)}
        result.partitions = [parts[p] for p in range(count)]
        scan = Scan(consumer, {(result.topic, p): -1 for p in range(count)}, deadline=deadline, poll_s=0.2)
        for message in scan.records():
            parts[partition_of(message)].add(message, result.topic)
        for key, end in scan.ends.items():
            parts[key[1]].end = end
