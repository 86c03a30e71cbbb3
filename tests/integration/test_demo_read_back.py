"""The demo's account starts from what the shop's topic holds, read back after the run (real broker)."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from airflow_kafka_retry.demo.account import produced_fates, read_produced
from airflow_kafka_retry.demo.orders import fate
from airflow_kafka_retry.policy.headers.replay import REPLAY_ID

pytestmark = pytest.mark.integration


def test_ids_are_read_back_with_replays_left_out_and_duplicates_counted(kafka_bootstrap, new_topic):
    topic = new_topic("demo-read-back", partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for order_id, partition in (("0", 0), ("1", 1), ("2", 0), ("2", 1)):  # order 2 written twice
        producer.produce(topic, key=order_id.encode(), value=b"{}", partition=partition)
    producer.produce(topic, key=b"1", value=b"{}", partition=0, headers=[(REPLAY_ID, b"r-1")])  # a DLT replay
    assert producer.flush(30) == 0
    written = read_produced({"bootstrap.servers": kafka_bootstrap}, topic)
    assert written == {"0": 1, "1": 1, "2": 2}
    assert produced_fates(written) == {"0": fate(0), "1": fate(1), "2": fate(2)}
