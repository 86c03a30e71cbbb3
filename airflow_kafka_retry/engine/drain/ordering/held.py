"""
A held copy read back from ``<topic>-hold`` as the main-topic record it stands for.

Handled or routed, a held record must name its original coordinates (routing headers say where it failed
first), and carry the headers it came with, without the engine's ``kafka_retry-order`` header.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from airflow_kafka_retry.engine.kafka.messages import headers_of
from airflow_kafka_retry.policy.ordering.entries import ORDER_HEADER

if TYPE_CHECKING:
    from confluent_kafka import Message

    from airflow_kafka_retry.policy.headers.codec import Header


def own_headers(headers: list[Header] | None) -> list[Header] | None:
    """``headers`` without the engine's order header (None when nothing is left)."""
    kept = [h for h in headers or () if h[0] != ORDER_HEADER]
    return kept or None


class HeldMessage:
    """The held copy ``copy`` (of ``<topic>-hold``) shown as ``topic[partition]@offset`` of the main topic."""

    def __init__(self, copy: Message, topic: str, partition: int, offset: int) -> None:
        self._copy = copy
        self._topic, self._partition, self._offset = topic, partition, offset
        self._headers = own_headers(headers_of(copy))

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._copy.key()

    def value(self) -> bytes | None:
        return self._copy.value()

    def headers(self) -> list[Header] | None:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return self._copy.timestamp()

    def error(self) -> None:
        return None

    def as_message(self) -> Message:
        """This wrapper, typed as the consumed message it stands for."""
        return cast("Message", self)
