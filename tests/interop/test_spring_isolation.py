"""Issue 38 item 14: a Spring peer with its defaults reads the copies a killed provider drain ABORTED.

The provider drains the main topic and is SIGKILLed (``tests/support/kill_at.py``, point ``routed``) when
the 2nd chunk of partition 0 has reached tier 1 inside its open transaction; the next drain's
``init_transactions`` aborts that transaction and routes the chunk again, committed. Then two Spring
services (Boot 4 build, main listeners stopped) consume tier 1 from the start, each in its own groups:

* with Spring's defaults (the Java consumer's ``isolation.level=read_uncommitted``, KIP-98) it handles the
  aborted copies too: the chunk's orders twice;
* with ``spring.kafka.consumer.isolation-level=read_committed``: each order once.

Meanwhile ``topology show --bootstrap`` and ``EnsureRetryTopicsOperator`` name both services' groups and ask
for read_committed: the broker shows the members (client id, host, partitions), not their isolation level.

One build only: the isolation level is the Kafka client's, not spring-kafka's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from airflow_kafka_retry.engine.kafka.topic_admin import topology_topics
from airflow_kafka_retry.sandbox.scratch_topics import create_topics, unique_topic

from tests.interop import scenario as S
from tests.interop.spring_app import SpringService, spring_jar

pytestmark = [pytest.mark.interop, pytest.mark.slow]

ORDERS = 8  # transient:1, 4 per partition: each fails once on the main topic and is processed on tier 1
CHUNK = 2  # the 2nd chunk of partition 0 (offsets 2..3: orders o4 and o6) is the one the kill aborts


def _killed_drain(topology, bootstrap: str, ledger: Path, kill_log: Path) -> subprocess.CompletedProcess:
    args = ["drain", "--topology", str(topology.source), "--tier", "0"]
    args += ["--handler", f"{S.HANDLER}:handle", "--value-deserializer", f"{S.HANDLER}:decode"]
    args += ["--chunk-size", str(CHUNK), "--batch-size", str(CHUNK), "--parallelism", "1"]
    return subprocess.run(
        [sys.executable, "-m", "tests.support.kill_at", *args, "--bootstrap", bootstrap],
        env={
            **os.environ,
            "AKR_LEDGER": str(ledger),
            "PYTHONPATH": str(S.REPO),
            "AKR_KILL_AT": "routed",
            "AKR_KILL_ON": "2",
            "AKR_KILL_LOG": str(kill_log),
        },
        capture_output=True,
        text=True,
        timeout=180,
        cwd=S.REPO,
        check=False,
    )


def _uncommitted_keys(bootstrap: str, topic: str) -> list[str]:
    """The keys of every record of ``topic`` read as the Java client's default does (read_uncommitted)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_topic("reader"),
            "isolation.level": "read_uncommitted",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
        }
    )
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        keys, eof, deadline = [], set(), time.monotonic() + 30
        while len(eof) < len(parts):
            assert time.monotonic() < deadline, f"timed out reading {topic}"
            for msg in consumer.consume(500, 0.05):
                if msg.error():
                    assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                    eof.add(msg.partition())
                else:
                    keys.append(msg.key().decode())
        return keys
    finally:
        consumer.close()


def _ensure_topics(topology, bootstrap: str) -> dict:
    from airflow_kafka_retry.operators.ensure_topics import EnsureRetryTopicsOperator

    conn = {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW_CONN_SPRING_PEERS", json.dumps(conn))
        task = EnsureRetryTopicsOperator(
            task_id="ensure", topology=topology, kafka_conn_id="spring_peers", on_mismatch="warn"
        )
        return task.execute({})


def _processed(spring: SpringService, topic: str) -> Counter:
    return Counter(e["id"] for e in spring.events("processed") if e["topic"] == topic)


def test_spring_defaults_handle_aborted_copies_read_committed_does_not(interop_bootstrap, tmp_path):
    started = time.monotonic()
    jar = spring_jar("boot4")
    topic = unique_topic("orders")
    group = f"{topic}-svc"
    topology = S.write_topology(tmp_path / "orders.yaml", topic, group)
    tier1 = topology.retry_tiers[0].topic
    create_topics(interop_bootstrap, topology_topics(topology), S.PARTITIONS)
    orders = S.produce_orders(interop_bootstrap, topic, {"transient:1": ORDERS})

    ledger, kill_log = tmp_path / "ledger.jsonl", tmp_path / "kills.txt"
    killed = _killed_drain(topology, interop_bootstrap, ledger, kill_log)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert kill_log.read_text() == f"routed {topic}[0] up-to={2 * CHUNK}\n"
    S.drain_tier(topology, "0", interop_bootstrap, ledger)  # aborts the dead run's transaction, routes again

    committed = Counter(m.key().decode() for m in S.read_records(interop_bootstrap, tier1))
    assert committed == Counter(orders.keys()), committed
    aborted = Counter(_uncommitted_keys(interop_bootstrap, tier1)) - committed
    assert aborted == Counter({"o4": 1, "o6": 1}), aborted  # the killed chunk's copies, still in the log

    base = {"orders.topic": topic, "orders.containers.stopped": "orders"}
    with (
        SpringService(
            jar, tmp_path / "default", interop_bootstrap, {**base, "orders.group": group}
        ) as default,
        SpringService(
            jar,
            tmp_path / "read-committed",
            interop_bootstrap,
            {
                **base,
                "orders.group": f"{group}-rc",
                "spring.kafka.consumer.isolation-level": "read_committed",
            },
        ) as read_committed,
    ):
        want = sum(committed.values())
        default.wait_events(
            lambda _: sum(_processed(default, tier1).values()) >= want + sum(aborted.values()),
            "every copy on tier 1, the aborted ones included",
        )
        read_committed.wait_events(
            lambda _: sum(_processed(read_committed, tier1).values()) >= want,
            "every committed copy on tier 1",
        )
        # the detection, while both run: each service's tier-1 group is named, with read_committed asked for
        shown = S.show_with_broker(Path(topology.source), interop_bootstrap)
        assert shown.returncode == 0, shown.stderr
        peers = {p["group"]: p for p in json.loads(shown.stdout)["peer_consumers"]}
        for tier_group in (topology.consumer_group(topology.retry_tiers[0]), f"{group}-rc-retry-1000"):
            assert peers[tier_group]["topics"] == [tier1], peers
            assert peers[tier_group]["java_default_client_id"], peers  # Spring Boot's consumers: Java's ids
            assert f"consumer group {tier_group!r} has members" in shown.stderr, shown.stderr
        assert "spring.kafka.consumer.isolation-level=read_committed" in shown.stderr
        # the setup task reports (and logs) the same groups
        assert {p["group"] for p in _ensure_topics(topology, interop_bootstrap)["peer_consumers"]} == set(
            peers
        )
        # nothing more can come: in partition 0 of tier 1 the aborted copies lie before the rerun's copies of
        # o4 and o6, which both services have handled
        seen_by_default, seen_read_committed = _processed(default, tier1), _processed(read_committed, tier1)

    duplicates = seen_by_default - Counter(orders.keys())
    print(
        f"\nread_uncommitted (Spring's default): {sum(seen_by_default.values())} handlings of {len(orders)} "
        f"orders, duplicates {dict(duplicates)}; read_committed: {sum(seen_read_committed.values())} "
        f"handlings, duplicates {dict(seen_read_committed - Counter(orders.keys()))}; "
        f"{time.monotonic() - started:.0f} s; peers {sorted(peers)}"
    )
    assert duplicates == aborted, seen_by_default  # each aborted copy handled a second time
    assert seen_read_committed == Counter(orders.keys()), seen_read_committed  # each order once
