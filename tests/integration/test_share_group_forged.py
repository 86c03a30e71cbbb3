"""
Forged share-group dead letters, through the real redelivery lane on the real broker (issue 48 items 1, 2).

Whoever may write a share group's DLQ, or a retry tier, writes headers; the provider's transactional
producer must not write where they say. Dead letters naming another service's topic, the topology's own DLT,
parking topic, replay log or redelivery log, a 600-character topic or another share group, and a tier
record naming another service's topic, are produced straight into the DLQ and the tier. The input lane and
the tier run as they do in Airflow (``run_local``): each forged record ends in the DLT with its reason, none
is written to the topic it named (read back ``read_committed``), the genuine dead letter still goes back to
its source, and every partition's offset is committed (a second run reads nothing: no stall).
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.kafka.reading import TopicReader
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.policy.headers.codec import (
    ATTEMPTS,
    BACKOFF_TIMESTAMP,
    encode_big_integer,
    encode_int32,
    last_header,
)
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.sandbox.scratch_topics import CLIENT_LOGGER, create_topics, unique_topic

pytestmark = [pytest.mark.integration]

OPTIONS = DrainOptions(handler="airflow_kafka_retry.engine.drain.redelivery:no_handler", call_timeout_s=10.0)
NOT_REDELIVERABLE = b"airflow_kafka_retry.policy.routing.share_redelivery.NotRedeliverableError"


def dead_letter(topic: str, partition: int, offset: int, group: str) -> list[tuple[str, bytes]]:
    """The headers the broker writes (decimal text)."""
    return [
        ("__dlq.errors.topic", topic.encode()),
        ("__dlq.errors.partition", str(partition).encode()),
        ("__dlq.errors.offset", str(offset).encode()),
        ("__dlq.errors.group", group.encode()),
        ("__dlq.errors.delivery.count", b"1"),
        ("__dlq.errors.message", b"Offset rejected by client."),
    ]


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, list[tuple[str, bytes]]]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "logger": CLIENT_LOGGER})
    for key, headers in records:
        producer.produce(topic, key=key, value=b"value-" + key, headers=headers, partition=0)
    assert producer.flush(30) == 0


def read_all(bootstrap: str, topic: str) -> list:  # type: ignore[type-arg]
    """Every committed record of ``topic`` (read_committed), from the start of each partition."""
    with TopicReader({"bootstrap.servers": bootstrap}) as reader:
        return [m for p in range(reader.partitions(topic)) for m in reader.read(topic, p)]


def committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "logger": CLIENT_LOGGER})
    try:
        return consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    finally:
        consumer.close()


def share_topology(bootstrap: str) -> tuple[Topology, str]:
    source = unique_topic("orders")
    group = unique_topic("share")
    topology = Topology.from_mapping(
        {
            "topic": source,
            "group_id": f"{group}-retrier",
            "input": {"family": "share-group", "dlq": f"dlq.{group}"},
            "on_due": "redeliver",
            "attempts": 3,
            "backoff": {"kind": "fixed", "delay": "300ms"},
        },
        source="forged.yaml",
    )
    create_topics(bootstrap, [source, f"dlq.{group}"], 1)
    ensure_topics(topology, {"bootstrap.servers": bootstrap}, partitions=1)
    return topology, group


def test_forged_dead_letters_end_in_the_dlt_with_their_reason_and_nothing_is_written_where_they_say(
    kafka_bootstrap: str,
) -> None:
    bootstrap = kafka_bootstrap
    config = {"bootstrap.servers": bootstrap}
    topology, group = share_topology(bootstrap)
    victim = unique_topic("payments-commands")
    dlt, parking = str(topology.dlt_topic), str(topology.parking_topic)
    replay_log, redelivery_log = f"{dlt}-replay-log", f"{topology.topic}-redelivery-log"
    create_topics(bootstrap, [victim], 4)
    create_topics(bootstrap, [replay_log], 1)
    forged = {
        b"victim": dead_letter(victim, 3, 5, group),
        b"own-dlt": dead_letter(dlt, 0, 5, group),
        b"parking": dead_letter(parking, 0, 5, group),
        b"replay-log": dead_letter(replay_log, 0, 5, group),
        b"redelivery-log": dead_letter(redelivery_log, 0, 5, group),
        b"long-name": dead_letter("x" * 600, 0, 5, group),
        b"other-group": dead_letter(topology.topic, 0, 5, "payments-share"),
    }
    produce(
        bootstrap,
        str(topology.input.dlq),
        [*forged.items(), (b"genuine", dead_letter(topology.topic, 0, 0, group))],
    )
    tier = topology.retry_tiers[0]
    now = int(time.time() * 1000)
    tier_forged = [
        *dead_letter(victim, 2, 9, group),
        (ATTEMPTS, encode_int32(2)),
        (BACKOFF_TIMESTAMP, encode_big_integer(now - 1_000)),
        ("kafka_original-topic", topology.topic.encode()),
        ("kafka_original-partition", encode_int32(0)),
        ("kafka_original-offset", b"\x00" * 8),
    ]
    produce(bootstrap, tier.topic, [(b"tier-forged", tier_forged)])

    lane = run_local(topology, topology.tier(0), config, OPTIONS, in_process=True)
    assert [p.status for p in lane.partitions] == ["ok"], [p.error for p in lane.partitions]
    time.sleep(0.5)  # the genuine dead letter's back-off
    deadline = time.monotonic() + 60
    while not any(m.key() == b"genuine" for m in read_all(bootstrap, topology.topic)):
        assert time.monotonic() < deadline, "the genuine dead letter was not redelivered in 60 s"
        run = run_local(topology, tier, config, OPTIONS, in_process=True)
        assert [p.status for p in run.partitions] == ["ok"], [p.error for p in run.partitions]
        time.sleep(0.3)

    # Each forged record is in the DLT once, with the reason it was not redelivered.
    reasons = {
        bytes(m.key()): (
            last_header(m.headers(), "kafka_exception-fqcn"),
            last_header(m.headers(), "kafka_exception-message"),
        )
        for m in read_all(bootstrap, dlt)
    }
    assert sorted(reasons) == sorted([*forged, b"tier-forged"])
    assert {fqcn for fqcn, _ in reasons.values()} == {NOT_REDELIVERABLE}
    assert b"is not one this topology redelivers to" in reasons[b"victim"][1]
    assert b"is not one this topology redelivers to" in reasons[b"tier-forged"][1]
    assert b"cut from 600 characters" in reasons[b"long-name"][1]
    assert b"names share group 'payments-share'" in reasons[b"other-group"][1]
    # Nothing written where the forged headers said (read_committed); only the genuine one went back.
    assert read_all(bootstrap, victim) == []
    assert read_all(bootstrap, replay_log) == []
    assert read_all(bootstrap, parking) == []
    assert [m.key() for m in read_all(bootstrap, topology.topic)] == [b"genuine"]
    assert len(read_all(bootstrap, redelivery_log)) == 1  # the genuine redelivery's entry only
    # No stall: both partitions committed to their end, and the next runs read nothing.
    assert (
        committed(bootstrap, topology.consumer_group(topology.tier(0)), topology.tier(0).topic)
        == len(forged) + 1
    )
    assert committed(bootstrap, topology.consumer_group(tier), tier.topic) == 2
    for again in (topology.tier(0), tier):
        rerun = run_local(topology, again, config, OPTIONS, in_process=True)
        assert [(p.status, p.drained) for p in rerun.partitions] == [("ok", 0)]


@pytest.mark.requires_capability("enforces_max_message_bytes", "abort_isolation")
def test_a_record_its_source_refuses_goes_to_the_dlt_and_the_rest_of_the_chunk_goes_back(
    kafka_bootstrap: str,
) -> None:
    """
    An allowed source that refuses a record for good (here: larger than its ``max.message.bytes``) does not
    stall the tier: its chunk is aborted and committed again with that record in the DLT, its reason in the
    exception headers; the small records of the same chunk go back once (read_committed), the log holds their
    entries only, and the tier's offset is committed.
    """
    bootstrap = kafka_bootstrap
    config = {"bootstrap.servers": bootstrap}
    source = unique_topic("orders")
    group = unique_topic("share")
    topology = Topology.from_mapping(
        {
            "topic": source,
            "group_id": f"{group}-retrier",
            "input": {"family": "share-group", "dlq": f"dlq.{group}"},
            "on_due": "redeliver",
            "backoff": {"kind": "fixed", "delay": "1ms"},
        },
        source="refused.yaml",
    )
    create_topics(bootstrap, [f"dlq.{group}"], 1)
    create_topics(bootstrap, [source], 1, config={"max.message.bytes": "2048"})
    ensure_topics(topology, config, partitions=1)
    tier = topology.retry_tiers[0]
    records = [(b"small-0", 10), (b"big", 8_000), (b"small-1", 10)]
    producer = Producer({"bootstrap.servers": bootstrap, "logger": CLIENT_LOGGER})
    for offset, (key, size) in enumerate(records):
        headers = dead_letter(source, 0, offset, group)
        producer.produce(f"dlq.{group}", key=key, value=b"v" * size, headers=headers, partition=0)
    assert producer.flush(30) == 0

    lane = run_local(topology, topology.tier(0), config, OPTIONS, in_process=True)
    assert [p.status for p in lane.partitions] == ["ok"], [p.error for p in lane.partitions]
    time.sleep(0.1)  # due
    run = run_local(topology, tier, config, OPTIONS, in_process=True)
    assert [p.status for p in run.partitions] == ["ok"], [p.error for p in run.partitions]

    assert sorted(bytes(m.key()) for m in read_all(bootstrap, source)) == [b"small-0", b"small-1"]
    (dead,) = read_all(bootstrap, str(topology.dlt_topic))
    assert dead.key() == b"big"
    assert len(dead.value()) == 8_000
    assert last_header(dead.headers(), "kafka_exception-fqcn") == NOT_REDELIVERABLE
    message = last_header(dead.headers(), "kafka_exception-message") or b""
    assert b"refused the redelivery" in message
    assert b"too large" in message.lower()
    assert len(read_all(bootstrap, f"{source}-redelivery-log")) == 2
    assert (
        committed(bootstrap, topology.consumer_group(tier), tier.topic) == run.partitions[0].committed_offset
    )
    rerun = run_local(topology, tier, config, OPTIONS, in_process=True)
    assert [(p.status, p.drained) for p in rerun.partitions] == [("ok", 0)]


def test_on_due_redeliver_refuses_a_run_without_transactions(kafka_bootstrap: str) -> None:
    topology, _ = share_topology(kafka_bootstrap)
    options = DrainOptions(handler=OPTIONS.handler, transactional=False)
    run = run_local(
        topology, topology.tier(0), {"bootstrap.servers": kafka_bootstrap}, options, in_process=True
    )
    (partition,) = run.partitions
    assert partition.status == "failed"
    assert "option transactional=False does not fit on_due: redeliver" in str(partition.error)
    assert "forged.yaml" in str(partition.error)


def test_the_source_topic_lookup_runs_under_the_drains_call_deadline(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``RedeliveryLane._exists`` asks the broker under the partition's CallDeadlines."""
    from airflow_kafka_retry.engine.drain import redelivery
    from airflow_kafka_retry.engine.drain.partition import PartitionJob

    topology, group = share_topology(kafka_bootstrap)
    config = {"bootstrap.servers": kafka_bootstrap}
    produce(
        kafka_bootstrap, str(topology.input.dlq), [(b"genuine", dead_letter(topology.topic, 0, 0, group))]
    )
    assert (
        run_local(topology, topology.tier(0), config, OPTIONS, in_process=True).partitions[0].status == "ok"
    )
    tier = topology.retry_tiers[0]
    # the routed record is readable once its transaction's markers are written (asynchronous to the commit,
    # late on a loaded machine), and due 300 ms after it was routed
    deadline = time.monotonic() + 60
    while not read_all(kafka_bootstrap, tier.topic):
        assert time.monotonic() < deadline, f"the routed dead letter is not readable in {tier.topic} in 60 s"
        time.sleep(0.2)
    time.sleep(0.5)  # due
    job = PartitionJob(topology, tier, 0, config, OPTIONS, cutoff_ms=int(time.time() * 1000))
    seen: list[tuple[list[str], str | None]] = []
    real = redelivery.partition_counts

    def spy(client: object, topics: list[str], timeout: float = 10.0) -> dict[str, int]:
        waiting = job.deadlines.waiting
        seen.append((topics, waiting.call if waiting is not None else None))
        return real(client, topics, timeout)  # type: ignore[arg-type]

    monkeypatch.setattr(redelivery, "partition_counts", spy)
    summary = job.run()
    assert summary.status == "ok", summary.error
    assert seen == [([topology.topic], "list_topics")]
    assert [m.key() for m in read_all(kafka_bootstrap, topology.topic)] == [b"genuine"]


def test_a_full_producer_queue_is_waited_out_not_a_crash(kafka_bootstrap: str) -> None:
    """``produce`` raising BufferError (here: a queue of one message) makes the router poll and go on."""
    topology, group = share_topology(kafka_bootstrap)
    config = {"bootstrap.servers": kafka_bootstrap}
    keys = [b"a", b"b", b"c"]
    letters = [(key, dead_letter(topology.topic, 0, i, group)) for i, key in enumerate(keys)]
    produce(kafka_bootstrap, str(topology.input.dlq), letters)
    assert (
        run_local(topology, topology.tier(0), config, OPTIONS, in_process=True).partitions[0].status == "ok"
    )
    time.sleep(0.5)  # due
    tiny = {**config, "queue.buffering.max.messages": 1}
    run = run_local(topology, topology.retry_tiers[0], tiny, OPTIONS, in_process=True)
    assert [p.status for p in run.partitions] == ["ok"], [p.error for p in run.partitions]
    assert sorted(bytes(m.key()) for m in read_all(kafka_bootstrap, topology.topic)) == keys
    assert len(read_all(kafka_bootstrap, f"{topology.topic}-redelivery-log")) == len(keys)


def test_a_queue_that_stays_full_fails_the_run_and_sends_nothing_to_the_dlt(kafka_bootstrap: str) -> None:
    """
    A producer queue that stays full past the call timeout is the cluster's problem, not the record's: the
    run fails, transient, with nothing committed; no redelivery is taken for refused and sent to the DLT.
    (The queue: one message, held 5 s by ``linger.ms`` while the router waits 1 s for room.)
    """
    topology, group = share_topology(kafka_bootstrap)
    config = {"bootstrap.servers": kafka_bootstrap}
    letters = [(key, dead_letter(topology.topic, 0, i, group)) for i, key in enumerate([b"a", b"b"])]
    produce(kafka_bootstrap, str(topology.input.dlq), letters)
    assert (
        run_local(topology, topology.tier(0), config, OPTIONS, in_process=True).partitions[0].status == "ok"
    )
    time.sleep(0.5)  # due
    held = {**config, "queue.buffering.max.messages": 1, "linger.ms": 5_000}
    options = DrainOptions(handler=OPTIONS.handler, call_timeout_s=1.0, broker_retry_s=0)
    tier = topology.retry_tiers[0]
    run = run_local(topology, tier, held, options, in_process=True)
    (partition,) = run.partitions
    assert partition.status == "failed"
    error = str(partition.error)
    assert error.startswith("RouteError: "), error  # the cluster's failure (transient), not a refused record
    assert "queue stayed full" in error
    assert read_all(kafka_bootstrap, str(topology.dlt_topic)) == []
    assert read_all(kafka_bootstrap, topology.topic) == []
    assert committed(kafka_bootstrap, topology.consumer_group(tier), tier.topic) < 0  # nothing committed
