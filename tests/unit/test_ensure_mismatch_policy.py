"""Which existing-topic mismatches fail ``EnsureRetryTopicsOperator`` under each ``on_mismatch``."""

from __future__ import annotations

import pytest

from airflow_kafka_retry.engine.kafka.topic_admin import TopicMismatch
from airflow_kafka_retry.operators.ensure_topics import fatal_mismatches

PARTITIONS = TopicMismatch("orders-retry-1000", "partitions", 1, 2, "orders")
LIMIT = TopicMismatch("orders-dlt", "max.message.bytes", 1000, 2000, "orders")


@pytest.mark.parametrize(
    ("on_mismatch", "compat", "fatal"),
    [
        ("auto", "none", [PARTITIONS, LIMIT]),
        ("auto", "spring-3.2", [LIMIT]),  # Spring's own retry topics have 1 partition by default
        ("auto", "spring-builder-4.0", [LIMIT]),
        ("fail", "spring-3.2", [PARTITIONS, LIMIT]),
        ("warn", "none", []),
    ],
)
def test_fatal_mismatches(on_mismatch, compat, fatal):
    assert fatal_mismatches([PARTITIONS, LIMIT], on_mismatch, compat) == fatal


def test_order_topic_mismatches_fail_under_auto_whatever_compat():
    hold = TopicMismatch("orders-hold", "partitions", 1, 2, "orders")
    policy = TopicMismatch("orders-order-state", "cleanup.policy", "delete", "compact", "orders", note="n")
    mismatches = [PARTITIONS, hold, policy]
    strict = ["orders-hold", "orders-order-state"]
    assert fatal_mismatches(mismatches, "auto", "spring-3.2", strict=strict) == [hold, policy]
    assert fatal_mismatches(mismatches, "warn", "none", strict=strict) == []
    assert str(policy) == "n"
