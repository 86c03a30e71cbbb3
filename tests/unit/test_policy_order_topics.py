"""The hold and state topics of ``ordering: key``: their configs and the cleanup each must keep."""

from __future__ import annotations

from airflow_kafka_retry.engine.kafka.topic_admin import topology_topics
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.policy.topology.order_topics import (
    cleanup_problem,
    order_topic_configs,
    order_topics,
)


def _orders(**extra):
    data = {"topic": "orders", "group_id": "svc", "attempts": 3, "backoff": {"kind": "fixed", "delay": "1s"}}
    return Topology.from_mapping({**data, **extra})


def test_ordering_adds_the_hold_and_state_topics_last():
    assert order_topics(_orders()) == []
    assert order_topic_configs(_orders()) == {}
    ordered = _orders(ordering="key")
    assert topology_topics(ordered)[-2:] == ["orders-hold", "orders-order-state"]
    assert order_topic_configs(ordered) == {
        "orders-hold": {"cleanup.policy": "delete", "retention.ms": "-1"},
        "orders-order-state": {"cleanup.policy": "compact"},
    }


def test_a_wrong_cleanup_policy_names_the_topic_both_values_and_the_fix():
    ordered = _orders(ordering="key")
    assert cleanup_problem(ordered, "orders-order-state", "compact") is None
    assert cleanup_problem(ordered, "orders-hold", "delete") is None
    assert cleanup_problem(ordered, "orders-retry-1", "compact") is None  # not an order topic
    problem = cleanup_problem(ordered, "orders-order-state", "delete")
    assert problem is not None
    assert "'orders-order-state' has cleanup.policy=delete" in problem
    assert "--entity-name orders-order-state --add-config cleanup.policy=compact" in problem
    both = cleanup_problem(ordered, "orders-hold", "compact,delete")
    assert both is not None
    assert "one held copy per key" in both
