"""2c: the provider drains the main topic and routes failures into tier 1; Spring's retry containers
(its main listener stopped) take over from there.

Per Spring build: Spring's tier-1 container never handles a record before the due time the provider wrote
(``retry_topic-backoff-timestamp``, parsed by Spring's ``KafkaBackoffAwareMessageListenerAdapter``); the
attempt count continues (Spring handles tier-1 records on attempt 2 and routes on by its own count); the
exhausted orders reach Spring's DLTs with the provider's first-failure coordinates. 2a, groups: every group
on the broker is one ``topology show`` names. Every order ends exactly once (the ledger).
"""

from __future__ import annotations

import pytest

from airflow_kafka_retry.policy.headers import codec as H
from airflow_kafka_retry.sandbox.scratch_topics import create_topics, unique_topic

from tests.interop import scenario as S
from tests.interop.spring_app import SpringService

pytestmark = [pytest.mark.interop, pytest.mark.slow]


def test_airflow_main_tier_spring_retry_tiers(interop_bootstrap, jar, tmp_path):
    topic = unique_topic("orders")
    group = f"{topic}-svc"
    topology = S.write_topology(tmp_path / "orders.yaml", topic, group)
    retry_topics = [t.topic for t in topology.retry_tiers]
    dlt, validation_dlt = f"{topic}-dlt", f"{topic}-validation-dlt"
    create_topics(interop_bootstrap, [topic], S.PARTITIONS)
    orders = S.produce_orders(interop_bootstrap, topic)
    with SpringService(
        jar,
        tmp_path / "spring",
        interop_bootstrap,
        {"orders.topic": topic, "orders.group": group, "orders.containers.stopped": "orders"},
    ) as spring:
        spring.wait_assigned([topology.consumer_group(t) for t in topology.retry_tiers] + [f"{group}-dlt"])
        assert group not in spring.assigned()

        ledger_file = tmp_path / "airflow-ledger.jsonl"
        summary = S.drain_tier(topology, "0", interop_bootstrap, ledger_file)
        assert summary["group"] == group
        failed = {rid for rid, kind in orders.items() if kind != "ok"}
        events = spring.wait_events(
            lambda ev: {e["id"] for e in ev if e["event"] in ("processed", "dlt")} >= failed,
            "every failed order to its end",
        )
        # 2a, groups: Spring's retry and DLT groups and the provider's main-topic group, as topology show says
        _, shown_groups = S.spring_names(topology)
        assert S.broker_groups(interop_bootstrap, group, len(shown_groups)) == shown_groups

    # what the provider wrote into tier 1: attempt 2, a due time, the first-failure coordinates
    due = {}
    first = {}
    for msg in S.read_records(interop_bootstrap, retry_topics[0]):
        rid = msg.key().decode()
        assert H.read_attempts(msg.headers()) == 2, rid
        due[rid] = H.read_due_ms(msg.headers())
        coords = H.read_original_coordinates(msg.headers())
        first[rid] = (coords.topic, coords.partition, coords.offset)
    assert set(due) == failed

    tier1 = [e for e in events if e["topic"] == retry_topics[0]]
    assert {e["id"] for e in tier1} == failed
    for e in tier1:
        assert e["attempt"] == 2, e  # Spring read the provider's count
        assert e["handled_at"] >= due[e["id"]], (
            "Spring handled a record before its due time",
            e,
            due[e["id"]],
        )
    # Spring went on by its own count: transient:N processed on attempt N + 1 on its N-th retry tier
    processed = [e for e in events if e["event"] == "processed"]
    for e in processed:
        n = int(orders[e["id"]].split(":")[1])
        assert (e["attempt"], e["topic"]) == (n + 1, retry_topics[n - 1]), e
    for e in (e for e in events if e["event"] == "dlt"):
        kind = orders[e["id"]]
        assert e["topic"] == (validation_dlt if kind == "invalid" else dlt), e
        assert (e["original_topic"], e["original_partition"], e["original_offset"]) == first[e["id"]], e
        assert e["attempts"] == 5, e
        assert e["exception_cause_fqcn"].startswith("com.example.orders.OrderFailures$"), e

    # 2e: every order ends exactly once
    ends = S.homes(events, S.read_ledger(ledger_file))
    for rid, kind in orders.items():
        if kind == "ok":
            want = [f"airflow:{topic}"]
        elif kind.startswith("transient:"):
            want = [f"spring:{retry_topics[int(kind.split(':')[1]) - 1]}"]
        else:
            want = [f"dlt:{validation_dlt if kind == 'invalid' else dlt}"]
        assert ends.get(rid) == want, (rid, kind, ends.get(rid))
    assert set(ends) == set(orders)
