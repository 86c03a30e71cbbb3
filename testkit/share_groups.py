"""
Kafka share groups with a dead-letter queue (KIP-1191) for tests: the broker, the group's configs, a consumer.

The test suite's broker is Apache Kafka 4.1.2 (``kafka_jars/pom.xml``), whose share groups have no
dead-letter queue. :func:`share_dlq_kafka` is a second, pinned broker: :data:`SHARE_DLQ_KAFKA_VERSION`
from the same pom, resolved the same way (once, cached outside git), formatted with
``--feature share.version=2``, and allowed to create a group's DLQ topic itself
(``errors.deadletterqueue.auto.create.topics.enable``). Its DLQ topics need the broker's prefix
``errors.deadletterqueue.topic.name.prefix`` (``dlq.`` by default).

:func:`set_group_configs` sets a group's configs (``share.auto.offset.reset``,
``errors.deadletterqueue.topic.name``, ``errors.deadletterqueue.copy.record.enable``,
``share.delivery.count.limit``) through ``AdminClient.incremental_alter_configs`` on the GROUP resource.
:func:`acknowledge_records` runs a real ``confluent_kafka.ShareConsumer`` in explicit acknowledgement mode
that answers each delivery as a callback decides (ACCEPT, RELEASE, REJECT) until every record has had a
final answer, within a deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.sandbox.kafka import QUICK_JIT, ApacheKafka
from airflow_kafka_retry.sandbox.scratch_topics import CLIENT_LOGGER, admin_client

if TYPE_CHECKING:
    from confluent_kafka import AcknowledgeType, Message

#: The broker with share-group dead-letter queues; only the tests that need one run it.
SHARE_DLQ_KAFKA_VERSION = "4.4.0"
#: Finalized when its storage is formatted: ``share.version=2`` turns the share-group DLQ on.
SHARE_DLQ_FEATURES = ("share.version=2",)
#: The broker's default ``errors.deadletterqueue.topic.name.prefix``: a group's DLQ topic starts with it.
DLQ_PREFIX = "dlq."


def share_dlq_kafka(**kwargs: Any) -> ApacheKafka:
    """An (unstarted) single-node Apache Kafka 4.4 whose share groups can dead-letter records."""
    overrides = {"errors.deadletterqueue.auto.create.topics.enable": "true", **kwargs.pop("overrides", {})}
    kwargs.setdefault("jvm_options", QUICK_JIT)
    return ApacheKafka(
        version=SHARE_DLQ_KAFKA_VERSION, features=SHARE_DLQ_FEATURES, overrides=overrides, **kwargs
    )


def set_group_configs(
    bootstrap: str, group: str, configs: Mapping[str, str], *, timeout: float = 30.0
) -> None:
    """SET each of ``configs`` on share group ``group`` (the GROUP config resource)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entries = [
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in configs.items()
    ]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    admin = admin_client(bootstrap)
    for future in admin.incremental_alter_configs([resource], request_timeout=timeout).values():
        future.result(timeout)


def acknowledge_records(
    bootstrap: str,
    group: str,
    topics: Sequence[str],
    decide: Callable[[Message, int], AcknowledgeType],
    *,
    final: Iterable[tuple[str, int, int]],
    delivery_limit: int = 5,
    timeout: float = 60.0,
) -> dict[tuple[str, int, int], int]:
    """
    Answer every delivery to share group ``group`` as ``decide(message, delivery)`` says, until done.

    ``delivery`` counts from 1 for each record (the broker's delivery count as this consumer saw it).
    Done when every record in ``final`` (``(topic, partition, offset)``) has had a final answer: ACCEPT,
    REJECT, or a RELEASE on its ``delivery_limit``-th delivery (the group's ``share.delivery.count.limit``,
    after which the broker delivers it no more). Returns how often each record was delivered. Raises
    ``TimeoutError`` naming the records still waiting when ``timeout`` passes.
    """
    from confluent_kafka import AcknowledgeType, ShareConsumer

    waiting = set(final)
    deliveries: dict[tuple[str, int, int], int] = {}
    consumer = ShareConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "logger": CLIENT_LOGGER,
        }
    )
    deadline = time.monotonic() + timeout
    try:
        consumer.subscribe(list(topics))
        while waiting:
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"share group {group!r}: no final acknowledgement within {timeout:.0f}s for "
                    f"{sorted(waiting)} (deliveries so far {deliveries})"
                )
            for message in consumer.poll(1.0):
                if message.error() is not None:
                    raise RuntimeError(f"share group {group!r}: {message.error()}")
                key = (str(message.topic()), int(message.partition() or 0), int(message.offset() or 0))
                deliveries[key] = deliveries.get(key, 0) + 1
                answer = decide(message, deliveries[key])
                consumer.acknowledge(message, answer)
                if answer != AcknowledgeType.RELEASE or deliveries[key] >= delivery_limit:
                    waiting.discard(key)
            results = consumer.commit_sync(max(1.0, deadline - time.monotonic()))
            failed = {str(tp): error for tp, error in results.items() if error is not None}
            if failed:
                raise RuntimeError(f"share group {group!r}: acknowledgements failed: {failed}")
        return deliveries
    finally:
        consumer.close()
