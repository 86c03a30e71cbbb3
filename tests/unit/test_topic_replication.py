"""A topic one broker's loss would stop is named when the topology's topics are ensured or shown."""

from __future__ import annotations

from types import SimpleNamespace

from airflow_kafka_retry.engine.kafka.topic_replication import replication_warnings


def _metadata(brokers: int, replicas: dict[str, int]) -> SimpleNamespace:
    def topic(count: int) -> SimpleNamespace:
        parts = {p: SimpleNamespace(replicas=list(range(count))) for p in range(3)}
        return SimpleNamespace(error=None, partitions=parts)

    return SimpleNamespace(
        brokers={i: object() for i in range(brokers)},
        topics={name: topic(count) for name, count in replicas.items()},
    )


def test_a_replication_factor_of_one_on_three_brokers_is_named() -> None:
    metadata = _metadata(3, {"orders": 3, "orders-retry-1": 1, "orders-dlt": 3})
    warnings = replication_warnings(metadata, ["orders", "orders-retry-1", "orders-dlt", "gone"])  # type: ignore[arg-type]
    assert len(warnings) == 1
    assert "'orders-retry-1' has replication factor 1 on a cluster of 3 brokers" in warnings[0]
    assert "replication factor 3" in warnings[0]


def test_one_broker_or_replicated_topics_say_nothing() -> None:
    assert replication_warnings(_metadata(1, {"orders": 1}), ["orders"]) == []  # type: ignore[arg-type]
    assert replication_warnings(_metadata(3, {"orders": 2}), ["orders"]) == []  # type: ignore[arg-type]
