"""2d: the blocking-retry family. Spring's ``payments`` listener retries in place and then a plain
``DeadLetterPublishingRecoverer`` writes ``payments-dlt`` with ``kafka_dlt-*`` headers; the provider's
``dlt inspect`` reads those records (original topic, partition, offset and exception from Spring's headers)
and ``dlt replay`` moves them back to their original topic, where Spring's listener, fixed, processes them.

Every payment ends exactly once: processed at once, or dead-lettered, replayed once and processed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml
from confluent_kafka import Producer

from airflow_kafka_retry.testing.topics import create_topics, unique_topic

from tests.interop import scenario as S
from tests.interop.spring_app import SpringService

pytestmark = [pytest.mark.interop, pytest.mark.slow]
PAYMENTS = {"ok": 3, "poison": 3}


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


def test_dead_letter_publishing_recoverer_records_replayed_to_spring(interop_bootstrap, jar, tmp_path):
    topic = unique_topic("payments")
    dlt = f"{topic}-dlt"  # DeadLetterPublishingRecoverer's default destination, same partition
    create_topics(interop_bootstrap, [topic, dlt], 1)
    topology_file = tmp_path / "payments.yaml"
    topology_file.write_text(
        yaml.safe_dump(
            {
                "topic": topic,
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
            producer.produce(topic, key=rid.encode(), value=kind.encode())
    assert producer.flush(30) == 0
    poisoned = {rid for rid, kind in payments.items() if kind == "poison"}

    with SpringService(
        jar,
        tmp_path / "spring",
        interop_bootstrap,
        {
            "orders.topic": unique_topic("idle-orders"),
            "orders.containers.stopped": "orders,orders-retry-1000,orders-retry-2000,orders-retry-4000,"
            "orders-dlt,orders-validation-dlt",
            "orders.payments.enabled": "true",
            "orders.payments.topic": topic,
        },
    ) as spring:
        spring.wait_events(
            lambda ev: sum(e["id"] in poisoned for e in ev) == 3 * len(poisoned),
            "3 deliveries of each poison",
        )
        dead = S.read_records_once_there(interop_bootstrap, dlt, len(poisoned))
        assert sorted(m.key().decode() for m in dead) == sorted(poisoned)
        first = {
            e["id"]: (e["partition"], e["offset"]) for e in spring.events("failed") if e["topic"] == topic
        }

        inspected = dlt_cli("inspect", "--topology", str(topology_file), bootstrap=interop_bootstrap)
        (tmp_path / "inspect.json").write_text(json.dumps(inspected, indent=1))
        assert inspected["records"] == len(poisoned), inspected
        # grouped by what Spring's kafka_dlt-* headers say: the container's wrapper, the listener's exception
        # as the cause, the original topic; the samples are the DLT coordinates
        [group] = inspected["groups"]
        assert (group["exception"], group["cause"], group["original_topic"], group["count"]) == (
            "org.springframework.kafka.listener.ListenerExecutionFailedException",
            "com.example.orders.OrderFailures$PoisonOrderException",
            topic,
            len(poisoned),
        ), group

        (tmp_path / "spring" / "payments-fixed").touch()  # the fix is deployed
        replayed = dlt_cli("replay", "--topology", str(topology_file), bootstrap=interop_bootstrap)
        (tmp_path / "replay.json").write_text(json.dumps(replayed, indent=1))
        events = spring.wait_events(
            lambda ev: {e["id"] for e in ev if e["event"] == "processed"} == set(payments),
            "every payment processed",
        )

    processed = [e for e in events if e["event"] == "processed"]
    assert sorted(e["id"] for e in processed) == sorted(payments)  # each exactly once
    for e in processed:
        assert e["topic"] == topic
        if e["id"] in poisoned:
            assert e["offset"] > first[e["id"]][1]  # the replayed copy, not the original
    assert (replayed["status"], replayed["moved"], replayed["targets"]) == (
        "ok",
        len(poisoned),
        {topic: len(poisoned)},
    )
