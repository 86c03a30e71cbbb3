"""Peeking at partition heads on a real broker: committed offsets, due headers, idle partitions, no
commits."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.heads.peek import PeekError, peek_heads
from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.policy.headers import codec as H
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.sandbox.scratch_topics import unique_topic

from tests.support import ledger
from tests.support.tier_records import commit, produce

pytestmark = pytest.mark.integration

HOUR = 3_600_000


def _now() -> int:
    return time.time_ns() // 1_000_000


def test_empty_tier_is_idle(kafka_bootstrap, new_topic):
    topic = new_topic("peek-empty", partitions=3)
    peek = peek_heads({"bootstrap.servers": kafka_bootstrap}, topic, unique_topic("g"), timeout_s=30)
    assert peek.partitions == (0, 1, 2)
    assert peek.heads == ()
    assert not peek.pending
    assert peek.idle_partitions == [0, 1, 2]


def test_fully_committed_tier_is_idle(kafka_bootstrap, new_topic):
    topic = new_topic("peek-done", partitions=2)
    group = unique_topic("g")
    now = _now()
    produce(kafka_bootstrap, topic, [(0, now - HOUR), (0, now - HOUR), (1, now - HOUR)])
    commit(kafka_bootstrap, group, topic, {0: 2, 1: 1})
    peek = peek_heads({"bootstrap.servers": kafka_bootstrap}, topic, group, timeout_s=30)
    assert peek.heads == ()
    # another group (nothing committed) sees the same records pending from the beginning
    other = peek_heads({"bootstrap.servers": kafka_bootstrap}, topic, unique_topic("g"), timeout_s=30)
    assert [(h.partition, h.offset, h.due_ms) for h in other.heads] == [
        (0, 0, now - HOUR),
        (1, 0, now - HOUR),
    ]


def test_mixed_partitions_from_committed_offsets(kafka_bootstrap, new_topic):
    """Pending-not-due, due, idle and header-less heads, each from its own committed offset; nothing
    committed."""
    topic = new_topic("peek-mixed", partitions=4)
    group = unique_topic("g")
    now = _now()
    produce(
        kafka_bootstrap,
        topic,
        [
            (0, now - HOUR),
            (0, now + HOUR),
            (0, now - 2 * HOUR),  # committed 1: head is offset 1, not due
            (1, now - 5_000),
            (1, now + HOUR),  # nothing committed: head offset 0, due
            (2, now - HOUR),  # committed 1: idle
            (3, None),
            (3, None),  # committed 1: head without due header
        ],
        extra_headers=[("trace-id", b"t")],
    )
    commit(kafka_bootstrap, group, topic, {0: 1, 2: 1, 3: 1})
    before = ledger.committed(kafka_bootstrap, group, topic, 4)

    peek = peek_heads({"bootstrap.servers": kafka_bootstrap}, topic, group, timeout_s=30)

    assert [(h.partition, h.offset, h.due_ms) for h in peek.heads] == [
        (0, 1, now + HOUR),
        (1, 0, now - 5_000),
        (3, 1, None),
    ]
    assert peek.idle_partitions == [2]
    assert all(h.timestamp_ms is not None and abs(h.timestamp_ms - now) < 10 * 60_000 for h in peek.heads)
    later = _now()
    assert [h.is_due(later) for h in peek.heads] == [False, True, True]
    assert peek.heads[2].due_at(later) == later  # a record without due header is due now
    # peeking committed nothing and moved nothing
    assert ledger.committed(kafka_bootstrap, group, topic, 4) == before
    assert before[1] < 0
    assert before[0] == 1
    # the payload never appears in what a peek returns
    assert "secret-payload" not in repr(peek.to_dict())


def test_only_chosen_partitions(kafka_bootstrap, new_topic):
    topic = new_topic("peek-some", partitions=3)
    now = _now()
    produce(kafka_bootstrap, topic, [(0, now), (1, now), (2, now)])
    peek = peek_heads({"bootstrap.servers": kafka_bootstrap}, topic, unique_topic("g"), partitions=[2, 0])
    assert peek.partitions == (0, 2)
    assert [h.partition for h in peek.heads] == [0, 2]


def test_records_appended_after_a_consumed_run_are_seen(kafka_bootstrap, new_topic):
    topic = new_topic("peek-append", partitions=1)
    group = unique_topic("g")
    now = _now()
    produce(kafka_bootstrap, topic, [(0, now - HOUR)])
    commit(kafka_bootstrap, group, topic, {0: 1})
    assert not peek_heads({"bootstrap.servers": kafka_bootstrap}, topic, group).pending
    [offset] = produce(kafka_bootstrap, topic, [(0, now + 1234)])
    [head] = peek_heads({"bootstrap.servers": kafka_bootstrap}, topic, group).heads
    assert (head.partition, head.offset, head.due_ms) == (0, offset, now + 1234)
    assert offset == 1


def test_missing_topic_names_it(kafka_bootstrap):
    topic = unique_topic("peek-missing")
    with pytest.raises(PeekError, match=f"topic\\(s\\) {topic} do not exist"):
        peek_heads({"bootstrap.servers": kafka_bootstrap}, topic, unique_topic("g"), timeout_s=10)


def test_unreachable_broker_times_out_naming_the_topic():
    with pytest.raises(PeekError) as info:
        peek_heads(
            {"bootstrap.servers": "127.0.0.1:1"}, "orders-retry-1", "g", partitions=[0, 1], timeout_s=2
        )
    assert "orders-retry-1[0, 1]" in str(info.value)


def test_heads_of_tiers_the_engine_wrote_and_committed(kafka_bootstrap, tmp_path):
    """After a transactional drain of the main topic: main is idle (the commit sits past the transaction
    marker), retry-1 holds the failures with the engine's due headers, not due for an hour."""
    ledger.ledger_path(tmp_path)
    topic = unique_topic("peek-engine")
    topology = Topology.from_mapping(
        {
            "topic": topic,
            "group_id": f"{topic}-svc",
            "attempts": 3,
            "backoff": {"kind": "fixed", "delay": "1h"},
            "not_retryable": [f"{ledger.HANDLER_MODULE}.InvalidOrder"],
        }
    )
    inputs = ledger.produce_inputs(kafka_bootstrap, topology, 28, 2)
    config = {"bootstrap.servers": kafka_bootstrap}
    main, retry = topology.tier(0), topology.tier(1)
    assert peek_heads(config, main.topic, topology.consumer_group(main)).heads[0].due_ms is None
    started = _now()
    summary = run_local(
        topology,
        main,
        config,
        DrainOptions(
            handler=f"{ledger.HANDLER_MODULE}:indexed", value_deserializer=f"{ledger.HANDLER_MODULE}:decode"
        ),
    )
    assert summary.ok
    assert summary.totals()["drained"] == 28
    assert not peek_heads(config, main.topic, topology.consumer_group(main)).pending

    peek = peek_heads(config, retry.topic, topology.consumer_group(retry))
    assert [h.partition for h in peek.heads] == [0, 1]
    assert {part for mode, part, _ in inputs.records.values() if mode in ledger.RETRIED_MODES} == {0, 1}
    assert all(h.offset == 0 for h in peek.heads)  # nothing of retry-1 is committed yet
    for head in peek.heads:
        assert started + HOUR <= head.due_ms <= _now() + HOUR
        assert not head.is_due(_now())


def test_records_of_an_open_transaction_are_not_pending_until_committed(kafka_bootstrap, new_topic):
    topic = new_topic("peek-txn", partitions=1)
    group = unique_topic("g")
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": unique_topic("txn")})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"x", partition=0, headers=[(H.BACKOFF_TIMESTAMP, H.encode_big_integer(5))])
    producer.flush(30)
    assert not peek_heads({"bootstrap.servers": kafka_bootstrap}, topic, group, timeout_s=30).pending
    producer.commit_transaction(30)
    [head] = peek_heads({"bootstrap.servers": kafka_bootstrap}, topic, group, timeout_s=30).heads
    assert (head.offset, head.due_ms) == (0, 5)
