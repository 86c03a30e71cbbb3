"""2b: Spring's main listener fails orders, its retry containers are stopped, and the factory DAGs
(``airflow dags test``) drain Spring's retry topics; Spring's @DltHandler reads what Airflow dead-lettered.

Per Spring build (Boot 4.0.7 / spring-kafka 4.0, Boot 3.5.7 / spring-kafka 3.3): the topics Spring created
on the broker are ``topology show``'s; the attempt count continues from Spring's (a ``transient:N`` order is
processed by Airflow on attempt N + 1 on the tier Spring's count puts it in); every exhausted order reaches
the DLT that Spring's DLT containers read, and the headers Spring parses there point at the first failure on
the main topic with the Python exception and attempts 5. Every order ends exactly once (the ledger).
"""

from __future__ import annotations

import json

import pytest

from airflow_kafka_retry.sandbox.scratch_topics import create_topics, unique_topic

from tests.interop import scenario as S
from tests.interop.spring_app import SpringService

# three `airflow dags test` runs: minutes each on a loaded machine (a guard against hangs, not a target)
pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.timeout(1800)]


def test_spring_main_listener_airflow_retry_tiers(interop_bootstrap, jar, tmp_path):
    topic = unique_topic("orders")
    group = f"{topic}-svc"
    topology = S.write_topology(tmp_path / "orders.yaml", topic, group)
    retry_topics = [t.topic for t in topology.retry_tiers]
    dlt, validation_dlt = f"{topic}-dlt", f"{topic}-validation-dlt"
    create_topics(interop_bootstrap, [topic], S.PARTITIONS)
    stopped = ",".join(f"orders-retry-{t.delay_ms}" for t in topology.retry_tiers)
    with SpringService(
        jar,
        tmp_path / "spring",
        interop_bootstrap,
        {"orders.topic": topic, "orders.group": group, "orders.containers.stopped": stopped},
    ) as spring:
        spring.wait_assigned([group, f"{group}-dlt", f"{group}-validation-dlt"])
        assert not set(spring.assigned()) & {topology.consumer_group(t) for t in topology.retry_tiers}

        # 2a, topics: what Spring created is what topology show names (+ the provider's own parking topic)
        shown_topics, _ = S.spring_names(topology)
        created = S.broker_topics(interop_bootstrap, topic)
        assert set(created) == shown_topics, (sorted(created), sorted(shown_topics))
        # the same file with compat: none derives other names: topology show warns, naming Spring's topics
        warned = S.show_with_broker(S.without_preset(topology, tmp_path / "none.yaml"), interop_bootstrap)
        assert warned.returncode == 0, warned.stderr
        # without the preset the exception DLT is named differently too (dlt_routing_naming: suffix)
        named = set(json.loads(warned.stdout)["spring_named_topics"]["spring-3.2"])
        assert named == {*retry_topics, validation_dlt}, warned.stdout
        assert "compat: none, but the broker has Spring-named topics" in warned.stderr, warned.stderr

        orders = S.produce_orders(interop_bootstrap, topic)
        events = spring.wait_events(
            lambda ev: {e["id"] for e in ev if e["topic"] == topic} == set(orders), "every order once"
        )
        first_failure = {
            e["id"]: (e["partition"], e["offset"])
            for e in events
            if e["event"] == "failed" and e["topic"] == topic
        }

        ledger_file = tmp_path / "airflow-ledger.jsonl"
        dags = S.AirflowDags(tmp_path / "airflow", topology, interop_bootstrap, ledger_file)
        for retry_topic in retry_topics:
            dags.test_dag(retry_topic)

        exhausted = {rid for rid, kind in orders.items() if kind in ("poison", "invalid")}
        events = spring.wait_events(
            lambda ev: {e["id"] for e in ev if e["event"] == "dlt"} >= exhausted, "every exhausted order"
        )

    python_ledger = S.read_ledger(ledger_file)
    # attempts continue from Spring's count: transient:N is processed on attempt N + 1, on the N-th retry tier
    for e in python_ledger:
        kind = orders[e["id"]]
        n = int(kind.split(":")[1])
        assert (e["attempt"], e["topic"]) == (n + 1, retry_topics[n - 1]), (e, kind)
    # Spring's @DltHandler: original coordinates of the first failure on the main topic, the Python
    # exception (this provider writes the handler's exception as both fqcn and cause), attempts 5
    dead = [e for e in events if e["event"] == "dlt"]
    for e in dead:
        kind = orders[e["id"]]
        partition, offset = first_failure[e["id"]]
        expected_class = f"{S.HANDLER}.{'InvalidOrder' if kind == 'invalid' else 'PoisonOrder'}"
        assert e["topic"] == (validation_dlt if kind == "invalid" else dlt), e
        assert (e["original_topic"], e["original_partition"], e["original_offset"]) == (
            topic,
            partition,
            offset,
        )
        assert (e["exception_fqcn"], e["exception_cause_fqcn"], e["attempts"]) == (
            expected_class,
            expected_class,
            5,
        ), e
        assert e["exception_message"] == (
            "order has no customer" if kind == "invalid" else "no exchange rate for CHF"
        ), e
    # 2e: every order ends exactly once, on one side or the other
    ends = S.homes(events, python_ledger)
    for rid, kind in orders.items():
        if kind == "ok":
            want = [f"spring:{topic}"]
        elif kind.startswith("transient:"):
            want = [f"airflow:{retry_topics[int(kind.split(':')[1]) - 1]}"]
        else:
            want = [f"dlt:{validation_dlt if kind == 'invalid' else dlt}"]
        assert ends.get(rid) == want, (rid, kind, ends.get(rid))
    assert set(ends) == set(orders)
