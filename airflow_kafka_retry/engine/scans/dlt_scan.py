"""
Watching dead-letter topics: read what arrived since the watch group's last commit, summarise, commit.

Two steps, so the caller can act between them (call notifiers) and commit only afterwards:
:func:`scan_new_records` reads every DLT partition from the watch group's committed offset to the
end seen with the first fetch (the engine's one read-to-the-end scan, ``engine/kafka/scan.py``: partition
EOF or the high watermark carried by fetch responses, not ListOffsets) and feeds a
:class:`DltWatchSummary` (counts and capped coordinates, never payloads);
:func:`commit_offsets` then commits where the scan stopped. Reading never commits.

A scan has a time limit. One that reaches it having read records stops there and is *partial*
(:attr:`DltScan.complete` false, :attr:`DltScan.unfinished` the partitions not read to their end):
committing its offsets reports those records once, and the next scan goes on from there, so a backlog
larger than one scan is worked off over several runs instead of being reported again at every run.

The commit carries, as the offsets' metadata, the exception tags the watch's metrics admitted so far
(``observability/metrics.py`` caps them per topology); the scan reads them back (:attr:`DltScan.admitted`).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from airflow_kafka_retry.engine.kafka.clients import (
    KafkaConfigError,
    open_consumer,
    partition_counts,
)
from airflow_kafka_retry.engine.kafka.deadlines import CallStuckError, bounded
from airflow_kafka_retry.engine.kafka.messages import headers_of, offset_of, partition_of, topic_of
from airflow_kafka_retry.engine.kafka.scan import ReadError, ReadTimeout, Scan, committed_offsets, where
from airflow_kafka_retry.policy.dead_letters.families import DeadLetter, Family, describe_dead_letter

#: Seconds a scan may take past its ``timeout_s`` (closing its consumer) before the engine abandons it.
CLOSE_S = 30.0
#: Seconds the engine gives a commit of the watch's offsets.
COMMIT_S = 60.0
#: Seconds between two reads of the committed offsets while the group's coordinator loads or moves.
COMMITTED_RETRY_S = 0.5

TopicPartitionKey = tuple[str, int]
UNKNOWN_EXCEPTION = "<no exception header>"


def failure_tag(letter: DeadLetter) -> str:
    """
    What a dead letter is counted under: its exception class, whatever family wrote it.

    A share-group dead letter names no class, only the broker's reason (one of two fixed texts): it is
    counted as ``<share-group: reason>``; a record naming neither as :data:`UNKNOWN_EXCEPTION`.
    """
    if letter.failure_class:
        return letter.failure_class
    if letter.family == "share-group" and letter.failure_message:
        return f"<share-group: {letter.failure_message}>"
    return UNKNOWN_EXCEPTION


class DltWatchError(RuntimeError):
    """A DLT could not be read or the watch group not committed; the message names topic and partition."""


@dataclass
class DltWatchSummary:
    """
    New DLT records, counted per exception class (:func:`failure_tag`), cause class, family and DLT topic.

    Every dead-letter family is read (:mod:`~airflow_kafka_retry.policy.dead_letters.families`).
    ``dead_letters`` entries use the run summary's field names: ``topic``/``partition``/``offset`` is
    where the record failed before it was dead-lettered (from the headers of the family that wrote it;
    None when it carries none), ``dlt_topic``/``dlt_partition``/``dlt_offset`` where it sits now, plus the
    family, group or connector, failure message and delivery count (None where the record does not give
    it: ``missing`` counts the records lacking each field, as ``dlt inspect`` names them).

    :param assume: per DLT topic, the family of its records that carry no family header (a topology's
        ``dead_letter_queues`` entry with ``family``: a Connect DLQ without context headers, Airflow's).
    """

    group: str
    coordinate_cap: int = 100
    assume: dict[str, Family] = field(default_factory=dict)
    records: int = 0
    dead_lettered: Counter[str] = field(default_factory=Counter)  # exception class -> records
    causes: Counter[str] = field(default_factory=Counter)  # cause class -> records (where a cause is named)
    dlt_topics: Counter[str] = field(default_factory=Counter)  # DLT topic -> records
    families: Counter[str] = field(default_factory=Counter)  # dead-letter family -> records
    # (DLT topic, family, exception): what the metrics count (the family is one of six)
    by_topic_family_exception: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    unreadable: Counter[str] = field(default_factory=Counter)  # header name -> records it was unreadable in
    missing: Counter[str] = field(default_factory=Counter)  # field (dead_letter_families.FIELDS) -> records
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    dead_letters_truncated: int = 0

    def add(self, message: Message) -> None:
        # from the headers and the timestamp (when it failed, or was produced): never the payload
        topic = topic_of(message)
        letter = describe_dead_letter(
            headers_of(message), message.timestamp()[1], assume=self.assume.get(topic)
        )
        exception, cause = failure_tag(letter), letter.failure_cause
        self.records += 1
        self.families[letter.family] += 1
        for name, _ in letter.unreadable:
            self.unreadable[name] += 1
        self.missing.update(letter.missing)
        self.dead_lettered[exception] += 1
        if cause:
            self.causes[cause] += 1
        self.dlt_topics[topic] += 1
        self.by_topic_family_exception[(topic, letter.family, exception)] += 1
        if len(self.dead_letters) >= self.coordinate_cap:
            self.dead_letters_truncated += 1
            return
        self.dead_letters.append(
            {
                "topic": letter.original_topic,
                "partition": letter.original_partition,
                "offset": letter.original_offset,
                "exception": exception,
                "cause": cause,
                "consumer_group": letter.group,
                "family": letter.family,
                "connector": letter.connector,
                "failure_message": letter.failure_message,
                "delivery_count": letter.delivery_count,
                "dlt_topic": message.topic(),
                "dlt_partition": message.partition(),
                "dlt_offset": message.offset(),
            }
        )

    def totals(self) -> dict[str, Any]:
        return {
            "new_records": self.records,
            "dead_lettered": dict(sorted(self.dead_lettered.items())),
            "causes": dict(sorted(self.causes.items())),
            "dlt_topics": dict(sorted(self.dlt_topics.items())),
            "families": dict(sorted(self.families.items())),
            "dlt_topic_families": topic_families(self.by_topic_family_exception),
            "missing": dict(sorted(self.missing.items())),
            "unreadable_headers": dict(sorted(self.unreadable.items())),
        }


def topic_families(counts: Mapping[tuple[str, str, str], int]) -> dict[str, dict[str, int]]:
    """``{DLT topic: {family: records}}`` from the ``(topic, family, exception)`` counts."""
    found: dict[str, Counter[str]] = {}
    for (topic, family, _), n in counts.items():
        found.setdefault(topic, Counter())[family] += n
    return {topic: dict(sorted(found[topic].items())) for topic in sorted(found)}


@dataclass(frozen=True)
class DltScan:
    """Where the scan started and stopped per partition (next offsets to commit where it read anything)."""

    group: str
    start_offsets: dict[TopicPartitionKey, int]  # committed before the scan; negative: nothing committed
    next_offsets: dict[TopicPartitionKey, int]  # only partitions where records were read
    admitted: frozenset[str] = frozenset()  # exception tags earlier watches admitted (commit metadata)
    unfinished: tuple[TopicPartitionKey, ...] = ()  # not read to their end before the time limit

    @property
    def complete(self) -> bool:
        """Every partition was read to the end seen when the scan began."""
        return not self.unfinished

    def ranges(self) -> dict[str, dict[str, int | None]]:
        return {
            f"{t}[{p}]": {"from": start if start >= 0 else None, "to": self.next_offsets.get((t, p))}
            for (t, p), start in sorted(self.start_offsets.items())
        }


def _committed(
    consumer: Consumer, keys: list[TopicPartitionKey], deadline: float
) -> tuple[dict[TopicPartitionKey, int], frozenset[str]]:
    """
    The watch group's committed offsets and admitted tags.

    Asked again until ``deadline`` (monotonic) while the group's coordinator loads or moves (a rolling
    restart: ``NOT_COORDINATOR``); any other error, or the deadline, raises a :class:`DltWatchError`.
    """
    try:
        found = committed_offsets(
            consumer, keys, deadline - time.monotonic(), retry_s=COMMITTED_RETRY_S, clock=time.monotonic
        )
    except ReadError as exc:
        raise DltWatchError(str(exc)) from exc.__cause__
    offsets = {}
    admitted: set[str] = set()
    for tp in found:
        offsets[(tp.topic, tp.partition)] = tp.offset
        admitted |= _tags(tp.metadata)
    return offsets, frozenset(admitted)


def _tags(metadata: str | None) -> set[str]:
    try:
        data = json.loads(metadata or "{}")
    except ValueError:
        return set()
    tags = data.get("tags") if isinstance(data, dict) else None
    return {t for t in tags if isinstance(t, str)} if isinstance(tags, list) else set()


def scan_new_records(
    kafka_config: Mapping[str, Any],
    topics: Sequence[str],
    group: str,
    summary: DltWatchSummary,
    *,
    timeout_s: float = 120.0,
    poll_timeout_s: float = 0.5,
) -> DltScan:
    """
    Read every record of ``topics`` after ``group``'s committed offsets into ``summary``; commit nothing.

    Records appended after a partition's first fetch are left for the next scan. A scan that reaches
    ``timeout_s`` stops: having read records, it returns a partial scan (``unfinished`` names the
    partitions it did not read to their end; commit its offsets and the next scan goes on from there);
    having read none, it raises a :class:`DltWatchError` naming the partitions that did not answer.
    The engine holds the whole scan to ``timeout_s`` plus the close of its consumer (``CLOSE_S``), whatever
    a client call does when a broker dies (a :class:`DltWatchError` then names the topics).
    """

    def scan() -> DltScan:
        return _scan(kafka_config, topics, group, summary, timeout_s, poll_timeout_s)

    try:
        return bounded(scan, seconds=timeout_s + CLOSE_S, what=f"the scan of {', '.join(topics)}")
    except CallStuckError as exc:
        raise DltWatchError(f"{exc}; nothing was committed, the next run scans again") from exc


def _scan(
    kafka_config: Mapping[str, Any],
    topics: Sequence[str],
    group: str,
    summary: DltWatchSummary,
    timeout_s: float,
    poll_timeout_s: float,
) -> DltScan:
    deadline = time.monotonic() + timeout_s
    with open_consumer(kafka_config, group) as consumer:
        try:
            counts = partition_counts(consumer, list(topics), timeout=max(0.1, deadline - time.monotonic()))
        except KafkaConfigError as exc:
            raise DltWatchError(str(exc)) from exc
        keys = [(t, p) for t in topics for p in range(counts[t])]
        start, admitted = _committed(consumer, keys, deadline)
        scan = Scan(consumer, start, deadline=deadline, poll_s=poll_timeout_s, clock=time.monotonic)
        try:
            next_offsets = _read_to_end(scan, summary)
        finally:
            scan.close()
    return DltScan(group, start, next_offsets, admitted, tuple(sorted(scan.open)))


def _read_to_end(scan: Scan, summary: DltWatchSummary) -> dict[TopicPartitionKey, int]:
    """Each partition's records into ``summary``; the next offset of each partition read from."""
    next_offsets: dict[TopicPartitionKey, int] = {}
    try:
        for message in scan.records():
            summary.add(message)
            next_offsets[(topic_of(message), partition_of(message))] = offset_of(message) + 1
    except ReadError as exc:  # a timeout having read records is a partial scan: the rest is for the next one
        if not isinstance(exc, ReadTimeout) or not next_offsets:
            raise DltWatchError(f"{exc}; nothing was committed") from None
    return next_offsets


def commit_offsets(
    kafka_config: Mapping[str, Any],
    group: str,
    offsets: Mapping[TopicPartitionKey, int],
    tags: Collection[str] = (),
) -> None:
    """
    Commit ``(topic, partition) -> next offset`` for ``group``; a DltWatchError names what failed.

    The admitted exception ``tags`` go with it as the offsets' metadata.
    """
    if not offsets:
        return
    try:  # a synchronous commit has no timeout of its own: a dead group coordinator could hold it for ever
        bounded(
            lambda: _commit(kafka_config, group, offsets, tags),
            seconds=COMMIT_S,
            what=f"the commit of group {group!r} ({where(list(offsets))})",
        )
    except CallStuckError as exc:
        raise DltWatchError(f"{exc}; the next run reports these records again") from exc


def _commit(
    kafka_config: Mapping[str, Any],
    group: str,
    offsets: Mapping[TopicPartitionKey, int],
    tags: Collection[str],
) -> None:
    metadata = json.dumps({"tags": sorted(tags)}, separators=(",", ":"))
    with open_consumer(kafka_config, group) as consumer:
        try:
            result = consumer.commit(
                offsets=[TopicPartition(t, p, o, metadata=metadata) for (t, p), o in sorted(offsets.items())],
                asynchronous=False,
            )
        except KafkaException as exc:
            raise DltWatchError(f"{where(list(offsets))}: cannot commit group {group!r}: {exc}") from exc
        failed = [tp for tp in result or () if tp.error is not None]
        if failed:
            raise DltWatchError(
                "; ".join(
                    f"{tp.topic}[{tp.partition}]: cannot commit group {group!r}: {tp.error}" for tp in failed
                )
            )
