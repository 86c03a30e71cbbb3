"""The DLT watch's committed-offset read goes on through a moving group coordinator, up to its deadline.

In a rolling restart a ``watch_dlt`` task failed on ``NOT_COORDINATOR`` from ``Consumer.committed``: the
broker that answered no longer coordinated the group, a moment before another did. The real-parts case is
fault case 19 (``tests/faults/test_cluster_rolling_restart.py``); here the client is a stand-in that
answers as librdkafka does.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from airflow_kafka_retry.engine.scans import dlt_scan as dlt_watch
from airflow_kafka_retry.engine.scans.dlt_scan import DltWatchError

KEYS = [("orders-dlt", 0), ("orders-dlt", 1)]


class _Client:
    """``committed()`` raises each of ``failures`` in turn, then answers offset 7 for every partition."""

    def __init__(self, *failures: KafkaError) -> None:
        self.failures = list(failures)
        self.calls = 0

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        self.calls += 1
        if self.failures:
            raise KafkaException(self.failures.pop(0))
        return [TopicPartition(tp.topic, tp.partition, 7) for tp in tps]


def test_a_moving_coordinator_is_asked_again(monkeypatch) -> None:
    monkeypatch.setattr(dlt_watch, "COMMITTED_RETRY_S", 0.01)
    client = _Client(
        KafkaError(KafkaError.NOT_COORDINATOR), KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS)
    )
    offsets, _ = dlt_watch._committed(client, KEYS, time.monotonic() + 10)  # type: ignore[arg-type]
    assert offsets == dict.fromkeys(KEYS, 7)
    assert client.calls == 3


def test_another_error_or_the_deadline_fails_naming_the_partitions(monkeypatch) -> None:
    monkeypatch.setattr(dlt_watch, "COMMITTED_RETRY_S", 0.01)
    with pytest.raises(
        DltWatchError, match=r"orders-dlt\[0\], orders-dlt\[1\]: .*GROUP_AUTHORIZATION_FAILED"
    ):
        dlt_watch._committed(  # type: ignore[arg-type]
            _Client(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED)), KEYS, time.monotonic() + 10
        )
    busy = _Client(*[KafkaError(KafkaError.NOT_COORDINATOR)] * 1000)
    with pytest.raises(DltWatchError, match="NOT_COORDINATOR"):
        dlt_watch._committed(busy, KEYS, time.monotonic() + 1.0)  # type: ignore[arg-type]
    assert busy.calls < 1000, "asked past its deadline"
