"""Regression tests for engine faults found by the fault-injection suite (tests/faults, docs/faults.md)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from airflow_kafka_retry.engine.drain.transaction import ChunkTransaction, FencedError, RoutedRecord
from airflow_kafka_retry.engine.heads.peek import peek_heads
from airflow_kafka_retry.engine.kafka.clients import open_producer
from airflow_kafka_retry.policy.headers import codec as H
from airflow_kafka_retry.policy.routing.resolver import Destination
from airflow_kafka_retry.sandbox.scratch_topics import unique_topic

from tests.support import ledger
from tests.support.ledger import FaultInput

pytestmark = [pytest.mark.integration]


def test_a_run_fenced_while_producing_reports_fenced_and_the_close_does_not_mask_it(
    kafka_bootstrap, new_topic
):
    """Regression (found by case 7): fenced in the middle of producing a chunk, ``produce()`` raises a bare
    ``_FATAL`` (was reported as "transaction failed and was aborted"), and closing the fenced producer raised
    ``_FENCED`` from ``flush()``, masking the run's error with a raw KafkaException."""
    source, target = new_topic("fence-src"), new_topic("fence-dst", partitions=2)
    config, txn_id = {"bootstrap.servers": kafka_bootstrap}, unique_topic("fence-txn")

    class Source:  # what the router reads of a source message
        calls = 0

        def value(self) -> bytes:
            Source.calls += 1
            if (
                Source.calls == 2
            ):  # let the first record's AddPartitionsToTxn fail first: produce() raises _FATAL
                time.sleep(1.0)
            return b"v"

        def key(self) -> bytes:
            return b"k"

    routed = [
        RoutedRecord(Source(), Destination("retry", target, i % 2, 2, 0, 0, "retryable"), [], "E")  # type: ignore[arg-type]
        for i in range(200)
    ]
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": unique_topic("fence-group")})
    try:
        with open_producer(config, txn_id) as old:
            router = ChunkTransaction(old, consumer, True, {target: 2})
            router.start()
            with open_producer(config, txn_id) as new:
                ChunkTransaction(
                    new, consumer, True, {target: 2}
                ).start()  # a newer run of the same partition
                with pytest.raises(
                    FencedError, match=r"fenced by a newer run of the same partition; nothing committed"
                ):
                    router.commit(TopicPartition(source, 0, 10), routed)
    finally:
        consumer.close()


def test_the_due_check_reads_a_poison_due_time_as_the_drain_does(kafka_bootstrap):
    """Regression: the tier-due sensor's peek believed a 2^63-1 back-off timestamp, so it would skip the tier
    for ever, while the drain (Spring's rule) treats the record as due now."""
    topology = ledger.make_fault_topology("poison-peek")
    ledger.produce_fault_inputs(
        kafka_bootstrap,
        topology,
        [
            FaultInput("ok", headers=[(H.BACKOFF_TIMESTAMP, H.encode_big_integer(2**63 - 1))]),
            FaultInput("ok", headers=[(H.BACKOFF_TIMESTAMP, b"\x01" * 9)]),
        ],
        2,
    )
    peek = peek_heads({"bootstrap.servers": kafka_bootstrap}, topology.topic, topology.group_id)
    assert [(h.partition, h.due_ms) for h in peek.heads] == [(0, None), (1, None)]
