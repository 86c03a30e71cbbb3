"""
End to end on real dead letters: a share group's (Kafka 4.4) and a Connect sink's (Connect 4.3.1), through the
command line. ``dlt inspect --format json`` shows the original topic, partition and offset of every one of
them, and ``dlt replay`` returns each to its source partition exactly once (a second replay moves nothing).
The headers themselves are pinned in test_share_group_dead_letters.py and test_connect_dead_letters.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml
from confluent_kafka import AcknowledgeType, Producer

from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.sandbox.scratch_topics import CLIENT_LOGGER
from testkit.kafka_connect import file_sink_with_dlq
from testkit.share_groups import DLQ_PREFIX, acknowledge_records, set_group_configs

from tests.support import ledger
from tests.support.cli_run import run_cli as _cli
from tests.support.dead_letter_fixtures import read_exactly, unique_name

if TYPE_CHECKING:
    from confluent_kafka import Message

    from airflow_kafka_retry.sandbox.kafka import ApacheKafka
    from testkit.kafka_connect import ConnectWorker

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _source(bootstrap: str, tmp_path: Path, values: list[bytes]) -> tuple[str, Path, dict[bytes, tuple]]:
    """A topology's topics (2 partitions) and ``values`` produced to its topic; where each went."""
    topic = unique_name("orders")
    topology = Topology.from_mapping({"topic": topic, "group_id": "svc", "attempts": 2})
    ensure_topics(topology, {"bootstrap.servers": bootstrap}, partitions=2)
    topology_file = tmp_path / "topology.yaml"
    topology_file.write_text(yaml.safe_dump({"topic": topic, "group_id": "svc", "attempts": 2}))
    placed: dict[bytes, tuple] = {}

    def delivered(err: object, msg: Message) -> None:
        assert err is None, err
        placed[bytes(msg.value() or b"")] = (topic, msg.partition(), msg.offset())

    producer = Producer({"bootstrap.servers": bootstrap, "logger": CLIENT_LOGGER})
    for i, value in enumerate(values):
        producer.produce(topic, key=f"k{i}".encode(), value=value, partition=i % 2, on_delivery=delivered)
    assert producer.flush(30) == 0
    return topic, topology_file, placed


def _inspect_and_replay(bootstrap: str, topology_file: Path, dlq: str, family: str, bad: dict) -> None:
    """Inspect shows every dead letter's source; replay returns each once, and a second replay none."""
    common = ["--topology", str(topology_file), "--bootstrap", bootstrap, "--dlt", dlq]
    run = _cli("dlt", "inspect", *common, "--format", "json", "--samples", "100")
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert (report["records"], report["families"]) == (len(bad), {family: len(bad)})
    shown = [
        (s["original_topic"], s["original_partition"], s["original_offset"])
        for group in report["groups"]
        for s in group["samples"]
    ]
    assert sorted(shown) == sorted(bad.values()), "every dead letter's original coordinates, once each"

    topic = next(iter(bad.values()))[0]
    before = ledger.read_all(bootstrap, topic)
    replay = _cli("dlt", "replay", *common, "--format", "json")
    assert replay.returncode == 0, replay.stderr[-3000:]
    assert json.loads(replay.stdout)["moved"] == len(bad)
    records = ledger.read_all(bootstrap, topic)
    assert len(records) == len(before) + len(bad), "exactly one copy each, nothing else"
    counts = {value: sum(1 for m in records if m.value() == value) for value in bad}
    assert counts == dict.fromkeys(bad, 2), "the original and one replayed copy"
    assert all(m.partition() == bad[m.value()][1] for m in records if m.value() in bad), "to its partition"

    again = json.loads(_cli("dlt", "replay", *common, "--format", "json").stdout)
    assert (again["moved"], again["already_replayed"]) == (0, len(bad))
    assert len(ledger.read_all(bootstrap, topic)) == len(before) + len(bad)


def test_share_group_dead_letters_inspected_and_replayed(
    share_dlq_kafka: ApacheKafka, tmp_path: Path
) -> None:
    bootstrap = share_dlq_kafka.bootstrap
    _, topology_file, placed = _source(bootstrap, tmp_path, [b"ok-0", b"bad-1", b"bad-2", b"ok-3", b"bad-4"])
    group = unique_name("workers")
    dlq = DLQ_PREFIX + group
    set_group_configs(
        bootstrap,
        group,
        {
            "share.auto.offset.reset": "earliest",
            "errors.deadletterqueue.topic.name": dlq,
            "errors.deadletterqueue.copy.record.enable": "true",
        },
    )
    acknowledge_records(
        bootstrap,
        group,
        [next(iter(placed.values()))[0]],
        lambda m, _: (
            AcknowledgeType.REJECT if (m.value() or b"").startswith(b"bad") else AcknowledgeType.ACCEPT
        ),
        final=placed.values(),
    )
    bad = {value: where for value, where in placed.items() if value.startswith(b"bad")}
    read_exactly(bootstrap, dlq, len(bad))
    _inspect_and_replay(bootstrap, topology_file, dlq, "share-group", bad)


def test_connect_dead_letters_inspected_and_replayed(connect_worker: ConnectWorker, tmp_path: Path) -> None:
    bootstrap = connect_worker.bootstrap
    values = [b'{"n": 0}', b"bad 1", b"bad 2", b'{"n": 3}', b"bad 4"]
    topic, topology_file, placed = _source(bootstrap, tmp_path, values)
    name, dlq = unique_name("sink"), unique_name("orders-dlq")
    sink = file_sink_with_dlq(topic=topic, file=tmp_path / "sink.txt", dlq_topic=dlq, context_headers=True)
    connect_worker.put_connector(name, sink)
    bad = {value: where for value, where in placed.items() if value.startswith(b"bad")}
    read_exactly(bootstrap, dlq, len(bad))
    connect_worker.delete_connector(name)  # fixed, as a user would, before the redrive: no new dead letters
    _inspect_and_replay(bootstrap, topology_file, dlq, "kafka-connect", bad)
