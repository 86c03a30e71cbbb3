"""Putting records with due headers on a tier and committing a group's offsets, for the due-check tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from confluent_kafka import Consumer, Producer, TopicPartition

from airflow_kafka_retry.policy.headers import codec as H


def produce(
    bootstrap: str,
    topic: str,
    records: Sequence[tuple[int, int | None]],
    extra_headers: Sequence[tuple[str, bytes]] = (),
) -> list[int]:
    """Produce one record per ``(partition, due_ms)`` (``None``: no due header); returns their offsets."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    offsets: dict[int, int] = {}

    def delivered(err, msg):
        assert err is None, err
        offsets[len(offsets)] = msg.offset()

    for i, (partition, due_ms) in enumerate(records):
        headers = list(extra_headers)
        if due_ms is not None:
            headers += [(H.ATTEMPTS, H.encode_int32(2)), (H.BACKOFF_TIMESTAMP, H.encode_big_integer(due_ms))]
        producer.produce(
            topic,
            value=f"secret-payload-{i}".encode(),
            key=str(i).encode(),
            partition=partition,
            headers=headers,
            on_delivery=delivered,
        )
        producer.flush(30)  # one at a time: offsets come back in order
    assert producer.flush(30) == 0
    return [offsets[i] for i in range(len(records))]


def commit(bootstrap: str, group: str, topic: str, offsets: Mapping[int, int]) -> None:
    """Commit ``partition -> next offset`` for ``group`` (no member joins the group)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()
