"""``topology show`` warns when ``compat: none`` meets a Spring service's topics on the broker."""

from __future__ import annotations

from airflow_kafka_retry.policy.topology.compat_check import spring_named_topics, warning

README = {
    "topic": "orders",
    "group_id": "orders-service",
    "attempts": 4,
    "backoff": {"kind": "exponential", "initial": "1s", "multiplier": 2.0, "max": "10s"},
}
SPRING = ["orders", "orders-retry-1000", "orders-retry-2000", "orders-retry-4000", "orders-dlt"]


def test_spring_topics_under_compat_none_are_named_with_their_preset():
    found = spring_named_topics(README, SPRING)
    assert found["spring-3.2"] == ["orders-retry-1000", "orders-retry-2000", "orders-retry-4000"]
    text = warning(found)
    assert "orders-retry-1000" in text
    assert "compat: spring-3.2" in text


def test_no_warning_for_own_names_or_a_preset():
    own = ["orders", "orders-retry-1", "orders-retry-2", "orders-retry-3", "orders-dlt"]
    assert spring_named_topics(README, own) == {}
    assert warning({}) is None
    assert spring_named_topics({**README, "compat": "spring-3.2"}, SPRING) == {}


def test_index_and_reused_names():
    fixed = {**README, "attempts": 3, "backoff": {"kind": "fixed", "delay": "1s"}}
    assert spring_named_topics(fixed, ["orders-retry"]) == {
        "spring-3.2": ["orders-retry"],
        "spring-builder-4.1": ["orders-retry"],
    }
    assert "spring-builder-4.0" in spring_named_topics(fixed, ["orders-retry-0"])
