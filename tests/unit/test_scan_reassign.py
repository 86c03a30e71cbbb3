"""A scan on a consumer an earlier scan used (``engine/kafka/scan.py``), no broker."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_kafka_retry.engine.kafka.scan import Scan

if TYPE_CHECKING:
    from confluent_kafka import TopicPartition


class Consumer:
    """Notes the calls a scan makes before it reads."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def resume(self, tps: list[TopicPartition]) -> None:
        self.calls.append("resume")

    def assign(self, tps: list[TopicPartition]) -> None:
        self.calls.append("assign")


def test_a_partition_an_earlier_scan_paused_is_resumed_before_it_is_assigned_again():
    # resumed after its assignment, its first fetch waited for the client's next wake-up: 1 s
    consumer = Consumer()
    Scan(consumer, {("orders-order-state", 0): 12})
    assert consumer.calls[:2] == ["resume", "assign"]
