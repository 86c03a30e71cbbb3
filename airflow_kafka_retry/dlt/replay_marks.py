"""
The ``moved`` marks of a replay under ``ordering: key`` with ``release_on: replay`` (``docs/ordering.md``).

There a key whose head was dead-lettered stays blocked, its head in the DLT (or the parking topic). A replay
that moves such a record writes, in the transaction that moves it, a ``moved`` mark to ``<topic>-hold[p]``
(``p``: the DLT partition it read the record from) naming where it read it (``at``) and where its copy landed
(``to``): the keeper of ``p`` then follows the head to its new place, and the key moves on once it ends
there. ``at`` is the coordinates the replay read, never a header. A record without a key has no mark (it was
never ordered). Every DLT partition must be a main-topic partition: the DLTs, the parking topic and the hold
topic need the main topic's partition count, as the keeper requires.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_kafka_retry.engine.kafka.clients import KafkaConfigError
from airflow_kafka_retry.policy.errors import ReplayError
from airflow_kafka_retry.policy.ordering.entries import MARK, ORDER_HEADER, Location, Mark, key_id

if TYPE_CHECKING:
    from confluent_kafka import Producer

    from airflow_kafka_retry.dlt.records import DltRecord
    from airflow_kafka_retry.dlt.summary import Move
    from airflow_kafka_retry.engine.kafka.reading import TopicReader
    from airflow_kafka_retry.policy.topology.model import Topology


def hold_of(topology: Topology, source: str) -> str | None:
    """The hold topic a replay of ``source`` marks its moves in; None when its moves need no mark."""
    if topology.hold_topic is None or topology.release_on != "replay":
        return None
    parked = [t.topic for t in topology.dlt_tiers]
    if topology.parking_topic:
        parked.append(topology.parking_topic)
    return topology.hold_topic if source in parked else None


def check_hold_partitions(reader: TopicReader, topology: Topology, source: str, partitions: int) -> None:
    """``source`` (``partitions`` of them), the main topic and the hold topic have one partition count."""
    hold = hold_of(topology, source)
    if hold is None:
        return
    try:
        counts = {t: reader.partitions(t) for t in (topology.topic, hold)}
    except KafkaConfigError as exc:
        raise ReplayError(f"ordering: key: {exc}") from None
    counts[source] = partitions
    if len(set(counts.values())) > 1:
        found = ", ".join(f"{t} has {n}" for t, n in counts.items())
        raise ReplayError(
            f"ordering: key needs {source} and {hold} with the partition count of {topology.topic} (a key's "
            f"records and marks stay on one partition), but {found} partition(s): nothing was moved"
        )


def moved_mark(record: DltRecord, move: Move, ms: int) -> Mark | None:
    """The mark of ``record`` moved as ``move`` says (delivered: its target offset known); None: no key."""
    kid = key_id(record.key)
    if kid is None:
        return None
    if move.target_partition is None or move.target_offset is None:
        raise ReplayError(
            f"{record.coordinates}: its copy's coordinates are not known, so no mark is written"
        )
    return Mark(
        key_id=kid,
        kind="moved",
        at=Location(record.topic, record.partition, record.offset),
        to=Location(move.target, move.target_partition, move.target_offset),
        ms=ms,
    )


def write_mark(producer: Producer, hold: str, partition: int, mark: Mark) -> None:
    """Produce ``mark`` to ``hold[partition]`` (in the producer's open transaction)."""
    producer.produce(
        hold, key=mark.key_id, value=mark.to_bytes(), headers=[(ORDER_HEADER, MARK)], partition=partition
    )
