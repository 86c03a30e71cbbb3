"""The ledger scenario shared by the local-engine and Spark tests.

Inputs with known fates go to the main topic; the tiers are run to completion by whichever
engine the test uses; then every input id must be in exactly one place: the processed ledger
or the DLT, with the right headers, and every tier group's committed offset must sit right
after the last record of its partition.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from airflow_kafka_retry.engine.summary import RunSummary
from airflow_kafka_retry.engine.topics import ensure_topics
from airflow_kafka_retry.policy import headers as H
from airflow_kafka_retry.policy.topology import Tier, Topology, load_topology
from airflow_kafka_retry.testing.topics import unique_topic

HANDLER_MODULE = "tests.support.ledger_handler"
# Seven modes: coprime with the partition counts used, so every partition (and every chunk) mixes
# fates. Chunks where every record succeeds are tested on their own (test_engine_commits.py).
MODES = ("ok", "transient:1", "permanent", "fatal", "transient:2", "bad-json", "ok")
# (attempts header expected on the DLT record, exception class) for records that end in the DLT.
DLT_FATES = {
    "permanent": (5, f"{HANDLER_MODULE}.PermanentError"),
    "fatal": (2, f"{HANDLER_MODULE}.InvalidOrder"),
    "bad-json": (2, "airflow_kafka_retry.errors.DeserializationError"),
}


#: Modes whose records go around the retry tiers (the others succeed or go straight to the DLT).
RETRIED_MODES = ("transient:1", "transient:2", "permanent")


def make_topology(prefix: str = "orders") -> Topology:
    topic = unique_topic(prefix)
    return Topology.from_mapping({
        "topic": topic,
        "group_id": f"{topic}-svc",
        "attempts": 4,
        "backoff": {"kind": "fixed", "delay": "0ms"},
        "not_retryable": [f"{HANDLER_MODULE}.InvalidOrder"],
    }, source=f"<ledger {topic}>")


def write_topology(topology: Topology, path: Path) -> Topology:
    """A ledger topology as a YAML file (what the CLI and the Spark driver read); returns it loaded from there."""
    path.write_text(yaml.safe_dump({
        "topic": topology.topic, "group_id": topology.group_id, "attempts": topology.attempts,
        "backoff": {"kind": "fixed", "delay": "0ms"}, "not_retryable": list(topology.not_retryable)}))
    return load_topology(path)


@dataclass
class Inputs:
    """What was produced: id -> (mode, partition, offset)."""

    records: dict[str, tuple[str, int, int]] = field(default_factory=dict)


def produce_inputs(bootstrap: str, topology: Topology, count: int, partitions: int) -> Inputs:
    ensure_topics(topology, {"bootstrap.servers": bootstrap}, partitions=partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    inputs = Inputs()

    def delivered(err, msg):
        assert err is None, err
        mode = MODES[int(msg.key()) % len(MODES)]
        inputs.records[msg.key().decode()] = (mode, msg.partition(), msg.offset())

    for i in range(count):
        mode = MODES[i % len(MODES)]
        value = b"{not json" if mode == "bad-json" else json.dumps({"id": str(i), "mode": mode}).encode()
        producer.produce(topology.topic, value=value, key=str(i).encode(), partition=i % partitions,
                         headers=[("trace-id", f"t{i}".encode()), ("bin", b"\x00\x01")], on_delivery=delivered)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    assert len(inputs.records) == count
    return inputs


def read_all(bootstrap: str, topic: str, timeout: float = 30.0) -> list:
    """Every committed record of ``topic`` (all partitions), read to partition EOF."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("reader"),
                         "enable.partition.eof": True, "isolation.level": "read_committed",
                         "enable.auto.commit": False})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        out, eof, deadline = [], set(), time.monotonic() + timeout
        while len(eof) < len(parts):
            assert time.monotonic() < deadline, f"timed out reading {topic}"
            for msg in consumer.consume(500, 0.5):
                if msg.error():
                    assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                    eof.add(msg.partition())
                else:
                    out.append(msg)
        return out
    finally:
        consumer.close()


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


def run_tiers(topology: Topology, run_tier: Callable[[Tier], RunSummary]) -> list[RunSummary]:
    """Run every tier once, in order (delays are 0, so everything routed is due at once)."""
    summaries = []
    for tier in topology.tiers:
        summary = run_tier(tier)
        assert summary.ok, json.dumps(summary.to_dict()["partitions"], indent=1)[:3000]
        summaries.append(summary)
    return summaries


def processed_ids(ledger_path: str) -> Counter:
    with open(ledger_path) as fh:
        return Counter(line.strip() for line in fh if line.strip())


def check_ledger(bootstrap: str, topology: Topology, inputs: Inputs, ledger_path: str, partitions: int, *,
                 allow_duplicates: bool = False, handled_once: bool = True) -> None:
    """Assert every input has exactly one home (the one its mode gives), with the right headers and offsets.

    ``allow_duplicates``: a broker without abort isolation shows the records of transactions that a
    killed run left open (and the next run aborted), so copies may appear; homes must still agree.
    ``handled_once``: every processed record was handled successfully exactly once. Off only where a
    run is killed after handling records it had not committed yet (handling is at least once).
    """
    processed = processed_ids(ledger_path)
    if handled_once:
        twice = sorted(i for i, n in processed.items() if n > 1)
        assert not twice, f"{len(twice)} records handled successfully more than once, e.g. {twice[:5]}"
    dlt = read_all(bootstrap, topology.dlt_topic)
    dlt_ids = Counter(m.key().decode() for m in dlt)
    if not allow_duplicates:
        assert not [i for i, n in dlt_ids.items() if n > 1], "records duplicated in the DLT"
    for rid, (mode, partition, offset) in inputs.records.items():
        homes = (["processed"] if rid in processed else []) + (["dlt"] if rid in dlt_ids else [])
        assert len(homes) == 1, f"id {rid} ({mode}) is in {homes or 'no home'}"
        expected = "dlt" if mode in DLT_FATES else "processed"
        assert homes == [expected], f"id {rid} ({mode}) ended in {homes[0]}, expected {expected}"
    assert set(processed) <= set(inputs.records), "ledger has ids that were never produced"
    for msg in dlt:
        rid = msg.key().decode()
        mode, partition, offset = inputs.records[rid]
        attempts, fqcn = DLT_FATES[mode]
        headers = msg.headers()
        assert H.read_attempts(headers) == attempts, (rid, mode, H.read_attempts(headers))
        coords = H.read_original_coordinates(headers)
        assert (coords.topic, coords.partition, coords.offset) == (topology.topic, partition, offset), (rid, coords)
        assert H.last_header(headers, H.RETRY_TOPIC_NAMES.exception_fqcn).decode() == fqcn
        assert H.last_header(headers, "trace-id") == f"t{rid}".encode()
        assert H.last_header(headers, "bin") == b"\x00\x01"
        assert [k for k, _ in headers].count(H.RETRY_TOPIC_NAMES.exception_fqcn) == 1, "exception headers appended, not replaced"
        assert msg.partition() == partition, "DLT record left its partition"
        if mode == "bad-json":
            assert msg.value() == b"{not json", "undeserializable record lost its original bytes"
    for tier in topology.retry_tiers:  # every record routed through a tier: attempt, coordinates, partition
        for msg in read_all(bootstrap, tier.topic):
            rid = msg.key().decode()
            mode, partition, offset = inputs.records[rid]
            assert mode in RETRIED_MODES, f"id {rid} ({mode}) was sent to {tier.topic}"
            assert H.read_attempts(msg.headers()) == tier.index + 1, (tier.topic, rid, H.read_attempts(msg.headers()))
            coords = H.read_original_coordinates(msg.headers())
            assert (coords.topic, coords.partition, coords.offset) == (topology.topic, partition, offset), (rid, coords)
            assert msg.partition() == partition, f"id {rid} left its partition in {tier.topic}"
    for tier in topology.tiers:
        records = read_all(bootstrap, tier.topic)
        ends: dict[int, int] = {}
        for msg in records:
            ends[msg.partition()] = max(ends.get(msg.partition(), -1), msg.offset() + 1)
        group = topology.consumer_group(tier)
        offsets = committed(bootstrap, group, tier.topic, partitions)
        for p in range(partitions):
            if p in ends:
                assert offsets[p] == ends[p], f"{tier.topic}[{p}]: committed {offsets[p]}, drained to {ends[p]}"


def tier_contents(bootstrap: str, topology: Topology) -> dict[int, list[str]]:
    """The ids each retry tier and the DLT (index -1) hold, in partition-then-offset order."""
    contents = {}
    for tier in (*topology.retry_tiers, *topology.dlt_tiers):
        records = sorted(read_all(bootstrap, tier.topic), key=lambda m: (m.partition(), m.offset()))
        contents[tier.index] = [m.key().decode() for m in records]
    return contents


def ledger_path(tmp_path) -> str:
    path = str(tmp_path / "ledger.txt")
    open(path, "w").close()
    os.environ["AKR_LEDGER"] = path
    return path
