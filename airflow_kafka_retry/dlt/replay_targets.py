"""
Where a replay or inspect reads from and where each record goes (the target).

The source is a DLT or the parking topic of the topology, or any other dead-letter topic named in full
(a Kafka Connect DLQ, a share group's ``dlq.*`` topic, an Airflow ``dlq_topic``): only the topology's own
main topic and retry tiers are refused as a source. The target is checked as strictly whatever the source.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_kafka_retry.policy.errors import ReplayError

if TYPE_CHECKING:
    from airflow_kafka_retry.dlt.records import DltRecord
    from airflow_kafka_retry.policy.topology.model import Topology

BY_KEY = -1  # produce without a partition: the producer partitions by key


def source_topics(topology: Topology) -> list[str]:
    """Every topic a replay or inspect may read: the DLTs, then the parking topic."""
    parking = [topology.parking_topic] if topology.parking_topic else []
    return [t.topic for t in topology.dlt_tiers] + parking


def source_topic(topology: Topology, dlt: str | None) -> str:
    """
    The topic named by ``--dlt`` (default: the topology's main DLT).

    A DLT or the parking topic of ``topology`` (``parking`` for short), or any other topic by its name (a
    DLQ another framework fills); not the topology's main topic or a retry tier.
    """
    known = source_topics(topology)
    if dlt is None or dlt in ("", "dlt"):
        if not known:
            raise ReplayError(
                f"{topology.source}: the topology has no DLT (dlt_strategy: no_dlt); name the "
                "dead-letter topic to read with --dlt TOPIC"
            )
        return known[0]
    if dlt == "parking":
        if topology.parking_topic is None:
            raise ReplayError(f"--dlt parking: {topology.source} has no parking topic")
        return topology.parking_topic
    if dlt in {t.topic for t in topology.tiers}:
        raise ReplayError(
            f"--dlt {dlt!r} is not a dead-letter or parking topic of {topology.source} "
            f"({', '.join(known) or 'none'}): it is its main topic or a retry tier (a DLQ another "
            "framework fills can be named in full)"
        )
    return dlt


def check_target_spec(
    topology: Topology, source: str, spec: str | None, allowed: Collection[str] = ()
) -> None:
    """
    Fail early on a ``--to`` that can never be right (the per-record check is :func:`target_for`).

    :param allowed: topics beyond the topology's own (main, retry tiers) that a replay may write to.
    """
    if not spec:  # None or ""
        return
    if spec == "first-tier" and len(topology.tiers) < 2:
        raise ReplayError(
            f"--to first-tier: {topology.source} has no retry tier (attempts: {topology.attempts})"
        )
    topic = topology.topic if spec == "main" else topology.tiers[1].topic if spec == "first-tier" else spec
    _check_topic(topology, source, topic, "--to", allowed)


def _check_topic(topology: Topology, source: str, topic: str, what: str, allowed: Collection[str]) -> None:
    if topic == source:
        raise ReplayError(f"{what} {topic!r} is the topic being replayed; pick another target")
    if topic in {t.topic for t in topology.dlt_tiers}:
        raise ReplayError(
            f"{what} {topic!r} is a dead-letter topic of {topology.source}; replaying into a DLT "
            "would only dead-letter the records again"
        )
    own = [t.topic for t in topology.tiers]
    if topic not in own and topic not in allowed:
        extra = f"; also allowed: {', '.join(sorted(allowed))}" if allowed else ""
        raise ReplayError(
            f"{what} {topic!r} is not a topic of {topology.source} (main and retry tiers: "
            f"{', '.join(own)}{extra}); a replay writes only there unless the replay DAG's "
            "author allows more topics (build_dlt_replay_dag(allowed_targets=[...]), "
            "dlt replay --allow-target TOPIC)"
        )


def _original_partition(record: DltRecord) -> int:
    """
    The original partition a header names, else (a Spring or headerless record) the DLT record's own.

    ``BY_KEY`` when a header says something no partition is (negative, or unreadable), and for a Connect or
    share-group dead letter without one: their DLQ partitions do not follow the source's.
    """
    letter = record.dead_letter
    partition = letter.original_partition
    if partition is not None:
        return partition if partition >= 0 else BY_KEY
    if letter.family in ("kafka-connect", "share-group") or any(
        "partition" in name for name, _ in letter.unreadable
    ):
        return BY_KEY
    return record.partition


def no_original_topic(record: DltRecord) -> str:
    """Why ``record`` names no original topic, by its family, and what to do."""
    letter = record.dead_letter
    why = {
        "kafka-connect": "its __connect.errors.topic header is missing or unreadable (Kafka Connect writes "
        "it only with errors.deadletterqueue.context.headers.enable=true)",
        "share-group": "its __dlq.errors.topic header is missing or unreadable",
        "airflow": "Airflow's KafkaSharedStreamTrigger(dlq_topic=...) writes key and value only",
    }.get(
        letter.family,
        "no header of any dead-letter family names one (kafka_original-topic, kafka_dlt-original-topic, "
        "__connect.errors.topic, __dlq.errors.topic)",
    )
    unreadable = f" (unreadable: {', '.join(n for n, _ in letter.unreadable)})" if letter.unreadable else ""
    return (
        f"carries no original-topic header: {why}{unreadable}; pass --to main, --to first-tier or --to TOPIC"
    )


@dataclass(frozen=True)
class Target:
    """
    Where one record goes.

    :param topic: the target topic.
    :param partition: the record's original partition (as Spring keeps partitions along the retry
        path), or ``BY_KEY`` when its header is negative or not a number, the partition is not present
        in the target, or the transform changed the key.
    :param attempt: the attempt it starts at when the target is a retry tier, else None (attempt 1).
    """

    topic: str
    partition: int
    attempt: int | None


def target_for(
    topology: Topology,
    source: str,
    spec: str | None,
    record: DltRecord,
    *,
    key_changed: bool = False,
    partition_counts: dict[str, int] | None = None,
    allowed: Collection[str] = (),
) -> Target:
    """
    The target of ``record`` for ``--to spec`` (default: its original topic).

    An original topic read from the record's headers is held to the same rule as ``--to``: the
    topology's main topic or a retry tier, or one of ``allowed``. (A producer can set
    ``kafka_original-topic`` itself, and Spring keeps such a header on the first failure.)
    """
    if not spec:  # None or ""
        topic = record.original.topic
        if topic is None:
            raise ReplayError(f"{record.coordinates} {no_original_topic(record)}")
        _check_topic(topology, source, topic, f"the original topic of {record.coordinates}", allowed)
    elif spec == "main":
        topic = topology.topic
    elif spec == "first-tier":
        topic = topology.tier(1).topic
    else:
        topic = spec
    tier = next((t for t in topology.retry_tiers if t.topic == topic), None)
    attempt = tier.index + 1 if tier is not None else None
    partition = _original_partition(record)
    count = (partition_counts or {}).get(topic)
    if key_changed or (count is not None and partition >= count):
        partition = BY_KEY
    return Target(topic, partition, attempt)
