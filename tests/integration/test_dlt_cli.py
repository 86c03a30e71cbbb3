"""``dlt inspect`` / ``dlt replay`` through real processes, and a DLT written with Spring's ``kafka_dlt-*``
headers."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer

from airflow_kafka_retry.dlt.inspect import inspect_dlt
from airflow_kafka_retry.dlt.replay import ReplayRequest, replay_dlt
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.policy.headers import codec as H, replay as R
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.sandbox.scratch_topics import unique_topic

from tests.integration.test_dlt_replay import PERMANENT, fill_dlt, ids_of, replayed_copies
from tests.support import ledger
from tests.support.cli_run import run_cli as _cli

pytestmark = [pytest.mark.integration]


def test_inspect_and_dry_run_from_the_command_line(kafka_bootstrap, tmp_path):
    topology, inputs, _, _ = fill_dlt(kafka_bootstrap, tmp_path, "cli")
    topology_file = tmp_path / "topology.yaml"
    ledger.write_topology(topology, topology_file)
    common = ["--topology", str(topology_file), "--bootstrap", kafka_bootstrap]

    table = _cli("dlt", "inspect", *common)
    assert table.returncode == 0, table.stderr[-3000:]
    lines = table.stdout.splitlines()
    assert (
        lines[0]
        == f"{topology.dlt_topic}: 30 record(s), 0 replayed (replay log {topology.dlt_topic}-replay-log)"
    )
    assert lines[1].split()[:3] == ["COUNT", "REPLAYED", "EXCEPTION"]
    assert any(PERMANENT in line and topology.topic in line for line in lines[2:])
    assert "mode" not in table.stdout, "payloads shown without --show-values"
    report = json.loads(_cli("dlt", "inspect", *common, "--format", "json", "--by", "day").stdout)
    assert sum(g["count"] for g in report["groups"]) == 30
    assert report["bucket"] == "day"
    assert '"mode"' in _cli("dlt", "inspect", *common, "--show-values").stdout

    dry = _cli("dlt", "replay", *common, "--exception", PERMANENT, "--dry-run", "--format", "text")
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert dry.stderr.startswith("replay id: replay-")
    assert "(dry run)" in dry.stderr
    moves = [line for line in dry.stdout.splitlines() if " -> " in line]
    assert len(moves) == len(ids_of(inputs, "permanent")) == 10
    assert all(
        line.startswith(f"{topology.dlt_topic}[") and f" -> {topology.topic}[" in line for line in moves
    )
    assert f"would move 10 record(s) from {topology.dlt_topic}" in dry.stdout
    assert replayed_copies(kafka_bootstrap, topology.topic) == []

    foreign = _cli("dlt", "replay", *common, "--to", "no-such-target-topic")
    assert foreign.returncode == 2
    assert "--to 'no-such-target-topic' is not a topic of" in foreign.stderr
    bad = _cli(
        "dlt", "replay", *common, "--to", "no-such-target-topic", "--allow-target", "no-such-target-topic"
    )
    assert bad.returncode == 2
    assert "target topic(s) do not exist: no-such-target-topic" in bad.stderr


def test_a_dlt_written_by_a_spring_dead_letter_publishing_recoverer(kafka_bootstrap):
    """Spring's plain DeadLetterPublishingRecoverer writes the kafka_dlt-* family: read, replayed, kept."""
    topic = unique_topic("spring")
    topology = Topology.from_mapping({"topic": topic, "group_id": "svc", "attempts": 2})
    config = {"bootstrap.servers": kafka_bootstrap}
    ensure_topics(topology, config, partitions=2)
    names = H.DEAD_LETTER_NAMES
    producer = Producer(config)
    for i in range(4):
        producer.produce(
            topology.dlt_topic,
            key=f"k{i}".encode(),
            value=b"payload",
            partition=i % 2,
            headers=[
                (names.original_topic, topic.encode()),
                (names.original_partition, H.encode_int32(i % 2)),
                (names.original_offset, H.encode_int64(100 + i)),
                (names.original_timestamp, H.encode_int64(1)),
                (
                    names.exception_fqcn,
                    b"org.springframework.kafka.listener.ListenerExecutionFailedException",
                ),
                (names.exception_cause_fqcn, b"com.example.InvalidOrder"),
                (names.exception_message, b"bad order"),
            ],
        )
    assert producer.flush(10) == 0

    report = inspect_dlt(topology, config)
    [group] = report["groups"]
    assert (group["exception"], group["cause"], group["original_topic"], group["count"]) == (
        "org.springframework.kafka.listener.ListenerExecutionFailedException",
        "com.example.InvalidOrder",
        topic,
        4,
    )
    summary = replay_dlt(topology, config, ReplayRequest(exception="com.example.InvalidOrder", partition=1))
    assert summary.moved == 2
    copies = replayed_copies(kafka_bootstrap, topic)
    assert sorted(m.key() for m in copies) == [b"k1", b"k3"]
    for copy in copies:
        assert copy.partition() == 1
        assert R.read_replay_audit(copy.headers()).topic == topology.dlt_topic
        offset = H.last_header(copy.headers(), names.original_offset)
        assert H.read_original_coordinates(copy.headers()).offset in (101, 103)
        assert offset is not None
        assert H.last_header(copy.headers(), names.exception_fqcn) is None


def test_inspect_shows_header_strings_without_their_terminal_escapes(kafka_bootstrap, tmp_path):
    """Whoever produced a record chose its headers: the table shows control characters escaped, never raw."""
    topology = ledger.make_topology("escapes")
    topology_file = tmp_path / "topology.yaml"
    ledger.write_topology(topology, topology_file)
    config = {"bootstrap.servers": kafka_bootstrap}
    ensure_topics(topology, config, partitions=1)
    names = H.RETRY_TOPIC_NAMES
    hostile_class = "com.example.Bad\x1b]0;owned\x07\x1b[2J\x1b[31mError\u202e"
    producer = Producer(config)
    producer.produce(
        topology.dlt_topic,
        key=b"k",
        value=b"v",
        headers=[
            (names.original_topic, b"orders\x1b[8m"),
            (names.exception_fqcn, hostile_class.encode()),
            (names.exception_cause_fqcn, b"com.example.Cause\r\nFAKE LINE"),
        ],
    )
    assert producer.flush(10) == 0

    table = _cli("dlt", "inspect", "--topology", str(topology_file), "--bootstrap", kafka_bootstrap)
    assert table.returncode == 0, table.stderr[-3000:]
    assert not any(c in table.stdout for c in "\x1b\x07\r\u202e"), repr(table.stdout)
    # the title, the column names, the group, what its record lacks, the count per family
    assert len(table.stdout.splitlines()) == 5, "a header's line break reached the terminal"
    assert r"com.example.Bad\x1b]0;owned\x07\x1b[2J\x1b[31mError\u202e" in table.stdout
    assert r"(cause com.example.Cause\x0d\x0aFAKE LINE)" in table.stdout
    assert r"orders\x1b[8m" in table.stdout
    # JSON keeps the strings as they are (json.dumps escapes control characters itself)
    report = json.loads(
        _cli(
            "dlt",
            "inspect",
            "--topology",
            str(topology_file),
            "--bootstrap",
            kafka_bootstrap,
            "--format",
            "json",
        ).stdout
    )
    assert report["groups"][0]["exception"] == hostile_class
