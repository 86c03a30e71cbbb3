"""
A record read from a DLT, a DLQ or the parking topic, and what its headers say about the failure.

Every dead-letter family is read (:mod:`~airflow_kafka_retry.policy.dead_letters.families`): both of
Spring's spellings (``kafka_original-*`` / ``kafka_exception-*`` of non-blocking retries and this
provider, ``kafka_dlt-*`` of a plain ``DeadLetterPublishingRecoverer``), Kafka Connect's
``__connect.errors.*`` and the share group's ``__dlq.errors.*``, so filters and targets work the same
for all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from airflow_kafka_retry.engine.kafka.messages import headers_of, offset_of, partition_of, topic_of
from airflow_kafka_retry.policy.dead_letters.families import DeadLetter, Family, describe_dead_letter
from airflow_kafka_retry.policy.headers.codec import Header, OriginalCoordinates
from airflow_kafka_retry.policy.headers.replay import ReplayAudit, read_replay_audit

if TYPE_CHECKING:
    from confluent_kafka import Message


@dataclass(frozen=True)
class DltRecord:
    """
    One dead-lettered record, as a replay transform gets it.

    A transform returns it edited with ``dataclasses.replace(record, value=..., key=..., headers=...)``
    (``key``/``value`` bytes or None, ``headers`` a sequence of ``(str, bytes | None)``), or None to
    leave it out of the replay. ``topic``, ``partition``, ``offset`` and ``timestamp_ms`` are the
    record's DLT coordinates and cannot be changed. ``queue_family`` is what the topology's
    ``dead_letter_queues`` entry says the records of this queue without any family's headers are.
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    queue_family: Family | None = None

    @classmethod
    def from_message(cls, message: Message, *, queue_family: Family | None = None) -> DltRecord:
        return cls(
            queue_family=queue_family,
            topic=topic_of(message),
            partition=partition_of(message),
            offset=offset_of(message),
            timestamp_ms=message.timestamp()[1],
            key=message.key(),
            value=message.value(),
            headers=tuple(headers_of(message) or ()),
        )

    @property
    def coordinates(self) -> str:
        """``topic[partition]@offset``, for messages and summaries (never the payload)."""
        return f"{self.topic}[{self.partition}]@{self.offset}"

    def describe(self, assume: Family | None = None) -> DeadLetter:
        """
        What the record's headers say, whatever family wrote them.

        :param assume: the family of a record whose headers name none (see ``describe_dead_letter``).
        """
        return describe_dead_letter(
            self.headers, self.timestamp_ms, key=self.key, value=self.value, assume=assume
        )

    @cached_property
    def dead_letter(self) -> DeadLetter:
        """:meth:`describe` with the family detected from the headers, else the queue's family."""
        return self.describe(self.queue_family)

    @property
    def exception(self) -> str | None:
        """Class of the failure (Spring: value exception, else key exception; Connect's), any family."""
        return self.dead_letter.failure_class

    @property
    def exception_cause(self) -> str | None:
        """Class of the failure's cause (Spring wraps listener errors: the cause is the real one)."""
        return self.dead_letter.failure_cause

    @cached_property
    def original(self) -> OriginalCoordinates:
        """Where the record failed before it was dead-lettered, from the family that wrote it."""
        d = self.dead_letter
        return OriginalCoordinates(
            d.original_topic,
            d.original_partition,
            d.original_offset,
            d.original_timestamp_ms,
            d.original_timestamp_type,
            d.group,
        )

    @cached_property
    def replay(self) -> ReplayAudit | None:
        """The replay that produced this record, when a replayed record failed again (parking)."""
        return read_replay_audit(self.headers)
