"""
The redelivery log on the real broker (issue 48 item 4): a used entry is deleted in the chunk's transaction,
and the input lane reads only what was appended since it last read.

No share group is needed: the dead letters are written to the topology's DLQ with the headers the broker
writes (``__dlq.errors.*``), the log's entries as a redelivering tier writes them, and the input lane
(tier 0, the local engine in this process) routes them.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.drain.supervisor import broker_transient
from airflow_kafka_retry.engine.kafka.reading import TopicReader
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.engine.logs.compacted_log import log_state
from airflow_kafka_retry.engine.logs.redelivery_log import (
    RedeliveryLogError,
    RedeliveryLogView,
    ensure_redelivery_log,
    redelivery_log_topic,
)
from airflow_kafka_retry.policy.headers.codec import read_original_coordinates
from airflow_kafka_retry.policy.routing.share_redelivery import Redelivery, entry_key
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.sandbox.processes import free_port
from airflow_kafka_retry.sandbox.scratch_topics import CLIENT_LOGGER, admin_client, create_topics

from tests.support.dead_letter_fixtures import unique_name

if TYPE_CHECKING:
    from airflow_kafka_retry.engine.drain.summary import RunSummary

pytestmark = [pytest.mark.integration]

OPTIONS = DrainOptions(handler="airflow_kafka_retry.engine.drain.redelivery:no_handler", call_timeout_s=10.0)


def _topology(bootstrap: str, *, source_prefix: str = "orders") -> Topology:
    source, dlq = unique_name(source_prefix), "dlq." + unique_name("share")
    create_topics(bootstrap, [source, dlq], 1)
    topology = Topology.from_mapping(
        {
            "topic": source,
            "group_id": unique_name("retrier"),
            "input": {"family": "share-group", "dlq": dlq},
            "on_due": "redeliver",
            "attempts": 3,
            "backoff": {"kind": "fixed", "delay": "60s"},
        },
        source="redelivery-log-test.yaml",
    )
    ensure_topics(topology, {"bootstrap.servers": bootstrap}, partitions=1)
    ensure_redelivery_log({"bootstrap.servers": bootstrap}, redelivery_log_topic(source))
    return topology


def _log_entries(bootstrap: str, topology: Topology, rounds: dict[int, int | None]) -> None:
    """Entries of records redelivered to ``topology.topic[0]@offset`` (None: a tombstone), as a tier logs."""
    producer = Producer({"bootstrap.servers": bootstrap, "logger": CLIENT_LOGGER})
    for offset, attempt in rounds.items():
        value = (
            None if attempt is None else Redelivery(attempt, (topology.topic, 0, offset - 1000), 1).encode()
        )
        key = entry_key((topology.topic, 0, offset))
        producer.produce(redelivery_log_topic(topology.topic), key=key, value=value)
    assert producer.flush(30) == 0


def _dead_letters(bootstrap: str, topology: Topology, offsets: list[int], size: int = 10) -> None:
    """The share group's dead letters of ``topology.topic[0]@offset``, record copied."""
    producer = Producer({"bootstrap.servers": bootstrap, "logger": CLIENT_LOGGER})
    for offset in offsets:
        headers = [
            ("__dlq.errors.topic", topology.topic.encode()),
            ("__dlq.errors.partition", b"0"),
            ("__dlq.errors.offset", str(offset).encode()),
            ("__dlq.errors.group", topology.tier(0).topic.removeprefix("dlq.").encode()),  # the DLQ's group
            ("__dlq.errors.delivery.count", b"1"),
            ("__dlq.errors.message", b"Offset rejected by client."),
        ]
        producer.produce(
            topology.tier(0).topic, key=f"k{offset}".encode(), value=b"x" * size, headers=headers, partition=0
        )
    assert producer.flush(30) == 0


def _input_lane(bootstrap: str, topology: Topology, options: DrainOptions = OPTIONS) -> RunSummary:
    return run_local(topology, topology.tier(0), {"bootstrap.servers": bootstrap}, options, in_process=True)


def _log(bootstrap: str, topology: Topology) -> dict[bytes, list[tuple[int, bytes | None]]]:
    """The log read ``read_committed``: each key's records (offset, value), in order."""
    out: dict[bytes, list[tuple[int, bytes | None]]] = {}
    with TopicReader({"bootstrap.servers": bootstrap}) as reader:
        for message in reader.read(redelivery_log_topic(topology.topic), 0):
            out.setdefault(bytes(message.key() or b""), []).append((message.offset() or 0, message.value()))
    return out


def _sources_in(bootstrap: str, topic: str) -> set[int]:
    """The source offsets of the dead letters in ``topic`` (read_committed), checking their first record."""
    with TopicReader({"bootstrap.servers": bootstrap}) as reader:
        messages = list(reader.read(topic, 0))
    out = set()
    for message in messages:
        headers: Any = message.headers() or []
        source = int(dict(headers)["__dlq.errors.offset"])
        logged = source >= 20  # the tests log an entry for every dead letter from offset 20 on
        assert read_original_coordinates(headers).offset == (source - 1000 if logged else source)
        out.add(source)
    return out


def _log_end(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("ends")})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def _summary_ok(run: RunSummary) -> None:
    assert [p.status for p in run.partitions] == ["ok"], [p.error for p in run.partitions]


def test_a_used_entry_is_tombstoned_in_the_chunks_transaction(kafka_bootstrap: str) -> None:
    topology = _topology(kafka_bootstrap)
    _log_entries(kafka_bootstrap, topology, {30: 2, 31: 2, 99: 2})  # 99: its record was accepted
    _dead_letters(kafka_bootstrap, topology, [30, 31, 12])  # 12: never redelivered, round 1

    _summary_ok(_input_lane(kafka_bootstrap, topology))

    assert _sources_in(kafka_bootstrap, topology.tier(2).topic) == {30, 31}
    assert _sources_in(kafka_bootstrap, topology.tier(1).topic) == {12}
    log = _log(kafka_bootstrap, topology)
    for used in (30, 31):
        records = log[entry_key((topology.topic, 0, used))]
        assert [value is None for _, value in records] == [False, True], records  # the entry, its tombstone
    assert [v is None for _, v in log[entry_key((topology.topic, 0, 99))]] == [False]  # unused: kept
    last = max(offset for records in log.values() for offset, _ in records)
    # the tombstones were written in a transaction: its commit marker follows them
    assert _log_end(kafka_bootstrap, redelivery_log_topic(topology.topic)) == last + 2


@pytest.mark.requires_capability("enforces_max_message_bytes", "abort_isolation")
def test_an_aborted_chunk_leaves_the_entry_and_its_retry_finds_it(kafka_bootstrap: str) -> None:
    """
    The tombstones cannot be written (the log's max.message.bytes): the routed records and commit go too.

    The source topic's long name makes a tombstone's key long: its batch is over the limit, the transaction
    marker (no key of ours) under it, so the broker can still write the abort.
    """
    topology = _topology(kafka_bootstrap, source_prefix="orders-" + "o" * 120)
    log_topic = redelivery_log_topic(topology.topic)
    _log_entries(kafka_bootstrap, topology, {20: 2, 21: 2})
    _set_config(kafka_bootstrap, log_topic, "max.message.bytes", "150")
    _dead_letters(kafka_bootstrap, topology, [20, 21])

    # the aborted transaction is transient: the supervisor tries the partition again for 3 s
    failed = _input_lane(kafka_bootstrap, topology, dataclasses.replace(OPTIONS, broker_retry_s=3.0))

    [partition] = failed.partitions
    assert partition.status == "failed", partition
    assert partition.committed_offset is None, partition
    assert partition.retries >= 1, partition
    state = log_state({"bootstrap.servers": kafka_bootstrap}, log_topic)
    assert state.read == 2  # by the first attempt; the next ones found nothing appended (the abort marker)
    assert _sources_in(kafka_bootstrap, topology.tier(2).topic) == set()  # the routed records were aborted
    log = _log(kafka_bootstrap, topology)
    assert all(value is not None for records in log.values() for _, value in records), log
    assert len(log) == 2

    _set_config(kafka_bootstrap, log_topic, "max.message.bytes", "1000000")
    _summary_ok(_input_lane(kafka_bootstrap, topology))
    assert state.read == 2  # the entries were still held: nothing read again

    assert _sources_in(kafka_bootstrap, topology.tier(2).topic) == {20, 21}  # found again: round 2
    log = _log(kafka_bootstrap, topology)
    assert {key: [v is None for _, v in records] for key, records in log.items()} == {
        entry_key((topology.topic, 0, 20)): [False, True],
        entry_key((topology.topic, 0, 21)): [False, True],
    }


def test_a_second_run_of_the_input_lane_reads_only_what_was_appended(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    topology = _topology(kafka_bootstrap)
    log_topic = redelivery_log_topic(topology.topic)
    _log_entries(kafka_bootstrap, topology, dict.fromkeys(range(100, 400), 2))
    _log_entries(kafka_bootstrap, topology, dict.fromkeys(range(100, 350)))  # used long ago: 250 tombstones
    _dead_letters(kafka_bootstrap, topology, [360])
    caplog.set_level(logging.INFO, logger="airflow_kafka_retry.engine.logs.redelivery_log")

    _summary_ok(_input_lane(kafka_bootstrap, topology))
    assert f"{log_topic}[0]: read 550 record(s) of the redelivery log from offset 0" in caplog.text
    state = log_state({"bootstrap.servers": kafka_bootstrap}, log_topic)
    assert (state.read, len(state.entries)) == (550, 50)

    caplog.clear()
    _log_entries(kafka_bootstrap, topology, {500: 2, 501: 2, 502: 2})
    _dead_letters(kafka_bootstrap, topology, [501])
    _summary_ok(_input_lane(kafka_bootstrap, topology))

    # the first run's tombstone (and its commit marker) and the three new entries, nothing before
    assert state.read == 550 + 1 + 3
    assert f"{log_topic}[0]: read 4 record(s) of the redelivery log from offset 550" in caplog.text
    assert entry_key((topology.topic, 0, 360)) not in state.entries
    assert entry_key((topology.topic, 0, 501)) in state.entries  # its tombstone comes after this read
    assert len(state.entries) == 50 - 1 + 3
    assert _sources_in(kafka_bootstrap, topology.tier(2).topic) == {360, 501}


def _set_config(bootstrap: str, topic: str, name: str, value: str) -> None:
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)],
    )
    admin = admin_client(bootstrap)  # kept alive: a collected client cancels its futures
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def test_no_broker_answering_the_logs_calls_fails_them_as_transient_naming_the_log() -> None:
    """What the supervisor retries (``broker_transient``), within the call timeouts: never a hang."""
    bootstrap = f"127.0.0.1:{free_port()}"  # nobody listens there
    config = {"bootstrap.servers": bootstrap}
    started = time.monotonic()
    with pytest.raises(RedeliveryLogError, match="orders-redelivery-log") as raised:
        ensure_redelivery_log(config, "orders-redelivery-log", timeout=2.0)
    assert broker_transient(raised.value), raised.value
    view = RedeliveryLogView(config, "orders-redelivery-log", timeout_s=2.0)
    try:
        with pytest.raises(RedeliveryLogError, match=r"orders-redelivery-log\[0\]") as raised:
            view.refresh()
    finally:
        view.close()
    assert broker_transient(raised.value), raised.value
    took = time.monotonic() - started
    assert took < 60, f"{took:.0f}s with 2 s call timeouts"  # liveness (they end), not speed


def test_a_log_made_by_an_earlier_version_gets_the_configs_that_let_compaction_reach_it(
    kafka_bootstrap: str,
) -> None:
    """Only what the topic does not set itself: an operator's own segment.ms stays."""
    config = {"bootstrap.servers": kafka_bootstrap}
    old, tuned = unique_name("old") + "-redelivery-log", unique_name("tuned") + "-redelivery-log"
    create_topics(kafka_bootstrap, [old], 1, config={"cleanup.policy": "compact,delete"})
    create_topics(kafka_bootstrap, [tuned], 1, config={"cleanup.policy": "compact", "segment.ms": "600000"})

    assert ensure_redelivery_log(config, old) is False
    assert ensure_redelivery_log(config, tuned) is False

    _settled_configs(kafka_bootstrap, old, {"segment.ms": "3600000", "delete.retention.ms": "3600000"})
    _settled_configs(kafka_bootstrap, tuned, {"segment.ms": "600000", "delete.retention.ms": "3600000"})


def _settled_configs(bootstrap: str, topic: str, expected: dict[str, str]) -> None:
    """
    Assert the topic's configs equal ``expected`` within 30 s.

    In KRaft the controller applies a config change and each broker learns it when it replays the metadata
    log, so a describe right after the change may still show the default (CI run of stop 53).
    """
    deadline = time.monotonic() + 30
    configs = _configs(bootstrap, topic)
    while configs != expected and time.monotonic() < deadline:
        time.sleep(0.2)
        configs = _configs(bootstrap, topic)
    assert configs == expected, f"{topic}: {configs}"


def _configs(bootstrap: str, topic: str) -> dict[str, str]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = admin_client(bootstrap)
    described = admin.describe_configs([resource])[resource].result(30)
    return {name: described[name].value for name in ("segment.ms", "delete.retention.ms")}
