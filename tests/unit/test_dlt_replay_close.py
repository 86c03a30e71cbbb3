"""A replay raises its own error, not a failure of closing its transactional producer (issue 38 item 9).

``Replay.run`` used to ``flush`` its producer in ``finally``. A transactional producer has nothing to flush
there (``commit_transaction`` flushed every committed chunk, what is left belongs to an aborted one), and
flushing one that another replay of the same DLT fenced (a fatal error) raises a ``KafkaException``, which
replaced the error the replay was raising.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

from airflow_kafka_retry.dlt import replay as replay_module
from airflow_kafka_retry.dlt.errors import ReplayAbortedError
from airflow_kafka_retry.dlt.replay import Replay, ReplayRequest
from airflow_kafka_retry.policy.topology.file import load_topology

EXAMPLE = Path(__file__).parents[2] / "dags" / "topologies" / "orders.yaml"
NOWHERE = {"bootstrap.servers": "127.0.0.1:9"}


class _Reader:
    def __init__(self, kafka_config):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def partitions(self, topic):
        return 1


class _FencedProducer:
    """A transactional producer another replay fenced: every call fails with a fatal error."""

    def __init__(self) -> None:
        self.flushed = 0

    def flush(self, timeout=None):
        self.flushed += 1
        raise KafkaException(KafkaError(KafkaError._FENCED, "producer fenced", fatal=True))


def test_the_replays_own_error_is_raised_not_the_fenced_producers_flush(monkeypatch):
    replay = Replay(load_topology(EXAMPLE), NOWHERE, ReplayRequest())
    producer = _FencedProducer()
    monkeypatch.setattr(replay_module, "TopicReader", _Reader)
    monkeypatch.setattr(replay, "_fence", lambda watch: producer)

    def fenced(reader, partitions):
        raise ReplayAbortedError("replay r of orders-dlt was fenced by another replay of the same DLT")

    monkeypatch.setattr(replay, "_resume", fenced)
    with pytest.raises(ReplayAbortedError, match="was fenced by another replay of the same DLT"):
        replay.run()
    assert producer.flushed == 0, "a transactional producer has nothing to flush once the run is over"
