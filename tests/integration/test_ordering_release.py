"""
``ordering release`` and the state read on real Kafka: state entries written as the keeper writes them, the
release mark read back from ``<topic>-hold`` (what the keeper does with it is tested with the keeper).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from airflow_kafka_retry.dlt.inspect import inspect_dlt
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics, topology_topics
from airflow_kafka_retry.engine.scans.order_state import read_order_state
from airflow_kafka_retry.ordering.release import NotBlocked, ReleaseError, release_key
from airflow_kafka_retry.policy.ordering.entries import (
    MARK,
    ORDER_HEADER,
    BlockedKey,
    Held,
    Location,
    Mark,
    key_id,
)
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.sandbox.scratch_topics import (
    delete_topics,
    unique_topic,
)

from tests.support.cli_run import run_cli

pytestmark = [pytest.mark.integration]

PARTITIONS = 3


@pytest.fixture
def ordered(kafka_bootstrap: str, tmp_path: Any) -> Any:
    """An ``ordering: key`` topology with its hold and state topics (3 partitions), and its file."""
    topic = unique_topic("ordered")
    topology = Topology.from_mapping(
        {"topic": topic, "group_id": "svc", "attempts": 2, "ordering": "key", "release_on": "replay"}
    )
    assert topology.hold_topic
    assert topology.order_state_topic
    ensure_topics(
        topology, {"bootstrap.servers": kafka_bootstrap}, partitions=PARTITIONS
    )  # hold and state too
    path = tmp_path / "topology.yaml"
    path.write_text(
        f"topic: {topic}\ngroup_id: svc\nattempts: 2\nordering: key\nrelease_on: replay\n", encoding="utf-8"
    )
    yield topology, path
    delete_topics(kafka_bootstrap, topology_topics(topology))


def write_state(bootstrap: str, topic: str, entries: list[tuple[int, bytes | None, bytes | None]]) -> None:
    """State records (partition, record key, value) as the keeper writes them (not in a transaction here)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for partition, key, value in entries:
        producer.produce(topic, key=key, value=value, partition=partition)
    assert producer.flush(30) == 0


def hold_records(bootstrap: str, hold: str, partition: int) -> list[Any]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(hold, partition, 0)])
    found = []
    try:
        for _ in range(200):
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                break  # partition EOF
            found.append(message)
    finally:
        consumer.close()
    return found


def test_the_state_is_read_per_partition_without_keys_and_a_release_mark_lands(kafka_bootstrap, ordered):
    topology, path = ordered
    state_topic, hold = topology.order_state_topic, topology.hold_topic
    acct, other, freed = key_id(b"acct-42"), key_id(b"\x00\xffbinary"), key_id(b"freed")
    assert acct
    assert other
    assert freed
    head = Location(f"{topology.topic}-retry-1", 1, 7)
    blocked = BlockedKey(
        head, (Held(3, 130, 2_000), Held(4, 131, 2_500)), since_ms=1_000, head_main_offset=100
    )
    write_state(
        kafka_bootstrap,
        state_topic,
        [
            (1, acct, BlockedKey(Location(topology.topic, 1, 100), since_ms=1_000).to_bytes()),
            (1, acct, blocked.to_bytes()),  # the later entry wins
            (1, freed, BlockedKey(head, since_ms=500).to_bytes()),
            (1, freed, None),  # a tombstone frees the key
            (
                2,
                other,
                BlockedKey(Location(f"{topology.topic}-dlt", 2, 0), since_ms=5_000, in_dlt=True).to_bytes(),
            ),
            (2, b"short", b"{}"),  # not ours: counted and named, the read goes on
            (0, key_id(b"x"), b"not json"),
        ],
    )

    state = read_order_state({"bootstrap.servers": kafka_bootstrap}, state_topic, timeout_s=30)
    assert state.error is None
    shown = state.to_dict(now_ms=11_000)
    by_partition = {p["partition"]: p for p in shown["partitions"]}
    assert [by_partition[p]["blocked_keys"] for p in range(3)] == [0, 1, 1]
    assert by_partition[1]["held_records"] == 2
    assert by_partition[1]["oldest"] == {
        "since_ms": 1_000,
        "age_s": 10.0,
        "head": str(head),
        "head_main_offset": 100,
        "held": 2,
        "in_dlt": False,
    }
    assert by_partition[2]["bad_entries"] == 1
    assert by_partition[0]["bad_entries"] == 1
    assert by_partition[2]["bad"][0].startswith(f"{state_topic}[2]@1: ")
    assert by_partition[0]["bad"][0].startswith(f"{state_topic}[0]@0: the state entry is not JSON")
    assert shown["totals"]["blocked_keys"] == 2
    assert shown["totals"]["held_records"] == 2
    assert shown["totals"]["oldest"]["since_ms"] == 1_000
    assert acct.hex() not in json.dumps(shown)
    assert "acct-42" not in json.dumps(shown)

    config = {"bootstrap.servers": kafka_bootstrap}
    inspected = inspect_dlt(topology, config)["blocked_keys"]  # dlt inspect shows the same, without keys
    assert [(p["blocked_keys"], p["held_records"], p["bad"]) for p in inspected["partitions"]] == [
        (p["blocked_keys"], p["held_records"], p["bad"]) for p in shown["partitions"]
    ]
    assert inspected["totals"]["oldest"]["head"] == str(head)
    common = ["--topology", str(path), "--bootstrap", kafka_bootstrap]
    table = run_cli("dlt", "inspect", *common, timeout=120)
    assert table.returncode == 0, table.stderr[-3000:]
    assert f"blocked keys ({state_topic}): 2 key(s), 2 record(s) held" in table.stdout
    assert "  partition 1: 1 key(s), 2 held; oldest since 1970-01-01T00:00:01Z" in table.stdout
    assert f"head {head} (main offset 100), 2 held" in table.stdout
    assert f"unreadable state entry: {state_topic}[2]@1: " in table.stdout
    released = release_key(topology, config, b"acct-42", by="alice", reason="ticket 7", clock=lambda: 42)
    assert (released.partition, released.entry) == (1, blocked)
    marks = hold_records(kafka_bootstrap, hold, 1)
    assert len(marks) == 1
    assert marks[0].offset() == released.mark_offset
    assert marks[0].headers() == [(ORDER_HEADER, MARK)]
    mark = Mark.from_record(marks[0].key(), marks[0].value(), f"{hold}[1]@{marks[0].offset()}")
    assert mark == Mark(acct, "release", at=head, by="alice", reason="ticket 7", ms=42)
    assert hold_records(kafka_bootstrap, hold, 0) == []
    assert hold_records(kafka_bootstrap, hold, 2) == []

    nobody = key_id(b"nobody") or b""
    with pytest.raises(NotBlocked, match=f"key id {nobody.hex()} is not blocked"):
        release_key(topology, config, b"nobody", by="alice")
    with pytest.raises(NotBlocked):  # blocked on partition 2, not 1
        release_key(topology, config, b"\x00\xffbinary", partition=1, by="alice")

    # the command line: a binary key by --key-hex, the OS user or --by, the audit line without the key
    done = run_cli(
        "ordering", "release", *common, "--key-hex", "00ff62696e617279", "--by", "bob", timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    printed = json.loads(done.stdout)
    assert printed["key_id"] == other.hex()
    assert printed["partition"] == 2
    assert printed["in_dlt"] is True
    assert printed["head"] == f"{topology.topic}-dlt[2]@0"
    assert printed["by"] == "bob"
    assert f"key id {other.hex()}" in done.stderr
    assert "released by bob" in done.stderr
    (landed,) = hold_records(kafka_bootstrap, hold, 2)
    assert Mark.from_record(landed.key(), landed.value(), "here").at == Location(
        f"{topology.topic}-dlt", 2, 0
    )

    missing = run_cli("ordering", "release", *common, "--key", "nobody", timeout=120)
    assert missing.returncode == 1
    assert "is not blocked" in missing.stderr


def test_clear_errors_for_a_topology_without_order_and_missing_topics(kafka_bootstrap, tmp_path):
    config = {"bootstrap.servers": kafka_bootstrap}
    plain = Topology.from_mapping({"topic": unique_topic("plain"), "group_id": "svc", "attempts": 2})
    with pytest.raises(ReleaseError, match="ordering is 'none', so no key is ever held"):
        release_key(plain, config, b"k", by="alice")
    absent = Topology.from_mapping(
        {"topic": unique_topic("absent"), "group_id": "svc", "attempts": 2, "ordering": "key"}
    )
    with pytest.raises(ReleaseError, match=f"{absent.order_state_topic} do not exist on the cluster"):
        release_key(absent, config, b"k", by="alice", timeout_s=10)
    state = read_order_state(config, str(absent.order_state_topic), timeout_s=10)
    assert state.error is not None
    assert str(absent.order_state_topic) in state.error
