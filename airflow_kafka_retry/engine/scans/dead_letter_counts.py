"""
What a DLT (or parking topic) holds, for the view: counts by exception class, family and hour, and samples.

Read-only: an assigned consumer with no group commits, from the beginning of every partition to its
end (the engine's one read-to-the-end scan, ``engine/kafka/scan.py``), at most ``scan_limit`` records per
partition. Every dead-letter family is read
(:mod:`~airflow_kafka_retry.policy.dead_letters.families`): Spring's two spellings, Kafka Connect's
``__connect.errors.*``, the share-group DLQ's ``__dlq.errors.*``. A record is counted under its failure
class, a share-group dead letter (no class) under ``<share-group: reason>``, a record naming neither as
``unknown``; also by family, by field it lacks (``missing``) and by header that could not be read
(``unreadable``). The :data:`SAMPLES` newest records are described: DLT coordinates, family, original
topic, partition and offset, failure, group or connector, delivery count, what they lack. Never a key or
value; header strings are bounded (:mod:`~airflow_kafka_retry.policy.headers.bounds`).
"""

from __future__ import annotations

import heapq
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException

from airflow_kafka_retry.engine.kafka.clients import open_consumer, partition_counts
from airflow_kafka_retry.engine.kafka.messages import headers_of, offset_of, partition_of
from airflow_kafka_retry.engine.kafka.scan import ReadError, Scan
from airflow_kafka_retry.policy.client_names import READER_GROUP_PREFIX
from airflow_kafka_retry.policy.dead_letters.families import DeadLetter, Family, describe_dead_letter
from airflow_kafka_retry.policy.dead_letters.fields import dead_letter_fields

if TYPE_CHECKING:
    from confluent_kafka import Message

UNKNOWN = "unknown"
#: How many of the newest records the view describes, per DLT.
SAMPLES = 5


def hour_of(timestamp_ms: int) -> str:
    return datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:00Z")


@dataclass
class DeadLetterCounts:
    """
    Counts of a DLT's records and its newest ones described; ``error`` names a broker problem.

    ``by_exception`` and ``by_hour`` count by :func:`failure_label`; ``by_family`` by dead-letter family;
    ``missing`` how many records lack each field, ``unreadable`` how many had each header unreadable,
    ``not_replayable`` the share-group dead letters without a copied record. ``assume``: the family of
    the topic's records without any family's headers (a topology's ``dead_letter_queues`` entry).
    """

    topic: str
    assume: Family | None = None
    total: int = 0
    by_exception: Counter[str] = field(default_factory=Counter)
    by_hour: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    by_family: Counter[str] = field(default_factory=Counter)
    missing: Counter[str] = field(default_factory=Counter)
    unreadable: Counter[str] = field(default_factory=Counter)
    not_replayable: int = 0
    truncated: bool = False
    error: str | None = None
    _newest: list[tuple[tuple[int, int, int], dict[str, Any]]] = field(default_factory=list, repr=False)

    def add(self, message: Message) -> None:
        """Count one record and keep it among the newest described (no key or value is kept)."""
        timestamp = message.timestamp()[1]
        letter = describe_dead_letter(
            headers_of(message), timestamp, key=message.key(), value=message.value(), assume=self.assume
        )
        label = failure_label(letter)
        self.total += 1
        self.by_exception[label] += 1
        self.by_hour[hour_of(timestamp)][label] += 1
        self.by_family[letter.family] += 1
        self.missing.update(letter.missing)
        self.unreadable.update(name for name, _ in letter.unreadable)
        self.not_replayable += int(not letter.record_copied)
        order = (timestamp, partition_of(message), offset_of(message))  # unique: no tie reaches the dicts
        if len(self._newest) < SAMPLES:
            heapq.heappush(self._newest, (order, _sample(message, letter)))
        elif order > self._newest[0][0]:
            heapq.heapreplace(self._newest, (order, _sample(message, letter)))

    @property
    def samples(self) -> list[dict[str, Any]]:
        """The newest records described, newest first."""
        return [sample for _, sample in sorted(self._newest, key=lambda item: item[0], reverse=True)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "assumed_family": self.assume,
            "total": self.total,
            "truncated": self.truncated,
            "error": self.error,
            "by_exception": dict(self.by_exception.most_common()),
            "by_hour": [
                {"hour": hour, "counts": dict(counts)} for hour, counts in sorted(self.by_hour.items())
            ],
            "by_family": dict(self.by_family.most_common()),
            "missing": dict(self.missing.most_common()),
            "unreadable": dict(self.unreadable.most_common()),
            "not_replayable": self.not_replayable,
            "samples": self.samples,
        }


def failure_label(letter: DeadLetter) -> str:
    """What the view counts a record under: its failure class, else a share group's reason, else unknown."""
    if letter.failure_class:
        return letter.failure_class
    if letter.family == "share-group" and letter.failure_message:
        return f"<share-group: {letter.failure_message}>"
    return UNKNOWN


def _sample(message: Message, letter: DeadLetter) -> dict[str, Any]:
    """A record by its DLT coordinates with what its headers say, bounded; never its key or value."""
    return {
        "partition": partition_of(message),
        "offset": offset_of(message),
        "timestamp_ms": message.timestamp()[1],
        **dead_letter_fields(letter),
    }


def count_dead_letters(
    kafka_config: dict[str, Any],
    topic: str,
    *,
    scan_limit: int = 20_000,
    timeout_s: float = 10.0,
    assume: Family | None = None,
) -> DeadLetterCounts:
    """
    Counts of ``topic``'s records; a broker problem is returned in ``error``, naming the topic.

    :param assume: the family of its records without any family's headers (None: ``unknown``).
    """
    result = DeadLetterCounts(topic, assume=assume)
    try:
        _count(result, kafka_config, scan_limit, timeout_s)
    except (KafkaException, ReadError, ValueError, TimeoutError) as exc:
        result.error = f"{topic}: {exc}"
    return result


def _count(result: DeadLetterCounts, kafka_config: dict[str, Any], scan_limit: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    config = {**kafka_config, "socket.timeout.ms": int(timeout_s * 1000)}
    with open_consumer(config, f"{READER_GROUP_PREFIX}view-{uuid.uuid4().hex[:8]}") as consumer:
        count = partition_counts(consumer, [result.topic], timeout=timeout_s)[result.topic]
        scan = Scan(consumer, {(result.topic, p): -1 for p in range(count)}, deadline=deadline, poll_s=0.2)
        scanned = Counter[int]()
        for message in scan.records():
            result.add(message)
            partition = partition_of(message)
            scanned[partition] += 1
            if scanned[partition] >= scan_limit:
                result.truncated = True
                scan.finish((result.topic, partition))
