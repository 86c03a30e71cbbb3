"""Which consumer-group members ``topology show --bootstrap`` and ``EnsureRetryTopicsOperator`` warn about
(``engine/scans/peer_consumers.py``, the pure part; the broker part runs in ``test_spring_isolation.py``)."""

from __future__ import annotations

from airflow_kafka_retry.engine.scans.peer_consumers import (
    WHY,
    Member,
    peer_groups,
    topology_groups,
    warning,
    warnings,
)
from airflow_kafka_retry.policy.topology.model import Topology

TOPOLOGY = Topology.from_mapping(
    {
        "topic": "orders",
        "group_id": "orders-service",
        "compat": "spring-3.2",
        "attempts": 4,
        "backoff": {"kind": "exponential", "initial": "1s", "multiplier": 2.0, "max": "10s"},
    }
)
TOPICS = ["orders", "orders-retry-1000", "orders-retry-2000", "orders-retry-4000", "orders-dlt"]


def test_topology_groups_are_springs_names():
    assert topology_groups(TOPOLOGY) == {
        "orders-service",
        "orders-service-retry-1000",
        "orders-service-retry-2000",
        "orders-service-retry-4000",
        "orders-service-dlt",
    }


def test_members_of_the_topology_groups_or_on_its_topics_are_peers():
    members = [
        # Spring's retry container in the shared group, idle at the moment (no partition assigned)
        Member("orders-service-retry-1000", "consumer-orders-service-retry-1000-1", "/10.0.0.5"),
        # another service's group reading tier 1, with a client id of its own
        Member("audit", "audit-0", "/10.0.0.7", frozenset({"orders-retry-1000", "payments"})),
        # unrelated
        Member("billing", "consumer-billing-1", "/10.0.0.8", frozenset({"payments"})),
    ]
    peers = peer_groups(members, TOPICS, topology_groups(TOPOLOGY))
    assert [p.group for p in peers] == ["audit", "orders-service-retry-1000"]
    audit, spring = peers
    assert audit.topics == ("orders-retry-1000",)
    assert not audit.java
    assert spring.java
    assert spring.topics == ()
    assert spring.to_dict() == {
        "group": "orders-service-retry-1000",
        "topics": [],
        "java_default_client_id": True,
        "members": [{"client_id": "consumer-orders-service-retry-1000-1", "host": "/10.0.0.5"}],
    }


def test_java_default_client_id_is_checked_against_the_group():
    assert Member("g-retry-1000", "consumer-g-retry-1000-12", "h").java_default_id
    assert not Member("g-retry-1000", "consumer-other-1", "h").java_default_id
    assert not Member("g", "rdkafka", "h").java_default_id


def test_warning_names_the_group_and_asks_for_read_committed():
    peer = peer_groups(
        [Member("orders-service", "consumer-orders-service-1", "/10.0.0.5", frozenset({"orders"}))],
        TOPICS,
        topology_groups(TOPOLOGY),
    )[0]
    text = warning(peer)
    assert "consumer group 'orders-service'" in text
    assert "consumer-orders-service-1@/10.0.0.5" in text
    assert "Java client ids" in text
    assert "reading orders)" in text
    assert "spring.kafka.consumer.isolation-level=read_committed" in text
    assert warnings([peer]) == [text, WHY]  # the reason once, after the groups
    assert "does not show a consumer's isolation level" in WHY


def test_no_members_no_warning():
    assert peer_groups([], TOPICS, topology_groups(TOPOLOGY)) == []
    assert warnings([]) == []
