"""Unit tests for engine.drain.transaction.transactional_id (pure; no producer is constructed)."""

from __future__ import annotations

import pytest

from airflow_kafka_retry.engine.drain.options import DEFAULT_TRANSACTIONAL_ID_PREFIX, DrainOptions
from airflow_kafka_retry.policy.client_names import transactional_id


def test_transactional_id_format() -> None:
    assert (
        transactional_id("airflow-kafka-retry.", "svc-orders-retry-0", "orders-retry-0", 3)
        == "airflow-kafka-retry.svc-orders-retry-0/orders-retry-0/3"
    )


def test_transactional_id_is_deterministic() -> None:
    ids = {transactional_id(DEFAULT_TRANSACTIONAL_ID_PREFIX, "g", "orders-retry-0", 7) for _ in range(10)}
    assert ids == {"airflow-kafka-retry.g/orders-retry-0/7"}


def test_transactional_id_with_default_options_prefix() -> None:
    options = DrainOptions("myapp.handlers:handle")
    assert transactional_id(options.transactional_id_prefix, "g", "t", 0) == "airflow-kafka-retry.g/t/0"


@pytest.mark.parametrize(
    "other",
    [
        ("airflow-kafka-retry.", "g", "orders-retry-0", 1),  # another partition
        ("airflow-kafka-retry.", "g2", "orders-retry-0", 0),  # another group
        ("airflow-kafka-retry.", "g", "orders-retry-1", 0),  # another topic
        ("other.", "g", "orders-retry-0", 0),  # another prefix
    ],
)
def test_transactional_id_differs_per_coordinate(other: tuple[str, str, str, int]) -> None:
    assert transactional_id("airflow-kafka-retry.", "g", "orders-retry-0", 0) != transactional_id(*other)


def test_partitions_of_one_topic_get_distinct_ids() -> None:
    ids = [transactional_id("p.", "g", "t", p) for p in range(64)]
    assert len(set(ids)) == 64


def test_empty_prefix() -> None:
    assert transactional_id("", "g", "t", 2) == "g/t/2"


def test_transactional_ids_cannot_collide_through_dots_in_names() -> None:
    assert transactional_id("p.", "a.b", "c", 0) != transactional_id("p.", "a", "b.c", 0)
