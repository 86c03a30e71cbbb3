"""A replay partition read from a header that is negative means "by key" (issue 29, item 4), real broker."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer

from airflow_kafka_retry.dlt.replay import ReplayRequest, replay_dlt
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.engine.logs.replay_log import log_topic
from airflow_kafka_retry.policy.headers import codec as H, replay as R

from tests.support import ledger

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("partition", [H.encode_int32(-2), b"zz"])
def test_a_negative_or_non_numeric_original_partition_replays_by_key(kafka_bootstrap, partition):
    topology = ledger.make_topology("negpart")
    config = {"bootstrap.servers": kafka_bootstrap}
    ensure_topics(topology, config, partitions=2)
    headers = [
        ("kafka_dlt-original-topic", topology.topic.encode()),
        ("kafka_dlt-original-partition", partition),
        ("kafka_dlt-original-offset", H.encode_int64(3)),
        ("kafka_dlt-exception-fqcn", b"com.acme.Broken"),
    ]
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(
        topology.dlt_topic, value=b'{"id": "n1", "mode": "ok"}', key=b"n1", partition=0, headers=headers
    )
    assert producer.flush(30) == 0

    summary = replay_dlt(topology, config, ReplayRequest(), replay_id="neg-1")
    assert summary.moved == 1
    [copy] = [m for m in ledger.read_all(kafka_bootstrap, topology.topic) if R.is_replayed(m.headers())]
    assert copy.partition() in (0, 1)
    [entry] = [
        json.loads(m.value())
        for m in ledger.read_all(kafka_bootstrap, log_topic(topology.dlt_topic))
        if m.key().startswith(b"record/")
    ]
    assert entry["by_key"] is True, entry
    assert entry["target_partition"] == copy.partition(), entry
    # a rerun of the same replay finds it done, never fails on the partition
    assert replay_dlt(topology, config, ReplayRequest(), replay_id="neg-1").moved == 0
