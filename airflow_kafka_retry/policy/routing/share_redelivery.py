"""
Back-off retries for a Kafka share group: what its dead letters become, and how a due record goes back.

A topology with ``input: {family: share-group, dlq: ...}`` and ``on_due: redeliver``
(:mod:`.topology.input_lane`) works in rounds. Round 1 is the share consumer's own deliveries of the source
record; when it gives the record up (a REJECT, or a RELEASE past ``share.delivery.count.limit``) the broker
writes a dead letter. The input lane (tier 0) reads it and routes it as a failure of that round
(:class:`ShareGroupRejection`, retryable) through the topology's resolver: into the next tier with its
back-off, or, past ``attempts`` rounds, into the final DLT. When the tier record is due it is redelivered
to its source topic: round n+1, with ``retry_topic-attempts`` = n+1.

The share group's DLQ copies the key and value of a record, never its headers, so the attempt number of a
redelivered record would be lost when it is dead-lettered again. The provider remembers it instead: a
redelivery is logged (:class:`Redelivery`, keyed by the redelivered record's own coordinates) in the same
transaction as the redelivered record, and a dead letter whose ``__dlq.errors.topic/partition/offset`` the
log knows continues from that round. A dead letter the log does not know is round 1.

Where it may write. A dead letter's headers are anyone's input (whoever may write the DLQ or a tier), so
they never choose the target: a redelivery goes back to the dead letter's own source only when the topology
allows it (:class:`RedeliveryTargets`: a topic of ``input.sources``, dead-lettered by ``input.group``). Any
other dead letter or tier record is a :class:`NotRedeliverableError` that names why, and goes to the DLT.
Both the input lane (:func:`dead_letter_round`) and the tier (:func:`redelivery_plan`) check it: a tier
record can be forged as well as a dead letter.

Headers. The input lane puts the first source record's coordinates in front of a dead letter's headers
(:func:`dead_letter_round`): Spring's ``kafka_original-topic/partition/offset`` in the topology's naming and
``retry_topic-original-timestamp`` (the first dead letter's time: the source's own timestamp is lost), so
the tier record carries them as any retried record does. A redelivered record carries those three
original coordinates and the tier record's ``retry_topic-*`` headers (:func:`redelivery_headers`): the
round in ``retry_topic-attempts`` (4-byte int), when it was due in ``retry_topic-backoff-timestamp``.

Pure: no I/O. The engine reads and writes the log (``engine/logs/redelivery_log.py``) and produces.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.policy.dead_letters.decoding import INT32, HeaderReader
from airflow_kafka_retry.policy.dead_letters.families import (
    SHARE_GROUP,
    SHARE_PARTITION,
    SHARE_TOPIC,
    describe_dead_letter,
)
from airflow_kafka_retry.policy.headers.codec import (
    ORIGINAL_TIMESTAMP,
    RETRY_HEADERS,
    HeaderNames,
    encode_big_integer,
    encode_int32,
    encode_int64,
    last_header,
    read_original_coordinates,
)

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.topology.model import Topology

Header = tuple[str, bytes | None]
Coordinates = tuple[str, int, int]  # topic, partition, offset


class ShareGroupRejection(Exception):
    """
    A share consumer gave a record up (rejected it, or released it past the group's delivery limit).

    Retryable by default: the share consumer said nothing of why. List
    ``airflow_kafka_retry.policy.routing.share_redelivery.ShareGroupRejection`` in ``not_retryable`` to send
    every dead letter straight to the DLT.
    """


class NotRedeliverableError(Exception):
    """A record that cannot go back to its source topic: it goes to the DLT, never to a tier."""


@dataclass(frozen=True)
class Redelivery:
    """
    A log entry: a record redelivered to its source topic, on which round, and where it first was.

    :param attempt: the round the redelivered record is (its ``retry_topic-attempts``).
    :param original: the first source record's topic, partition and offset.
    :param first_failed_ms: when it was first dead-lettered (the share group's first dead letter).
    :param due_ms: when the tier record was due (None when it carried no due time).
    """

    attempt: int
    original: Coordinates
    first_failed_ms: int | None = None
    due_ms: int | None = None

    def encode(self) -> bytes:
        topic, partition, offset = self.original
        data: dict[str, Any] = {
            "attempt": self.attempt,
            "original_topic": topic,
            "original_partition": partition,
            "original_offset": offset,
            "first_failed_ms": self.first_failed_ms,
            "due_ms": self.due_ms,
        }
        return json.dumps(data, sort_keys=True, separators=(",", ":")).encode("utf-8")

    @classmethod
    def decode(cls, value: bytes) -> Redelivery:
        """An entry from its log value; a ValueError says what is wrong with it."""
        data = json.loads(value)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        attempt, topic = data.get("attempt"), data.get("original_topic")
        partition, offset = data.get("original_partition"), data.get("original_offset")
        if not (isinstance(attempt, int) and attempt >= 1 and isinstance(topic, str) and topic):
            raise ValueError(f"no attempt >= 1 and original topic in {data!r}")
        if not (isinstance(partition, int) and isinstance(offset, int)):
            raise ValueError(f"no original partition and offset in {data!r}")
        first, due = data.get("first_failed_ms"), data.get("due_ms")
        return cls(
            attempt,
            (topic, partition, offset),
            first if isinstance(first, int) else None,
            due if isinstance(due, int) else None,
        )


def shown(text: str | None, limit: int = 80) -> str:
    """A header's text as an error message shows it: printable, quoted, at most ``limit`` characters."""
    if text is None:
        return "none"
    cut = "".join(c if c.isprintable() else "?" for c in text[:limit])
    return repr(cut) + (f" (cut from {len(text)} characters)" if len(text) > limit else "")


@dataclass(frozen=True)
class RedeliveryTargets:
    """
    Where a topology may redeliver: the source topics it allows, for its own share group's dead letters.

    :param sources: the topics a redelivery may go back to (``input.sources``, default the ``topic``).
    :param group: the share group whose DLQ the topology drains (``input.group``, or from ``dlq.<group>``).
    :param dlq: that DLQ (named in the reasons).
    """

    sources: frozenset[str]
    group: str
    dlq: str

    @classmethod
    def of(cls, topology: Topology) -> RedeliveryTargets:
        """The targets of an ``on_due: redeliver`` topology (its input is a share group's DLQ)."""
        source = topology.input
        group = source.share_group if source is not None else None
        if source is None or group is None:
            raise ValueError(f"{topology.source}: only a share-group input with a known group redelivers")
        return cls(frozenset(source.redelivery_sources(topology.topic)), group, source.dlq)

    def refusal(self, topic: str, group: str | None) -> str | None:
        """Why a dead letter of ``topic`` from share group ``group`` may not go back to it; None: it may."""
        why: list[str] = []
        if topic not in self.sources:
            why.append(
                f"its source topic {shown(topic)} is not one this topology redelivers to (input.sources: "
                f"{', '.join(sorted(self.sources))}): where the provider writes comes from the topology, "
                "never from a header"
            )
        if group != self.group:
            why.append(
                f"it names share group {shown(group)} in {SHARE_GROUP}, not {self.group!r}, whose DLQ "
                f"{self.dlq!r} the topology drains (input.group)"
            )
        return "; ".join(why) or None


def entry_key(coordinates: Coordinates) -> bytes:
    """The log key of a redelivered record: ``<topic>/<partition>/<offset>`` (a topic has no ``/``)."""
    topic, partition, offset = coordinates
    return f"{topic}/{partition}/{offset}".encode()


@dataclass(frozen=True)
class DeadLetterRound:
    """
    What the input lane makes of one share-group dead letter.

    :param attempt: the round that failed (the log's, else 1).
    :param error: what it is routed as: :class:`ShareGroupRejection`, or :class:`NotRedeliverableError`
        for a dead letter that names no source or holds no record.
    :param headers: the dead letter's headers with the original coordinates in front.
    :param logged: the log key that gave the round (the input lane deletes it once routed), or None.
    """

    attempt: int
    error: Exception
    headers: list[Header]
    logged: bytes | None = None


def dead_letter_round(
    headers: Sequence[Header] | None,
    timestamp_ms: int,
    key: bytes | None,
    value: bytes | None,
    names: HeaderNames,
    logged: Callable[[bytes], Redelivery | None],
    *,
    targets: RedeliveryTargets,
) -> DeadLetterRound:
    """
    The round a share-group dead letter failed on, what it is routed as, and the headers it is routed with.

    ``logged(key)`` is the redelivery log's entry for a redelivered record's :func:`entry_key`, if any. A dead
    letter ``targets`` refuses is a :class:`NotRedeliverableError` (round 1, the log not consulted).
    """
    own = list(headers or ())
    letter = describe_dead_letter(own, timestamp_ms, key=key, value=value)
    source = (letter.original_topic, letter.original_partition, letter.original_offset)
    if letter.family != "share-group" or None in source:
        unreadable = "; ".join(f"{k}: {why}" for k, why in letter.unreadable)
        return DeadLetterRound(
            1,
            NotRedeliverableError(
                f"a {letter.family} record, not a share-group dead letter with __dlq.errors.topic, "
                f".partition and .offset{' (' + unreadable + ')' if unreadable else ''}: it names no source "
                "topic to redeliver to"
            ),
            own,
        )
    coordinates: Coordinates = (str(source[0]), int(source[1] or 0), int(source[2] or 0))
    refused = targets.refusal(coordinates[0], letter.group)
    if refused is not None:
        where = f"{shown(coordinates[0])}[{coordinates[1]}]@{coordinates[2]}"
        return DeadLetterRound(
            1,
            NotRedeliverableError(f"the dead letter of {where} cannot be redelivered: {refused}"),
            [*_front(names, coordinates, timestamp_ms), *own],
        )
    entry_at = entry_key(coordinates)
    entry = logged(entry_at)
    original = entry.original if entry is not None else coordinates
    first_ms = entry.first_failed_ms if entry is not None else None
    if first_ms is None:
        first_ms = timestamp_ms
    front = _front(names, original, first_ms)
    attempt = entry.attempt if entry is not None else 1
    logged_key = entry_at if entry is not None else None
    if not letter.record_copied:
        error: Exception = NotRedeliverableError(
            f"the share group's dead letter of {original[0]}[{original[1]}]@{original[2]} holds no record "
            "(errors.deadletterqueue.copy.record.enable is false for the group): nothing to redeliver"
        )
    else:
        count = f" after {letter.delivery_count} deliveries" if letter.delivery_count is not None else ""
        error = ShareGroupRejection(
            f"{letter.failure_message or 'given up by the share consumer'} (share group {letter.group}, "
            f"round {attempt}{count})"
        )
    return DeadLetterRound(attempt, error, [*front, *own], logged_key)


def _front(names: HeaderNames, original: Coordinates, first_ms: int) -> list[Header]:
    """The first source's coordinates and first failure time, in front of a dead letter's own headers."""
    return [
        (names.original_topic, original[0].encode("utf-8")),
        (names.original_partition, encode_int32(original[1])),
        (names.original_offset, encode_int64(original[2])),
        (ORIGINAL_TIMESTAMP, encode_big_integer(first_ms)),
    ]


@dataclass(frozen=True)
class RedeliveryPlan:
    """Where a due tier record goes back to, and the log entry its redelivery writes."""

    topic: str
    partition: int
    entry: Redelivery


def redelivery_plan(
    headers: Sequence[Header] | None,
    attempt: int,
    due_ms: int | None,
    names: HeaderNames,
    *,
    targets: RedeliveryTargets,
) -> RedeliveryPlan | NotRedeliverableError:
    """
    The source topic and partition of a due tier record (its last share-group dead letter's), or why not.

    The partition is the source's; the engine lets the key decide where the source topic has fewer. A
    source ``targets`` refuses (the tier record may be forged too) is a :class:`NotRedeliverableError`.
    """
    own = list(headers or ())
    reader = HeaderReader(own)
    topic = reader.text(SHARE_TOPIC)
    partition = reader.decimal(SHARE_PARTITION, INT32)
    first = read_original_coordinates(own, prefer=names)
    if not topic or partition is None or partition < 0 or first.topic is None:
        unreadable = "; ".join(f"{k}: {why}" for k, why in sorted(reader.unreadable.items()))
        return NotRedeliverableError(
            f"the tier record carries no readable {SHARE_TOPIC} and {SHARE_PARTITION} with its original "
            f"coordinates{' (' + unreadable + ')' if unreadable else ''}: it did not come from a share "
            "group's DLQ through this topology's input, so there is no source to redeliver it to"
        )
    refused = targets.refusal(topic, reader.text(SHARE_GROUP))
    if refused is not None:
        return NotRedeliverableError(
            f"the tier record's {SHARE_TOPIC} {shown(topic)}, partition {partition}, cannot be redelivered "
            f"to: {refused}"
        )
    original: Coordinates = (first.topic, first.partition or 0, first.offset or 0)
    return RedeliveryPlan(
        topic, partition, Redelivery(attempt, original, reader.big_integer(ORIGINAL_TIMESTAMP), due_ms)
    )


def redelivery_headers(headers: Sequence[Header] | None, names: HeaderNames) -> list[Header]:
    """
    The headers of a redelivered record: the first source's coordinates, then the tier record's retry headers.

    ``retry_topic-attempts`` says the round, ``retry_topic-backoff-timestamp`` when it was due and
    ``retry_topic-original-timestamp`` when it was first dead-lettered; the exception and ``__dlq.errors``
    headers stay in the tier.
    """
    own = list(headers or ())
    out: list[Header] = []
    for name in (names.original_topic, names.original_partition, names.original_offset, *RETRY_HEADERS):
        value = last_header(own, name)
        if value is not None:
            out.append((name, value))
    return out
