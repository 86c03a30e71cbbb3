"""
Real share-group dead letters (KIP-1191) from Apache Kafka 4.4, read back: exactly what the broker writes.

A real ``confluent_kafka.ShareConsumer`` (explicit acknowledgement) rejects some records and releases one
until the group's delivery limit; the broker (``ShareGroupDLQStateManager``) writes them to the group's
DLQ topic. The assertions are the ground truth for decoding this family (``policy/dead_letters/families``)
and docs/dead-letter-sources.md: which headers, in which order, in which encoding, and what of the source
record is kept, with ``errors.deadletterqueue.copy.record.enable`` on and off.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, AcknowledgeType, Producer
from confluent_kafka.admin import ConfigResource, ResourceType

from airflow_kafka_retry.sandbox.scratch_topics import CLIENT_LOGGER, admin_client, create_topics
from testkit.share_groups import DLQ_PREFIX, acknowledge_records, set_group_configs

from tests.support.dead_letter_fixtures import read_exactly, unique_name

if TYPE_CHECKING:
    from confluent_kafka import Message

    from airflow_kafka_retry.sandbox.kafka import ApacheKafka

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: The broker's headers on every share-group dead letter, in the order it writes them.
SHARE_DLQ_HEADERS = [
    "__dlq.errors.topic",
    "__dlq.errors.partition",
    "__dlq.errors.offset",
    "__dlq.errors.group",
    "__dlq.errors.delivery.count",
    "__dlq.errors.message",
]
REJECTED = b"Offset rejected by client."
EXCEEDED = b"Offset delivery count exceeded the threshold."
SOURCE_TIMESTAMP = 1_600_000_000_000  # 2020: far from the time a dead letter is written


def _produce(bootstrap: str, topic: str, count: int, partitions: int) -> dict[bytes, tuple[int, int]]:
    """Records ``v0``.. (key ``k<i>``, partition ``i % partitions``, own headers, an old timestamp)."""
    placed: dict[bytes, tuple[int, int]] = {}

    def delivered(err: object, msg: Message) -> None:
        assert err is None, err
        placed[bytes(msg.value() or b"")] = (int(msg.partition() or 0), int(msg.offset() or 0))

    producer = Producer({"bootstrap.servers": bootstrap, "logger": CLIENT_LOGGER})
    for i in range(count):
        producer.produce(
            topic,
            key=f"k{i}".encode(),
            value=f"v{i}".encode(),
            partition=i % partitions,
            timestamp=SOURCE_TIMESTAMP + i,
            headers=[("trace-id", f"t{i}".encode()), ("bin", i.to_bytes(4, "big"))],
            on_delivery=delivered,
        )
    assert producer.flush(30) == 0
    assert len(placed) == count
    return placed


def _group(bootstrap: str, *, copy_record: bool, limit: int = 5) -> tuple[str, str]:
    group = unique_name("share")
    dlq = DLQ_PREFIX + group
    set_group_configs(
        bootstrap,
        group,
        {
            "share.auto.offset.reset": "earliest",
            "errors.deadletterqueue.topic.name": dlq,
            "errors.deadletterqueue.copy.record.enable": str(copy_record).lower(),
            "share.delivery.count.limit": str(limit),
        },
    )
    return group, dlq


def _topic_configs(bootstrap: str, topic: str, *names: str) -> dict[str, str | None]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    admin = admin_client(bootstrap)  # kept until the answer: a dropped client ends its requests
    (future,) = admin.describe_configs([resource], request_timeout=15).values()
    found = future.result(15)
    return {name: found[name].value for name in names}


def _by_source(records: list[Message]) -> dict[tuple[str, int, int], Message]:
    out = {}
    for record in records:
        headers = dict(record.headers() or [])
        coordinates = (
            headers["__dlq.errors.topic"].decode(),
            int(headers["__dlq.errors.partition"]),
            int(headers["__dlq.errors.offset"]),
        )
        assert coordinates not in out, f"two dead letters for {coordinates}"
        out[coordinates] = record
    return out


def test_rejected_and_exhausted_records_with_copies(share_dlq_kafka: ApacheKafka) -> None:
    """copy.record on: key and value copied; six headers in decimal text; no source header, timestamp new."""
    bootstrap = share_dlq_kafka.bootstrap
    source = create_topics(bootstrap, [unique_name("orders")], partitions=2)[0]
    placed = _produce(bootstrap, source, 6, partitions=2)
    group, dlq = _group(bootstrap, copy_record=True, limit=2)
    rejected = {b"v0", b"v1"}  # one on each partition
    released = b"v2"  # released on every delivery: the broker gives up after the limit (2)

    def decide(message: Message, delivery: int) -> AcknowledgeType:
        value = message.value()
        if value in rejected:
            return AcknowledgeType.REJECT
        return AcknowledgeType.RELEASE if value == released else AcknowledgeType.ACCEPT

    before_ms = int(time.time() * 1000)
    deliveries = acknowledge_records(
        bootstrap,
        group,
        [source],
        decide,
        final=[(source, *coordinates) for coordinates in placed.values()],
        delivery_limit=2,
    )
    assert deliveries[(source, *placed[released])] == 2, "the released record is delivered up to the limit"

    letters = _by_source(read_exactly(bootstrap, dlq, 3))
    expected = {
        (source, *placed[b"v0"]): (b"v0", b"1", REJECTED),
        (source, *placed[b"v1"]): (b"v1", b"1", REJECTED),
        (source, *placed[released]): (released, b"2", EXCEEDED),
    }
    assert set(letters) == set(expected)
    for (topic, partition, offset), (value, delivery_count, message) in expected.items():
        letter = letters[(topic, partition, offset)]
        headers = letter.headers() or []
        assert [name for name, _ in headers] == SHARE_DLQ_HEADERS, "exactly the broker's six, in order"
        assert dict(headers) == {
            "__dlq.errors.topic": topic.encode(),
            "__dlq.errors.partition": str(partition).encode(),  # decimal text, not a big-endian int
            "__dlq.errors.offset": str(offset).encode(),
            "__dlq.errors.group": group.encode(),
            "__dlq.errors.delivery.count": delivery_count,
            "__dlq.errors.message": message,
        }
        assert letter.value() == value
        assert letter.key() == b"k" + value[1:], "the source key is copied"
        kind, timestamp = letter.timestamp()
        assert kind == TIMESTAMP_CREATE_TIME
        assert timestamp >= before_ms, "the timestamp is the dead letter's write time, not the source's"
    assert _topic_configs(
        bootstrap, dlq, "errors.deadletterqueue.group.enable", "message.timestamp.type"
    ) == {
        "errors.deadletterqueue.group.enable": "true",
        "message.timestamp.type": "CreateTime",
    }, "the DLQ topic the broker created says it is one"


def test_without_copies_only_the_headers_are_written(share_dlq_kafka: ApacheKafka) -> None:
    """copy.record off: no key, no value; the same headers. A DLQ of 2 partitions: source partition mod 2."""
    bootstrap = share_dlq_kafka.bootstrap
    source = create_topics(bootstrap, [unique_name("orders")], partitions=2)[0]
    placed = _produce(bootstrap, source, 2, partitions=2)
    group, dlq = _group(bootstrap, copy_record=False)
    # an existing DLQ topic must say it is one: errors.deadletterqueue.group.enable=true
    create_topics(bootstrap, [dlq], partitions=2, config={"errors.deadletterqueue.group.enable": "true"})

    acknowledge_records(
        bootstrap,
        group,
        [source],
        lambda message, delivery: AcknowledgeType.REJECT,
        final=[(source, *coordinates) for coordinates in placed.values()],
    )

    letters = _by_source(read_exactly(bootstrap, dlq, 2))
    assert set(letters) == {(source, *coordinates) for coordinates in placed.values()}
    for (_, partition, offset), letter in letters.items():
        assert [name for name, _ in letter.headers() or []] == SHARE_DLQ_HEADERS
        assert dict(letter.headers() or [])["__dlq.errors.offset"] == str(offset).encode()
        assert letter.key() is None
        assert letter.value() is None, "without copy.record the DLQ holds metadata only"
        assert letter.partition() == partition % 2
