"""Due times: records not yet due stay put for a later run; order holds per partition."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from airflow_kafka_retry.engine.drain.follow import drain_following, wait_for_pass
from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.engine.local.engine import LocalEngine, run_local
from airflow_kafka_retry.policy.headers import codec as H
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.sandbox.scratch_topics import unique_topic

from tests.support import ledger

pytestmark = [pytest.mark.integration]


def _topology() -> Topology:
    topic = unique_topic("due")
    return Topology.from_mapping(
        {
            "topic": topic,
            "group_id": f"{topic}-svc",
            "attempts": 3,
            "backoff": {"kind": "fixed", "delay": "1h"},
        }
    )


def _produce(bootstrap: str, topic: str, rows: list[tuple[int, str, int]]) -> None:
    """rows: (partition, id, due_ms) as a retry tier would hold them (attempt 2)."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition, rid, due in rows:
        headers = [
            (H.ATTEMPTS, H.encode_int32(2)),
            (H.BACKOFF_TIMESTAMP, H.encode_big_integer(due)),
            (H.ORIGINAL_TIMESTAMP, H.encode_big_integer(due - 3_600_000)),
        ]
        producer.produce(
            topic,
            json.dumps({"id": rid, "mode": "ok"}).encode(),
            key=rid.encode(),
            partition=partition,
            headers=headers,
        )
    assert producer.flush(10) == 0


def test_records_not_yet_due_stay_for_a_later_run(kafka_bootstrap, tmp_path):
    ledger_file = ledger.ledger_path(tmp_path)
    topology = _topology()
    ensure_topics(topology, {"bootstrap.servers": kafka_bootstrap}, partitions=2)
    tier = topology.tier(1)
    now = int(time.time() * 1000)
    past, soon, later = now - 60_000, now + 60_000, now + 120_000
    _produce(
        kafka_bootstrap,
        tier.topic,
        [
            (0, "a", past),
            (0, "b", past),
            (0, "c", soon),
            (0, "d", past),
            (0, "e", later),
            (1, "f", past),
            (1, "g", past),
        ],
    )
    options = DrainOptions(
        handler=f"{ledger.HANDLER_MODULE}:indexed", value_deserializer=f"{ledger.HANDLER_MODULE}:decode"
    )
    config = {"bootstrap.servers": kafka_bootstrap}

    first = run_local(topology, tier, config, options, cutoff_ms=now)
    by_partition = {p.partition: p for p in first.partitions}
    assert (by_partition[0].drained, by_partition[0].committed_offset, by_partition[0].stop_reason) == (
        2,
        2,
        "not_due",
    )
    assert by_partition[0].next_due_ms == soon
    assert (by_partition[1].drained, by_partition[1].committed_offset, by_partition[1].stop_reason) == (
        2,
        2,
        "end",
    )
    assert ledger.processed_ids(ledger_file) == {"a": 1, "b": 1, "f": 1, "g": 1}

    # "d" is due but sits behind "c": partition order wins, as in Spring's retry topics
    second = run_local(topology, tier, config, options, cutoff_ms=soon)
    assert {p.partition: p.drained for p in second.partitions} == {0: 2, 1: 0}
    order = list(ledger.processed_ids(ledger_file))
    assert order[4:] == ["c", "d"]  # the second run handled c, then d
    # partitions run side by side (default parallelism), so only the order within a partition is fixed
    assert [rid for rid in order if rid in "abcd"] == ["a", "b", "c", "d"]
    assert [rid for rid in order if rid in "fg"] == ["f", "g"]

    third = run_local(topology, tier, config, options, cutoff_ms=later)
    assert {p.partition: p.committed_offset for p in third.partitions} == {0: 5, 1: None}
    assert set(ledger.processed_ids(ledger_file)) == set("abcdefg")


def test_routed_records_carry_increasing_due_times_per_partition(kafka_bootstrap, tmp_path):
    ledger.ledger_path(tmp_path)
    topology = _topology()
    ensure_topics(topology, {"bootstrap.servers": kafka_bootstrap}, partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(40):  # interleaved over two partitions
        producer.produce(
            topology.topic,
            json.dumps({"id": str(i), "mode": "permanent"}).encode(),
            key=str(i).encode(),
            partition=i % 2,
        )
    assert producer.flush(10) == 0
    options = DrainOptions(
        handler=f"{ledger.HANDLER_MODULE}:indexed",
        value_deserializer=f"{ledger.HANDLER_MODULE}:decode",
        batch_size=4,
        chunk_size=7,
    )
    before = int(time.time() * 1000)
    summary = run_local(
        topology, topology.tier(0), {"bootstrap.servers": kafka_bootstrap}, options, parallelism=2
    )
    after = int(time.time() * 1000)
    assert summary.ok
    assert summary.to_dict()["totals"]["routed"] == {topology.tier(1).topic: 40}
    routed = ledger.read_all(kafka_bootstrap, topology.tier(1).topic)
    for partition in (0, 1):
        records = sorted((m for m in routed if m.partition() == partition), key=lambda m: m.offset())
        # same partition, same order as on the main topic, due times never going backwards
        assert [int(m.key()) for m in records] == list(range(partition, 40, 2))
        dues = [H.read_due_ms(m.headers()) for m in records]
        assert dues == sorted(dues), f"due times go backwards in partition {partition}"
        assert before + 3_600_000 <= dues[0]
        assert dues[-1] <= after + 3_600_000
        assert [H.read_attempts(m.headers()) for m in records] == [2] * 20


def test_following_drains_records_that_fall_due_soon_in_passes_of_the_same_run(kafka_bootstrap, tmp_path):
    ledger_file = ledger.ledger_path(tmp_path)
    topology = _topology()
    ensure_topics(topology, {"bootstrap.servers": kafka_bootstrap}, partitions=2)
    tier = topology.tier(1)
    now = int(time.time() * 1000)
    dues = {"a": now - 1_000, "b": now + 800, "c": now + 1_600, "d": now + 60_000, "e": now + 1_200}
    _produce(kafka_bootstrap, tier.topic, [(0, rid, dues[rid]) for rid in "abcd"] + [(1, "e", dues["e"])])
    config = {"bootstrap.servers": kafka_bootstrap}
    options = DrainOptions(
        handler=f"{ledger.HANDLER_MODULE}:indexed", value_deserializer=f"{ledger.HANDLER_MODULE}:decode"
    )
    passes: list[int] = []

    def drain(cutoff_ms: int):
        passes.append(cutoff_ms)
        return run_local(topology, tier, config, options, cutoff_ms=cutoff_ms)

    # without follow: what is due at the cutoff, then stop
    plain = drain_following(drain, cutoff_ms=now, follow_ms=None)
    assert (sum(p.drained for p in plain.partitions), len(passes)) == (1, 1)
    # following: b, e and c fall due within 2 s of each other and are drained by passes of the same run
    # (how many depends on how long each pass takes: one per due time at most); the last pass's cutoff is
    # no earlier than c's due time; d (due in a minute) is left
    passes.clear()
    started = int(time.time() * 1000)
    followed = drain_following(drain, cutoff_ms=started, follow_ms=2_000)
    # the first pass's cutoff is the start: c, if not yet due then, needs a later pass (a loaded machine may
    # start the run after c fell due, and then one pass takes all three)
    assert (2 if started < dues["c"] else 1) <= len(passes) <= 4, (passes, dues, started)
    assert passes == sorted(passes), (passes, dues)
    assert passes[-1] >= dues["c"], (passes, dues)
    by_partition = {p.partition: p for p in followed.partitions}
    assert (
        by_partition[0].drained,
        by_partition[0].committed_offset,
        by_partition[0].stop_reason,
        by_partition[0].next_due_ms,
    ) == (2, 3, "not_due", dues["d"])
    assert (by_partition[1].drained, by_partition[1].committed_offset, by_partition[1].stop_reason) == (
        1,
        1,
        "end",
    )
    assert followed.totals()["drained"] == 3
    assert followed.ok
    assert ledger.processed_ids(ledger_file) == {"a": 1, "b": 1, "c": 1, "e": 1}
    assert ledger.committed(kafka_bootstrap, topology.consumer_group(tier), tier.topic, 2) == {0: 3, 1: 1}
    # a stop request ends a follow wait (here for d, due in a minute) and says so
    asked = time.monotonic() + 1.0
    passes.clear()
    stopped = drain_following(
        drain,
        cutoff_ms=int(time.time() * 1000),
        follow_ms=120_000,
        should_stop=lambda: "killed" if time.monotonic() > asked else None,
    )
    assert (len(passes), stopped.stopped, stopped.totals()["drained"]) == (1, "killed", 0)
    assert int(time.time() * 1000) < dues["d"]
    assert ledger.processed_ids(ledger_file) == {"a": 1, "b": 1, "c": 1, "e": 1}


def test_a_pass_started_ahead_of_its_records_hands_none_before_its_due_time(kafka_bootstrap, tmp_path):
    """The operator's path (``wait_for_pass``, then a pass in worker processes): early records are held."""
    ledger_file = ledger.ledger_path(tmp_path)
    topology = _topology()
    ensure_topics(topology, {"bootstrap.servers": kafka_bootstrap}, partitions=2)
    tier = topology.tier(1)
    due = int(time.time() * 1000) + 2_000  # the wave; the pass starts PASS_LEAD_MS before it
    rows = [(0, "past", due - 60_000)]
    rows += [(p, f"w{p}-{i}", due + 40 * i) for p in (0, 1) for i in range(6)]  # due over 200 ms
    rows += [(1, "later", due + 60_000)]  # past the pass's cutoff: left
    _produce(kafka_bootstrap, tier.topic, rows)
    options = DrainOptions(
        handler=f"{ledger.HANDLER_MODULE}:stamped", value_deserializer=f"{ledger.HANDLER_MODULE}:decode"
    )
    config = {"bootstrap.servers": kafka_bootstrap}
    with LocalEngine(topology, tier, config, options, parallelism=2) as engine:
        cutoff = wait_for_pass(due)
        summary = drain_following(engine.drain, cutoff_ms=cutoff, follow_ms=None)
    assert summary.ok
    assert summary.totals()["drained"] == 13
    stamps = [line.split() for line in Path(ledger_file + ".stamps").read_text().splitlines()]
    early = [(rid, int(d), float(h)) for rid, d, h in stamps if float(h) < int(d)]
    assert early == [], "handed to the handler before their due time"
    assert ledger.processed_ids(ledger_file) == {rid: 1 for _, rid, _ in rows if rid != "later"}
    assert ledger.committed(kafka_bootstrap, topology.consumer_group(tier), tier.topic, 2) == {0: 7, 1: 6}
