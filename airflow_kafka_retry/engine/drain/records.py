"""The record a user handler sees."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.headers.codec import Header


@dataclass(frozen=True)
class TierRecord:
    """
    One due record handed to the user's handler.

    :param key: the raw key bytes (or the decoded key when a key deserializer is configured).
    :param value: the value: raw bytes, or what the value deserializer returned.
    :param headers: all record headers, in order, as ``(name, bytes | None)`` pairs.
    :param attempt: the delivery attempt this is (1 on the main topic; Spring's ``retry_topic-attempts``).
    :param due_ms: when it became due (``retry_topic-backoff-timestamp``), None on the main topic.
    """

    key: Any
    value: Any
    headers: tuple[Header, ...]
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    timestamp_type: int
    attempt: int
    due_ms: int | None = None
    raw_key: bytes | None = None
    raw_value: bytes | None = None

    @property
    def coordinates(self) -> str:
        """``topic[partition]@offset``, for messages and summaries (never the payload)."""
        return f"{self.topic}[{self.partition}]@{self.offset}"


_new = object.__new__
_set_attribute = object.__setattr__


def make_record(
    key: Any,
    value: Any,
    headers: tuple[Header, ...],
    topic: str,
    partition: int,
    offset: int,
    timestamp_ms: int,
    timestamp_type: int,
    attempt: int,
    due_ms: int | None,
    raw_key: bytes | None,
    raw_value: bytes | None,
) -> TierRecord:
    """
    ``TierRecord(...)`` built for the drain's hot path: equal to what the constructor returns.

    A frozen dataclass's ``__init__`` pays one ``object.__setattr__`` per field; this sets the
    instance dictionary at once (TierRecord has no ``__post_init__`` and no slots).
    """
    record = _new(TierRecord)
    _set_attribute(
        record,
        "__dict__",
        {
            "key": key,
            "value": value,
            "headers": headers,
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "timestamp_ms": timestamp_ms,
            "timestamp_type": timestamp_type,
            "attempt": attempt,
            "due_ms": due_ms,
            "raw_key": raw_key,
            "raw_value": raw_value,
        },
    )
    return record


def record_from_message(
    message: Any, headers: list[Header] | None, attempt: int, due_ms: int | None, topic: str, partition: int
) -> TierRecord:
    """The record of a message consumed from ``topic[partition]`` when no deserializer is configured."""
    key, value = message.key(), message.value()
    timestamp_type, timestamp_ms = message.timestamp()
    record = _new(TierRecord)
    _set_attribute(
        record,
        "__dict__",
        {
            "key": key,
            "value": value,
            "headers": tuple(headers) if headers else (),
            "topic": topic,
            "partition": partition,
            "offset": message.offset(),
            "timestamp_ms": timestamp_ms,
            "timestamp_type": timestamp_type,
            "attempt": attempt,
            "due_ms": due_ms,
            "raw_key": key,
            "raw_value": value,
        },
    )
    return record
