"""The record a user handler sees."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_kafka_retry.policy.headers import Header


@dataclass(frozen=True)
class TierRecord:
    """One due record handed to the user's handler.

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
