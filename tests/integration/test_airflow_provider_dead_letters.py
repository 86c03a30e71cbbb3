"""
Dead letters written by Airflow's own Kafka provider, read and replayed by this one (issue 41).

The apache-airflow-providers-apache-kafka ``KafkaSharedStreamProducer`` (the shared stream behind
``KafkaSharedStreamTrigger``) re-publishes each event its subscribers reject to ``dlq_topic``: key and
value only (``_send_to_dlq``), no header, the broker's time. The real producer runs here, on the suite's
broker, through a real Airflow connection: it streams three records, the subscribers accept the first and
reject the other two, and it dead-letters those. Then, as a user would, ``dlt inspect`` reads them as the
``airflow`` family (named with ``--family``: such a record says nothing of where it came from) and lists
what the family lacks instead of guessing it, and ``dlt replay --to main`` returns them to the source
once each; a second replay moves nothing.
"""

from __future__ import annotations

import asyncio
import json

import pytest
import yaml
from confluent_kafka import Producer

from airflow_kafka_retry.sandbox.scratch_topics import create_topics, unique_topic

from tests.support import ledger
from tests.support.cli_run import run_cli as _cli

pytestmark = [pytest.mark.integration]
CONN_ID = "akr_airflow_stream"


async def _stream_and_reject(source: str, dlq: str, count: int) -> list[tuple[int, int]]:
    """Run Airflow's shared-stream producer over ``count`` records; reject all but the first."""
    from airflow.providers.apache.kafka.triggers.shared_stream import KafkaSharedStreamProducer
    from airflow.triggers.shared_stream import AdvanceItem, AdvanceOutcome

    producer = KafkaSharedStreamProducer(topics=[source], kafka_config_id=CONN_ID, dlq_topic=dlq)
    stream = producer.open_stream()
    items = []
    try:
        while len(items) < count:
            _, payload = await asyncio.wait_for(anext(stream), timeout=60)
            outcome = AdvanceOutcome(acked=1, failed=0) if not items else AdvanceOutcome(0, 0, rejected=1)
            items.append(AdvanceItem(payload, outcome))
        await producer.advance(items)  # dead-letters the rejected ones, then commits past all three
    finally:
        await stream.aclose()
        if producer._consumer is not None:
            producer._consumer.close()
    return [(item.broker_payload.partition, item.broker_payload.offset) for item in items[1:]]


def test_airflow_providers_dead_letters_are_read_as_their_family_and_replayed_once(
    kafka_bootstrap, monkeypatch, tmp_path
):
    source, dlq = unique_topic("af-source"), unique_topic("af-dlq")
    create_topics(kafka_bootstrap, [source, dlq, f"{source}-retry-1", f"{source}-dlt"], 1)
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{CONN_ID.upper()}",
        json.dumps(
            {
                "conn_type": "kafka",
                "extra": {
                    "bootstrap.servers": kafka_bootstrap,
                    "group.id": unique_topic("af-stream"),
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                },
            }
        ),
    )
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for n in range(3):
        producer.produce(source, key=f"k{n}".encode(), value=f"v{n}".encode(), headers=[("trace", b"t")])
    assert producer.flush(10) == 0

    rejected = asyncio.run(_stream_and_reject(source, dlq, 3))
    assert rejected == [(0, 1), (0, 2)]
    letters = ledger.read_all(kafka_bootstrap, dlq)
    assert [(m.key(), m.value(), m.headers()) for m in letters] == [
        (b"k1", b"v1", None),
        (b"k2", b"v2", None),
    ]

    topology_file = tmp_path / "topology.yaml"
    topology_file.write_text(yaml.safe_dump({"topic": source, "group_id": "svc", "attempts": 2}))
    common = ["--topology", str(topology_file), "--bootstrap", kafka_bootstrap, "--dlt", dlq]
    inspect = _cli("dlt", "inspect", *common, "--family", "airflow", "--format", "json", "--samples", "5")
    assert inspect.returncode == 0, inspect.stderr[-3000:]
    report = json.loads(inspect.stdout)
    assert (report["records"], report["families"]) == (2, {"airflow": 2})
    samples = [s for g in report["groups"] for s in g["samples"]]
    assert len(samples) == 2
    for sample in samples:  # nothing guessed: every field the provider does not write is named missing
        assert sample["family"] == "airflow"
        assert (sample["original_topic"], sample["original_partition"], sample["original_offset"]) == (
            None,
            None,
            None,
        )
        assert {"original_topic", "original_partition", "original_offset"} <= set(sample["missing"])

    refused = _cli("dlt", "replay", *common, "--dry-run")
    assert refused.returncode == 2
    assert "carries no original-topic header" in refused.stderr

    replay = _cli("dlt", "replay", *common, "--to", "main", "--format", "json")
    assert replay.returncode == 0, replay.stderr[-3000:]
    assert json.loads(replay.stdout)["moved"] == 2
    again = _cli("dlt", "replay", *common, "--to", "main", "--format", "json")
    assert (json.loads(again.stdout)["moved"], json.loads(again.stdout)["already_replayed"]) == (0, 2)
    back = [(m.key(), m.value()) for m in ledger.read_all(kafka_bootstrap, source)]
    assert back == [(b"k0", b"v0"), (b"k1", b"v1"), (b"k2", b"v2"), (b"k1", b"v1"), (b"k2", b"v2")]
