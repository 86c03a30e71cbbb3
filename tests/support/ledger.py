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
from typing import TYPE_CHECKING

import yaml
from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.policy.headers import codec as H
from airflow_kafka_retry.policy.topology.file import load_topology
from airflow_kafka_retry.policy.topology.model import Tier, Topology
from airflow_kafka_retry.sandbox.scratch_topics import unique_topic

if TYPE_CHECKING:
    from airflow_kafka_retry.engine.drain.summary import RunSummary

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
    return Topology.from_mapping(
        {
            "topic": topic,
            "group_id": f"{topic}-svc",
            "attempts": 4,
            "backoff": {"kind": "fixed", "delay": "0ms"},
            "not_retryable": [f"{HANDLER_MODULE}.InvalidOrder"],
        },
        source=f"<ledger {topic}>",
    )


def write_topology(topology: Topology, path: Path) -> Topology:
    """A ledger topology as a YAML file (what the CLI and the Spark driver read); returns it loaded from
    there."""
    path.write_text(
        yaml.safe_dump(
            {
                "topic": topology.topic,
                "group_id": topology.group_id,
                "attempts": topology.attempts,
                "backoff": {"kind": "fixed", "delay": "0ms"},
                "not_retryable": list(topology.not_retryable),
            }
        )
    )
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
        producer.produce(
            topology.topic,
            value=value,
            key=str(i).encode(),
            partition=i % partitions,
            headers=[("trace-id", f"t{i}".encode()), ("bin", b"\x00\x01")],
            on_delivery=delivered,
        )
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    assert len(inputs.records) == count
    return inputs


def read_all(bootstrap: str, topic: str, timeout: float = 30.0) -> list:
    """Every committed record of ``topic`` (all partitions), read to partition EOF.

    A partition's EOF comes with the fetch answer that finds nothing more; the broker holds such an answer
    for ``fetch.wait.max.ms`` (500 ms by default), and ``consume(n, t)`` waits its whole ``t`` for ``n``
    records. With both short, a read of a test's topic takes about 50 ms instead of a second.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_topic("reader"),
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
        }
    )
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        _await_markers(bootstrap, topic, list(parts))
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        out, eof, deadline = [], set(), time.monotonic() + timeout
        while len(eof) < len(parts):
            assert time.monotonic() < deadline, f"timed out reading {topic}"
            for msg in consumer.consume(500, 0.05):
                if msg.error():
                    assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                    eof.add(msg.partition())
                else:
                    out.append(msg)
        return out
    finally:
        consumer.close()


def _await_markers(bootstrap: str, topic: str, partitions: list[int], timeout: float = 3.0) -> None:
    """
    Wait (at most ``timeout``) until no transaction is pending on ``topic``: its last stable offset equals
    its log end. A producer's ``commit_transaction`` returns once the coordinator logged the commit; the
    markers reach the partitions a moment later, and a ``read_committed`` read before them ends at the open
    transaction, missing records a run already committed. A transaction still open at the deadline (a
    producer killed mid-chunk, until its timeout) is read around, as Kafka does.
    """
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tps = [TopicPartition(topic, p) for p in partitions]
    deadline = time.monotonic() + timeout
    while True:
        ends = {}
        try:
            for level in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
                futures = admin.list_offsets(
                    {tp: OffsetSpec.latest() for tp in tps}, isolation_level=level, request_timeout=2
                )
                ends[level] = {tp.partition: f.result(5).offset for tp, f in futures.items()}
        except (KafkaException, TimeoutError):  # a leader not elected yet (a topic just made): ask again
            ends.clear()
        if ends and ends[IsolationLevel.READ_COMMITTED] == ends[IsolationLevel.READ_UNCOMMITTED]:
            return
        if time.monotonic() >= deadline:
            return
        time.sleep(0.05)


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


def check_ledger(
    bootstrap: str,
    topology: Topology,
    inputs: Inputs,
    ledger_path: str,
    partitions: int,
    *,
    allow_duplicates: bool = False,
    handled_once: bool = True,
) -> None:
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
        for tier in topology.retry_tiers:
            keys = Counter(m.key() for m in read_all(bootstrap, tier.topic))
            doubled = [k for k, n in keys.items() if n > 1]
            assert not doubled, f"records duplicated in {tier.topic}: {doubled[:5]}"
    for rid, (mode, _partition, _offset) in inputs.records.items():
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
        assert (coords.topic, coords.partition, coords.offset) == (topology.topic, partition, offset), (
            rid,
            coords,
        )
        assert H.last_header(headers, H.RETRY_TOPIC_NAMES.exception_fqcn).decode() == fqcn
        assert H.last_header(headers, "trace-id") == f"t{rid}".encode()
        assert H.last_header(headers, "bin") == b"\x00\x01"
        assert [k for k, _ in headers].count(H.RETRY_TOPIC_NAMES.exception_fqcn) == 1, (
            "exception headers appended, not replaced"
        )
        assert msg.partition() == partition, "DLT record left its partition"
        if mode == "bad-json":
            assert msg.value() == b"{not json", "undeserializable record lost its original bytes"
    for tier in topology.retry_tiers:  # every record routed through a tier: attempt, coordinates, partition
        for msg in read_all(bootstrap, tier.topic):
            rid = msg.key().decode()
            mode, partition, offset = inputs.records[rid]
            assert mode in RETRIED_MODES, f"id {rid} ({mode}) was sent to {tier.topic}"
            assert H.read_attempts(msg.headers()) == tier.index + 1, (
                tier.topic,
                rid,
                H.read_attempts(msg.headers()),
            )
            coords = H.read_original_coordinates(msg.headers())
            assert (coords.topic, coords.partition, coords.offset) == (topology.topic, partition, offset), (
                rid,
                coords,
            )
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
                assert offsets[p] == ends[p], (
                    f"{tier.topic}[{p}]: committed {offsets[p]}, drained to {ends[p]}"
                )


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


# ----------------------------------------------------------------------------- the fault suite's full ledger
FAULT_ID, FAULT_MODE = "fault-id", "fault-mode"


def make_fault_topology(prefix: str, attempts: int = 3, **extra) -> Topology:
    """A short retry path (main, ``attempts - 1`` retry tiers, DLT), delays 0, ``InvalidOrder`` fatal."""
    topic = unique_topic(prefix)
    return Topology.from_mapping(
        {
            "topic": topic,
            "group_id": f"{topic}-svc",
            "attempts": attempts,
            "backoff": {"kind": "fixed", "delay": "0ms"},
            "not_retryable": [f"{HANDLER_MODULE}.InvalidOrder"],
            **extra,
        },
        source=f"<faults {topic}>",
    )


def write_fault_topology(topology: Topology, path: Path) -> Topology:
    """``topology`` (from :func:`make_fault_topology`) as a YAML file, loaded back from there."""
    path.write_text(
        yaml.safe_dump(
            {
                "topic": topology.topic,
                "group_id": topology.group_id,
                "attempts": topology.attempts,
                "backoff": {"kind": "fixed", "delay": "0ms"},
                "not_retryable": list(topology.not_retryable),
            }
        )
    )
    return load_topology(path)


@dataclass
class FaultInput:
    """One record to produce: its fate (``mode``), and optionally its key, value and extra headers."""

    mode: str = "ok"
    key: bytes | None = b"-"  # b"-": the id as key
    value: bytes | None = None  # None: a small JSON value
    headers: list = field(default_factory=list)


def produce_fault_inputs(
    bootstrap: str, topology: Topology, specs: list[FaultInput], partitions: int, **producer_config
) -> Inputs:
    """Create the topology's topics and produce ``specs`` round-robin over ``partitions``; id = index."""
    ensure_topics(topology, {"bootstrap.servers": bootstrap}, partitions=partitions)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5, **producer_config}
    )
    inputs = Inputs()
    errors: list = []

    def delivered(rid: str, mode: str):
        def report(err, msg):
            if err is not None:
                errors.append(err)
            else:
                inputs.records[rid] = (mode, msg.partition(), msg.offset())

        return report

    for i, spec in enumerate(specs):
        key = str(i).encode() if spec.key == b"-" else spec.key
        value = json.dumps({"id": str(i), "mode": spec.mode}).encode() if spec.value is None else spec.value
        producer.produce(
            topology.topic,
            value=value,
            key=key,
            partition=i % partitions,
            on_delivery=delivered(str(i), spec.mode),
            headers=[
                (FAULT_ID, str(i).encode()),
                (FAULT_MODE, spec.mode.encode()),
                ("bin", b"\x00\x01"),
                *spec.headers,
            ],
        )
        producer.poll(0)
    assert producer.flush(60) == 0, errors
    assert not errors, errors
    assert len(inputs.records) == len(specs)
    return inputs


def _fault_id(msg) -> str:
    value = H.last_header(msg.headers(), FAULT_ID)
    assert value is not None, f"{msg.topic()}[{msg.partition()}]@{msg.offset()} has no {FAULT_ID} header"
    return value.decode()


def default_fate(mode: str) -> str:
    """Where a record of ``mode`` ends once every tier ran: ``processed`` or ``dlt``."""
    return "dlt" if mode in ("permanent", "fatal", "bad-json", "hang") else "processed"


@dataclass
class Account:
    """Every input's home once the ledger is checked: counts for the results table."""

    inputs: int
    processed: int
    dlt: int
    parking: int
    pending: dict[str, int]
    lost: int

    def homes(self) -> str:
        parts = [f"{self.processed} processed", f"{self.dlt} DLT"]
        parts += [f"{n} pending in {t}" for t, n in sorted(self.pending.items()) if n]
        if self.parking:
            parts.append(f"{self.parking} parked")
        return ", ".join(parts)


def account(
    bootstrap: str,
    topology: Topology,
    inputs: Inputs,
    ledger_path: str,
    partitions: int,
    *,
    fate: Callable[[str], str | None] = default_fate,
    allow_duplicates: bool = False,
    handled_once: bool = True,
) -> Account:
    """The full ledger, asserted: each input in exactly one of processed / a later tier / DLT / parking.

    * a record is *pending* in a tier when a copy of it sits at or after that tier partition's
      committed offset (not drained yet): that is its home;
    * every record a tier group committed past (offset < committed) has a home further on: it was
      processed, or a copy is in a later tier, a DLT or parking -- no committed offset passes a
      record without a home;
    * each input has exactly one kind of home, the one ``fate(mode)`` names (None: not checked);
    * ``allow_duplicates``: copies of one kind are tolerated (a broker without abort isolation shows
      the records of aborted transactions); ``handled_once``: no id was handled successfully twice.
    """
    processed = processed_ids(ledger_path)
    if handled_once:
        twice = sorted(i for i, n in processed.items() if n > 1)
        assert not twice, f"{len(twice)} records handled successfully more than once, e.g. {twice[:5]}"
    assert set(processed) <= set(inputs.records), "ledger has ids that were never produced"
    homes: dict[str, list[str]] = {rid: (["processed"] if rid in processed else []) for rid in inputs.records}
    passed: list[tuple[Tier, str, str]] = []  # (tier, id, where) of records a group committed past
    copies: Counter = Counter()
    for tier in topology.tiers:
        offsets = committed(bootstrap, topology.consumer_group(tier), tier.topic, partitions)
        for msg in read_all(bootstrap, tier.topic):
            rid = _fault_id(msg)
            where = f"{tier.topic}[{msg.partition()}]@{msg.offset()}"
            if msg.offset() < offsets.get(msg.partition(), -1):
                passed.append((tier, rid, where))
            else:
                homes[rid].append(f"pending:{tier.topic}")
                copies[(rid, tier.topic)] += 1
    parking = getattr(topology, "parking_topic", None)
    for kind, topics in (
        ("dlt", [t.topic for t in topology.dlt_tiers]),
        ("parking", [parking] if parking else []),
    ):
        for topic in topics:
            for msg in read_all(bootstrap, topic):
                rid = _fault_id(msg)
                homes[rid].append(kind)
                copies[(rid, kind)] += 1
                if kind == "dlt":
                    mode, partition, offset = inputs.records[rid]
                    coords = H.read_original_coordinates(msg.headers())
                    assert (coords.topic, coords.partition, coords.offset) == (
                        topology.topic,
                        partition,
                        offset,
                    ), (rid, coords)
    if not allow_duplicates:
        doubled = [c for c, n in copies.items() if n > 1]
        assert not doubled, f"records with two copies in one home: {doubled[:5]}"
    lost = sorted(rid for rid, h in homes.items() if not h)
    assert not lost, f"{len(lost)} records have no home, e.g. {[(r, inputs.records[r]) for r in lost[:5]]}"
    for rid, found in homes.items():
        kinds = set(found)
        assert len(kinds) == 1, f"id {rid} ({inputs.records[rid][0]}) is in {sorted(kinds)}"
        expected = fate(inputs.records[rid][0])
        if expected is not None:
            assert kinds == {expected}, (
                f"id {rid} ({inputs.records[rid][0]}) ended in {found[0]}, expected {expected}"
            )
    index = {t.topic: t.index for t in topology.tiers}
    for tier, rid, where in passed:
        home = homes[rid][0]
        later = home in ("processed", "dlt", "parking") or index[home.split(":", 1)[1]] > tier.index
        assert later, f"{where} (id {rid}) was committed past, but its only home is {home}"
    pending = Counter(h[0].split(":", 1)[1] for h in homes.values() if h[0].startswith("pending:"))
    return Account(
        inputs=len(inputs.records),
        processed=sum(1 for h in homes.values() if h[0] == "processed"),
        dlt=sum(1 for h in homes.values() if h[0] == "dlt"),
        parking=sum(1 for h in homes.values() if h[0] == "parking"),
        pending=dict(pending),
        lost=len(lost),
    )
