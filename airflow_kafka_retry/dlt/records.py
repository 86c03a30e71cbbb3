"""
A record read from a DLT (or parking topic), and what its headers say about the failure.

Both of Spring's header families are read (``kafka_exception-*`` / ``kafka_original-*`` written by
non-blocking retries, ``kafka_dlt-exception-*`` / ``kafka_dlt-original-*`` written by a plain
``DeadLetterPublishingRecoverer``), so a DLT filled by a Spring service is read the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from airflow_kafka_retry.engine.consumed import headers_of, offset_of, partition_of, topic_of
from airflow_kafka_retry.policy.headers import (
    HEADER_NAMES,
    Header,
    OriginalCoordinates,
    last_header,
    read_original_coordinates,
)
from airflow_kafka_retry.policy.replay_headers import ReplayAudit, read_replay_audit

if TYPE_CHECKING:
    from confluent_kafka import Message


def _first_text(headers: tuple[Header, ...], field: str) -> str | None:
    for names in HEADER_NAMES.values():
        value = last_header(headers, getattr(names, field))
        if value is not None:
            return value.decode("utf-8", errors="replace")
    return None


@dataclass(frozen=True)
class DltRecord:
    """
    One dead-lettered record, as a replay transform gets it.

    A transform returns it edited with ``dataclasses.replace(record, value=..., key=..., headers=...)``
    (``key``/``value`` bytes or None, ``headers`` a sequence of ``(str, bytes | None)``), or None to
    leave it out of the replay. ``topic``, ``partition``, ``offset`` and ``timestamp_ms`` are the
    record's DLT coordinates and cannot be changed.
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()

    @classmethod
    def from_message(cls, message: Message) -> DltRecord:
        return cls(
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

    @cached_property
    def exception(self) -> str | None:
        """Class of the failure (value exception, else key exception), from either header family."""
        return _first_text(self.headers, "exception_fqcn") or _first_text(self.headers, "key_exception_fqcn")

    @cached_property
    def exception_cause(self) -> str | None:
        """Class of the failure's cause (Spring wraps listener errors: the cause is the real one)."""
        return _first_text(self.headers, "exception_cause_fqcn")

    @cached_property
    def original(self) -> OriginalCoordinates:
        """Where the record first failed (either header family)."""
        return read_original_coordinates(self.headers)

    @cached_property
    def replay(self) -> ReplayAudit | None:
        """The replay that produced this record, when a replayed record failed again (parking)."""
        return read_replay_audit(self.headers)
