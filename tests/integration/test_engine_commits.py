"""Chunks in which every record succeeds still commit their offsets (nothing to route, offsets only)."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.sandbox.scratch_topics import unique_topic

from tests.support import ledger

pytestmark = [pytest.mark.integration]


@pytest.mark.parametrize(
    "transactional",
    [
        pytest.param(
            True, id="transactional", marks=pytest.mark.requires_capability("offsets_only_transactions")
        ),
        pytest.param(False, id="idempotent"),
    ],
)
def test_successful_chunks_commit_their_offsets(kafka_bootstrap, tmp_path, transactional):
    ledger_file = ledger.ledger_path(tmp_path)
    topic = unique_topic("commits")
    topology = Topology.from_mapping({"topic": topic, "group_id": f"{topic}-svc"})
    ensure_topics(topology, {"bootstrap.servers": kafka_bootstrap}, partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(25):
        producer.produce(topic, json.dumps({"id": str(i), "mode": "ok"}).encode(), partition=0)
    assert producer.flush(10) == 0
    options = DrainOptions(
        handler=f"{ledger.HANDLER_MODULE}:indexed",
        chunk_size=10,
        transactional=transactional,
        value_deserializer=f"{ledger.HANDLER_MODULE}:decode",
    )

    summary = run_local(topology, topology.tier(0), {"bootstrap.servers": kafka_bootstrap}, options)

    assert summary.partitions[0].committed_offset == 25
    assert ledger.committed(kafka_bootstrap, topology.consumer_group(topology.tier(0)), topic, 1) == {0: 25}
    again = run_local(topology, topology.tier(0), {"bootstrap.servers": kafka_bootstrap}, options)
    assert again.partitions[0].drained == 0
    assert sum(ledger.processed_ids(ledger_file).values()) == 25
