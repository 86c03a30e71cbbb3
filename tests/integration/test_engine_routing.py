"""Routing rules through the real engine: exception DLTs, DLT strategies, timeout, bad batch index."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.policy.headers import codec as H
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.sandbox.scratch_topics import unique_topic

from tests.support import ledger

pytestmark = [pytest.mark.integration]
HANDLERS = ledger.HANDLER_MODULE


def _setup(bootstrap: str, tmp_path, modes: list[str], **topology: object) -> Topology:
    ledger.ledger_path(tmp_path)
    topic = unique_topic("route")
    built = Topology.from_mapping(
        {
            "topic": topic,
            "group_id": f"{topic}-svc",
            "attempts": 3,
            "backoff": {"kind": "fixed", "delay": "0ms"},
            **topology,
        }
    )
    ensure_topics(built, {"bootstrap.servers": bootstrap}, partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i, mode in enumerate(modes):
        producer.produce(
            topic, json.dumps({"id": str(i), "mode": mode}).encode(), key=str(i).encode(), partition=0
        )
    assert producer.flush(10) == 0
    return built


def _options(handler: str = "indexed") -> DrainOptions:
    return DrainOptions(handler=f"{HANDLERS}:{handler}", value_deserializer=f"{HANDLERS}:decode")


def test_exception_specific_dlt_and_dlt_reprocessing_never_loops(kafka_bootstrap, tmp_path):
    topology = _setup(
        kafka_bootstrap,
        tmp_path,
        ["fatal", "permanent", "ok"],
        dlt_routing={"-invalid-dlt": [f"{HANDLERS}.InvalidOrder"]},
        not_retryable=[f"{HANDLERS}.InvalidOrder"],
    )
    config = {"bootstrap.servers": kafka_bootstrap}
    for tier in topology.tiers:
        assert run_local(topology, tier, config, _options()).ok
    invalid = ledger.read_all(kafka_bootstrap, f"{topology.topic}-invalid-dlt")
    main_dlt = ledger.read_all(kafka_bootstrap, topology.dlt_topic)
    assert [m.key() for m in invalid] == [b"0"]
    assert [m.key() for m in main_dlt] == [b"1"]

    # reprocessing the DLT: the record fails again and goes back to the end of the DLT, once per run
    dlt = topology.select("dlt")
    summary = run_local(topology, dlt, config, _options())
    part = summary.partitions[0]
    assert (part.drained, part.routed, part.committed_offset) == (1, {topology.dlt_topic: 1}, 1)
    assert part.dead_letters[0].reason == "dlt_failure_retried"
    again = ledger.read_all(kafka_bootstrap, topology.dlt_topic)
    assert [m.key() for m in again] == [b"1", b"1"]
    assert H.read_original_coordinates(again[1].headers()).offset == 1  # still the main topic coordinates


def test_fail_on_error_dlt_strategy_drops_with_coordinates(kafka_bootstrap, tmp_path):
    topology = _setup(kafka_bootstrap, tmp_path, ["permanent"], attempts=1, dlt_strategy="fail_on_error")
    config = {"bootstrap.servers": kafka_bootstrap}
    assert run_local(topology, topology.tier(0), config, _options()).ok
    summary = run_local(topology, topology.select("dlt"), config, _options())
    part = summary.partitions[0]
    assert (part.drained, part.dropped, part.routed, part.committed_offset) == (1, 1, {}, 1)
    assert (part.dead_letters[0].topic, part.dead_letters[0].offset, part.dead_letters[0].reason) == (
        topology.dlt_topic,
        0,
        "dlt_failure_dropped",
    )


def test_no_dlt_drops_exhausted_records_and_commits(kafka_bootstrap, tmp_path):
    topology = _setup(kafka_bootstrap, tmp_path, ["permanent", "ok"], attempts=1, dlt_strategy="no_dlt")
    summary = run_local(topology, topology.tier(0), {"bootstrap.servers": kafka_bootstrap}, _options())
    part = summary.partitions[0]
    assert (part.succeeded, part.dropped, part.committed_offset) == (1, 1, 2)
    assert part.dead_letters[0].reason == "no_dlt"


def test_records_older_than_the_timeout_go_to_the_dlt(kafka_bootstrap, tmp_path):
    topology = _setup(kafka_bootstrap, tmp_path, ["permanent"], attempts=5, timeout="1ms")
    time.sleep(0.01)
    summary = run_local(topology, topology.tier(0), {"bootstrap.servers": kafka_bootstrap}, _options())
    assert summary.partitions[0].dead_letters[0].reason == "timeout"
    assert [m.key() for m in ledger.read_all(kafka_bootstrap, topology.dlt_topic)] == [b"0"]


def test_a_bad_batch_index_fails_the_partition_naming_the_handler_and_commits_nothing(
    kafka_bootstrap, tmp_path
):
    topology = _setup(kafka_bootstrap, tmp_path, ["ok", "ok"])
    summary = run_local(
        topology, topology.tier(0), {"bootstrap.servers": kafka_bootstrap}, _options("bad_index")
    )
    part = summary.partitions[0]
    assert not summary.ok
    assert part.status == "failed"
    assert f"{HANDLERS}:bad_index" in part.error
    assert "index 5" in part.error
    assert part.committed_offset is None
    assert ledger.committed(
        kafka_bootstrap, topology.consumer_group(topology.tier(0)), topology.topic, 1
    ) == {0: -1001}


def test_in_place_attempts_count_as_attempts_and_stop_at_the_topology_attempts(kafka_bootstrap, tmp_path):
    ledger_file = tmp_path / "ledger.txt"
    topology = _setup(kafka_bootstrap, tmp_path, ["permanent", "transient:2", "ok"], attempts=3)
    options = DrainOptions(
        handler=f"{HANDLERS}:indexed", value_deserializer=f"{HANDLERS}:decode", in_place_attempts=5
    )
    summary = run_local(topology, topology.tier(0), {"bootstrap.servers": kafka_bootstrap}, options)
    part = summary.partitions[0]
    assert summary.ok
    assert (part.drained, part.succeeded, part.committed_offset) == (3, 2, 3)
    # batches [0, 1, 2] (fails at 0), [1, 2] (fails at 0), [2]; then in place: the permanent record
    # on attempts 2 and 3 only (not 5 more), the transient one on attempts 2 and 3 (it succeeds on 3)
    assert part.handler_calls == 7
    assert part.routed == {topology.dlt_topic: 1}, "in-place attempts used up the retry tiers"
    [dead] = ledger.read_all(kafka_bootstrap, topology.dlt_topic)
    assert dead.key() == b"0"
    assert H.read_attempts(dead.headers()) == 4  # failed on attempt 3 of 3; Spring writes attempts + 1
    assert part.dead_letters[0].reason == "exhausted"
    assert ledger.processed_ids(str(ledger_file)) == {"1": 1, "2": 1}
    assert ledger.read_all(kafka_bootstrap, topology.tier(1).topic) == []


def test_a_topology_without_its_parking_topic_drains_until_a_record_must_be_parked(
    kafka_bootstrap, tmp_path, monkeypatch
):
    """Upgrading a Spring service's topics (main, retry, DLT; no parking topic) breaks no drain that parks
    nothing."""
    from airflow_kafka_retry.dlt.replay import ReplayRequest, replay_dlt
    from airflow_kafka_retry.sandbox.scratch_topics import create_topics

    monkeypatch.setenv("AKR_LEDGER", ledger.ledger_path(tmp_path))
    topology = ledger.make_fault_topology("upgrade", attempts=2)
    create_topics(kafka_bootstrap, [t.topic for t in (*topology.tiers, *topology.dlt_tiers)])
    config = {"bootstrap.servers": kafka_bootstrap}
    options = DrainOptions(handler="tests.support.fault_handler:indexed")
    main = topology.topic
    producer = Producer(config)

    def produce(rid: str, mode: str, extra: list) -> None:
        producer.produce(
            main,
            key=rid.encode(),
            value=b"{}",
            partition=0,
            headers=[(ledger.FAULT_ID, rid.encode()), (ledger.FAULT_MODE, mode.encode()), *extra],
        )
        assert producer.flush(10) == 0

    produce("0", "ok", [])
    produce("1", "fatal", [])
    first = run_local(topology, topology.tier(0), config, options)
    assert first.ok, first.to_dict()
    assert [m.key() for m in ledger.read_all(kafka_bootstrap, topology.dlt_topic)] == [b"1"]

    # a replayed record that fails again must be parked: that chunk fails, naming the topic; nothing is
    # committed. The replay is a real one (the replay log knows it): forged replay headers are ignored.
    produce("2", "ok", [])
    assert replay_dlt(topology, config, ReplayRequest(to="main")).moved == 1  # "1", fatal again on main
    failed = run_local(topology, topology.tier(0), config, options)
    [partition] = failed.partitions
    assert not failed.ok
    assert partition.status == "failed"
    assert partition.error.startswith(
        f"ParkingTopicMissingError: parking topic '{topology.parking_topic}' does not "
        f"exist, and 1 replayed record(s) of {main}[0] failed again"
    ), partition.error
    assert "topology create-topics" in partition.error
    group = topology.consumer_group(topology.tier(0))
    assert ledger.committed(kafka_bootstrap, group, main, 1) == {0: 2}, "the failed chunk was committed"
    assert [m.key() for m in ledger.read_all(kafka_bootstrap, topology.dlt_topic)] == [b"1"]

    # once the topic exists, the same records run again and the replayed one is parked, once
    create_topics(kafka_bootstrap, [topology.parking_topic])
    again = run_local(topology, topology.tier(0), config, options)
    assert again.ok, again.to_dict()
    assert [m.key() for m in ledger.read_all(kafka_bootstrap, topology.parking_topic)] == [b"1"]
    assert ledger.committed(kafka_bootstrap, group, main, 1) == {0: 4}
