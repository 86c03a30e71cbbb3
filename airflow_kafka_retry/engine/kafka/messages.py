"""
Typed reads of a message a consumer returned.

confluent-kafka's stubs type :class:`~confluent_kafka.Message` for both sides of the client: ``topic()``,
``partition()`` and ``offset()`` may be None, and ``headers()`` may be a dict or hold ``str`` values, as in
a message built to produce. A consumed message has its coordinates, and librdkafka delivers its headers as
a list of ``(key, bytes | None)`` (or None when it has none): these functions say so once, for the type
checker, and fail clearly where a message breaks that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from confluent_kafka import Message

    from airflow_kafka_retry.policy.headers.codec import Header


def headers_of(message: Message) -> list[Header] | None:
    """The headers of a consumed message as librdkafka delivers them; None when it has none."""
    return cast("list[Header] | None", message.headers())


def topic_of(message: Message) -> str:
    topic = message.topic()
    if topic is None:
        raise ValueError("a consumed message has no topic")
    return topic


def partition_of(message: Message) -> int:
    partition = message.partition()
    if partition is None:
        raise ValueError(f"a consumed message of {message.topic()} has no partition")
    return partition


def offset_of(message: Message) -> int:
    offset = message.offset()
    if offset is None:
        raise ValueError(f"a consumed message of {message.topic()}[{message.partition()}] has no offset")
    return offset
