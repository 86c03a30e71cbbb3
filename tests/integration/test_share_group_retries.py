"""
Back-off retries for a real Kafka 4.4 share group (issue 41 item 3), end to end through the real parts.

A real ``ShareConsumer`` rejects the records of some keys on their first rounds; the broker dead-letters them
to ``dlq.<group>`` (key and value copied, headers not); a topology with ``input: {family: share-group}``
and ``on_due: redeliver`` drains that DLQ into its tiers, which wait their back-off and redeliver each record
to its source partition with its round in ``retry_topic-attempts``; the share consumer takes it again. The
tier runs are driven in a loop here, with the local engine (``testkit/share_retry.drain_share_topology``).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import Producer

from airflow_kafka_retry.engine.kafka.reading import TopicReader
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.engine.logs.redelivery_log import redelivery_log_topic
from airflow_kafka_retry.policy.dead_letters.families import describe_dead_letter
from airflow_kafka_retry.policy.headers.codec import read_original_coordinates
from airflow_kafka_retry.policy.routing.share_redelivery import entry_key
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.sandbox.scratch_topics import CLIENT_LOGGER, create_topics
from testkit.share_groups import DLQ_PREFIX, set_group_configs
from testkit.share_retry import (
    RETRIED_GROUP_CONFIGS,
    ShareQueue,
    drain_share_topology,
)

from tests.support.dead_letter_fixtures import read_exactly, unique_name

if TYPE_CHECKING:
    from airflow_kafka_retry.sandbox.kafka import ApacheKafka

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ATTEMPTS = 3  # rounds of delivery to the share consumer: the source's, then two redeliveries
BACKOFF_MS = 1500
#: key -> the round on which the share consumer accepts it (None: never, so it ends in the DLT)
PLAN: dict[bytes, int | None] = {
    b"ok-0": 1,
    b"ok-1": 1,
    b"second-0": 2,
    b"second-1": 2,
    b"third-0": 3,
    b"never-0": None,
    b"never-1": None,
}


NEVER = sorted(k for k, v in PLAN.items() if v is None)


def _decide(key: bytes, attempt: int) -> bool:
    accept_on = PLAN[key]
    return accept_on is not None and attempt >= accept_on


def _setup(bootstrap: str) -> tuple[Topology, str, dict[bytes, tuple[int, int]]]:
    source = unique_name("orders")
    group = unique_name("share")
    create_topics(bootstrap, [source], 2)
    set_group_configs(
        bootstrap, group, {**RETRIED_GROUP_CONFIGS, "errors.deadletterqueue.topic.name": DLQ_PREFIX + group}
    )
    topology = Topology.from_mapping(
        {
            "topic": source,
            "group_id": f"{group}-retrier",
            "input": {"family": "share-group", "dlq": DLQ_PREFIX + group},
            "on_due": "redeliver",
            "attempts": ATTEMPTS,
            "backoff": {"kind": "fixed", "delay": f"{BACKOFF_MS}ms"},
        },
        source="share-retries.yaml",
    )
    ensure_topics(topology, {"bootstrap.servers": bootstrap}, partitions=2)
    placed: dict[bytes, tuple[int, int]] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "logger": CLIENT_LOGGER})
    for i, key in enumerate(PLAN):

        def delivered(err: object, msg: object, key: bytes = key) -> None:
            assert err is None, err
            placed[key] = (msg.partition(), msg.offset())  # type: ignore[attr-defined]

        producer.produce(source, key=key, value=b"v-" + key, partition=i % 2, on_delivery=delivered)
    assert producer.flush(30) == 0
    return topology, group, placed


def _settled(queue: ShareQueue, dlt_count: int) -> bool:
    accepted = {d.key for d in queue.snapshot() if d.accepted}
    return accepted == {k for k, v in PLAN.items() if v is not None} and dlt_count >= len(NEVER)


def _dlt_size(bootstrap: str, topology: Topology) -> int:
    """The records in the DLT (read_committed: transaction markers are not records)."""
    with TopicReader({"bootstrap.servers": bootstrap}) as reader:
        dlt = str(topology.dlt_topic)
        return sum(1 for p in range(reader.partitions(dlt)) for _ in reader.read(dlt, p))


def test_rejected_records_wait_their_backoff_and_come_back_with_their_round(
    share_dlq_kafka: ApacheKafka,
) -> None:
    bootstrap = share_dlq_kafka.bootstrap
    topology, group, placed = _setup(bootstrap)
    config = {"bootstrap.servers": bootstrap}
    deadline = time.monotonic() + 120
    with ShareQueue(bootstrap, group, [topology.topic], _decide) as queue:
        dlq_seen = False
        while not _settled(queue, _dlt_size(bootstrap, topology)):
            queue.check()
            assert time.monotonic() < deadline, f"not settled in 120s: {queue.snapshot()[-8:]}"
            dlq_seen = dlq_seen or bool(read_dlq_partitions(bootstrap, DLQ_PREFIX + group))
            if dlq_seen:
                for run in drain_share_topology(topology, config):
                    failed = [p.error for p in run.partitions if p.status == "failed"]
                    assert not failed, failed
            time.sleep(0.2)
        time.sleep(1.0)  # anything wrongly left would show up in the deliveries and the DLT now
        for run in drain_share_topology(topology, config):
            assert not [p.error for p in run.partitions if p.status == "failed"]
        time.sleep(1.0)
        deliveries = queue.snapshot()

    # Rounds carried across the DLQ round trip: the dead letter of a redelivered record has no header,
    # so round 3 is reached only through the redelivery log.
    rounds: dict[bytes, list[int]] = {}
    for d in deliveries:
        rounds.setdefault(d.key, []).append(d.attempt)
    expected = {key: list(range(1, (accept_on or ATTEMPTS) + 1)) for key, accept_on in PLAN.items()}
    assert rounds == expected

    # Never redelivered before due; each redelivery back to its source partition.
    for d in deliveries:
        if d.attempt > 1:
            assert d.due_ms is not None, d
            assert d.timestamp_ms >= d.due_ms, f"{d.key!r} round {d.attempt} redelivered before it was due"
            assert d.partition == placed[d.key][0]
            assert d.offset != placed[d.key][1]

    # Round n+1 waited in tier n: the records of each tier are those redelivered on that round.
    with TopicReader(config) as reader:
        for tier in topology.retry_tiers:
            held = sorted(bytes(m.key() or b"") for p in (0, 1) for m in reader.read(tier.topic, p))
            assert held == sorted(d.key for d in deliveries if d.attempt == tier.index + 1), tier.topic

    # Every record ends once: accepted by the share consumer, or in the DLT.
    accepted = Counter(d.key for d in deliveries if d.accepted)
    assert accepted == Counter({k: 1 for k, v in PLAN.items() if v is not None})
    dlt = read_exactly(bootstrap, str(topology.dlt_topic), len(NEVER))
    assert sorted(bytes(m.key() or b"") for m in dlt) == NEVER
    for message in dlt:
        headers = message.headers() or []
        key = bytes(message.key() or b"")
        first = read_original_coordinates(headers)  # type: ignore[arg-type]
        assert (first.topic, first.partition, first.offset) == (topology.topic, *placed[key])
        assert message.value() == b"v-" + key
        assert describe_dead_letter(headers, 0).failure_class == (  # type: ignore[arg-type]
            "airflow_kafka_retry.policy.routing.share_redelivery.ShareGroupRejection"
        )

    # The redelivery log: the entry of each redelivered record that was rejected again was used, and deleted
    # (a tombstone, read_committed); that of an accepted one stays until retention.
    last: dict[bytes, bytes | None] = {}
    with TopicReader(config) as reader:
        for message in reader.read(redelivery_log_topic(topology.topic), 0):
            last[bytes(message.key() or b"")] = message.value()
    redelivered = [d for d in deliveries if d.attempt > 1]
    assert len(last) == len(redelivered)
    for d in redelivered:
        used = last[entry_key((d.topic, d.partition, d.offset))] is None
        assert used == (not d.accepted), d


def read_dlq_partitions(bootstrap: str, topic: str) -> list[int]:
    from confluent_kafka.admin import AdminClient

    # all topics: a metadata request naming the DLQ would let the broker auto-create it as a plain topic,
    # to which the share group cannot write (it needs errors.deadletterqueue.group.enable=true)
    found = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics.get(topic)
    return list(found.partitions) if found is not None and found.error is None else []
