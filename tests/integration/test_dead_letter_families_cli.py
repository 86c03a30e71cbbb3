"""
``dlt inspect`` and ``dlt replay`` through the command line on a DLQ that is not the topology's own, holding
dead letters of every family, their headers produced byte for byte as each framework's source writes them
(the real frameworks' records are in the share-group and Connect tests).
"""

from __future__ import annotations

import json

import pytest
import yaml
from confluent_kafka import Producer

from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.policy.headers import replay as R
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.sandbox.scratch_topics import create_topics, unique_topic

from tests.support import ledger
from tests.support.cli_run import run_cli as _cli
from tests.unit.test_dead_letter_families import T_SOURCE, big_integer, put_int, put_long, utf8

pytestmark = [pytest.mark.integration]


def _letters(topic: str) -> list[tuple[str, bytes | None, bytes | None, list]]:
    """(name, key, value, headers) of one dead letter per family, all failed on ``topic``."""
    connect = [
        ("trace-id", b"c"),
        ("__connect.errors.topic", utf8(topic)),
        ("__connect.errors.partition", utf8("1")),
        ("__connect.errors.offset", utf8("9000000000")),
        ("__connect.errors.connector.name", utf8("orders-sink")),
        ("__connect.errors.task.id", utf8("0")),
        ("__connect.errors.stage", utf8("VALUE_CONVERTER")),
        ("__connect.errors.class.name", utf8("org.apache.kafka.connect.json.JsonConverter")),
        ("__connect.errors.exception.class.name", utf8("org.apache.kafka.connect.errors.DataException")),
        ("__connect.errors.exception.message", utf8("Converting byte[] to Kafka Connect data failed")),
    ]
    share = [
        ("__dlq.errors.topic", utf8(topic)),
        ("__dlq.errors.partition", utf8("0")),
        ("__dlq.errors.offset", utf8("77")),
        ("__dlq.errors.group", utf8("workers")),
        ("__dlq.errors.delivery.count", utf8("5")),
        ("__dlq.errors.message", utf8("Offset rejected by client.")),
    ]
    share_metadata_only = [(k, utf8("78") if k == "__dlq.errors.offset" else v) for k, v in share]
    spring = [
        ("kafka_original-topic", utf8(topic)),
        ("kafka_original-partition", put_int(1)),
        ("kafka_original-offset", put_long(41)),
        ("kafka_original-timestamp", put_long(T_SOURCE)),
        ("kafka_dlt-original-consumer-group", utf8("orders-svc")),
        ("kafka_exception-fqcn", utf8("com.example.InvalidOrder")),
        ("retry_topic-original-timestamp", big_integer(T_SOURCE)),
        ("retry_topic-attempts", put_int(3)),
    ]
    return [
        ("connect", b"k-connect", b"v-connect", connect),
        ("share", b"k-share", b"v-share", share),
        ("share-metadata-only", None, None, share_metadata_only),
        ("spring", b"k-spring", b"v-spring", spring),
        ("airflow", b"k-airflow", b"v-airflow", []),
    ]


@pytest.fixture
def every_family(kafka_bootstrap, tmp_path):
    topic = unique_topic("families")
    topology = Topology.from_mapping({"topic": topic, "group_id": "svc", "attempts": 2})
    config = {"bootstrap.servers": kafka_bootstrap}
    ensure_topics(topology, config, partitions=2)
    dlq = unique_topic("dlq.families")  # not <topic><dlt_suffix>: another framework's DLQ
    create_topics(kafka_bootstrap, [dlq], 1)
    producer = Producer(config)
    for _, key, value, headers in _letters(topic):
        producer.produce(dlq, key=key, value=value, headers=headers, partition=0)
    assert producer.flush(10) == 0
    topology_file = tmp_path / "topology.yaml"
    topology_file.write_text(yaml.safe_dump({"topic": topic, "group_id": "svc", "attempts": 2}))
    common = ["--topology", str(topology_file), "--bootstrap", kafka_bootstrap, "--dlt", dlq]
    return topic, dlq, common


def test_inspect_shows_every_family_with_its_coordinates(every_family):
    topic, dlq, common = every_family
    run = _cli("dlt", "inspect", *common, "--format", "json", "--family", "airflow", "--samples", "5")
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert (report["topic"], report["records"]) == (dlq, 5)
    assert report["families"] == {"airflow": 1, "kafka-connect": 1, "share-group": 2, "spring-retry-topic": 1}
    samples = {s["offset"]: s for g in report["groups"] for s in g["samples"]}
    coordinates = {
        o: (s["family"], s["original_topic"], s["original_partition"], s["original_offset"])
        for o, s in samples.items()
    }
    assert coordinates == {
        0: ("kafka-connect", topic, 1, 9_000_000_000),
        1: ("share-group", topic, 0, 77),
        2: ("share-group", topic, 0, 78),
        3: ("spring-retry-topic", topic, 1, 41),
        4: ("airflow", None, None, None),
    }
    assert (samples[0]["connector"], samples[0]["failure_class"]) == (
        "orders-sink",
        "org.apache.kafka.connect.errors.DataException",
    )
    assert (samples[1]["group"], samples[1]["delivery_count"], samples[1]["failure_message"]) == (
        "workers",
        5,
        "Offset rejected by client.",
    )
    assert samples[1]["missing"] == ["original_timestamp", "failure_class"]
    assert samples[2]["record_copied"] is False
    assert (samples[3]["group"], samples[3]["delivery_count"], samples[3]["original_timestamp_ms"]) == (
        "orders-svc",
        2,
        T_SOURCE,
    )
    assert "original_topic" in samples[4]["missing"]
    share_group = next(g for g in report["groups"] if g["family"] == "share-group")
    assert share_group["not_replayable"] == 1

    table = _cli("dlt", "inspect", *common)
    assert table.returncode == 0, table.stderr[-3000:]
    assert f"(from {topic}[1]@9000000000)" in table.stdout
    assert "1 without a copied record" in table.stdout
    assert "family share-group: 2 record(s)" in table.stdout


def test_replay_returns_every_family_to_its_original_topic_once(kafka_bootstrap, every_family):
    topic, dlq, common = every_family
    headerless = _cli("dlt", "replay", *common, "--dry-run")
    assert headerless.returncode == 2
    assert f"{dlq}[0]@4 carries no original-topic header" in headerless.stderr

    only_theirs = [*common, "--original-topic", topic, "--format", "json"]
    dry = _cli("dlt", "replay", *only_theirs, "--dry-run")
    assert dry.returncode == 0, dry.stderr[-3000:]
    summary = json.loads(dry.stdout)
    moves = {m["offset"]: (m["target"], m["target_partition"]) for m in summary["moves"]}
    assert moves == {0: (topic, 1), 1: (topic, 0), 3: (topic, 1)}
    assert summary["not_replayable"] == 1
    [nothing] = summary["not_replayable_records"]
    assert (nothing["offset"], nothing["original_offset"]) == (2, 78)
    assert "nothing to replay" in nothing["reason"]
    assert "copy.record.enable=false" in nothing["reason"]
    assert ledger.read_all(kafka_bootstrap, topic) == []

    real = _cli("dlt", "replay", *only_theirs)
    assert real.returncode == 0, real.stderr[-3000:]
    assert json.loads(real.stdout)["moved"] == 3
    copies = {m.key(): m for m in ledger.read_all(kafka_bootstrap, topic)}
    assert sorted(copies) == [b"k-connect", b"k-share", b"k-spring"]
    assert {k: m.partition() for k, m in copies.items()} == {b"k-connect": 1, b"k-share": 0, b"k-spring": 1}
    for key, copy in copies.items():
        names = [n for n, _ in copy.headers() or ()]
        assert R.read_replay_audit(copy.headers()).topic == dlq
        assert not [n for n in names if n.startswith(("__connect.", "__dlq."))], (key, names)  # auto drops
    assert ("trace-id", b"c") in copies[b"k-connect"].headers()
    assert "kafka_original-topic" in [n for n, _ in copies[b"k-spring"].headers()]  # auto keeps Spring's

    again = json.loads(_cli("dlt", "replay", *only_theirs).stdout)
    assert (again["moved"], again["already_replayed"]) == (0, 3)
    assert len(ledger.read_all(kafka_bootstrap, topic)) == 3

    airflow = _cli("dlt", "replay", *common, "--to", "main", "--offsets", "4", "--framework-headers", "keep")
    assert airflow.returncode == 0, airflow.stderr[-3000:]
    assert sorted(m.key() for m in ledger.read_all(kafka_bootstrap, topic))[0] == b"k-airflow"
