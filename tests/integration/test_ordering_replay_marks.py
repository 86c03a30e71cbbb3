"""
A replay under ``ordering: key`` with ``release_on: replay`` marks each keyed record it moves in
``<topic>-hold[p]`` (``p``: the DLT partition it read), with ``at`` its DLT location and ``to`` where its copy
landed, in the transaction that moves it; on real Kafka.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from airflow_kafka_retry.dlt.replay import ReplayRequest, replay_dlt
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics, topology_topics
from airflow_kafka_retry.policy.errors import ReplayError
from airflow_kafka_retry.policy.headers import codec as H, replay as R
from airflow_kafka_retry.policy.ordering.entries import MARK, ORDER_HEADER, Location, Mark, key_id
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.sandbox.scratch_topics import (
    admin_client,
    create_topics,
    delete_topics,
    unique_topic,
)

from tests.integration.test_ordering_release import hold_records
from tests.support import ledger

pytestmark = [pytest.mark.integration]

KEYS = [b"acct-1", b"acct-2", None, b"\x00binary"]


def dead_letters(bootstrap: str, topology: Topology) -> None:
    """Four dead letters as Spring writes them, on DLT partitions 0 and 1, one with a null key."""
    names = H.DEAD_LETTER_NAMES
    producer = Producer({"bootstrap.servers": bootstrap})
    for i, key in enumerate(KEYS):
        producer.produce(
            str(topology.dlt_topic),
            key=key,
            value=b"payload",
            partition=i % 2,
            headers=[
                (names.original_topic, topology.topic.encode()),
                (names.original_partition, H.encode_int32(i % 2)),
                (names.original_offset, H.encode_int64(100 + i)),
                (names.original_timestamp, H.encode_int64(1)),
                (names.exception_fqcn, b"com.example.InvalidOrder"),
            ],
        )
    assert producer.flush(10) == 0


def partitions_of(bootstrap: str, topic: str) -> int:
    """The partition count of ``topic`` (0: it does not exist)."""
    found = admin_client(bootstrap).list_topics(timeout=10).topics.get(topic)
    return 0 if found is None or found.error is not None else len(found.partitions)


def ordered(bootstrap: str, release_on: str, hold_partitions: int = 2) -> Topology:
    topology = Topology.from_mapping(
        {
            "topic": unique_topic(f"replay-{release_on}"),
            "group_id": "svc",
            "attempts": 2,
            "ordering": "key",
            "release_on": release_on,
        }
    )
    if hold_partitions != 2:  # a hold topic made by hand before the setup, with another partition count
        create_topics(bootstrap, [str(topology.hold_topic)], hold_partitions)
    ensure_topics(topology, {"bootstrap.servers": bootstrap}, partitions=2)
    dead_letters(bootstrap, topology)
    return topology


def test_a_replay_marks_each_keyed_head_it_moves_from_the_dlt(kafka_bootstrap):
    topology = ordered(kafka_bootstrap, "replay")
    hold = str(topology.hold_topic)
    try:
        summary = replay_dlt(topology, {"bootstrap.servers": kafka_bootstrap}, ReplayRequest())
        assert summary.moved == 4
        copies = {
            m.key(): m for m in ledger.read_all(kafka_bootstrap, topology.topic) if R.is_replayed(m.headers())
        }
        assert set(copies) == set(KEYS)
        for partition in (0, 1):
            marks = hold_records(kafka_bootstrap, hold, partition)
            assert all(m.headers() == [(ORDER_HEADER, MARK)] for m in marks)
            read = [Mark.from_record(m.key(), m.value(), f"{hold}[{partition}]") for m in marks]
            wanted = {}
            for offset, key in enumerate(KEYS[partition::2]):
                if key is not None:  # a null key is never ordered: no mark
                    copy = copies[key]
                    wanted[key_id(key)] = (
                        Location(str(topology.dlt_topic), partition, offset),
                        Location(topology.topic, copy.partition(), copy.offset()),
                    )
            assert {m.key_id: (m.at, m.to) for m in read} == wanted
            assert {m.kind for m in read} == {"moved"}
    finally:
        delete_topics(kafka_bootstrap, topology_topics(topology))


def test_no_marks_under_release_on_dlt_and_a_hold_topic_of_another_count_is_refused(kafka_bootstrap):
    free = ordered(kafka_bootstrap, "dlt")
    odd = ordered(kafka_bootstrap, "replay", hold_partitions=3)
    config = {"bootstrap.servers": kafka_bootstrap}
    try:
        assert replay_dlt(free, config, ReplayRequest()).moved == 4
        assert hold_records(kafka_bootstrap, str(free.hold_topic), 0) == []
        assert hold_records(kafka_bootstrap, str(free.hold_topic), 1) == []
        assert partitions_of(kafka_bootstrap, str(odd.hold_topic)) == 3
        with pytest.raises(ReplayError, match=f"{odd.hold_topic} has 3, .*nothing was moved"):
            replay_dlt(odd, config, ReplayRequest())
        assert [m for m in ledger.read_all(kafka_bootstrap, odd.topic) if R.is_replayed(m.headers())] == []
    finally:
        for topology in (free, odd):
            delete_topics(kafka_bootstrap, topology_topics(topology))
