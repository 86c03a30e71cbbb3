"""
Other frameworks' dead-letter queues a topology names (``dead_letter_queues``), on the real broker.

The DLT watch (operator and engine) reports their dead letters once each with family and original
coordinates, a queue's ``family`` names its headerless records, ``dlt inspect`` takes that family by default,
and the topology watcher's ``watch_dlt`` lane (as the factory builds it) fires for a new record in a queue
that did not exist when it started. Headers are produced as each framework writes them (the real frameworks'
records are in ``test_dead_letter_sources.py`` and the share-group and Connect CLI tests).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer

from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.factory.topology_dag import topology_lanes
from airflow_kafka_retry.operators.dlt_watch import WATCH_GROUP_TEMPLATE, DltWatchOperator
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.sandbox.scratch_topics import create_topics, delete_topics, unique_topic

from tests.integration.test_dead_letter_families_cli import _cli
from tests.integration.test_tier_event_trigger import WAIT_S, _Running
from tests.integration.test_topology_event_trigger import SETUP, _brief, _fired, _heads, _trigger
from tests.support import ledger
from tests.support.tier_records import commit
from tests.unit.test_dead_letter_families import utf8

pytestmark = pytest.mark.integration


def _connect_letter(topic: str, partition: int, offset: int) -> list[tuple[str, bytes]]:
    """A sink connector's dead letter with context headers (DeadLetterQueueReporter, decimal text)."""
    return [
        ("trace-id", b"t-1"),  # the source's own header, kept first
        ("__connect.errors.topic", utf8(topic)),
        ("__connect.errors.partition", utf8(str(partition))),
        ("__connect.errors.offset", utf8(str(offset))),
        ("__connect.errors.connector.name", utf8("payments-sink")),
        ("__connect.errors.task.id", utf8("0")),
        ("__connect.errors.stage", utf8("VALUE_CONVERTER")),
        ("__connect.errors.class.name", utf8("org.apache.kafka.connect.json.JsonConverter")),
        ("__connect.errors.exception.class.name", utf8("org.apache.kafka.connect.errors.DataException")),
        ("__connect.errors.exception.message", utf8("Converting byte[] to Kafka Connect data failed")),
    ]


def _share_letter(topic: str, partition: int, offset: int) -> list[tuple[str, bytes]]:
    """A share group's dead letter (ShareGroupDLQStateManager: six headers, decimal text)."""
    return [
        ("__dlq.errors.topic", utf8(topic)),
        ("__dlq.errors.partition", utf8(str(partition))),
        ("__dlq.errors.offset", utf8(str(offset))),
        ("__dlq.errors.group", utf8("orders-share")),
        ("__dlq.errors.delivery.count", utf8("2")),
        ("__dlq.errors.message", utf8("Offset delivery count exceeded the threshold.")),
    ]


def _produce(bootstrap: str, rows: list[tuple[str, int, list]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for topic, partition, headers in rows:
        producer.produce(topic, key=b"k", value=b"card=4111-secret", partition=partition, headers=headers)
    assert producer.flush(30) == 0


@pytest.fixture
def named_queues(kafka_bootstrap, tmp_path):
    """A topology naming a Connect DLQ (family kafka-connect), a share-group DLQ and one not created yet."""
    topic = unique_topic("queues")
    connect, share, later = unique_topic("connect-dlq"), unique_topic("dlq.share"), unique_topic("dlq.later")
    data = {
        "topic": topic,
        "group_id": f"{topic}-svc",
        "attempts": 2,
        "dead_letter_queues": [{"topic": connect, "family": "kafka-connect"}, share, later],
    }
    topology = Topology.from_mapping(data)
    ensure_topics(topology, {"bootstrap.servers": kafka_bootstrap}, partitions=1)
    create_topics(kafka_bootstrap, [connect], 1)
    create_topics(kafka_bootstrap, [share], 2)
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(data))
    yield topology, path, (connect, share, later)
    delete_topics(kafka_bootstrap, [connect, share, later])


def _reported(result: dict) -> list[tuple[str, int, int]]:
    return sorted((d["dlt_topic"], d["dlt_partition"], d["dlt_offset"]) for d in result["dead_letters"])


def _watch(path: Path, conn: str, calls: list[dict]) -> dict:
    return DltWatchOperator(
        task_id="watch_dlt",
        topology=path,
        kafka_conn_id=conn,
        on_dlt=lambda context: calls.append(json.loads(json.dumps(context["kafka_retry_summary"]))),
    ).execute({})


def test_the_watch_reports_each_named_queues_dead_letters_once_with_family_and_coordinates(
    kafka_bootstrap, kafka_conn, named_queues
):
    topology, path, (connect, share, later) = named_queues
    source = topology.topic
    _produce(
        kafka_bootstrap,
        [
            (connect, 0, _connect_letter(source, 1, 9_000_000_000)),
            (connect, 0, [("trace-id", b"t-2")]),  # Connect without context headers: the source's only
            (share, 1, _share_letter(source, 1, 42)),
            (share, 0, []),  # a queue named without family: a headerless record is unknown
        ],
    )
    calls: list[dict] = []

    result = _watch(path, kafka_conn, calls)

    assert [c["totals"]["new_records"] for c in calls] == [4]  # the notifier saw them, once
    assert result["totals"]["families"] == {"kafka-connect": 2, "share-group": 1, "unknown": 1}
    assert result["totals"]["dlt_topic_families"] == {
        connect: {"kafka-connect": 2},
        share: {"share-group": 1, "unknown": 1},
    }
    assert set(result["dlt_topics_watched"]) == {
        *(t.topic for t in topology.dlt_tiers),
        topology.parking_topic,
        connect,
        share,
    }  # the queue not created yet is left out, not an error
    assert result["dead_letter_queues"] == [
        {"topic": connect, "family": "kafka-connect", "exists": True},
        {"topic": share, "family": None, "exists": True},
        {"topic": later, "family": None, "exists": False},
    ]
    assert _reported(result) == [(connect, 0, 0), (connect, 0, 1), (share, 0, 0), (share, 1, 0)]
    by_where = {(d["dlt_topic"], d["dlt_partition"], d["dlt_offset"]): d for d in result["dead_letters"]}
    full = by_where[(connect, 0, 0)]
    assert (full["family"], full["topic"], full["partition"], full["offset"], full["connector"]) == (
        "kafka-connect",
        source,
        1,
        9_000_000_000,
        "payments-sink",
    )
    assert full["exception"] == "org.apache.kafka.connect.errors.DataException"
    bare = by_where[(connect, 0, 1)]  # named by the queue's family, with what it lacks
    assert (bare["family"], bare["topic"], bare["partition"], bare["offset"]) == (
        "kafka-connect",
        None,
        None,
        None,
    )
    # what each lacks, counted by field: the headerless Connect one all but its (source's) timestamp
    assert result["totals"]["missing"] == {
        "original_topic": 2,  # the headerless two
        "original_partition": 2,
        "original_offset": 2,
        "original_timestamp": 2,  # the share group's (never kept) and the unknown one
        "failed_at": 2,  # both Connect ones (the record keeps the source's timestamp)
        "group_or_connector": 2,
        "failure_class": 3,  # the share group names none either
        "failure_message": 2,
        "delivery_count": 3,  # Connect never gives one
    }
    shared = by_where[(share, 1, 0)]
    assert (shared["family"], shared["topic"], shared["partition"], shared["offset"]) == (
        "share-group",
        source,
        1,
        42,
    )
    assert (shared["consumer_group"], shared["delivery_count"]) == ("orders-share", 2)
    assert shared["exception"] == "<share-group: Offset delivery count exceeded the threshold.>"
    assert by_where[(share, 0, 0)]["family"] == "unknown"
    assert "4111" not in json.dumps(result)  # never payloads
    group = WATCH_GROUP_TEMPLATE.format(group_id=topology.group_id)
    assert ledger.committed(kafka_bootstrap, group, connect, 1) == {0: 2}  # from the watch group's offsets
    assert ledger.committed(kafka_bootstrap, group, share, 2) == {0: 1, 1: 1}

    # nothing new: no notification
    again = _watch(path, kafka_conn, calls)
    assert (again["totals"]["new_records"], len(calls)) == (0, 1)

    # the late queue appears (its framework creates it): its first dead letter is reported, alone
    create_topics(kafka_bootstrap, [later], 1)
    _produce(kafka_bootstrap, [(later, 0, _share_letter(source, 0, 7))])
    third = _watch(path, kafka_conn, calls)
    assert len(calls) == 2
    assert _reported(third) == [(later, 0, 0)]
    assert third["totals"]["dlt_topic_families"] == {later: {"share-group": 1}}
    assert third["dead_letter_queues"][2] == {"topic": later, "family": None, "exists": True}


def test_inspect_takes_the_queues_family_by_default(kafka_bootstrap, named_queues):
    topology, path, (connect, _, _) = named_queues
    _produce(kafka_bootstrap, [(connect, 0, [("trace-id", b"t-2")])])
    common = ["--topology", str(path), "--bootstrap", kafka_bootstrap, "--dlt", connect, "--format", "json"]

    named = _cli("dlt", "inspect", *common)
    detected = _cli("dlt", "inspect", *common, "--family", "auto")

    assert named.returncode == detected.returncode == 0, named.stderr[-2000:] + detected.stderr[-2000:]
    report = json.loads(named.stdout)
    assert (report["families"], report["assumed_family"]) == ({"kafka-connect": 1}, "kafka-connect")
    [sample] = [s for g in report["groups"] for s in g["samples"]]
    assert {"original_topic", "failure_class"} <= set(sample["missing"])
    assert json.loads(detected.stdout)["families"] == {"unknown": 1}
    # a replay reads the queue as the same family: the reason names Connect's context headers
    replay = _cli(
        "dlt",
        "replay",
        "--topology",
        str(path),
        "--bootstrap",
        kafka_bootstrap,
        "--dlt",
        connect,
        "--dry-run",
    )
    assert replay.returncode == 2
    assert "errors.deadletterqueue.context.headers.enable=true" in replay.stderr, replay.stderr[-2000:]


@pytest.mark.parametrize(
    "idle_check",
    [0.5, 600.0],
    ids=["idle-check-0.5s", "idle-check-10min"],  # 10 min: only the 5 s look for an awaited topic finds it
)
def test_the_watch_lane_fires_for_a_new_record_in_a_named_queue(
    kafka_bootstrap, kafka_conn, named_queues, idle_check
):
    """A DLQ appears at its framework's first dead letter: the lane looks for it every 5 s, not idle_check."""
    topology, _, (connect, share, later) = named_queues
    [lane] = topology_lanes(topology, (), {}, dlt_watch=True)  # the factory's watch_dlt lane
    assert {connect, share, later} <= set(lane["topics"])
    assert {connect, share, later} <= set(lane["optional_topics"])
    _produce(kafka_bootstrap, [(connect, 0, _connect_letter(topology.topic, 0, 5))])
    trigger = _trigger(kafka_conn, [lane], idle_check=idle_check)

    def a_run_then_a_new_queue(_events) -> None:
        commit(kafka_bootstrap, lane["group"], connect, {0: 1})  # the watch task's run takes the first
        time.sleep(
            2.0
        )  # the lane saw the commit (commit_check 0.2 s): it is idle, its next look idle_check on
        create_topics(kafka_bootstrap, [later], 1)  # the broker creates a share group's DLQ at any time
        _produce(kafka_bootstrap, [(later, 0, _share_letter(topology.topic, 0, 3))])

    events = _Running(trigger).for_seconds(
        WAIT_S,
        until=lambda ev: len(_fired(ev, "watch_dlt")) == 1,
        then=a_run_then_a_new_queue,
        done=lambda ev: len(_fired(ev, "watch_dlt")) >= 2,
    )

    assert [_heads(part) for _, part in _fired(events, "watch_dlt")] == [
        [(connect, 0, 0)],
        [(later, 0, 0)],
    ], _brief(events)
    assert not [e for _, e in events if SETUP in e["due"]], _brief(events)  # a missing queue is no setup
