"""2d and issue 41: both Spring dead-letter families from the real service, read and replayed by the CLI.

One Spring service per build (Boot 4.0.7 / spring-kafka 4.0, Boot 3.5.7 / spring-kafka 3.3) writes both:

* ``payments`` (family ``spring-dead-letter``): retried in place, then a plain
  ``DeadLetterPublishingRecoverer`` writes ``<payments>-dlt`` with ``kafka_dlt-*`` headers;
* ``orders`` (family ``spring-retry-topic``): ``@RetryableTopic``, 4 attempts through Spring's own retry
  topics, then the factory's recoverer writes ``<orders>-dlt`` with ``kafka_original-*`` /
  ``kafka_exception-*`` and ``retry_topic-attempts``.

``dlt inspect --format json`` shows, for every one of Spring's dead letters, the original topic, partition,
offset and timestamp of the source record as the broker holds it, when it was dead-lettered, the consumer
group, the failure class, cause and message, the delivery count (retry topics; what a plain recoverer does
not write is listed as missing), the same coordinates and exception Spring's own ``@DltHandler`` reads.
``dlt replay`` returns each to its source partition (the orders with a data fix,
``replay_fixes.repair_order``), where Spring processes it: every payment and order ends processed exactly
once, and a second replay moves nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest
import yaml
from confluent_kafka import Producer

from airflow_kafka_retry.sandbox.scratch_topics import create_topics, unique_topic

from tests.interop import scenario as S
from tests.interop.spring_app import SpringService

pytestmark = [pytest.mark.interop, pytest.mark.slow]
PAYMENTS = {"ok": 3, "poison": 3}
ORDERS = {"ok": 2, "poison": 4}  # over 2 partitions: each poison order fails 4 times, then orders-dlt
LISTENER_FAILED = "org.springframework.kafka.listener.ListenerExecutionFailedException"
POISON = "com.example.orders.OrderFailures$PoisonOrderException"
POISON_MESSAGE = "no exchange rate for CHF"


def dlt_cli(*args: str, bootstrap: str) -> dict:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_kafka_retry.cli",
            "dlt",
            *args,
            "--format",
            "json",
            "--bootstrap",
            bootstrap,
        ],
        env={**os.environ, "PYTHONPATH": str(S.REPO)},
        capture_output=True,
        text=True,
        timeout=180,
        cwd=S.REPO,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads(done.stdout)


def sources(bootstrap: str, topic: str) -> dict[str, tuple[int, int, int]]:
    """Each record of ``topic`` by key: (partition, offset, timestamp ms), as the broker holds it."""
    return {
        m.key().decode(): (m.partition(), m.offset(), m.timestamp()[1])
        for m in S.read_records(bootstrap, topic)
    }


def described(report: dict, dead: list, topic: str, source: dict, family: str) -> dict[str, dict]:
    """Each dead letter's sample in the inspect report, by key, after checking what every family shows:
    the family, the source record's topic, partition, offset and timestamp, and when it was dead-lettered."""
    assert (report["records"], report["families"]) == (len(dead), {family: len(dead)}), report
    samples = {(s["partition"], s["offset"]): s for g in report["groups"] for s in g["samples"]}
    assert len(samples) == len(dead), report  # every record shown
    shown = {}
    for m in dead:
        rid = m.key().decode()
        sample = samples[(m.partition(), m.offset())]
        partition, offset, timestamp = source[rid]
        assert (sample["family"], sample["original_topic"]) == (family, topic), (rid, sample)
        assert (sample["original_partition"], sample["original_offset"]) == (partition, offset), (rid, sample)
        assert (sample["original_timestamp_ms"], sample["failed_at_ms"]) == (timestamp, m.timestamp()[1])
        assert sample["unreadable"] == {}, sample
        shown[rid] = sample
    return shown


def test_spring_dead_letters_inspected_and_replayed(interop_bootstrap, jar, tmp_path):
    # the plain recoverer's family: payments, 1 partition, its DLT made here (Spring keeps the partition)
    payments_topic = unique_topic("payments")
    payments_dlt = f"{payments_topic}-dlt"
    create_topics(interop_bootstrap, [payments_topic, payments_dlt], 1)
    payments_file = tmp_path / "payments.yaml"
    payments_file.write_text(
        yaml.safe_dump(
            {
                "topic": payments_topic,
                "group_id": "payments-service",
                "compat": "spring-3.2",
                "attempts": 1,
                "headers": {"naming": "dead_letter"},
            }
        )
    )
    producer = Producer({"bootstrap.servers": interop_bootstrap, "enable.idempotence": True})
    payments = {}
    for kind, count in PAYMENTS.items():
        for _ in range(count):
            rid = f"p{len(payments)}"
            payments[rid] = kind
            producer.produce(payments_topic, key=rid.encode(), value=kind.encode())
    assert producer.flush(30) == 0
    poisoned = {rid for rid, kind in payments.items() if kind == "poison"}
    # the retry-topic family: orders, 2 partitions; Spring creates its retry topics and DLT
    orders_topic = unique_topic("orders")
    group = f"{orders_topic}-svc"
    orders_topology = S.write_topology(tmp_path / "orders.yaml", orders_topic, group)
    orders_dlt = f"{orders_topic}-dlt"
    create_topics(interop_bootstrap, [orders_topic], S.PARTITIONS)
    orders = S.produce_orders(interop_bootstrap, orders_topic, ORDERS)
    poison_orders = {rid for rid, kind in orders.items() if kind == "poison"}

    with SpringService(
        jar,
        tmp_path / "spring",
        interop_bootstrap,
        {
            "orders.topic": orders_topic,
            "orders.group": group,
            "orders.containers.stopped": "orders-validation-dlt",
            "orders.payments.enabled": "true",
            "orders.payments.topic": payments_topic,
        },
    ) as spring:
        spring.wait_events(
            lambda ev: (
                sum(e["id"] in poisoned for e in ev) == 3 * len(poisoned)
                and {e["id"] for e in ev if e["event"] == "dlt"} == poison_orders
            ),
            "3 deliveries of each poison payment and each poison order in Spring's DLT handler",
        )
        dead_payments = S.read_records_once_there(interop_bootstrap, payments_dlt, len(poisoned))
        assert sorted(m.key().decode() for m in dead_payments) == sorted(poisoned)
        dead_orders = S.read_records_once_there(interop_bootstrap, orders_dlt, len(poison_orders))
        assert sorted(m.key().decode() for m in dead_orders) == sorted(poison_orders)
        first = {
            e["id"]: (e["partition"], e["offset"])
            for e in spring.events("failed")
            if e["topic"] in (payments_topic, orders_topic)
        }
        failures = Counter(e["id"] for e in spring.events("failed"))
        payment_sources = sources(interop_bootstrap, payments_topic)
        order_sources = sources(interop_bootstrap, orders_topic)

        # spring-dead-letter: every record's coordinates and failure; a plain recoverer writes no count
        inspected = dlt_cli(
            "inspect", "--topology", str(payments_file), "--samples", "50", bootstrap=interop_bootstrap
        )
        (tmp_path / "inspect-payments.json").write_text(json.dumps(inspected, indent=1))
        [group_shown] = inspected["groups"]
        assert (group_shown["exception"], group_shown["cause"], group_shown["original_topic"]) == (
            LISTENER_FAILED,
            POISON,
            payments_topic,
        ), group_shown
        shown = described(inspected, dead_payments, payments_topic, payment_sources, "spring-dead-letter")
        for rid, sample in shown.items():
            assert payment_sources[rid][:2] == first[rid]  # where Spring's listener failed on it
            assert (sample["group"], sample["failure_class"]) == ("payments-service", LISTENER_FAILED)
            assert sample["failure_message"].endswith(POISON_MESSAGE), sample
            assert (sample["delivery_count"], sample["missing"]) == (None, ["delivery_count"]), sample

        # spring-retry-topic: the same, the delivery count too, and what Spring's @DltHandler read
        inspected = dlt_cli(
            "inspect",
            "--topology",
            str(orders_topology.source),
            "--samples",
            "50",
            bootstrap=interop_bootstrap,
        )
        (tmp_path / "inspect-orders.json").write_text(json.dumps(inspected, indent=1))
        assert {(g["exception"], g["cause"]) for g in inspected["groups"]} == {(LISTENER_FAILED, POISON)}
        shown = described(inspected, dead_orders, orders_topic, order_sources, "spring-retry-topic")
        spring_read = {e["id"]: e for e in spring.events("dlt")}
        for rid, sample in shown.items():
            java = spring_read[rid]
            assert order_sources[rid][:2] == first[rid]
            assert (sample["original_partition"], sample["original_offset"]) == (
                java["original_partition"],
                java["original_offset"],
            )
            assert (sample["failure_class"], sample["failure_message"]) == (
                java["exception_fqcn"],
                java["exception_message"],
            ), (sample, java)
            assert sample["failure_message"].endswith(POISON_MESSAGE), sample
            assert java["exception_cause_fqcn"] == POISON, java
            # 4 deliveries: Spring counted them, and wrote the next attempt's number (5) into the DLT
            assert (sample["delivery_count"], failures[rid], java["attempts"]) == (4, 4, 5), sample
            assert (sample["group"], sample["missing"]) == (group, []), sample

        (tmp_path / "spring" / "payments-fixed").touch()  # the payments fix is deployed
        replayed_payments = dlt_cli("replay", "--topology", str(payments_file), bootstrap=interop_bootstrap)
        replayed_orders = dlt_cli(
            "replay",
            "--topology",
            str(orders_topology.source),
            "--transform",
            "tests.interop.replay_fixes:repair_order",
            bootstrap=interop_bootstrap,
        )
        (tmp_path / "replay.json").write_text(json.dumps([replayed_payments, replayed_orders], indent=1))
        events = spring.wait_events(
            lambda ev: {e["id"] for e in ev if e["event"] == "processed"} == set(payments) | set(orders),
            "every payment and order processed",
        )
        again = [
            dlt_cli("replay", "--topology", str(path), bootstrap=interop_bootstrap)
            for path in (payments_file, orders_topology.source)
        ]

    processed = [e for e in events if e["event"] == "processed"]
    assert Counter(e["id"] for e in processed) == Counter({**payments, **orders}.keys())  # each exactly once
    source_topic = {**dict.fromkeys(payments, payments_topic), **dict.fromkeys(orders, orders_topic)}
    for e in processed:
        assert e["topic"] == source_topic[e["id"]], e
        if e["id"] in poisoned | poison_orders:  # the replayed copy, on the partition it failed on
            assert e["partition"] == first[e["id"]][0], e
            assert e["offset"] > first[e["id"]][1], e
    assert (replayed_payments["status"], replayed_payments["moved"], replayed_payments["targets"]) == (
        "ok",
        len(poisoned),
        {payments_topic: len(poisoned)},
    )
    assert (replayed_orders["status"], replayed_orders["moved"], replayed_orders["targets"]) == (
        "ok",
        len(poison_orders),
        {orders_topic: len(poison_orders)},
    )
    assert [(a["moved"], a["already_replayed"]) for a in again] == [
        (0, len(poisoned)),
        (0, len(poison_orders)),
    ]
    assert sorted(e["id"] for e in events if e["event"] == "dlt") == sorted(poison_orders)  # once each
